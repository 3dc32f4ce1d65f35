#pragma once
/// VTO, the vTensor operations: the vTensor pool, made of one part per concern, and what takes
/// more than one part. The parts: the vmm_gate (the backend, its lock and the mapping worker: the
/// only way to the driver), the chunk_pool (pSet records, free pool, creation), the range_pool
/// (vTensor ranges, range cache, scratch range), the mapping_table (vSet, map and unmap) and the
/// prefix_cache (rTree and its chunk references, eviction). Here: copy-on-write of partial prefix
/// pages, settling the worker's work, trim, the counters and the pool's invariants.
/// Threads: not thread-safe (the manager serialises calls), but for the backend, which the mapping
/// worker calls too: every call to it holds the gate's backend lock (checked by the clang build).

#include <cstdint>
#include <functional>
#include <memory>

#include "backends/vmm_backend.hpp"
#include "core/chunk_pool.hpp"
#include "core/eviction_order.hpp"
#include "core/kv_geometry.hpp"
#include "core/mapping_table.hpp"
#include "core/prefix_cache.hpp"
#include "core/range_pool.hpp"
#include "core/vmm_gate.hpp"

namespace vtensor {

/// Copies `bytes` from `src` to `dst` on the device (a cudaMemcpy on a GPU). Absent on the
/// simulated device, where copy-on-write is counted but moves no data.
using device_copy_fn = std::function<void(device_addr dst, device_addr src, std::uint64_t bytes)>;

/// The pool's counters, gathered from its parts.
struct operation_counters {
  std::uint64_t cow_bytes = 0;       ///< bytes copied by copy-on-write
  std::uint64_t evicted_nodes = 0;   ///< rTree leaves evicted
  std::uint64_t pool_hits = 0;       ///< chunks taken from the free pool
  std::uint64_t chunks_created = 0;  ///< chunks created through the backend
  std::uint64_t created_ahead = 0;   ///< of the chunks created, those the worker created ahead of need
  std::uint64_t lock_waits = 0;      ///< step-thread VMM calls that found the worker holding the driver
  std::uint64_t lock_wait_ns = 0;    ///< wall time of those waits (Note [Driver contention])
};

/// The vTensor pool: its parts, and the operations that span them. Not thread-safe.
class operations {
 public:
  /// `vtensor_bytes` is the size of every vTensor range; `range_cache` bounds how many freed
  /// ranges are kept reserved for reuse; the worker, when on, uses `backends.worker`. Throws
  /// std::invalid_argument when the backend does not map in the geometry's chunks.
  operations(backend_views backends, const kv_geometry& geometry, std::uint64_t vtensor_bytes,
             std::unique_ptr<eviction_order> eviction, std::size_t range_cache);
  ~operations();
  operations(const operations&) = delete;
  operations& operator=(const operations&) = delete;

  // --- the parts ---
  /// The backend, its lock and the mapping worker.
  [[nodiscard]] vmm_gate& gate() { return gate_; }
  [[nodiscard]] const vmm_gate& gate() const { return gate_; }
  /// Physical chunks: records, free pool, creation.
  [[nodiscard]] chunk_pool& pool() { return pool_; }
  [[nodiscard]] const chunk_pool& pool() const { return pool_; }
  /// vTensor ranges, the range cache and the scratch range.
  [[nodiscard]] range_pool& ranges() { return ranges_; }
  [[nodiscard]] const range_pool& ranges() const { return ranges_; }
  /// The chunk mappings (vSet) and their driver calls.
  [[nodiscard]] mapping_table& maps() { return maps_; }
  [[nodiscard]] const mapping_table& maps() const { return maps_; }
  /// The rTree and its chunk references.
  [[nodiscard]] prefix_cache& cache() { return cache_; }
  [[nodiscard]] const prefix_cache& cache() const { return cache_; }

  // --- across the parts ---
  /// Copies the first `bytes` of chunk `src` into the page at `dst`. A source mapped somewhere is
  /// read there; an unmapped (cached) one is mapped at the scratch range for the copy, with its
  /// VMM calls counted like any other. See Note [Copy-on-write of a partial prefix page].
  void copy_prefix(device_addr dst, chunk_id src, std::uint64_t bytes);
  /// Installs the device copy used by copy_prefix (none on the simulated device).
  void set_device_copy(device_copy_fn fn) { copy_ = std::move(fn); }
  /// Waits for all deferred work, adopts the chunks the worker created into the free pool and
  /// retries the map jobs that failed on the worker.
  void settle() {
    gate_.drain();
    pool_.adopt_created();
    gate_.retry_failed();
  }
  /// Gives every free-pool chunk and cached range back to the driver. Returns chunks released.
  std::size_t trim();
  /// Drops the whole rTree, then trims; the backend must then hold only live requests' memory.
  void drop_cache_and_trim();
  [[nodiscard]] operation_counters counters() const {
    return {
        cow_bytes_,         cache_.evicted_nodes(), pool_.pool_hits(), pool_.chunks_created(), pool_.created_ahead(),
        gate_.lock_waits(), gate_.lock_wait_ns()};
  }
  /// Checks pSet and vSet against each other, the tree and the backend; throws std::logic_error.
  /// Waits for nothing (Note [Checking with jobs in flight]).
  void check_invariants() const;

 private:
  void check_backend() const;

  vmm_gate gate_;  // first: every other part drives the backend through it
  kv_geometry geometry_;
  chunk_pool pool_;
  range_pool ranges_;
  mapping_table maps_;
  prefix_cache cache_;
  device_copy_fn copy_;
  std::uint64_t cow_bytes_ = 0;
};

}  // namespace vtensor
