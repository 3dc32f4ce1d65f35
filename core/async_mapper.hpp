#pragma once
/// The asynchronous mapping worker: one background thread that issues lookahead mappings (map +
/// set-access) and creates chunks ahead of need, so that a decode step only waits when a mapping
/// it needs is not done yet. One thread, because the driver serialises VMM calls: more threads do
/// not map faster (backends/calibration/README.md).
/// Threads: every public method may be called while the worker runs; the mapper's state is
/// guarded by its own mutex, the backend by the caller's backend lock (checked by the clang build).
///
/// Note [Deferred mappings]: the pool's bookkeeping (vSet, pSet) is done by the caller when it
/// submits a job, as if the mapping were in place; only the driver calls are deferred. Whoever
/// touches those addresses again (a step that needs the page, an unmap) first waits for the job's
/// ticket; an invariant check does not wait, and leaves out what a job in flight may still change
/// (Note [Checking with jobs in flight] in operations.cpp). Every backend call, from either thread, holds
/// `backend_mutex()`. A driver error in the worker is kept and rethrown by the next wait().
///
/// Note [Inline worker]: over a simulated device nothing the worker does depends on wall time
/// (the simulated clock prices its calls from the job, sim/vtensor_policy.hpp), so handing each
/// job to a thread only adds a lock per call and a thread switch per wait: on a whole-trace
/// replay those hand-offs cost more than the jobs (figures: results/README.md, issue 13). With
/// `inline_jobs` the mapper runs every job on the calling thread as it is submitted, holding the
/// backend lock once for the job: the schedule a thread would follow if it were infinitely fast,
/// one of the schedules the threaded worker may already take. Tickets, failed jobs, kept errors
/// and counters behave as with the thread; a wait never blocks. The calls still are the worker's:
/// the mapper makes them through the backend it was given, the worker's view (Note [Whose call is
/// it] in sim/accounting_backend.hpp), whichever thread runs the job. A real device keeps the
/// thread, whose calls overlap the step's.

#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backends/vmm_backend.hpp"
#include "core/cond_var.hpp"
#include "core/mutex.hpp"
#include "core/thread_annotations.hpp"

namespace vtensor {

/// A run of contiguous chunk mappings to unmap in one call.
struct unmap_entry {
  device_addr va = 0;       ///< first chunk's address
  std::uint64_t bytes = 0;  ///< a whole number of chunks
};

/// Driver work, built while the pool's bookkeeping is done (Note [Deferred mappings]) and run
/// afterwards, by the worker or at once: the driver calls go back to back, a map and a
/// set-access per chunk (Note [One set-access per chunk]).
struct mapping_job {
  std::vector<mapping_entry> maps;       ///< in order
  std::uint32_t create_chunks = 0;       ///< chunks to create ahead of need
  std::vector<unmap_entry> unmaps;       ///< runs to unmap, after the maps (deferred releases)
  std::vector<device_addr> free_ranges;  ///< ranges to free, after the unmaps (deferred releases)
  [[nodiscard]] bool empty() const {
    return maps.empty() && create_chunks == 0 && unmaps.empty() && free_ranges.empty();
  }
  /// Chunks the job maps.
  [[nodiscard]] std::size_t chunks() const { return maps.size(); }
};

/// Runs the map calls of `job` on `backend` (the caller holds the backend lock). Strong
/// guarantee: when a call fails, what the job mapped is unmapped before the error propagates.
void run_mapping_job(vmm_backend& backend, const mapping_job& job);

/// A map job of the worker that failed (Note [A map failing on the worker]): its maps were
/// undone, its bookkeeping stands; the step thread retries it or a later unmap skips its pages.
struct failed_job {
  std::uint64_t ticket = 0;  ///< the job's ticket
  mapping_job job;           ///< its maps not in the driver (those a later unmap skipped removed)
  std::exception_ptr error;  ///< the driver's error
};

/// What the worker did and what callers waited.
struct async_counters {
  std::uint64_t mapped_chunks = 0;    ///< chunks mapped by the worker
  std::uint64_t worker_vmm_ns = 0;    ///< backend time charged by the worker's calls (off the step)
  std::uint64_t waits = 0;            ///< waits that found their job not done
  std::uint64_t wait_ns = 0;          ///< wall time spent in those waits
  std::uint64_t unmapped_chunks = 0;  ///< chunk mappings the worker unmapped (deferred releases)
  std::uint64_t failed_jobs = 0;      ///< map jobs that failed on the worker
};

/// The worker. Created by the vmm_gate (core/vmm_gate.hpp) when asynchronous lookahead is on.
class async_mapper {
 public:
  /// Every job's calls go to `backend` (the worker's view, Note [Whose call is it] in
  /// sim/accounting_backend.hpp). With `inline_jobs`, no thread: each job runs in submit() (Note
  /// [Inline worker]).
  async_mapper(vmm_backend& backend, mutex& backend_mutex, bool inline_jobs = false);
  ~async_mapper();  ///< drains, then stops the thread
  async_mapper(const async_mapper&) = delete;
  async_mapper& operator=(const async_mapper&) = delete;

