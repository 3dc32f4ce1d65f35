#pragma once
// Running the grid of `vtensor compare`: each trace read and indexed once, the bounds of each
// cell (infinite cache, offline Belady at the budget), then every point replayed on a pool of
// threads into its typed result and its analysis. Results do not depend on the number of threads.

#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <vector>

#include "tools/cli.hpp"
#include "tools/compare_experiment.hpp"
#include "traces/memory_trace.hpp"
#include "traces/prefix_bounds.hpp"

namespace vtensor::tools {

/// The experiment's traces, each read once, with their prefix indexes.
struct compare_traces {
  std::vector<traces::loaded_trace> loaded;   ///< in the order of the trace axis
  std::vector<traces::prefix_index> indexes;  ///< one per trace
};

/// Reads and indexes every trace of `x` with the format and request limit of `first` (shared by
/// every point), or only trace `only` (the others left empty: a plan's task, which replays one
/// point). Throws usage_error for a trace without requests, trace_error for a bad one.
[[nodiscard]] compare_traces load_traces(const experiment& x, const replay_options& first,
                                         std::optional<std::size_t> only = std::nullopt);

/// Fills each cell's bounds: the infinite cache's hit rate, and the offline one at the cell's
/// budget of `token_bytes` per token (computed once per trace and budget); a cluster's cell gets
/// the offline bound of one cache holding all its replicas' memory, which no split of that
/// memory can beat (its own split bound is in each point's "cluster" block).
void add_bounds(std::vector<cell>& cells, const compare_traces& traces, std::uint64_t token_bytes);

/// Per-request latency limits, milliseconds (infinity: no limit): a request is good when it
/// completed within every one (TPOT: outputs of 2 tokens or more).
struct request_limits {
  double ttft_ms = std::numeric_limits<double>::infinity();
  double tpot_ms = std::numeric_limits<double>::infinity();
  double e2e_ms = std::numeric_limits<double>::infinity();
};

/// The share of `times`' requests that are good under `limits` (a rejected one is not; 0 for none).
[[nodiscard]] double goodput_share(const std::vector<request_times>& times, const request_limits& limits);

/// Replays every point of `grid` on `jobs` threads, filling its result and analysis (and its
/// goodput under `limits` when given); each point's time series goes to `timeseries_dir`/ID.csv
/// when given. A progress line goes to a terminal's io.err. The first failure stops the others
/// and is rethrown.
void run_points(compare_grid& grid, const compare_traces& traces,
                const std::optional<std::filesystem::path>& timeseries_dir, unsigned jobs, const cli_streams& io,
                const std::optional<request_limits>& limits = std::nullopt);

/// Replays point `k` of `grid` alone, as run_points() replays each (a plan's task: Note [Plans] in
/// tools/compare_plan.cpp).
void run_point_at(compare_grid& grid, std::size_t k, const compare_traces& traces,
                  const std::optional<std::filesystem::path>& timeseries_dir,
                  const std::optional<request_limits>& limits);

}  // namespace vtensor::tools
