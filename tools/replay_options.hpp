#pragma once
// The options of `vtensor replay`, parsed into a replay_options, and the pieces of a run's
// summary that every command replaying a trace shares (`replay`, `compare`).

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/kernel_factors.hpp"
#include "sim/kv_policy.hpp"
#include "sim/policy_registry.hpp"
#include "sim/presets.hpp"
#include "sim/replay.hpp"
#include "sim/step_log.hpp"
#include "tools/cli.hpp"
#include "traces/trace_reader.hpp"

namespace vtensor::tools {

/// Everything a replay needs, parsed and checked before any output file is opened.
struct replay_options {
  std::string trace_path;
  std::optional<traces::trace_format> format;  // nullopt: detect
  std::string policy_name;
  std::vector<std::string> backends;  // one, or the two of --compare-backends
  bool comparing = false;
  std::optional<bool> emulate_steps;  // nullopt: on for cuda only
  double step_scale = 1.0;
  double warmup_fraction = 0.1;
  sim::kv_policy_options policy;
  sim::model_compute model;
  sim::gpu_preset gpu;
  nlohmann::ordered_json memory_json;
  sim::replay_config config;
  double overhead_ms = 0;
  sim::kernel_factor_set kernel_factors;  // the selected set (the policy's factors are in config.replica)
  double sample_ms = 0;
  std::uint64_t seed = 0;
  bool with_wall = true;
  bool pipeline = false;                                      // pipelined admission (replica and vtensor policy)
  std::optional<std::string> json, timeseries, chrome_trace;  // output files

  [[nodiscard]] bool emulate_for(const std::string& backend) const { return emulate_steps.value_or(backend == "cuda"); }
};

/// The bundled Mooncake excerpt (the default trace), wherever vtensor was built or installed.
/// Throws usage_error when it cannot be found.
[[nodiscard]] std::string bundled_trace_path();

/// The option groups of `vtensor replay`: the trace and replica, the vtensor policy and its
/// backend, the baseline policies, the outputs; and all four together.
[[nodiscard]] boost::program_options::options_description workload_options();
[[nodiscard]] boost::program_options::options_description vtensor_options();
[[nodiscard]] boost::program_options::options_description baseline_options();
[[nodiscard]] boost::program_options::options_description output_options();
[[nodiscard]] boost::program_options::options_description replay_option_table();

/// Parses and checks the values of replay_option_table(): builds the policy once and opens the
/// trace once so that bad input fails before any output. Throws usage_error (exit 2) naming the
/// option, and std::runtime_error when a backend is not in this build.
[[nodiscard]] replay_options parse_replay_options(const boost::program_options::variables_map& v);

/// Nanoseconds as milliseconds and microseconds.
[[nodiscard]] double ms(std::uint64_t ns);
[[nodiscard]] double us(std::uint64_t ns);

/// Adds the vtensor policy's VMM split to a summary (modelled: deterministic; measured: only
/// `with_wall`).
void add_vmm_split(nlohmann::ordered_json& j, const sim::vmm_split_report& r, const sim::replay_summary& s,
                   const sim::creation_after_warmup& c, double warmup_fraction, std::uint64_t emulated_ns,
                   bool with_wall);

/// The "config" object of a run's summary.
[[nodiscard]] nlohmann::ordered_json run_config_json(const replay_options& o, const sim::kv_policy_options& p,
                                                     const sim::kv_policy& policy, traces::trace_format format,
                                                     bool emulated);

/// The policy of a replay: the registry's, with the pipeline for vtensor (Note [Pipelined
/// admission] in core/scheduler.cpp).
[[nodiscard]] std::unique_ptr<sim::kv_policy> make_policy(const replay_options& o, const sim::kv_policy_options& p);

/// The summary JSON of one finished replay: summary_json() with the run's config, plus the VMM
/// split and the pipeline's figures for policies with VMM calls.
[[nodiscard]] nlohmann::ordered_json replay_run_json(const replay_options& o, const sim::kv_policy_options& p,
                                                     const sim::kv_policy& policy, const sim::replay_summary& summary,
                                                     traces::trace_format format, const sim::step_log& log,
                                                     std::optional<std::uint64_t> emulated_ns, bool with_wall);

}  // namespace vtensor::tools