  /// Queues `job`; returns its ticket (tickets grow by one per job).
  std::uint64_t submit(mapping_job job) EXCLUDES(mutex_);
  /// Blocks until job `ticket` is done; `step_wait` counts the wait as a step waiting for a
  /// mapping. Rethrows a driver error the worker met outside a map job (a failed map job is kept
  /// for take_failed() instead).
  void wait(std::uint64_t ticket, bool step_wait) EXCLUDES(mutex_);
  /// The failed map jobs not retried yet, oldest first; their pages leave the skip set (the
  /// caller maps them again, or gives them back with forget_failed()).
  [[nodiscard]] std::vector<failed_job> take_failed() EXCLUDES(mutex_);
  /// Puts back jobs whose retry failed too: later unmaps skip their pages.
  void restore_failed(std::vector<failed_job> jobs) EXCLUDES(mutex_);
  /// Forgets the failed maps at addresses in [lo, hi) (the caller unmaps that range itself and
  /// skips them); returns their addresses, ascending.
  [[nodiscard]] std::vector<device_addr> forget_failed(device_addr lo, device_addr hi) EXCLUDES(mutex_);
  /// Chunk mappings recorded by the caller that are not in the driver (failed, not retried).
  [[nodiscard]] std::size_t unmapped_failed() const EXCLUDES(mutex_);
  /// Waits for every job.
  void drain() EXCLUDES(mutex_) { wait(last_ticket(), false); }
  /// Whether job `ticket` is done.
  [[nodiscard]] bool done(std::uint64_t ticket) const EXCLUDES(mutex_);
  /// Chunks created but not taken yet, when every job submitted is done; nullopt while a job is
  /// queued or running. Called holding the backend lock, it describes the backend's state.
  [[nodiscard]] std::optional<std::size_t> idle_created() const EXCLUDES(mutex_);
  /// The last ticket handed out.
  [[nodiscard]] std::uint64_t last_ticket() const EXCLUDES(mutex_);
  /// Chunks the worker created ahead, handed over once (the caller adopts them).
  [[nodiscard]] std::vector<chunk_handle> take_created() EXCLUDES(mutex_);
  /// A copy of the counters.
  [[nodiscard]] async_counters counters() const EXCLUDES(mutex_);
  /// Whether jobs run in submit() (Note [Inline worker]).
  [[nodiscard]] bool inline_jobs() const { return inline_; }

  /// The step thread takes the driver for a whole operation (Note [Driver hand-over]): until
  /// release_driver(), the worker starts no new driver call; the one in flight finishes first.
  /// A wait() for the worker lets go of the driver while it blocks and takes it back after.
  void hold_driver() noexcept { step_holds_driver_.store(true, std::memory_order_release); }
  /// Ends hold_driver(); the worker goes on.
  void release_driver() noexcept {
    step_holds_driver_.store(false, std::memory_order_release);
    step_holds_driver_.notify_all();
  }

 private:
  void run() EXCLUDES(mutex_);
  /// Runs job `ticket` on this thread, holding the backend lock throughout (Note [Inline worker]).
  void run_inline(std::uint64_t ticket, const mapping_job& job) EXCLUDES(mutex_, backend_mutex_);
  /// Books a job run (by the thread or inline) as done.
  void complete(std::uint64_t ticket, const mapping_job& job, std::vector<chunk_handle>& created, std::uint64_t charged,
                std::exception_ptr error) EXCLUDES(mutex_);
  /// The driver calls of a job; inline, the caller holds the backend lock (run_inline), else each
  /// call takes it (locked_call).
  void run_job(std::uint64_t ticket, const mapping_job& job, std::vector<chunk_handle>& created, std::uint64_t& charged)
      EXCLUDES(mutex_);
  void unmap_skipping_failed(const unmap_entry& u, std::uint64_t& charged) EXCLUDES(mutex_);
  /// Every run of a job's unmaps: skipping failed mappings (Note [Unmaps of an inline job]).
  void unmap_runs(const std::vector<unmap_entry>& unmaps, std::uint64_t& charged) EXCLUDES(mutex_);
  /// Runs `f(backend)` holding the backend lock: taken for the call, or inline already held.
  template <class F>
  void locked_call(std::uint64_t& charged, F&& f) EXCLUDES(mutex_);

  vmm_backend& backend_ GUARDED_BY(backend_mutex_);
  mutex& backend_mutex_;
  const std::uint64_t chunk_bytes_;  // the backend's, a constant read without the lock
  mutable mutex mutex_;
  cond_var work_cv_;
  cond_var done_cv_;
  std::deque<std::pair<std::uint64_t, mapping_job>> queue_ GUARDED_BY(mutex_);
  std::vector<chunk_handle> created_ GUARDED_BY(mutex_);
  std::uint64_t submitted_ GUARDED_BY(mutex_) = 0;
  std::uint64_t completed_ GUARDED_BY(mutex_) = 0;
  std::exception_ptr error_ GUARDED_BY(mutex_);
  std::vector<failed_job> failed_ GUARDED_BY(mutex_);                             // failed map jobs, by ticket
  std::unordered_map<device_addr, std::uint64_t> failed_vas_ GUARDED_BY(mutex_);  // their addresses -> ticket
  bool stop_ GUARDED_BY(mutex_) = false;
  std::atomic<bool> step_holds_driver_{false};  // Note [Driver hand-over]
  bool inline_ = false;                         // jobs run in submit(), no thread; set once
  async_counters counters_ GUARDED_BY(mutex_);
  std::thread thread_;
};

}  // namespace vtensor
