#pragma once
// The experiment of `vtensor compare` (docs/compare.md): the arms (named policies with their
// options, parsed once through the registry's tables), the axes (memory budgets, time scales,
// kernel-factor sets, traces) from the command line and the experiment file, and the grid they
// make: a cell per combination of the axes' values, a point per arm in each cell, each point with
// its replay options checked by replay's own parser before any work.

#include <boost/program_options.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/cluster.hpp"
#include "sim/policy_registry.hpp"
#include "tools/compare_analysis.hpp"
#include "tools/replay_options.hpp"
#include "tools/replay_result.hpp"

namespace vtensor::tools {

/// The replay options an arm may not set but that every point shares, given once on the command
/// line (the backend is always `sim`; the axes and outputs are compare's own).
extern const std::vector<std::string> k_shared_options;

/// An arm: a named policy with its options.
struct arm {
  std::string name;                 ///< unique in the experiment
  std::string policy;               ///< the registry's name
  std::string options;              ///< as typed, after the policy
  sim::policy_choice choice;        ///< the policy with its options, parsed through its table
  std::vector<std::string> router;  ///< its router options as typed (--router, --router-*; replay's table)
};

/// The shared options (k_shared_options) of replay's table, as one group.
[[nodiscard]] boost::program_options::options_description shared_option_table();

/// The tokens of `parsed` that set a shared option (k_shared_options), as typed.
[[nodiscard]] std::vector<std::string> shared_tokens(const boost::program_options::parsed_options& parsed);

/// The arms and the axes' values (as typed, for ids and outputs; time scales parsed too).
struct experiment {
  std::vector<arm> arms;                     ///< in the order given
  std::vector<std::string> memory;           ///< "default" or a size
  std::vector<std::string> kernel_factors;   ///< a set's name or a file
  std::vector<std::string> traces;           ///< paths
  std::vector<double> time_scale;            ///< parsed
  std::vector<std::string> time_scale_text;  ///< as typed
  std::vector<std::uint32_t> replicas;       ///< replicas per point (sim/cluster.hpp)
  std::string baseline;                      ///< the reference arm of the ratios
  /// Whether cell ids name their replica count: when the axis holds anything but 1 (ids of a
  /// one-replica experiment stay what they were).
  [[nodiscard]] bool names_replicas() const { return replicas.size() > 1 || replicas.front() != 1; }
};

/// The experiment of compare's options `v` (--arm, --arms FILE, --baseline, the axes; the
/// command line's axes replace the file's); `bundled` is the default trace. Throws usage_error
/// naming the option or the file's field.
[[nodiscard]] experiment read_experiment(const boost::program_options::variables_map& v, const std::string& bundled);

/// A combination of the axes' values.
struct cell {
  std::string id;                                                         ///< unique, file-name safe
  std::size_t memory = 0, time_scale = 0, kernel_factors = 0, trace = 0;  ///< indices into the axes
  std::size_t replicas = 0;                                               ///< index into the replicas axis
  std::uint32_t replica_count = 1;                                        ///< its value
  double infinite_hit_rate = 0, offline_hit_rate = 0;                     ///< the bounds (compare_run.hpp)
  std::optional<std::uint64_t> memory_bytes;                              ///< nullopt: unlimited
};

/// One arm in one cell: one replay.
struct point {
  std::string id;                 ///< ARM@CELL, file-name safe
  std::size_t arm = 0, cell = 0;  ///< indices into the arms and the cells
  replay_options options;         ///< the shared settings, the arm's policy, the cell's axes
  // Filled by the run (compare_run.hpp):
  replay_result result;                         ///< the replay (modelled figures only; wall_seconds kept apart)
  point_analysis analysis;                      ///< why tokens missed, histograms, quantiles
  std::optional<sim::cluster_summary> cluster;  ///< more than one replica: the cluster's figures
  std::optional<double> goodput;                ///< share of requests within the run's request limits, if any
  /// A point read back from a plan's result (compare --merge, tools/compare_plan.hpp): its summary
  /// and cluster blocks as rendered when it ran (`result.config` and `cluster` are not read back).
  struct rendered_blocks {
    nlohmann::ordered_json result;   ///< replay_result_json(result)
    nlohmann::ordered_json cluster;  ///< sim::cluster_json(*cluster), null for one replica
  };
  std::optional<rendered_blocks> rendered;
  [[nodiscard]] double hit_rate() const { return result.summary.hit_rate(); }
};

/// Every cell and point of an experiment.
struct compare_grid {
  std::vector<cell> cells;    ///< traces, then kernel factors, replicas, time scales, memory (innermost)
  std::vector<point> points;  ///< per cell, the arms in order
};

/// The grid of `x`, each point's options parsed from `shared` (the shared settings as typed) with
/// its arm's policy and its cell's axes. Throws usage_error naming the arm.
[[nodiscard]] compare_grid make_grid(const experiment& x, const std::vector<std::string>& shared);

/// One replay that `vtensor capacity` asks for: an arm at a time scale of its own, in the cell of
/// the other axes (indices into `x`'s memory, kernel-factor and trace axes).
struct probe {
  std::size_t arm = 0, memory = 0, kernel_factors = 0, trace = 0, replicas = 0;
  double time_scale = 1.0;
};

/// A grid of one point per probe, each in a cell of its own (the cell's time-scale index is 0 and
/// means nothing; its id names the probe's time scale). Throws usage_error naming the arm.
[[nodiscard]] compare_grid make_probe_grid(const experiment& x, const std::vector<std::string>& shared,
                                           const std::vector<probe>& probes);

}  // namespace vtensor::tools
