#pragma once
/// VTO, the vTensor operations: the only code that calls the VMM backend. Physical allocation
/// (free pool first, then create), virtual allocation (reserve without physical memory), map and
/// unmap, lazy deallocation (chunks go to the free pool; the driver gets them back only through
/// trim() or shutdown), eviction of cached prefixes, and copy-on-write of partial prefix pages.
/// Owns the vTensor pool: pSet, vSet and rTree.
/// Threads: not thread-safe (the manager serialises calls), but for the backend, which the mapping
/// worker calls too: every call to it holds `backend_mutex_` (checked by the clang build).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backends/vmm_backend.hpp"
#include "core/async_mapper.hpp"
#include "core/eviction_policy.hpp"
#include "core/kv_geometry.hpp"
#include "core/mutex.hpp"
#include "core/pset.hpp"
#include "core/radix_tree.hpp"
#include "core/vset.hpp"

namespace vtensor {

/// Copies `bytes` from `src` to `dst` on the device (a cudaMemcpy on a GPU). Absent on the
/// simulated device, where copy-on-write is counted but moves no data.
using device_copy_fn = std::function<void(device_addr dst, device_addr src, std::uint64_t bytes)>;

/// Counters that only operations can keep.
struct operation_counters {
  std::uint64_t cow_bytes = 0;       ///< bytes copied by copy-on-write
  std::uint64_t evicted_nodes = 0;   ///< rTree leaves evicted
  std::uint64_t pool_hits = 0;       ///< chunks taken from the free pool
  std::uint64_t chunks_created = 0;  ///< chunks created through the backend
  std::uint64_t created_ahead = 0;   ///< of the chunks created, those the worker created ahead of need
  std::uint64_t lock_waits = 0;      ///< step-thread VMM calls that found the worker holding the driver
  std::uint64_t lock_wait_ns = 0;    ///< wall time of those waits (Note [Driver contention])
};

/// The operations and the pool they act on. Not thread-safe.
class operations {
 public:
  /// `vtensor_bytes` is the size of every vTensor range; `range_cache` bounds how many freed
  /// ranges are kept reserved for reuse.
  operations(vmm_backend& backend, const kv_geometry& geometry, std::uint64_t vtensor_bytes,
             std::unique_ptr<eviction_policy> eviction, std::size_t range_cache);
  ~operations();
  operations(const operations&) = delete;
  operations& operator=(const operations&) = delete;

  // --- physical allocation ---
  /// A chunk from the free pool, else a new one; nullopt when the device is out of memory.
  /// The chunk comes unreferenced: map it, or give it back with unuse().
  [[nodiscard]] std::optional<chunk_id> alloc_chunk();
  /// alloc_chunk(), evicting cached prefixes (policy order) until a chunk frees up.
  [[nodiscard]] std::optional<chunk_id> alloc_chunk_evicting();
  /// `count` chunks, all or none (none taken are kept on failure). With `evict`, cached prefixes
  /// are evicted to make room.
  [[nodiscard]] bool alloc_chunks(std::size_t count, bool evict, std::vector<chunk_id>& out);
  /// Gives back a chunk from alloc_chunk() that was never mapped (skips mapped ones).
  void unuse(chunk_id c);
  /// Evicts one rTree leaf and drops its references; false when nothing is evictable.
  bool evict_one();

  // --- virtual allocation ---
  /// A vTensor range: from the range cache, else reserved.
  [[nodiscard]] device_addr alloc_range();
  /// Returns a vTensor range (holding no mapping) to the range cache, or frees it when full.
  void free_range(device_addr base);
  /// Puts a vTensor's range (base set) in the vSet.
  void track(mapped_range& r) { vset_.insert(r); }
  /// Takes it out (before its range is freed).
  void untrack(mapped_range& r) { vset_.erase(r); }
  /// Takes every range out (a scheduler destroyed while requests are live).
  void untrack_all() { vset_.clear_ranges(); }

