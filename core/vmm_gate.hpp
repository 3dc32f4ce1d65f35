#pragma once
/// The one way to the VMM backend: its lock, the step thread's waits behind the worker, and the
/// asynchronous mapping worker that shares the backend. Every driver call of the pool goes through
/// here, as `vmm(lambda)` (one call, its wait counted) or `locked(lambda)` (several calls under one
/// hold); nothing else names the backend. The worker issues its jobs through a view of its own
/// (backend_views).
/// Threads: the backend is guarded by `backend_mutex_` (checked by the clang build), which the
/// worker takes too; the rest (the worker's handle, the wait counters) belongs to the step thread.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backends/vmm_backend.hpp"
#include "core/async_mapper.hpp"
#include "core/mutex.hpp"

namespace vtensor {

/// The device as the pool's two callers reach it: the step thread's calls go through `step`, the
/// mapping worker's jobs through `worker`, so that an adaptor may tell the two apart by the handle
/// (Note [Whose call is it] in sim/accounting_backend.hpp). One backend serves as both when
/// nothing needs them apart; two views must forward to one device, whose calls one lock serialises.
struct backend_views {
  /// One backend for both callers.
  backend_views(vmm_backend& both) : step(both), worker(both) {}  // NOLINT(google-explicit-constructor)
  backend_views(vmm_backend& step_view, vmm_backend& worker_view) : step(step_view), worker(worker_view) {}
  vmm_backend& step;    ///< the step thread's calls
  vmm_backend& worker;  ///< the mapping worker's jobs, on its thread or inline
};

/// The backend, its lock and the mapping worker (off until enable_async()).
class vmm_gate {
 public:
  /// The step thread's calls go to `backends.step`; the worker is given `backends.worker`.
  explicit vmm_gate(backend_views backends)
      : backend_(backends.step), worker_backend_(backends.worker), one_view_(&backends.step == &backends.worker) {}
  ~vmm_gate();
  vmm_gate(const vmm_gate&) = delete;
  vmm_gate& operator=(const vmm_gate&) = delete;

  /// Runs `f(backend)` holding the backend lock: one driver call. A lock found taken is a wait
  /// behind the worker's call in flight: counted and timed in wall time, the measured side of the
  /// modelled contention (Note [Driver contention]).
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
  /// Runs `f(backend)` holding the backend lock throughout (several calls that belong together:
  /// a copy through the scratch range, a trim); a wait for the lock is not counted.
  template <class F>
  decltype(auto) locked(F&& f) const EXCLUDES(backend_mutex_) {
    const mutex_lock lock(backend_mutex_);
    return f(backend_);
  }

  // --- the mapping worker ---
  /// Starts the mapping worker; with `inline_jobs` it runs each job as it is submitted, on the
  /// submitting thread (Note [Inline worker] in async_mapper.hpp). Idempotent.
  void enable_async(bool inline_jobs = false);
  [[nodiscard]] bool async() const { return mapper_ != nullptr; }
  /// The worker, or null while it is off.
  [[nodiscard]] async_mapper* worker() const { return mapper_.get(); }
  /// Queues deferred driver work; returns its ticket (0 for an empty job). Throws
  /// std::logic_error for work without the worker.
  std::uint64_t submit(mapping_job job);
  /// Waits for ticket `ticket` (0: nothing); `step_wait` counts it as a step waiting for a mapping.
  void wait(std::uint64_t ticket, bool step_wait);
  /// Waits for all deferred work.
  void drain() const;
  /// Runs a job's driver calls now, on this thread (strong guarantee; see run_mapping_job).
  void run_now(const mapping_job& job);
  /// Maps again, on this thread, the worker's map jobs that failed (Note [A map failing on the
  /// worker] in async_mapper.cpp); returns how many. When a retry fails too, the jobs not done
  /// are kept for later unmaps to skip and the driver's error propagates.
  std::size_t retry_failed();
  /// Forgets the worker's failed maps in [lo, hi) (see async_mapper::forget_failed).
  [[nodiscard]] std::vector<device_addr> forget_failed(device_addr lo, device_addr hi) {
    return mapper_ ? mapper_->forget_failed(lo, hi) : std::vector<device_addr>{};
  }
  /// The step thread holds the driver while it lives (Note [Driver hand-over] in
  /// async_mapper.cpp): the worker starts no driver call until it ends, except while the step
  /// thread waits for a worker job. Does nothing without the worker.
  class [[nodiscard]] driver_scope {
   public:
    explicit driver_scope(const vmm_gate& gate) noexcept : mapper_(gate.mapper_.get()) {
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

  // --- state ---
  [[nodiscard]] async_counters async_stats() const;
  /// The device's counters, read under the backend lock: the step view's and, when it is another
  /// backend, the worker view's added.
  [[nodiscard]] vmm_counters vmm_stats() const;
  /// Step-thread driver calls that found the worker holding the driver, and their wall time.
  [[nodiscard]] std::uint64_t lock_waits() const { return lock_waits_; }
  [[nodiscard]] std::uint64_t lock_wait_ns() const { return lock_wait_ns_; }
  /// What the backend holds, and the chunks the worker created that nobody adopted yet.
  struct idle_backend {
    vmm_live live;                     ///< the backend's live counts
    std::size_t unadopted_chunks = 0;  ///< created by the worker, not in the pSet yet
    std::size_t unmapped_failed = 0;   ///< recorded mappings whose map failed on the worker, not retried
  };
  /// The backend's state when no worker job is queued or running; nullopt (without waiting)
  /// otherwise (Note [Checking with jobs in flight] in operations.cpp).
  [[nodiscard]] std::optional<idle_backend> backend_if_idle() const;

 private:
  vmm_backend& backend_ GUARDED_BY(backend_mutex_);         // the step thread's view
  vmm_backend& worker_backend_ GUARDED_BY(backend_mutex_);  // the worker's view, handed to the mapper
  const bool one_view_;                                     // backend_ and worker_backend_ are one object
  mutable mutex backend_mutex_;
  mutable std::uint64_t lock_waits_ = 0;    // step-thread waits for backend_mutex_ in vmm()
  mutable std::uint64_t lock_wait_ns_ = 0;  // their wall time
  std::unique_ptr<async_mapper> mapper_;    // declared after what it uses: destroyed (drained) first
};

}  // namespace vtensor
