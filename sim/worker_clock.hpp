#pragma once
/// The modelled clocks of a policy whose VMM work is split between the step thread and a mapping
/// worker (vtensor, vattention): the step thread's, which the replica's steps wait for, and the
/// worker's, which runs beside them. One model, written once; each policy decides what it books
/// where (its own Note [Mapping worker model] or Note [vAttention mapping worker model]). Plain
/// data with the operations both policies make alike; not thread-safe (the step thread only).
///
/// Note [The modelled worker clock]
/// The step thread's clock is the simulated time of the last advance_to() plus the modelled VMM
/// time the step thread spent since (`critical` grew by it): its priced calls, booked when the
/// policy books them, and its waits for worker jobs. The worker's clock is when its last job
/// ends (`worker_free`): a job starts at the later of that and when it was handed out. A wait
/// for a job that ends at `done` from `from` is counted and moves the step thread's clock by
/// done - from when the job is not done by then. What the caller books on which side is said
/// by the call (wait(), count_job(), critical, worker_free), never inferred.

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "backends/units.hpp"
#include "sim/kv_policy.hpp"

namespace vtensor::sim {

/// The two modelled clocks and their figures (Note [The modelled worker clock]).
struct worker_clock {
  sim_ns booked{};              ///< step-thread call time already on the clock
  sim_ns critical{};            ///< step-thread calls + waits, modelled
  sim_ns origin{};              ///< simulated time of the last advance_to()
  sim_ns critical_at_origin{};  ///< `critical` then
  sim_ns worker_free{};         ///< when the worker's last job ends
  sim_ns job_time{};            ///< modelled price of the jobs
  sim_ns wait_time{};           ///< modelled waits of the step thread
  std::uint64_t jobs = 0;       ///< jobs handed to the worker
  std::uint64_t waits = 0;      ///< waits of the step thread for one

  /// The step thread's clock now.
  [[nodiscard]] sim_ns now() const { return origin + (critical - critical_at_origin); }
  /// Whether `t` is later than the last advance_to() (else nothing moves).
  [[nodiscard]] bool passes(sim_ns t) const { return t > origin; }
  /// The simulated time is `t`.
  void advance_to(sim_ns t) {
    origin = t;
    critical_at_origin = critical;
  }
  /// The step thread's priced calls so far come to `total`: puts what is new on its clock.
  void book_calls(sim_ns total) {
    critical += total - booked;
    booked = total;
  }
  /// The step thread waits, from `from`, for a job that ends at `done`.
  void wait(sim_ns from, sim_ns done) {
    if (done <= from) return;
    ++waits;
    wait_time += done - from;
    critical += done - from;
  }
  /// A job of `price` handed to the worker (its place on the worker's clock is the caller's).
  void count_job(sim_ns price) {
    ++jobs;
    job_time += price;
  }
  /// A job of `price` handed out at `at` that runs next on the worker: returns its end.
  sim_ns run_job(sim_ns at, sim_ns price) {
    worker_free = std::max(worker_free, at) + price;
    count_job(price);
    return worker_free;
  }
  /// The clock's part of a VMM split: the critical time, the jobs and the waits.
  void report(vmm_split_report& r) const {
    r.critical_model_ns = critical.count();
    r.jobs = jobs;
    r.job_model_ns = job_time.count();
    r.modelled_waits = waits;
    r.modelled_wait_ns = wait_time.count();
  }
};

}  // namespace vtensor::sim
