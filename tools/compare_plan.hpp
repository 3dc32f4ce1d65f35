#pragma once
// A comparison split into tasks (issue 35): `vtensor compare ... --plan DIR` writes the grid as a
// plan (a manifest and one settings file per point), `--run-point DIR K` replays point K into
// DIR/results/K.json, and `--merge DIR` renders exactly what one `compare` run writes from the
// points' results (Note [Plans] in compare_plan.cpp). Any engine can run the points in between:
// a shell loop, GNU parallel or a Slurm job array.

#include <boost/program_options.hpp>
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
  std::string subcommand = "compare";  ///< the command whose plan it is: compare or capacity
  std::vector<std::string> args;       ///< compare's arguments, the plan's own left out
  std::string command;                 ///< as the single-machine run's summary.json names it
  std::string build;                   ///< build_sha256() of the planning binary
  std::string version;                 ///< its version
  std::vector<planned_trace> traces;
  std::vector<std::string> point_ids;  ///< in grid order: point K is point_ids[K]
};

/// A manifest of `subcommand`'s plan: the build's checksum and version, every trace's size and
/// checksum. Throws usage_error naming a trace that cannot be read.
[[nodiscard]] plan_manifest make_manifest(std::string subcommand, std::vector<std::string> args, std::string command,
                                          const std::vector<std::string>& traces, std::vector<std::string> point_ids);

/// DIR/points/K.json of a comparison: each point's id, arm, cell and resolved options.
[[nodiscard]] std::vector<nlohmann::ordered_json> compare_point_files(const experiment& x, const compare_grid& grid);

/// What one task of a plan cost where it was measured: `BINARY compare --run-point DIR K` run as
/// a child process, its wall time and its peak resident memory (wait4's rusage).
struct task_cost {
  std::size_t point = 0;
  double wall_seconds = 0;
  std::uint64_t peak_bytes = 0;
};

/// The engine a plan is handed to (--emit): none, parallel or slurm, the array's throttle, and
/// the points a slurm plan runs while planning to set its tasks' limits.
struct plan_engine {
  std::string name;
  unsigned throttle = 16;
  std::vector<std::size_t> measure = {0};
};

/// The options of a command's plan: --plan, --emit, --array-throttle, --run-point, --force,
/// --merge; `what` names the command's work (a comparison), `run` what a point does, `merge` what
/// the merge does and `outputs` its outputs.
[[nodiscard]] boost::program_options::options_description plan_options(const std::string& what, const std::string& run,
                                                                       const std::string& merge,
                                                                       const std::string& outputs);

/// Refuses plan options given where they do not apply: --emit without --plan, --array-throttle
/// without --emit slurm, --force without --run-point.
void check_plan_options(const boost::program_options::variables_map& v);

/// Refuses any option beside `allowed` (and those left at their defaults): --run-point and
/// --merge take their settings from the plan. `mode` names the one given.
void only_plan_options(const boost::program_options::variables_map& v, std::initializer_list<std::string_view> allowed,
                       std::string_view mode);

/// The engine of --emit and --array-throttle; `measure` as in plan_engine.
[[nodiscard]] plan_engine engine_of(const boost::program_options::variables_map& v, std::vector<std::size_t> measure);

/// Writes the manifest, DIR/points/K.json from `points` and the engine's script, whole or not at
/// all (DIR must not exist or be empty). For slurm, the points of `engine.measure` are run first,
/// in the folder being written, as tasks run them (by this binary), and their costs set the
/// tasks' limits: returned. Throws usage_error, or std::runtime_error when such a point fails.
std::vector<task_cost> write_plan(const std::filesystem::path& dir, const plan_manifest& manifest,
                                  const std::vector<nlohmann::ordered_json>& points, const plan_engine& engine);

/// What `--plan` prints: the plan written, how to run its tasks and merge them.
[[nodiscard]] std::string plan_written(const std::filesystem::path& dir, const plan_manifest& manifest,
                                       const plan_engine& engine, const std::vector<task_cost>& measured);

/// Whether `key` is one of the plan's own options (--plan, --emit, --array-throttle), which a
/// manifest's arguments leave out.
[[nodiscard]] bool plan_only_option(const std::string& key);

/// A word for sh: as it is when it needs no quoting, else single-quoted.
[[nodiscard]] std::string shell_quoted(const std::string& w);

/// `--run-point DIR K`'s folder. Throws usage_error unless the words are a folder and an index.
[[nodiscard]] std::filesystem::path run_point_dir(const std::vector<std::string>& words);

/// `--run-point DIR K`'s K, checked against the plan's point count. Throws usage_error.
[[nodiscard]] std::size_t point_index(const std::vector<std::string>& words, std::size_t points);

/// Whether point K of the plan in `dir` is done: its result exists and `read` takes it (an
/// unreadable one is not done: the task runs it again).
[[nodiscard]] bool point_done(const std::filesystem::path& dir, std::size_t k,
                              const std::function<void(const nlohmann::ordered_json&)>& read);

/// Every point's result of the plan in `dir`, read through `read(K, result)` (which throws on
/// what it cannot take). Returns "" when all are done, else what `--merge` prints: the points not
/// done and why, every one's --run-point command, and the engine's line that reruns only those
/// where the plan has one.
[[nodiscard]] std::string read_results(const std::filesystem::path& dir, const plan_manifest& manifest,
                                       const std::function<void(std::size_t, const nlohmann::ordered_json&)>& read);

/// How an engine starts a plan's tasks: the subcommand, the plan folder and the binary (absolute
/// paths), the folder the plan was made in (each task runs there: the plan's trace paths are as
/// typed), and how many points there are.
struct plan_tasks {
  std::string subcommand = "compare";
  std::filesystem::path dir;
  std::string binary;
  std::filesystem::path workdir;
  std::size_t points = 0;
};

/// DIR/run-parallel.sh: every point as one GNU parallel run, with a job log so that running it
/// again redoes only what failed or never ran; extra arguments go to parallel (--sshloginfile FILE
/// for several hosts).
[[nodiscard]] std::string parallel_script(const plan_tasks& tasks);

/// Runs point K of the `subcommand` plan in `dir` as a child process of `binary` (`BINARY
/// SUBCOMMAND --run-point DIR K`), its output to `log`; throws
/// std::runtime_error naming the point and the log when the task fails.
[[nodiscard]] task_cost measure_point(const std::string& binary, const std::string& subcommand,
                                      const std::filesystem::path& dir, std::size_t k,
                                      const std::filesystem::path& log);

/// A Slurm task's limits from the costs measured: 3x the longest wall time (at least 5 minutes,
/// in whole minutes) and 1.5x the largest peak plus 256 MiB (in MiB). An assumption, stated in
/// the script: points of one plan differ (arms, budgets, loads), and other machines are slower.
struct slurm_limits {
  std::uint64_t minutes = 0;
  std::uint64_t mebibytes = 0;
};
[[nodiscard]] slurm_limits slurm_limits_of(const std::vector<task_cost>& measured);

/// DIR/run-slurm.sbatch: every point as one Slurm job array, at most `throttle` tasks at once,
/// each with the limits of the costs measured (stated in it); its logs go to DIR/slurm/.
[[nodiscard]] std::string slurm_script(const plan_tasks& tasks, unsigned throttle,
                                       const std::vector<task_cost>& measured);

/// Reads DIR/manifest.json of a `subcommand` plan. Throws usage_error naming the file and what is
/// wrong.
[[nodiscard]] plan_manifest read_manifest(const std::filesystem::path& dir, const std::string& subcommand);

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
