#pragma once
/// A whole replay: a trace streamed into a replica through arrival events, run to the end, and
/// summarised. The trace is read one request ahead (constant memory in the trace's length);
/// requests arriving at the same instant are submitted together so they can share a step.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "sim/kv_policy.hpp"
#include "sim/metrics.hpp"
#include "sim/presets.hpp"
#include "sim/replica.hpp"
#include "traces/trace_reader.hpp"

namespace vtensor::sim {

/// Where a replay stands, for a progress line.
struct replay_progress {
  time_us now = 0;              ///< simulated time
  std::uint64_t submitted = 0;  ///< requests arrived
  std::uint64_t completed = 0;  ///< finished
  double wall_seconds = 0;      ///< since the start
};

/// How to replay (the policy is built by the caller).
struct replay_config {
  double time_scale = 1.0;                               ///< arrival_us * time_scale
  std::uint64_t max_requests = 0;                        ///< 0: the whole trace
  model_compute model;                                   ///< model on one GPU of the replica
  gpu_preset gpu;                                        ///< the GPU
  replica_config replica;                                ///< batching and cost
  std::function<void(const replay_progress&)> progress;  ///< called about twice a second, if set
};

/// The summary of a replay (keys of summary_json()).
struct replay_summary {
  replica_counters counters;               ///< the replica's totals
  kv_stats final_memory;                   ///< the policy's state at the end
  replica_peaks peak;                      ///< peaks over the replay
  double mean_internal_fragmentation = 0;  ///< over the time something was mapped
  double mean_sharing_saving = 0;          ///< over the time some request was live
  double mean_physical_bytes = 0;          ///< time-weighted
  double mean_mapped_bytes = 0;            ///< time-weighted
  double mean_used_bytes = 0;              ///< time-weighted
  double mean_running = 0;                 ///< time-weighted
  double mean_waiting = 0;                 ///< time-weighted
  memory_breakdown_means mean_breakdown;   ///< time-weighted, per part
  latency_summary ttft, tpot, e2e;         ///< milliseconds
  latency_summary queue;                   ///< arrival to first admission, milliseconds
  double first_arrival_seconds = 0;        ///< simulated (scaled) arrival of the first request
  double last_arrival_seconds = 0;         ///< simulated (scaled) arrival of the last request
  double simulated_seconds = 0;            ///< end of the last step
  double wall_seconds = 0;                 ///< host time of the replay
  std::uint64_t events = 0;                ///< events run
  std::uint32_t replicas = 1;              ///< replicas summed into it (Note [Cluster figures] in cluster.hpp)

  /// Requests rejected, over context or over memory.
  [[nodiscard]] std::uint64_t rejected() const { return counters.rejected_context + counters.rejected_memory; }
  /// Prompt tokens served from the prefix cache, as a share of all prompt tokens.
  [[nodiscard]] double hit_rate() const;
  /// Output and prefilled tokens per simulated second (0 for an empty replay).
  [[nodiscard]] double throughput_tokens_per_s() const;
  [[nodiscard]] double prefill_tokens_per_s() const;
  /// Busy step time as a share of the simulated time (of a cluster: the replicas' mean).
  [[nodiscard]] double busy_fraction() const;
  /// VMM time charged in all, and on the critical path, microseconds.
  [[nodiscard]] double vmm_time_us() const;
  [[nodiscard]] double vmm_critical_time_us() const;
};

/// Replays `reader` into `policy` and checks the policy's invariants at the end (throws
/// std::logic_error when broken). Throws trace_error on bad trace input, std::invalid_argument
/// on bad settings.
[[nodiscard]] replay_summary run_replay(traces::trace_reader& reader, kv_policy& policy, const replay_config& config,
                                        std::span<replica_observer* const> observers = {});

/// The summary with stable keys (docs/metrics.md): requests, completed, rejected,
/// preemptions, prompt_tokens, output_tokens, prefix_hit_rate, peak_physical_bytes,
/// peak_mapped_bytes, mean_internal_fragmentation, peak_internal_fragmentation,
/// mean_sharing_saving, cow_bytes, vmm_calls, vmm_time_us, ttft_ms, tpot_ms, e2e_ms,
/// throughput_tokens_per_s, simulated_seconds, wall_seconds (omitted when `with_wall` is false,
/// so that two runs compare byte for byte), and more; `config` is inserted as given, then `seed`.
[[nodiscard]] nlohmann::ordered_json summary_json(const replay_summary& s, const nlohmann::ordered_json& config,
                                                  std::uint64_t seed, bool with_wall = true);

/// Note [Overload]
/// A replica is overloaded when requests arrive faster than its steps serve them: the waiting
/// queue grows for as long as requests arrive, and TTFT is mostly queueing. The summary's "load"
/// says so from the run itself: offered load = busy step time / arrival span (the time from the
/// first to the last arrival; of a cluster, the replicas' busy time over replicas x span); the replay is reported
/// overloaded when the offered load exceeds 1 and the replica ran on after the last arrival for more than a tenth of
/// the arrival span (draining its backlog). The time scale at which it would keep up is estimated as this run's time
/// scale x the offered load: a lower bound, since at lighter load steps batch fewer requests and serve each token at a
/// higher cost.
struct load_report {
  double arrival_span_seconds = 0;  ///< last arrival - first arrival
  double drain_seconds = 0;         ///< end of the last step - last arrival
  double offered_load = 0;          ///< busy step time / arrival span (0 with one arrival instant)
  bool overloaded = false;          ///< see the note
  double keep_up_time_scale = 0;    ///< estimated smallest --time-scale that keeps up (lower bound)
};
[[nodiscard]] load_report load_of(const replay_summary& s, double time_scale);

/// Parses a byte size: an integer or decimal number with an optional unit (B, KB, MB, GB, TB
/// in powers of 1000; KiB, MiB, GiB, TiB in powers of 1024), or "unlimited" (UINT64_MAX).
/// Throws std::invalid_argument naming the text.
[[nodiscard]] std::uint64_t parse_byte_size(std::string_view text);

}  // namespace vtensor::sim
