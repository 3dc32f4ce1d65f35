#pragma once
// A comparison split into tasks (issue 35): `vtensor compare ... --plan DIR` writes the grid as a
// plan (a manifest and one settings file per point), `--run-point DIR K` replays point K into
// DIR/results/K.json, and `--merge DIR` renders exactly what one `compare` run writes from the
// points' results (Note [Plans] in compare_plan.cpp). Any engine can run the points in between:
// a shell loop, GNU parallel or a Slurm job array.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tools/compare_experiment.hpp"

namespace vtensor::tools {

/// The SHA-256 of a file's bytes, in hex. Throws usage_error naming the file when it cannot be read.
[[nodiscard]] std::string file_sha256(const std::filesystem::path& path);

/// The SHA-256 of the running binary (/proc/self/exe): a plan's points must be run and merged by
/// the build that planned them.
[[nodiscard]] const std::string& build_sha256();

/// A trace a plan reads, as it was when planned.
struct planned_trace {
  std::string path;
  std::uint64_t bytes = 0;
  std::string sha256;
};

/// DIR/manifest.json.
struct plan_manifest {
  std::vector<std::string> args;  ///< compare's arguments, the plan's own left out
  std::string command;            ///< as the single-machine run's summary.json names it
  std::string build;              ///< build_sha256() of the planning binary
  std::string version;            ///< its version
  std::vector<planned_trace> traces;
  std::vector<std::string> point_ids;  ///< in grid order: point K is point_ids[K]
};

/// Writes the manifest and DIR/points/K.json (each point's id, arm, cell and resolved options)
/// for `grid`, whole or not at all (DIR must not exist or be empty). `before_commit`, when given,
/// is called with the folder being written, a plan already, before it takes DIR's place (to run
/// a point in it, to add an engine's script). Throws usage_error.
void write_plan(const std::filesystem::path& dir, const plan_manifest& manifest, const experiment& x,
                const compare_grid& grid,
                const std::function<void(const std::filesystem::path&)>& before_commit = nullptr);

/// Writes an engine's script into a plan folder, executable.
void write_script(const std::filesystem::path& path, const std::string& text);

/// DIR/run-parallel.sh: every point of a plan of `points` points as one GNU parallel run of
/// `binary` (absolute paths), with a job log so that running it again redoes only what failed or
/// never ran; extra arguments go to parallel (--sshloginfile FILE for several hosts).
[[nodiscard]] std::string parallel_script(const std::filesystem::path& dir, const std::string& binary,
                                          std::size_t points);

/// What one task of a plan cost where it was measured: `BINARY compare --run-point DIR K` run as
/// a child process, its wall time and its peak resident memory (wait4's rusage).
struct task_cost {
  std::size_t point = 0;
  double wall_seconds = 0;
  std::uint64_t peak_bytes = 0;
};

/// Runs point K of the plan in `dir` as a child process of `binary`, its output to `log`; throws
/// std::runtime_error naming the point and the log when the task fails.
[[nodiscard]] task_cost measure_point(const std::string& binary, const std::filesystem::path& dir, std::size_t k,
                                      const std::filesystem::path& log);

/// A Slurm task's limits from the costs measured: 3x the longest wall time (at least 5 minutes,
/// in whole minutes) and 1.5x the largest peak plus 256 MiB (in MiB). An assumption, stated in
/// the script: points of one plan differ (arms, budgets, loads), and other machines are slower.
struct slurm_limits {
  std::uint64_t minutes = 0;
  std::uint64_t mebibytes = 0;
};
[[nodiscard]] slurm_limits slurm_limits_of(const std::vector<task_cost>& measured);

/// DIR/run-slurm.sbatch: every point of a plan of `points` points as one Slurm job array of
/// `binary` (absolute paths), at most `throttle` tasks at once, each with `limits`, the costs it
/// came from stated; its logs go to DIR/slurm/.
[[nodiscard]] std::string slurm_script(const std::filesystem::path& dir, const std::string& binary, std::size_t points,
                                       unsigned throttle, const std::vector<task_cost>& measured);

/// Reads DIR/manifest.json. Throws usage_error naming the file and what is wrong.
[[nodiscard]] plan_manifest read_manifest(const std::filesystem::path& dir);

/// Refuses (usage_error) a plan another build made, or whose traces changed since (size or
/// checksum), naming them; `only` limits the check to these traces' paths (all when empty).
void check_plan(const plan_manifest& m, const std::filesystem::path& dir, const std::vector<std::string>& only = {});

/// Where point K's result and time series go.
[[nodiscard]] std::filesystem::path point_result_path(const std::filesystem::path& dir, std::size_t k);
[[nodiscard]] std::filesystem::path point_timeseries_dir(const std::filesystem::path& dir);

/// A finished point's result as one JSON value (its id to check against, the typed figures every
/// output reads, and its rendered summary and cluster blocks), and back into `p`. from_json throws
/// nlohmann::json::exception on anything it cannot read.
[[nodiscard]] nlohmann::ordered_json point_result_json(const point& p);
void read_point_result(const nlohmann::ordered_json& j, point& p);

}  // namespace vtensor::tools