  // --- mapping ---
  /// Records a mapping of `c` at `va` now and defers the driver's map and set-access into `job`
  /// (Note [Deferred mappings] in async_mapper.hpp).
  mapping& map_deferred(device_addr va, chunk_id c, request_id owner, bool shared, mapping_job& job);
  /// map_deferred() writing the driver's call into `entry`, a slot of a job the caller fills out
  /// of order.
  mapping& map_deferred_into(device_addr va, chunk_id c, request_id owner, bool shared, mapping_entry& entry);
  /// Asks the cache for the record of `c`, about to be mapped (Note [Dense chunk records]).
  void prefetch_record(chunk_id c) const { pset_.prefetch(c); }
  /// Runs a job's driver calls now, on this thread (strong guarantee; see run_mapping_job).
  void run_now(const mapping_job& job);
  /// Undoes the bookkeeping of a mapping whose driver call never happened or was undone.
  void unrecord(mapping& m);

  // --- asynchronous worker (off unless enable_async) ---
  /// Starts the mapping worker; with `inline_jobs` it runs each job as it is submitted, on the
  /// submitting thread (Note [Inline worker] in async_mapper.hpp).
  void enable_async(bool inline_jobs = false);
  [[nodiscard]] bool async() const { return mapper_ != nullptr; }
  /// Queues deferred driver work; returns its ticket (0 for an empty job).
  std::uint64_t submit(mapping_job job);
  /// Waits for ticket `ticket` (0: nothing); `step_wait` counts it as a step waiting for a mapping.
  void wait(std::uint64_t ticket, bool step_wait);
  /// Waits for all deferred work.
  void drain() const;
  /// The step thread holds the driver while it lives (Note [Driver hand-over] in
  /// async_mapper.cpp): the worker starts no driver call until it ends, except while the step
  /// thread waits for a worker job. Does nothing without the worker.
  class [[nodiscard]] driver_scope {
   public:
    explicit driver_scope(const operations& ops) noexcept : mapper_(ops.mapper_.get()) {
      if (mapper_) mapper_->hold_driver();
    }
    ~driver_scope() {
      if (mapper_) mapper_->release_driver();
    }
    driver_scope(const driver_scope&) = delete;
    driver_scope& operator=(const driver_scope&) = delete;

   private:
    async_mapper* mapper_;
  };
  /// Waits for all deferred work, adopts the chunks the worker created into the free pool and
  /// retries the map jobs that failed on the worker.
  void settle() {
    drain();
    adopt_created();
    retry_failed();
  }
  /// Asks the worker to create chunks until the free pool holds `low_watermark` (one batch at a time).
  void create_ahead(std::uint32_t low_watermark);
  [[nodiscard]] async_counters async_stats() const;
  /// The backend's counters, read under the backend lock.
  [[nodiscard]] vmm_counters vmm_stats() const;
  /// What the backend holds, and the chunks the worker created that nobody adopted yet.
  struct idle_backend {
    vmm_live live;                     ///< the backend's live counts
    std::size_t unadopted_chunks = 0;  ///< created by the worker, not in the pSet yet
    std::size_t unmapped_failed = 0;   ///< recorded mappings whose map failed on the worker, not retried
  };
  /// The backend's state when no worker job is queued or running; nullopt (without waiting)
  /// otherwise (Note [Checking with jobs in flight]).
  [[nodiscard]] std::optional<idle_backend> backend_if_idle() const;
  /// Unmaps the contiguous mappings `maps` (adjacent addresses, ascending) in one call; chunks left
  /// unreferenced go to the free pool.
  void unmap_run(std::span<mapping* const> maps);
  /// As unmap_run, but the driver's unmap is deferred into `job` (a release on the worker, Note
  /// [Releases on the worker] in scheduler.cpp); the bookkeeping is done now.
  void unmap_run_deferred(std::span<mapping* const> maps, mapping_job& job);
  /// As free_range, but a range the cache does not keep is freed by `job`, after its unmaps.
  void free_range_deferred(device_addr base, mapping_job& job);
  /// Maps again, on this thread, the worker's map jobs that failed (Note [A map failing on the
  /// worker] in async_mapper.cpp); returns how many. When a retry fails too, the jobs not done
  /// are kept for later unmaps to skip and the driver's error propagates.
  std::size_t retry_failed();
  /// Forgets the worker's failed maps in [lo, hi) (see async_mapper::forget_failed).
  [[nodiscard]] std::vector<device_addr> forget_failed(device_addr lo, device_addr hi) {
    return mapper_ ? mapper_->forget_failed(lo, hi) : std::vector<device_addr>{};
  }
  /// Turns a private mapping into an immutable shared one.
  void make_shared(mapping& m);

