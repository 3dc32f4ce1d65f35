#pragma once
// What one replay produced, typed: the run's settings, the simulator's summary, and the VMM split
// of a policy with VMM calls. `replay` and `compare` build one per run (make_replay_result());
// the summary JSON (replay_result_json()) and the text summary (print_replay_summary()) are
// renderings of it, and compare's table, summary.json and arms.csv read its fields. What a
// policy contributes in its own words (describe(), add_run_config(), extra_figures()) is kept as
// the JSON the policy wrote. Single-threaded: a result is built once, then only read.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "sim/cluster.hpp"
#include "sim/kv_policy.hpp"
#include "sim/presets.hpp"
#include "sim/replay.hpp"
#include "sim/step_log.hpp"
#include "tools/replay_options.hpp"
#include "traces/trace_reader.hpp"

namespace vtensor::tools {

/// A run's settings, as the summary's "config" reports them.
struct run_config {
  std::string trace;                          ///< the trace's path
  traces::trace_format format{};              ///< as read
  std::string policy;                         ///< the registry's name of the policy
  nlohmann::ordered_json policy_options;      ///< kv_policy::describe(): the options in effect
  nlohmann::ordered_json policy_run_config;   ///< the keys kv_policy::add_run_config() adds
  std::string model;                          ///< model preset
  std::uint32_t tp = 1;                       ///< tensor-parallel degree
  sim::gpu_preset gpu;                        ///< the GPU
  std::uint64_t weight_bytes_per_gpu = 0;     ///< the model's weights on one GPU
  std::optional<std::uint64_t> memory_bytes;  ///< KV memory per GPU; nullopt: unlimited
  double time_scale = 1.0;                    ///< arrival x scale
  std::uint64_t max_requests = 0;             ///< 0: the whole trace
  sim::replica_config replica;                ///< batching, context limit, kernel factors, step cost
  double step_overhead_ms = 0;                ///< as given (replica.step_overhead_s is derived)
  std::string kernel_factor_set;              ///< the selected set's name
  double sample_ms = 0;                       ///< time-series interval
  bool emulate_steps = false;                 ///< step compute spent in wall time
  double step_time_scale = 1.0;               ///< emulated step time = modelled x scale
  int device = 0;                             ///< cuda backend's GPU index
};

/// The modelled contention of the step thread with the worker for the driver (Note [Driver
/// contention]), from the policy's extra figures when it models it.
struct modelled_contention {
  std::uint64_t bookings = 0;  ///< contended bookings
  double us = 0;               ///< their modelled time
};

/// The VMM split of a policy with VMM calls: where its VMM time went, and when chunks were made.
struct vmm_split {
  sim::vmm_split_report report;                   ///< kv_policy::vmm_report() after the replay
  sim::creation_after_warmup creation;            ///< chunk creation against the warm-up steps
  double warmup_fraction = 0;                     ///< the warm-up share of the steps
  std::uint64_t emulated_ns = 0;                  ///< wall time spent emulating step compute (0: none)
  nlohmann::ordered_json extra_figures;           ///< kv_policy::extra_figures(): the policy's own model
  std::optional<modelled_contention> contention;  ///< in extra_figures, when the policy models it
};

/// One finished replay.
struct replay_result {
  run_config config;             ///< what was run
  std::uint64_t seed = 0;        ///< recorded
  sim::replay_summary summary;   ///< the simulator's figures
  std::optional<vmm_split> vmm;  ///< policies with VMM calls only
  bool with_wall = true;         ///< wall_seconds and the measured block are part of it
};

/// The result of a replay of `policy` (options `p`, `o`'s settings) that gave `summary`, its
/// trace read as `format`, `log` its step log; `emulated_ns` when steps were emulated.
[[nodiscard]] replay_result make_replay_result(const replay_options& o, const sim::kv_policy_options& p,
                                               const sim::kv_policy& policy, const sim::replay_summary& summary,
                                               traces::trace_format format, const sim::step_log& log,
                                               std::optional<std::uint64_t> emulated_ns, bool with_wall);

/// Nanoseconds as milliseconds and microseconds.
[[nodiscard]] double ms(std::uint64_t ns);
[[nodiscard]] double us(std::uint64_t ns);

/// Modelled waits for the worker, and the modelled VMM time on the steps, as shares of busy step
/// time; measured mapping waits as a share of step wall time (0 when the denominator is).
[[nodiscard]] double modelled_wait_share(const vmm_split& v, const sim::replay_summary& s);
[[nodiscard]] double critical_share(const vmm_split& v, const sim::replay_summary& s);
[[nodiscard]] double measured_wait_share(const vmm_split& v, const sim::replay_summary& s);

/// The summary JSON (docs/metrics.md): sim::summary_json() with the run's "config", then the VMM
/// split ("vmm_model" with the policy's extra figures, "chunk_creation", and "measured" only
/// with_wall).
[[nodiscard]] nlohmann::ordered_json replay_result_json(const replay_result& r);

/// Adds the replica settings every point of a run shares (token_budget, max_running,
/// chunked_prefill, max_context_tokens, over_context, step_overhead_ms) to `j`, in that order.
void add_replica_settings(nlohmann::ordered_json& j, const sim::replica_config& r, double step_overhead_ms);

/// The human summary of `replay`: settings, requests, memory, latency, load, then the VMM split.
void print_replay_summary(std::ostream& out, const replay_result& r);
/// The cluster's lines after it (more than one replica): router and decisions, imbalance, the
/// bounds, one line per replica.
void print_cluster_summary(std::ostream& out, const sim::cluster_summary& c);

}  // namespace vtensor::tools
