#pragma once
/// The `radix` KV policy, after SGLang (python/sglang/srt/mem_cache/): one preallocated token
/// pool of `page_tokens`-token pages (TokenToKVPoolAllocator / PagedTokenToKVPoolAllocator), a
/// radix tree over the prompts' tokens at page granularity (RadixCache), running requests locking
/// their path to the root (inc_lock_ref / dec_lock_ref), LRU eviction of unlocked leaves (evict),
/// and the scheduler's use of them (match_prefix at admission, cache_unfinished_req after the
/// prefill, cache_finished_req when a request ends). docs/policies/radix.md says what is modelled
/// and where it departs from SGLang.
///
/// Note [Token identity in the radix tree]
/// SGLang keys its tree on token ids. A trace names content only through block keys
/// (kv_request::blocks: chained keys, 512 tokens each in Mooncake, the last block of a prompt may
/// be short), so the tree here keys token position p on (key of the block covering p, offset of p
/// in that block): two requests share a token iff the same chain of keys covers it. Tokens past
/// the keyed ones (the rest of the prompt, every generated token) are unique to their request and
/// never enter the tree. An edge holds a run of tokens [begin, end) (absolute positions from the
/// root) and the block keys covering it, so a 512-token block costs one entry, not 512 nodes; a
/// match that ends inside an edge splits it (SGLang's _split_node). With page_tokens > 1 every
/// match and insert is truncated to whole pages (SGLang's paged key match and page_align_keys),
/// so every edge holds whole pages. A node's children are found by the identity of their first
/// page (its first and last token), as SGLang's get_child_key uses the first page's token ids.
///
/// Note [Pages as a count]
/// SGLang's allocator hands out page indices from a free list; which index a page gets changes
/// nothing the simulator measures (the pool is one mapped range, nothing is contiguous per
/// request), so the pool keeps counts: free pages, tree pages locked by live requests, tree pages
/// held only by the cache, and each live request's private pages. Every operation on them is
/// O(1); eviction is O(log n) per leaf (an ordered set of the evictable leaves by last access).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/device_pool.hpp"
#include "sim/kv_policy.hpp"
#include "sim/policy_options.hpp"
#include "sim/pool_policy.hpp"

namespace vtensor::sim {

/// The radix policy's own settings (its option table: radix_definition()).
struct radix_settings {
  static constexpr std::string_view policy_name = "radix";  ///< its registry name
  std::uint32_t page_tokens = 1;                            ///< tokens per page of the token pool (SGLang's page_size)
  bool prefix_caching = true;                               ///< keep and share prefixes
  eviction_config eviction;                                 ///< the tree's eviction order (without clock and oracle)
};

/// The radix policy's registration: its option table and its answers (sim/policy_registry.cpp).
[[nodiscard]] policy_definition<radix_settings> radix_definition();

/// The policy. Owns its token pool (a sim::device_pool) and its radix tree.
class radix_policy final : public pool_policy {
 public:
  /// Reads kv (bytes per token), memory_bytes, backend, calibration, zero_latency and
  /// device_index of `options`, and its own settings. Throws std::invalid_argument for
  /// page_tokens 0 or a budget below one page, and what device_pool's constructor throws.
  explicit radix_policy(const kv_policy_options& options, const radix_settings& settings = {});
  /// The same over a backend built by the caller (tests inject faults this way); `model` prices
  /// its calls.
  radix_policy(const kv_policy_options& options, std::unique_ptr<vmm_backend> inner, const latency_model& model,
               const radix_settings& settings = {});
  ~radix_policy() override;

  /// Bytes of one page: page_tokens x KV bytes per token.
  [[nodiscard]] std::uint64_t page_bytes() const { return page_bytes_; }
  /// Pages the pool holds now (floor(physical bytes / page bytes)).
  [[nodiscard]] std::uint64_t pool_pages() const { return total_pages_; }
  /// Pages on the free list.
  [[nodiscard]] std::uint64_t free_pages() const { return free_pages_; }
  /// Tree pages on a live request's path (lock_ref > 0).
  [[nodiscard]] std::uint64_t locked_pages() const { return locked_pages_; }
  /// Tree pages no live request holds (evictable cache).
  [[nodiscard]] std::uint64_t cached_pages() const { return unlocked_pages_; }
  /// Nodes of the tree, root excluded.
  [[nodiscard]] std::uint64_t tree_nodes() const { return live_nodes_; }
  /// The pool's device memory.

 private:
  static constexpr std::uint32_t k_root = 0;