  // --- tree ---
  /// Takes a tree reference on each chunk of `version` and hangs it on `node`; whatever the tree
  /// hands back (a dominated version, or this one if redundant) loses its references.
  void record_page(radix_node& node, page_version version);
  [[nodiscard]] radix_tree& tree() { return tree_; }
  [[nodiscard]] const radix_tree& tree() const { return tree_; }

  // --- copy-on-write ---
  /// Copies the first `bytes` of chunk `src` into the page at `dst`. A source mapped somewhere is
  /// read there; an unmapped (cached) one is mapped at a scratch address for the copy, with its
  /// VMM calls counted like any other. See Note [Copy-on-write of a partial prefix page].
  void copy_prefix(device_addr dst, chunk_id src, std::uint64_t bytes);
  /// Installs the device copy used by copy_prefix (none on the simulated device).
  void set_device_copy(device_copy_fn fn) { copy_ = std::move(fn); }

  // --- release ---
  /// Gives every free-pool chunk and cached range back to the driver. Returns chunks released.
  std::size_t trim();
  /// Drops the whole rTree, then trims; the backend must then hold only live requests' memory.
  void drop_cache_and_trim();

  // --- state ---
  [[nodiscard]] const pset& chunks() const { return pset_; }
  [[nodiscard]] const vset& mappings() const { return vset_; }
  [[nodiscard]] operation_counters counters() const {
    operation_counters c = counters_;
    c.lock_waits = lock_waits_;
    c.lock_wait_ns = lock_wait_ns_;
    return c;
  }
  /// Chunks mapped at least once.
  [[nodiscard]] std::uint64_t mapped_chunks() const { return mapped_chunks_; }
  /// Chunks mapped shared at least once.
  [[nodiscard]] std::uint64_t shared_chunks() const { return shared_chunks_; }
  /// Ranges reserved from the backend (live vTensors, range cache, scratch).
  [[nodiscard]] std::size_t cached_ranges() const { return range_cache_.size(); }
  [[nodiscard]] bool has_scratch() const { return scratch_ != 0; }
  /// Checks pSet and vSet against each other, the tree and the backend; throws std::logic_error.
  /// Waits for nothing (Note [Checking with jobs in flight]).
  void check_invariants() const;

 private:
  /// alloc_chunks(count, true, out) when the pool holds less than `count` and nothing can be
  /// created (Note [Allocating a run of chunks] in operations.cpp).
  [[nodiscard]] bool alloc_by_eviction(std::size_t count, std::vector<chunk_id>& out);
  void drop_pages(std::vector<page_version>& pages);
  /// unrecord() of each mapping of a run, prefetching the chunk records ahead.
  void unrecord_run(std::span<mapping* const> maps);
  mapping& record_mapping(device_addr va, chunk_id c, request_id owner, bool shared);
  void adopt_created();
  void check_backend() const;
  /// Runs `f(backend)` holding the backend lock (the worker calls the backend too). A lock
  /// found taken is a wait behind the worker's call in flight: counted and timed in wall time,
  /// the measured side of the modelled contention.
  template <class F>
  decltype(auto) vmm(F&& f) const EXCLUDES(backend_mutex_) {
    if (!backend_mutex_.try_lock()) {
      const auto start = std::chrono::steady_clock::now();
      backend_mutex_.lock();
      ++lock_waits_;
      lock_wait_ns_ += static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
    }
    const mutex_lock lock(backend_mutex_, std::adopt_lock);
    return f(backend_);
  }

  vmm_backend& backend_ GUARDED_BY(backend_mutex_);
  kv_geometry geometry_;
  std::uint64_t vtensor_bytes_;
  std::size_t range_cache_limit_;
  vset vset_;
  pset pset_;
  radix_tree tree_;
  std::uint64_t capacity_chunks_;  // the backend's, read once
  std::vector<device_addr> range_cache_;
  device_addr scratch_ = 0;
  device_copy_fn copy_;
  mutable mutex backend_mutex_;
  mutable std::uint64_t lock_waits_ = 0;    // step-thread waits for backend_mutex_ in vmm()
  mutable std::uint64_t lock_wait_ns_ = 0;  // their wall time
  std::unique_ptr<async_mapper> mapper_;    // declared after what it uses: destroyed (drained) first
  std::uint64_t ahead_ticket_ = 0;
  operation_counters counters_;
  std::uint64_t mapped_chunks_ = 0;
  std::uint64_t shared_chunks_ = 0;
};

}  // namespace vtensor
