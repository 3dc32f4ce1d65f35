#pragma once
/// The base of the policies that hold one preallocated device region (the paged block pool, the
/// radix token pool, the static arena; Note [Preallocated pools] in device_pool.hpp): the pool,
/// the counters every one of them keeps, and the figures they report alike, so that a policy of
/// this kind writes only what is its own (its memory by what it holds) and the rest is written
/// once. Not thread-safe (the step thread only), as every policy.
///
/// Note [Figures of a pool policy]
/// A pool policy makes VMM calls only to build its pool (start-up work, on no step) and, with an
/// unlimited budget, to grow it (on the step that asked); it has no worker. So:
/// - its VMM time is the step side's modelled time less the pool's start-up time, all of it on
///   the critical path;
/// - its VMM split is that step side (the worker side, the accounting adaptor's, stays empty);
/// - its chunks created are the chunks the pool holds (a pool never gives one back before it is
///   destroyed), the same figure in stats() and in the split;
/// - stats()' counters (prompt tokens, prefix hits, evictions) and VMM counters are the base's.

#include <cstdint>
#include <memory>
#include <optional>

#include "sim/device_pool.hpp"
#include "sim/kv_policy.hpp"

namespace vtensor::sim {

/// A kv_policy over one device_pool.
class pool_policy : public kv_policy {
 public:
  /// The device memory (tests read it).
  [[nodiscard]] const device_pool& pool() const { return *pool_; }

 protected:
  /// Takes the pool, built by the derived policy's constructor.
  explicit pool_policy(std::unique_ptr<device_pool> pool);
  ~pool_policy() override;

  /// A pool cut into units (paged blocks, radix pages): the units held by live requests, cached
  /// (held for reuse only) and free, with the bytes live requests hold valid and their tokens'.
  struct unit_memory {
    std::uint64_t unit_bytes = 0;     ///< bytes of one unit
    std::uint64_t units = 0;          ///< units the pool is cut into (its tail beyond them is idle)
    std::uint64_t held = 0;           ///< held by live requests
    std::uint64_t cached = 0;         ///< held for reuse only
    std::uint64_t free = 0;           ///< free
    std::uint64_t used_bytes = 0;     ///< valid KV in the held units (shared ones once)
    std::uint64_t logical_bytes = 0;  ///< tokens of live requests x bytes per token
  };
  /// stats() of a pool cut into units: the memory and its breakdown from `u`, the rest as
  /// add_pool_figures().
  [[nodiscard]] kv_stats unit_stats(const unit_memory& u) const;
  /// What every pool policy's stats() holds alike (Note [Figures of a pool policy]): the
  /// counters below, chunks created and the VMM counters; physical bytes in the memory.
  void add_pool_figures(kv_stats& s) const;

  std::unique_ptr<device_pool> pool_;  ///< the device memory, mapped at start (or grown on demand)
  std::uint64_t prompt_tokens_ = 0;    ///< prompt tokens admitted (re-admissions included)
  std::uint64_t hit_tokens_ = 0;       ///< of which served from the cache
  std::uint64_t evictions_ = 0;        ///< cache entries evicted

 private:
  [[nodiscard]] std::uint64_t do_chunks_created() const final;
  [[nodiscard]] sim_ns do_vmm_time() const final;
  [[nodiscard]] std::optional<vmm_split_report> do_vmm_report() const final;
};

}  // namespace vtensor::sim
