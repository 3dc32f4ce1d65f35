#pragma once
/// What a replay measures: per-request latencies (with nearest-rank percentiles), and memory
/// and queue state over time (time-weighted means, peaks, and samples on a fixed grid).
/// Definitions: docs/metrics.md.

#include <cstdint>
#include <functional>
#include <vector>

#include "sim/event_queue.hpp"
#include "sim/kv_policy.hpp"

namespace vtensor::sim {

/// The state of a replica at an instant.
struct replica_state {
  time_us at = 0;              ///< when
  memory_stats memory;         ///< the policy's memory
  memory_breakdown breakdown;  ///< the same bytes by what they hold
  std::uint32_t running = 0;   ///< admitted requests
  std::uint32_t waiting = 0;   ///< arrived, not admitted
};

/// Time-weighted means of a memory_breakdown's parts, bytes.
struct memory_breakdown_means {
  double used = 0, internal = 0, reserved_idle = 0, external = 0, cached = 0, free = 0;
  double cached_pinning = 0, reclaimable = 0;
};

/// The peak of each figure over a replay, each taken on its own (they need not coincide).
struct replica_peaks {
  time_us at = 0;                     ///< the last instant observed
  memory_stats memory;                ///< the peak of each byte figure
  double internal_fragmentation = 0;  ///< memory_stats::internal_fragmentation()
  double sharing_saving = 0;          ///< memory_stats::sharing_saving()
  std::uint32_t running = 0;          ///< admitted requests
  std::uint32_t waiting = 0;          ///< arrived, not admitted
};

/// p50, p90, p99 (nearest rank) and the mean of a sample, in milliseconds.
struct latency_summary {
  double p50 = 0;           ///< median
  double p90 = 0;           ///< 90th percentile
  double p99 = 0;           ///< 99th percentile
  double mean = 0;          ///< arithmetic mean
  std::uint64_t count = 0;  ///< values
};

/// Nearest-rank percentiles of `values_us` (sorted in place), converted to milliseconds.
[[nodiscard]] latency_summary summarize_latencies(std::vector<std::uint64_t>& values_us);

/// Integrates a piecewise-constant state over time. observe() is called whenever the state may
/// have changed; the previous state holds over [previous at, at). Also emits the state on a grid
/// of `interval` microseconds (the value holding at each grid instant) through `on_sample`.
class state_tracker {
 public:
  /// `interval` 0 disables the grid.
  explicit state_tracker(time_us interval, std::function<void(const replica_state&)> on_sample = {});

  /// Records `s` (s.at must not go backwards).
  void observe(const replica_state& s);
  /// Emits the grid samples before `until` (the last observed state's) now, ahead of the
  /// observe() that would emit them; integrates nothing.
  void sample_until(time_us until);
  /// Emits the last grid samples up to `end` and stops.
  void close(time_us end);

  /// Mean of internal fragmentation over the time something was mapped.
  [[nodiscard]] double mean_internal_fragmentation() const;
  /// Mean of sharing saving over the time some request was live.
  [[nodiscard]] double mean_sharing_saving() const;
  /// Time-weighted means of the byte counters and queue lengths over the whole replay.
  [[nodiscard]] double mean_physical_bytes() const;
  [[nodiscard]] double mean_mapped_bytes() const;
  [[nodiscard]] double mean_used_bytes() const;
  [[nodiscard]] double mean_running() const;
  /// Time-weighted mean of each part of the memory breakdown over the whole replay.
  [[nodiscard]] memory_breakdown_means mean_breakdown() const;
  [[nodiscard]] double mean_waiting() const;
  /// The peak of each figure over every observed state.
  [[nodiscard]] const replica_peaks& peak() const { return peak_; }

 private:
  void integrate(time_us until);

  time_us interval_;
  std::function<void(const replica_state&)> on_sample_;
  bool have_last_ = false;
  replica_state last_;
  double last_fragmentation_ = 0;  // last_.memory's internal_fragmentation(), computed once
  double last_sharing_ = 0;        // and its sharing_saving()
  replica_peaks peak_;
  time_us next_sample_ = 0;
  double total_us_ = 0;
  double mapped_us_ = 0;              // time with something mapped
  double live_us_ = 0;                // time with logical bytes
  memory_breakdown_means breakdown_;  // integrals (bytes x us) until mean_breakdown() divides
  double frag_ = 0, sharing_ = 0, physical_ = 0, mapped_ = 0, used_ = 0, running_ = 0, waiting_ = 0;
};

}  // namespace vtensor::sim
