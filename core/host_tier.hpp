#pragma once
/// A host-memory KV tier (issue 37): the second level below a policy's GPU prefix cache, holding
/// blocks of prompt KV by content in pinned host memory, with an eviction order of its own from
/// the zoo (core/eviction_order.hpp).
///
/// Note [Host tier]
/// The tier is a store of blocks named by their content key (a trace block key, chained with its
/// prefix, as the GPU caches name them), each of `tokens` tokens at `offset` in its prompt, up to
/// a capacity in bytes (`bytes_per_token` x tokens held). It does not decide when a block comes
/// in: the policy offers a block at publication (write-through: every computed prefix block is
/// copied out as it is published, as SGLang's HiCache does by default) or when the GPU cache
/// evicts it (write-back: only what leaves the GPU is copied, as vLLM's offloading connector and
/// LMCache's local CPU backend do), and the tier keeps it, evicting its own victims to make room.
/// A block larger than the whole capacity is not kept. At admission the policy asks for the
/// leading run of the prompt's blocks past its GPU hit (`match`): the tier counts them as hits,
/// touches them, and the policy reloads them (tokens x bytes_per_token host-to-device) instead
/// of recomputing them; a block missing breaks the run, since a block's KV is only usable after
/// its prefix's. Every block the tier holds is a candidate for eviction (nothing on the host is
/// pinned by a running request: a reload copies, and the GPU copy is the one in use).
/// Figures are tokens and bytes each way, so that the step cost can price the copies
/// (Note [Transfer model] in tools/calibrate_transfer.cpp) and the report can split a hit rate
/// per tier.

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/eviction_order.hpp"

namespace vtensor {

/// One block of a prompt, as the tier sees it.
struct host_block {
  std::uint64_t key = 0;     ///< content key chained with the prefix; never 0
  std::uint64_t tokens = 0;  ///< at least 1
  std::uint64_t offset = 0;  ///< tokens before it in its prompt
};

/// What the tier did, cumulative.
struct host_tier_stats {
  std::uint64_t stored_tokens = 0;    ///< blocks copied in (device to host)
  std::uint64_t offered_tokens = 0;   ///< blocks offered, held already or not
  std::uint64_t hit_tokens = 0;       ///< matched at admission (to reload)
  std::uint64_t evicted_tokens = 0;   ///< dropped for room
  std::uint64_t rejected_tokens = 0;  ///< offered blocks larger than the capacity
  std::uint64_t held_tokens = 0;      ///< now
  std::uint64_t peak_held_tokens = 0;
};

class host_tier {
 public:
  static constexpr std::uint64_t unlimited = std::numeric_limits<std::uint64_t>::max();

  /// A tier of `capacity_bytes` (unlimited: no limit) at `bytes_per_token` (at least 1), evicting
  /// in `eviction`'s order. Throws std::invalid_argument for a zero rate or a bad order.
  host_tier(std::uint64_t capacity_bytes, std::uint64_t bytes_per_token, const eviction_config& eviction);
  ~host_tier();
  host_tier(const host_tier&) = delete;
  host_tier& operator=(const host_tier&) = delete;

  /// `block` is offered (Note [Host tier]): kept when new and not larger than the capacity,
  /// evicting the order's victims to fit; refreshed when held. Returns the bytes copied in (0
  /// when held already or not kept).
  std::uint64_t offer(const host_block& block);

  /// The leading run of `blocks` the tier holds, in tokens: each of them a hit, touched. The
  /// caller reloads them (tokens x bytes_per_token()).
  std::uint64_t match(std::span<const host_block> blocks);

  /// Whether the block of `key` is held.
  [[nodiscard]] bool holds(std::uint64_t key) const { return by_key_.contains(key); }

  [[nodiscard]] const host_tier_stats& stats() const { return stats_; }
  [[nodiscard]] std::uint64_t bytes_per_token() const { return bytes_per_token_; }
  [[nodiscard]] std::uint64_t capacity_tokens() const { return capacity_tokens_; }

  /// Every held block is in the key index and the order, and held_tokens is their sum; throws
  /// std::logic_error naming what does not hold.
  void check_invariants() const;

 private:
  void evict_one();

  std::uint64_t bytes_per_token_;
  std::uint64_t capacity_tokens_;
  std::unique_ptr<eviction_order> order_;
  std::unordered_map<std::uint64_t, cache_slot> by_key_;
  std::vector<host_block> slots_;  // by slot; key 0: free
  std::vector<cache_slot> free_;   // slots to reuse
  host_tier_stats stats_;
};

}  // namespace vtensor
