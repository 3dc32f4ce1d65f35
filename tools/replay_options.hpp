#pragma once
// The options of `vtensor replay`, parsed into a replay_options; `compare` builds each of its
// points' options with them too. What a run produced is a replay_result (tools/replay_result.hpp).

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
#include "sim/router.hpp"
#include "sim/step_log.hpp"
#include "tools/cli.hpp"
#include "traces/trace_reader.hpp"

namespace vtensor::tools {

/// Everything a replay needs, parsed and checked before any output file is opened.
struct replay_options {
  std::string trace_path;
  std::optional<traces::trace_format> format;  // nullopt: detect
  sim::policy_choice choice;                   // the policy and its own settings
  std::vector<std::string> backends;           // one, or the two of --compare-backends
  bool comparing = false;
  std::optional<bool> emulate_steps;  // nullopt: on for cuda only
  double step_scale = 1.0;
  double warmup_fraction = 0.1;
  sim::kv_policy_options policy;  // the settings every policy shares
  sim::model_compute model;
  sim::gpu_preset gpu;
  sim::replay_config config;
  double overhead_ms = 0;
  sim::kernel_factor_set kernel_factors;  // the selected set (the policy's factors are in config.replica)
  double sample_ms = 0;
  std::uint64_t seed = 0;
  bool with_wall = true;
  std::optional<std::string> json, timeseries, chrome_trace;  // output files
  std::uint32_t replicas = 1;                                 // --replicas (sim/cluster.hpp)
  std::string router = "round-robin";                         // --router (sim/router.hpp)
  sim::router_options router_options;                         // --router-* (the seed is --seed)
  std::optional<std::string> operating_point;                 // the main job's (Note [The main job's operating point])

  [[nodiscard]] bool emulate_for(const std::string& backend) const { return emulate_steps.value_or(backend == "cuda"); }
};

/// The values `compare` varies from point to point (its axes); `replay` takes them from its options.
struct replay_axes {
  std::optional<std::string> memory;      // --memory as typed; nullopt: GPU memory minus the weights
  double time_scale = 1.0;                // --time-scale
  std::string kernel_factors = "modern";  // --kernel-factors: a set's name or a file
  std::optional<std::string> trace;       // --trace; nullopt: the bundled excerpt
};

/// The time scale of `vtensor replay` on the bundled excerpt when neither --trace nor
/// --time-scale is given (Note [The main job's operating point] in replay_options.cpp).
inline constexpr double k_main_job_time_scale = 3.0;

/// The bundled Mooncake excerpt (the default trace), wherever vtensor was built or installed.
/// Throws usage_error when it cannot be found.
[[nodiscard]] std::string bundled_trace_path();

/// The option groups of `vtensor replay`: the trace and replica, the VMM backend, one group per
/// policy (from the registry's tables: the options not in an earlier group), the outputs; and
/// all of them together.
[[nodiscard]] boost::program_options::options_description workload_options();
[[nodiscard]] boost::program_options::options_description backend_options();
void add_policy_groups(boost::program_options::options_description& into);
[[nodiscard]] boost::program_options::options_description output_options();
/// Replicas and the router (`replay`; compare reads their defaults where its table lacks them).
[[nodiscard]] boost::program_options::options_description cluster_options();
[[nodiscard]] boost::program_options::options_description replay_option_table();
/// Every policy's options in one group called `caption` (an arm's options in `compare`).
[[nodiscard]] boost::program_options::options_description policy_option_table(const std::string& caption);

/// Policy `policy` with the options of the policies' tables given in `v` (typed ones only; the
/// others take their table's default). Throws usage_error for an unknown policy, and
/// sim::option_error (exit 2) for an option the policy does not read or a bad value.
[[nodiscard]] sim::policy_choice parse_policy_choice(const std::string& policy,
                                                     const boost::program_options::variables_map& v);

/// Replicas and the router of `v` (cluster_options(); absent ones keep their defaults) into `o`,
/// whose memory and seed are already parsed. Throws usage_error naming the option.
void parse_cluster_options(const boost::program_options::variables_map& v, replay_options& o);

/// The axes' values given in `v` (replay_option_table()).
[[nodiscard]] replay_axes replay_axes_of(const boost::program_options::variables_map& v);

/// Parses and checks the values of replay_option_table(), the policy `--policy` with its options
/// included; opens the trace and loads the calibration once so that bad input fails before any
/// output. Throws usage_error (exit 2) naming the option, and std::runtime_error when a backend is
/// not in this build.
[[nodiscard]] replay_options parse_replay_options(const boost::program_options::variables_map& v);
/// The same for `policy` and `axes`, given apart (a point of `compare`): the policies' options and
/// the axes' in `v` are not read.
[[nodiscard]] replay_options parse_replay_options(const boost::program_options::variables_map& v,
                                                  sim::policy_choice policy, const replay_axes& axes);

}  // namespace vtensor::tools