  // One block of a key chain as an edge holds it: the block covers positions
  // [start, start + its tokens) in the request that inserted it; the edge holds [.., end) of it.
  struct edge_block {
    std::uint64_t key = 0;
    std::uint64_t start = 0;  // the block's first position (offsets count from here)
    std::uint64_t end = 0;    // end of the part of the block on this edge
  };
  // A token's identity: (block key, offset in the block).
  struct token_id {
    std::uint64_t key = 0, offset = 0;
    friend bool operator==(const token_id&, const token_id&) = default;
  };
  // How a parent finds a child: the identity of the child's first page (first and last token).
  struct child_key {
    std::uint32_t parent = 0;
    token_id first, last;
    friend bool operator==(const child_key&, const child_key&) = default;
  };
  struct child_key_hash {
    std::size_t operator()(const child_key& k) const noexcept;
  };
  struct node {
    std::uint32_t parent = k_root;
    std::uint32_t children = 0;
    std::uint32_t lock_ref = 0;
    bool live = false;
    std::uint64_t begin = 0, end = 0;  // positions of its tokens, from the root
    bool candidate = false;            // an eviction candidate (unlocked live leaf) in order_
    child_key key;                     // its entry in children_
    std::vector<edge_block> blocks;    // the key chain over [begin, end), in order
    [[nodiscard]] std::uint64_t tokens() const { return end - begin; }
  };
  // A request's prompt keys, with the position each block starts at.
  struct key_view {
    std::span<const token_block> blocks;
    std::vector<std::uint64_t> starts;  // starts[i] = first position of blocks[i]; back() = keyed tokens
    [[nodiscard]] std::uint64_t keyed() const { return starts.back(); }
    [[nodiscard]] token_id at(std::uint64_t pos) const;  // pos < keyed()
  };
  struct live_request {
    std::uint32_t node = k_root;      // deepest tree node it locks (root: none)
    std::uint64_t tokens = 0;         // tokens backed (prompt + grown)
    std::uint64_t max_tokens = 0;     // tokens it may grow to
    std::uint64_t tree_end = 0;       // its tokens [0, tree_end) are tree tokens
    std::uint64_t private_pages = 0;  // pages holding its tokens [tree_end, tokens)
  };

  kv_admit_result do_admit(const kv_request& r) override;
  [[nodiscard]] std::uint64_t do_cached_tokens(const kv_request& r) const override;
  bool do_grow(request_id id, std::uint64_t tokens) override;
  void do_release(request_id id, release_reason why) override;
  [[nodiscard]] kv_stats do_stats() const override;
  [[nodiscard]] kv_access do_access() const override { return {true, page_tokens_}; }
  [[nodiscard]] std::string do_name() const override { return "radix"; }
  [[nodiscard]] nlohmann::ordered_json do_describe() const override;
  void do_check_invariants() const override;

  // Pool.
  [[nodiscard]] std::uint64_t pages_for(std::uint64_t tokens) const {
    return (tokens + page_tokens_ - 1) / page_tokens_;
  }
  [[nodiscard]] std::uint64_t floor_page(std::uint64_t tokens) const { return tokens / page_tokens_ * page_tokens_; }
  [[nodiscard]] bool can_grow_pool() const { return !pool_->preallocated(); }
  void sync_pool_pages();                            // takes in pages of chunks mapped since
  [[nodiscard]] bool make_room(std::uint64_t need);  // Note [Making room]

  // Tree.
  [[nodiscard]] key_view view_of(std::span<const token_block> blocks) const;
  [[nodiscard]] child_key key_at(std::uint32_t parent, const key_view& v, std::uint64_t pos) const;
  [[nodiscard]] child_key key_of_edge(std::uint32_t parent, const node& n) const;
  [[nodiscard]] std::uint32_t find_child(std::uint32_t parent, const key_view& v, std::uint64_t pos) const;
  [[nodiscard]] std::uint64_t match_edge(const node& n, const key_view& v, std::uint64_t limit) const;
  [[nodiscard]] std::pair<std::uint32_t, std::uint64_t> match_prefix(const key_view& v, std::uint64_t limit);
  [[nodiscard]] std::uint64_t peek_prefix(const key_view& v, std::uint64_t limit) const;
  [[nodiscard]] std::pair<std::uint32_t, std::uint64_t> insert(std::uint32_t from, const key_view& v, std::uint64_t pos,
                                                               std::uint64_t limit, std::uint64_t& duplicate_pages);
  std::uint32_t split(std::uint32_t id, std::uint64_t at);
  std::uint32_t new_node();
  void touch(std::uint32_t id);
  void refresh(std::uint32_t id);
  void enter(std::uint32_t id);  // tells order_ of a new live node
  void inc_lock(std::uint32_t id);
  void dec_lock(std::uint32_t id);
  void update_evictable(std::uint32_t id);
  void evict(std::uint64_t pages);              // Note [Making room]
  void drop_expired();                          // Note [Expiry at admission] in core/scheduler.cpp
  std::uint64_t remove_leaf(std::uint32_t id);  // an evicted leaf out of the tree; its pages
  [[nodiscard]] bool is_evictable(const node& n) const { return n.live && n.children == 0 && n.lock_ref == 0; }
  [[nodiscard]] std::uint64_t pages_of(const node& n) const { return n.tokens() / page_tokens_; }

  kv_policy_options options_;
  radix_settings settings_;
  std::uint64_t bytes_per_token_ = 0;
  std::uint32_t page_tokens_ = 1;
  std::uint64_t page_bytes_ = 0;

  std::uint64_t total_pages_ = 0, free_pages_ = 0;
  std::uint64_t locked_pages_ = 0, unlocked_pages_ = 0;
  std::uint64_t private_pages_ = 0, private_tokens_ = 0;
  std::uint64_t logical_tokens_ = 0;

  std::vector<node> nodes_;  // nodes_[0] is the root
  std::vector<std::uint32_t> free_nodes_;
  std::uint64_t live_nodes_ = 0;
  std::unordered_map<child_key, std::uint32_t, child_key_hash> children_;
  eviction_config eviction_;               // settings_.eviction with the replay's clock and oracle
  std::unique_ptr<eviction_order> order_;  // eviction order over unlocked leaves (slot = node id)

  std::unordered_map<std::uint64_t, live_request> requests_;
};

}  // namespace vtensor::sim
