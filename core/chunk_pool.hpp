#pragma once
/// Physical allocation: the pSet's chunk records and their free pool, chunks created through the
/// backend when the pool is empty, and the chunks the mapping worker created ahead of need,
/// adopted into the pool. A chunk nothing references stays in the pool (lazy deallocation); only
/// release_free() gives chunks back to the driver. Eviction is the prefix cache's: a caller that
/// may evict passes the cache in.
/// Threads: not thread-safe; the step thread only (the manager serialises). Driver calls go
/// through the vmm_gate, under its backend lock.

#include <cstdint>
#include <optional>
#include <vector>

#include "core/ids.hpp"
#include "core/pset.hpp"
#include "core/vmm_gate.hpp"

namespace vtensor {

class prefix_cache;

/// The chunk records, the free pool and chunk creation.
class chunk_pool {
 public:
  /// Creates through `gate`; never asks the driver for more than `capacity_chunks` live chunks.
  chunk_pool(vmm_gate& gate, std::uint64_t capacity_chunks) : gate_(gate), capacity_chunks_(capacity_chunks) {}

  /// A chunk from the free pool, else a new one; nullopt when the device is out of memory.
  /// The chunk comes unreferenced: map it, or give it back with unuse().
  [[nodiscard]] std::optional<chunk_id> alloc();
  /// alloc(), evicting from `cache` (policy order) until a chunk frees up.
  [[nodiscard]] std::optional<chunk_id> alloc_evicting(prefix_cache& cache);
  /// `count` chunks onto `out`, all or none (none taken are kept on failure), in the order as many
  /// alloc() calls would take them. With `evict_from`, cached prefixes are evicted to make room
  /// (Note [Allocating a run of chunks]).
  [[nodiscard]] bool alloc_run(std::size_t count, prefix_cache* evict_from, std::vector<chunk_id>& out);
  /// `count` chunks from the free pool onto `out`, all or none: never a create, never an eviction
  /// (a standby vTensor's, Note [Standby vTensor] in scheduler.cpp).
  [[nodiscard]] bool take_pooled(std::size_t count, std::vector<chunk_id>& out);
  /// Whether alloc_run(count, ...) would succeed without evicting: the free pool and the chunks the
  /// device can still create hold `count`.
  [[nodiscard]] bool holds_without_eviction(std::size_t count) const {
    const std::size_t pool = pset_.free_count();
    return pool >= count || pset_.live() + (count - pool) <= capacity_chunks_;
  }
  /// Gives back a chunk from alloc() that was never mapped (skips mapped ones).
  void unuse(chunk_id c) {
    const chunk_record& r = pset_[c];
    if (r.ref_count == 0 && !r.in_free_pool) pset_.put_free(c);
  }
  /// Adopts the chunks the worker created into the free pool.
  void adopt_created();
  /// Asks the worker to create chunks until the free pool holds `low_watermark` (one batch at a time).
  void create_ahead(std::uint32_t low_watermark);
  /// Releases every free-pool chunk to `backend` (called inside vmm_gate::locked); returns how many.
  std::size_t release_free(vmm_backend& backend);

  /// The chunk records and the free pool; those who take and drop references write them.
  [[nodiscard]] pset& records() { return pset_; }
  [[nodiscard]] const pset& records() const { return pset_; }
  /// Chunks taken from the free pool.
  [[nodiscard]] std::uint64_t pool_hits() const { return pool_hits_; }
  /// Chunks created through the backend, the worker's included once adopted.
  [[nodiscard]] std::uint64_t chunks_created() const { return chunks_created_; }
  /// Of those, the ones the worker created ahead of need.
  [[nodiscard]] std::uint64_t created_ahead() const { return created_ahead_; }

 private:
  /// alloc_run(count, cache, out) when the pool holds less than `count` and nothing can be
  /// created (Note [Allocating a run of chunks]).
  [[nodiscard]] bool alloc_by_eviction(std::size_t count, prefix_cache& cache, std::vector<chunk_id>& out);

  vmm_gate& gate_;
  pset pset_;
  std::uint64_t capacity_chunks_;  // the backend's, read once
  std::uint64_t ahead_ticket_ = 0;
  std::uint64_t pool_hits_ = 0;
  std::uint64_t chunks_created_ = 0;
  std::uint64_t created_ahead_ = 0;
};

}  // namespace vtensor
