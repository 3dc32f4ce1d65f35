#pragma once
/// The eviction zoo: which cached item goes first when memory runs short, on one interface shared
/// by every cache in the project (vtensor's rTree, paged's block cache, radix's tree).
///
/// Note [Eviction orders]
/// A cache (the *host*) names its items by dense slots it assigns and reuses, and tells the order
/// what happens to them:
///   insert / insert_like -> (touch | refresh | set_candidate)* -> pop_victim or erase
/// `insert` is an item entering the cache (not yet evictable); `insert_like` one that takes over
/// another's history (an edge split in a tree: the new upper node inherits the lower one's
/// recency and hits). `touch` is a use: a hit, or what the host counts as one (paged counts a
/// block's release, as vLLM's free queue does); `refresh` a walk that passes it without a use
/// (a tree's insert re-walking a prefix: with eager publication a request re-inserts its own
/// prompt after each prefill step, which must not count as reuse). `set_candidate` says whether the item may be
/// evicted now (a tree: an unpinned leaf; paged: a block no request holds). `pop_victim` removes
/// and returns the candidate to evict next; the host then frees the item and may reuse the slot.
/// An order never evicts a non-candidate, and keeps the history of non-candidates (a pinned item
/// keeps its segment, frequency, recency) so that it competes fairly when it becomes one again.
/// Queue-based orders (fifo, slru, arc, s3-fifo) put an item that becomes a candidate at the
/// place its history gives it; see each order's comment. Orders are deterministic: ties go to
/// the item inserted first (the lowest insertion sequence number), never to the slot number.
///
/// Sizes are in tokens (`cache_item::tokens`): a segment's share (slru, s3-fifo, arc) is a share
/// of the tokens the cache holds now, candidates or not, since the caches here have no fixed
/// item count (their capacity is memory, and the running requests hold part of it).
///
/// `key` is an item's content identity, chained with its prefix (a trace block key): ghost lists
/// (arc, s3-fifo) remember evicted keys, and the offline order asks the oracle when a key is used
/// next. A host that cannot name content passes 0 (ghosts then never match; offline treats the
/// item as never used again).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vtensor {

/// A host's name for one cached item: dense, reused after the item leaves.
using cache_slot = std::uint32_t;

/// What an order may know about an item.
struct cache_item {
  std::uint64_t tokens = 0;  ///< tokens the item holds (its size); at least 1
  std::uint64_t offset = 0;  ///< tokens before it on its sequence (its depth in the prompt)
  std::uint64_t key = 0;     ///< content identity chained with the prefix (trace block key); 0: none
};

/// Time as the replay sees it, advanced by the host's owner; orders read it (ttl, offline).
struct eviction_clock {
  double seconds = 0;              ///< simulated time
  std::uint64_t next_request = 0;  ///< index (trace file order) of the next request to be admitted
};

/// Foresight for the offline order: which later requests use a key.
class next_use_oracle {
 public:
  virtual ~next_use_oracle() = default;
  static constexpr std::uint64_t never = UINT64_MAX;
  /// Index (trace file order) of the first request at or after `from` whose prompt holds `key`;
  /// `never` when none does.
  [[nodiscard]] virtual std::uint64_t next_use(std::uint64_t key, std::uint64_t from) const = 0;
};

/// An order's name and its settings (each order reads the ones named in its comment).
struct eviction_config {
  std::string name = "lru";
  double slru_protected = 0.8;   ///< slru: the protected segment's share of the cached tokens
  double s3fifo_small = 0.1;     ///< s3-fifo: the small queue's share of the cached tokens
  std::uint64_t pin_tokens = 0;  ///< priority: items starting in a sequence's first pin_tokens tokens go last
  double ttl_s = 0;              ///< ttl: seconds an item lives after its last touch (> 0)
  /// cost-aware: recompute cost of a token at context position p is 1 + attention_weight x p
  /// (linear layers, plus attention over the p tokens before it), in units of a context-free token.
  double attention_weight = 0;
  const eviction_clock* clock = nullptr;    ///< ttl, offline: required
  const next_use_oracle* oracle = nullptr;  ///< offline: required
};

/// The order in which a cache's evictable items go (Note [Eviction orders]). Not thread-safe.
class eviction_order {
 public:
  virtual ~eviction_order() = default;
  /// Registry name ("lru", "s3-fifo", ...).
  [[nodiscard]] virtual std::string_view name() const = 0;
  /// `slot` enters the cache, not a candidate.
  virtual void insert(cache_slot slot, const cache_item& item) = 0;
  /// `slot` enters the cache with the history (recency, hits, segment) of `like`, which stays.
  virtual void insert_like(cache_slot slot, const cache_item& item, cache_slot like) = 0;
  /// `slot`'s size or place changed (a split shortened it); its history stays.
  virtual void resize(cache_slot slot, const cache_item& item) = 0;
  /// A use of `slot`.
  virtual void touch(cache_slot slot) = 0;
  /// A walk that passes `slot` without using it (an insert re-walking a prefix its own request
  /// holds): recency moves as for a touch, but it is not a use, so frequency orders (lfu, slru,
  /// arc, s3-fifo) count nothing and cost-aware keeps its value.
  virtual void refresh(cache_slot slot) = 0;
  /// Whether `slot` may be evicted now.
  virtual void set_candidate(cache_slot slot, bool candidate) = 0;
  /// Removes and returns the candidate to evict next; nullopt when there is none.
  [[nodiscard]] virtual std::optional<cache_slot> pop_victim() = 0;
  /// Removes and returns a candidate whose time is up (ttl), else nullopt: the host may call it
  /// at any moment to drop expired items without memory pressure. Other orders: nullopt.
  [[nodiscard]] virtual std::optional<cache_slot> pop_expired() { return std::nullopt; }
  /// Removes `slot` (candidate or not) for a reason of the host's.
  virtual void erase(cache_slot slot) = 0;
  /// Candidates now.
  [[nodiscard]] virtual std::size_t candidates() const = 0;
};

/// Makes an order; throws std::invalid_argument naming the problem (unknown name, listing the
/// known ones; a setting out of range; a required clock or oracle missing).
[[nodiscard]] std::unique_ptr<eviction_order> make_eviction_order(const eviction_config& config);
/// Known order names, in the order the docs list them.
[[nodiscard]] std::vector<std::string> eviction_order_names();

namespace detail {
/// The orders beyond lru, fifo and lfu (core/eviction_zoo.cpp); nullptr for a name it does not know.
[[nodiscard]] std::unique_ptr<eviction_order> make_zoo_order(const eviction_config& config);
/// Their names.
[[nodiscard]] std::vector<std::string> zoo_order_names();
}  // namespace detail

}  // namespace vtensor
