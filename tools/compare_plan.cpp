// A comparison split into tasks (tools/compare_plan.hpp).

#include "tools/compare_plan.hpp"

#include "tools/cli.hpp"
#include "tools/compare_output.hpp"
#include "tools/compare_run.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <openssl/evp.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>

// Note [Plans]
// A comparison is a grid of independent replays, so it can be run anywhere a task can: `compare
// ... --plan DIR` writes what the grid is, not how to run it. DIR/manifest.json holds compare's
// arguments (the plan's own left out), the command line the single-machine run's summary.json
// would name, the SHA-256 of the planning binary and of every trace, and the points' ids in grid
// order; DIR/points/K.json spells point K's settings out for a person or an engine's log. Every
// task re-reads the manifest and rebuilds the grid from the same arguments with the same code,
// so point K is the same replay on any machine that has the same build and the same traces,
// which --run-point and --merge check (a trace's size, then its checksum; the binary's checksum)
// before doing anything. A point's result is written whole or not at all (a temporary file
// renamed into place: atomic_output_file) after its time series, so a task killed mid-write
// leaves either nothing merge would take or a finished point; a point already finished is
// skipped unless forced, so rerunning a whole array after a failure redoes only what failed.
// The result holds the typed figures every output reads (the replay's summary, the analysis,
// goodput) and the summary and cluster blocks as rendered when the point ran (the run's config
// and the cluster's per-replica figures are only ever rendered); --merge reads them back into
// the grid and renders through the same code as a single run, so that with --no-wall its
// outputs are byte-identical to `compare --out` on one machine. nlohmann's numbers round-trip
// (doubles are written with the shortest digits that read back to the same value).

extern char** environ;  // NOLINT: POSIX's, passed on to a measured task

namespace nlohmann {
template <>
struct adl_serializer<vtensor::sim_ns> {
  static void to_json(json& j, const vtensor::sim_ns& t) { j = t.count(); }
  static void from_json(const json& j, vtensor::sim_ns& t) { t = vtensor::sim_ns{j.get<std::uint64_t>()}; }
};
}  // namespace nlohmann

namespace vtensor {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(memory_stats, physical_bytes, mapped_bytes, used_bytes, cached_bytes,
                                   free_pool_bytes, logical_bytes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(vmm_counters, calls, time_ns)
}  // namespace vtensor

namespace vtensor::sim {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(memory_breakdown, used, internal, reserved_idle, external, cached, free,
                                   cached_pinning, reclaimable)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(kv_stats, memory, breakdown, prompt_tokens, prefix_hit_tokens, cow_bytes, evictions,
                                   chunks_created, vmm)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(replica_peaks, at, memory, internal_fragmentation, sharing_saving, running, waiting)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(latency_summary, p50, p90, p99, mean, count)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(memory_breakdown_means, used, internal, reserved_idle, external, cached, free,
                                   cached_pinning, reclaimable)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(replica_counters, submitted, completed, rejected_context, rejected_memory, truncated,
                                   preemptions, prompt_tokens, admitted_prompt_tokens, hit_tokens, prefill_tokens,
                                   recomputed_tokens, output_tokens, cow_bytes, steps, busy_us, vmm_critical,
                                   compute_bound_steps, step_wall_ns, stretch_steps)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(replay_summary, counters, final_memory, peak, mean_internal_fragmentation,
                                   mean_sharing_saving, mean_physical_bytes, mean_mapped_bytes, mean_used_bytes,
                                   mean_running, mean_waiting, mean_breakdown, ttft, tpot, e2e, queue,
                                   first_arrival_seconds, last_arrival_seconds, simulated_seconds, wall_seconds, events,
                                   replicas)
}  // namespace vtensor::sim

namespace vtensor::tools {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(log_histogram, edges, counts)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(miss_causes, cold, evicted, granularity, preempted, in_flight, unpublished, no_cache,
                                   total)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(point_analysis, misses, reuse_distance, cached_lifetime, ttft_ms, tpot_ms,
                                   over_bound_requests)

namespace fs = std::filesystem;

namespace {

constexpr int k_version = 1;

// The typed figures go through nlohmann::json (the field lists above are written for it) and
// sit in the ordered result file as plain values.
template <typename T>
nlohmann::ordered_json typed(const T& value) {
  return nlohmann::ordered_json::parse(nlohmann::json(value).dump());
}
template <typename T>
T untyped(const nlohmann::ordered_json& j) {
  return nlohmann::json::parse(j.dump()).get<T>();
}

std::string hex(const unsigned char* bytes, unsigned n) {
  std::string s;
  for (unsigned i = 0; i < n; ++i) s += fmt::format("{:02x}", bytes[i]);
  return s;
}

nlohmann::ordered_json read_json(const fs::path& path, std::string_view what) {
  std::ifstream in(path);
  if (!in) throw usage_error(fmt::format("{} {}: cannot be read", what, path.string()));
  try {
    return nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw usage_error(fmt::format("{} {}: not JSON ({})", what, path.string(), e.what()));
  }
}

}  // namespace

std::string file_sha256(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw usage_error(fmt::format("{}: cannot be read", path.string()));
  const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw std::runtime_error("SHA-256: no digest");
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (in.gcount() > 0 && EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<std::size_t>(in.gcount())) != 1)
      throw std::runtime_error("SHA-256: update failed");
  }
  if (in.bad()) throw usage_error(fmt::format("{}: read error", path.string()));
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned n = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest.data(), &n) != 1) throw std::runtime_error("SHA-256: final failed");
  return hex(digest.data(), n);
}

const std::string& build_sha256() {
  static const std::string sum = file_sha256("/proc/self/exe");
  return sum;
}

fs::path point_result_path(const fs::path& dir, std::size_t k) { return dir / "results" / fmt::format("{}.json", k); }
fs::path point_timeseries_dir(const fs::path& dir) { return dir / "timeseries"; }

plan_manifest make_manifest(std::string subcommand, std::vector<std::string> args, std::string command,
                            const std::vector<std::string>& traces, std::vector<std::string> point_ids) {
  plan_manifest m;
  m.subcommand = std::move(subcommand);
  m.args = std::move(args);
  m.command = std::move(command);
  m.build = build_sha256();
  m.version = VTENSOR_VERSION;
  for (const std::string& t : traces) {
    std::error_code ec;
    const auto bytes = fs::file_size(t, ec);
    if (ec) throw usage_error(fmt::format("trace {}: cannot be read", t));
    m.traces.push_back({t, bytes, file_sha256(t)});
  }
  m.point_ids = std::move(point_ids);
  return m;
}

std::vector<nlohmann::ordered_json> compare_point_files(const experiment& x, const compare_grid& grid) {
  std::vector<nlohmann::ordered_json> files;
  for (std::size_t k = 0; k < grid.points.size(); ++k) {
    const point& p = grid.points[k];
    const cell& c = grid.cells[p.cell];
    const arm& a = x.arms[p.arm];
    nlohmann::ordered_json e = {{"index", k}, {"id", p.id}};
    e["arm"] = {{"name", a.name}, {"policy", a.policy}, {"options", a.options}, {"router", a.router}};
    e["cell"] = {{"id", c.id},
                 {"memory", x.memory[c.memory]},
                 {"time_scale", x.time_scale_text[c.time_scale]},
                 {"kernel_factors", x.kernel_factors[c.kernel_factors]},
                 {"trace", x.traces[c.trace]},
                 {"replicas", c.replica_count}};
    e["result"] = point_result_path(fs::path("."), k).lexically_normal().string();
    files.push_back(std::move(e));
  }
  return files;
}

namespace po = boost::program_options;

namespace {

// An engine's script in a plan folder, executable.
void write_script(const fs::path& path, const std::string& text) {
  write_file(path, text);
  fs::permissions(path, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add);
}

}  // namespace

po::options_description plan_options(const std::string& what, const std::string& run, const std::string& merge,
                                     const std::string& outputs) {
  po::options_description plan(fmt::format("a {} as tasks (Note [Plans] in tools/compare_plan.cpp)", what));
  plan.add_options()(
      "plan", po::value<std::string>(),
      fmt::format("write the {} to folder DIR as a plan, one task per point, instead of running it", what).c_str())(
      "run-point", po::value<std::vector<std::string>>()->multitoken(),
      fmt::format("DIR K: {} of plan DIR into DIR/results/K.json (a point done already is "
                  "skipped)",
                  run)
          .c_str())(
      "emit", po::value<std::string>(),
      "with --plan: also write the command that runs every point: parallel (DIR/run-parallel.sh, GNU parallel) "
      "or slurm (DIR/run-slurm.sbatch, a job array; runs a point or two here to set each task's time and memory)")(
      "array-throttle", po::value<std::uint32_t>()->default_value(16),
      "with --emit slurm: the most tasks of the array that run at once (its %N)")(
      "force", po::bool_switch(), "with --run-point: run the point even when it is done")(
      "merge", po::value<std::string>(),
      fmt::format("DIR: {} of plan DIR from its points' results {}, or name the points not done", merge, outputs)
          .c_str());
  return plan;
}

void check_plan_options(const po::variables_map& v) {
  if (v.count("emit") != 0 && v.count("plan") == 0) throw usage_error("--emit needs --plan DIR");
  if (!v["array-throttle"].defaulted() && (v.count("emit") == 0 || v["emit"].as<std::string>() != "slurm"))
    throw usage_error("--array-throttle goes with --emit slurm");
  if (v["force"].as<bool>()) throw usage_error("--force goes with --run-point DIR K");
}

void only_plan_options(const po::variables_map& v, std::initializer_list<std::string_view> allowed,
                       std::string_view mode) {
  for (const auto& [key, value] : v) {
    if (value.defaulted() || std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    throw usage_error(fmt::format("{} takes its settings from the plan: --{} is not one of its options", mode, key));
  }
}

plan_engine engine_of(const po::variables_map& v, std::vector<std::size_t> measure) {
  plan_engine e;
  if (v.count("emit") != 0) e.name = v["emit"].as<std::string>();
  e.throttle = v["array-throttle"].as<std::uint32_t>();
  e.measure = std::move(measure);
  return e;
}

std::vector<task_cost> write_plan(const fs::path& dir, const plan_manifest& m,
                                  const std::vector<nlohmann::ordered_json>& points, const plan_engine& engine) {
  if (!engine.name.empty() && engine.name != "parallel" && engine.name != "slurm")
    throw usage_error(fmt::format("--emit {}: not an engine (parallel, slurm)", engine.name));
  if (engine.throttle == 0) throw usage_error("--array-throttle 0: at least one task must run");
  if (fs::exists(dir) && !(fs::is_directory(dir) && fs::is_empty(dir))) {
    throw usage_error(fmt::format(
        "--plan {}: exists and is not an empty folder (a plan's results would be lost): remove it or name another",
        dir.string()));
  }
  output_folder folder(dir.string());  // whole or not at all; timeseries/ made inside
  fs::create_directory(folder.temp() / "points");
  fs::create_directory(folder.temp() / "results");
  nlohmann::ordered_json j = {{"format", fmt::format("vtensor-{}-plan", m.subcommand)},
                              {"version", k_version},
                              {"vtensor", m.version},
                              {"build_sha256", m.build},
                              {"command", m.command},
                              {"args", m.args}};
  nlohmann::ordered_json traces = nlohmann::ordered_json::array();
  for (const planned_trace& t : m.traces)
    traces.push_back({{"path", t.path}, {"bytes", t.bytes}, {"sha256", t.sha256}});
  j["traces"] = std::move(traces);
  j["points"] = m.point_ids;
  j["directory"] = fs::current_path().string();
  write_file(folder.temp() / "manifest.json", j.dump(2) + "\n");
  for (std::size_t k = 0; k < points.size(); ++k)
    write_file(folder.temp() / "points" / fmt::format("{}.json", k), points[k].dump(2) + "\n");
  // Absolute paths in a script: it runs from anywhere, on any host.
  const plan_tasks tasks{m.subcommand, fs::absolute(dir).lexically_normal(),
                         fs::read_symlink("/proc/self/exe").string(), fs::current_path(), m.point_ids.size()};
  std::vector<task_cost> measured;
  if (engine.name == "parallel") write_script(folder.temp() / "run-parallel.sh", parallel_script(tasks));
  if (engine.name == "slurm") {
    // Run here as tasks run them, in the plan being written: their results stay (the array skips
    // them) and their costs set the tasks' limits.
    fs::create_directory(folder.temp() / "slurm");
    for (const std::size_t k : engine.measure) {
      measured.push_back(measure_point(tasks.binary, m.subcommand, folder.temp(), k,
                                       folder.temp() / "slurm" / fmt::format("measured-{}.out", k)));
    }
    write_script(folder.temp() / "run-slurm.sbatch", slurm_script(tasks, engine.throttle, measured));
  }
  folder.commit();
  return measured;
}

std::string plan_written(const fs::path& dir, const plan_manifest& m, const plan_engine& engine,
                         const std::vector<task_cost>& measured) {
  std::string how;
  if (engine.name == "parallel")
    how = fmt::format("\nor every one with GNU parallel: sh {}/run-parallel.sh", dir.string());
  if (engine.name == "slurm") {
    const slurm_limits l = slurm_limits_of(measured);
    std::vector<std::string> costs;
    for (const task_cost& c : measured)
      costs.push_back(fmt::format("point {} in {:.1f} s, peak {} MiB", c.point, c.wall_seconds, c.peak_bytes >> 20));
    how = fmt::format(
        "\nor every one as a Slurm job array: sbatch {}/run-slurm.sbatch\n(done here: {}; each task is given {} min "
        "and {} MiB: edit the script to change them)",
        dir.string(), fmt::join(costs, ", "), l.minutes, l.mebibytes);
  }
  return fmt::format(
      "plan {}: {} points; run each with\n  vtensor {} --run-point {} K   (K = 0 to {}){}\nthen: vtensor {} --merge {} "
      "[outputs]\n",
      dir.string(), m.point_ids.size(), m.subcommand, dir.string(), m.point_ids.size() - 1, how, m.subcommand,
      dir.string());
}

bool plan_only_option(const std::string& key) { return key == "plan" || key == "emit" || key == "array-throttle"; }

std::string shell_quoted(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./=,:@+%") ==
                        std::string::npos)
    return w;
  std::string out = "'";
  for (const char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

fs::path run_point_dir(const std::vector<std::string>& words) {
  if (words.size() != 2) throw usage_error("--run-point takes a plan folder and a point index: --run-point DIR K");
  return words[0];
}

std::size_t point_index(const std::vector<std::string>& words, std::size_t points) {
  const fs::path dir = run_point_dir(words);
  std::size_t k = 0;
  try {
    std::size_t used = 0;
    k = std::stoul(words[1], &used);
    if (used != words[1].size()) throw std::invalid_argument("trailing characters");
  } catch (const std::exception&) {
    throw usage_error(fmt::format("--run-point {} {}: '{}' is not a point index", words[0], words[1], words[1]));
  }
  if (k >= points)
    throw usage_error(fmt::format("--run-point: plan {} has points 0 to {}, not {}", dir.string(), points - 1, k));
  return k;
}

bool point_done(const fs::path& dir, std::size_t k, const std::function<void(const nlohmann::ordered_json&)>& read) {
  const fs::path result = point_result_path(dir, k);
  if (!fs::exists(result)) return false;
  try {
    read(nlohmann::ordered_json::parse(std::ifstream(result)));
    return true;
  } catch (const std::exception&) {  // unreadable: not done
    return false;
  }
}

std::string read_results(const fs::path& dir, const plan_manifest& m,
                         const std::function<void(std::size_t, const nlohmann::ordered_json&)>& read) {
  std::vector<std::string> missing;
  std::vector<std::size_t> rerun;
  for (std::size_t k = 0; k < m.point_ids.size(); ++k) {
    const fs::path result = point_result_path(dir, k);
    std::string why;
    if (!fs::exists(result)) {
      why = "not run";
    } else {
      try {
        read(k, nlohmann::ordered_json::parse(std::ifstream(result)));
      } catch (const std::exception& e) {
        why = fmt::format("unreadable: {}", e.what());
      }
    }
    if (!why.empty()) {
      missing.push_back(fmt::format("  {} ({}): {}", k, m.point_ids[k], why));
      rerun.push_back(k);
    }
  }
  if (missing.empty()) return "";
  std::string out =
      fmt::format("vtensor {}: plan {}: {} of {} points are not done:\n{}\nrun them, then merge again:\n", m.subcommand,
                  dir.string(), missing.size(), m.point_ids.size(), fmt::join(missing, "\n"));
  for (const std::size_t k : rerun)
    out += fmt::format("  vtensor {} --run-point {} {}\n", m.subcommand, dir.string(), k);
  if (fs::exists(dir / "run-slurm.sbatch"))
    out += fmt::format("or as a job array of those: sbatch --array={} {}/run-slurm.sbatch\n", fmt::join(rerun, ","),
                       dir.string());
  if (fs::exists(dir / "run-parallel.sh"))
    out += fmt::format("or with GNU parallel (its job log reruns what failed): sh {}/run-parallel.sh\n", dir.string());
  return out;
}

std::string parallel_script(const plan_tasks& t) {
  const std::string d = shell_quoted(t.dir.string()), b = shell_quoted(t.binary), w = shell_quoted(t.workdir.string());
  return fmt::format(
      "#!/bin/sh\n"
      "# The {0} points of the vtensor {5} plan in {1}, run by GNU parallel (written by\n"
      "# `vtensor {5} ... --plan DIR --emit parallel`; Note [Plans] in tools/compare_plan.cpp).\n"
      "# Run it again after a failure: the job log and --resume-failed rerun only the points that\n"
      "# failed or never ran, and a point already done is skipped anyway.\n"
      "# Arguments go to parallel: --jobs N (default: one per core), --sshloginfile FILE for several\n"
      "# hosts (one per line, ':' for this one); each host needs this binary and the traces at the same\n"
      "# paths, and the plan folder shared (a shared file system), since every task checks both\n"
      "# checksums and writes its result there.\n"
      "# Each task runs in {4}, where the plan was made (its trace paths are as typed).\n"
      "# Then, from there: {2} {5} --merge {1} [outputs]\n"
      "set -eu\n"
      "cd {4}\n"
      "exec parallel --joblog {1}/parallel.joblog --resume-failed --workdir {4} \"$@\" {2} {5} --run-point {1} "
      "'{{}}' ::: $(seq 0 {3})\n",
      t.points, d, b, t.points - 1, w, t.subcommand);
}

task_cost measure_point(const std::string& binary, const std::string& subcommand, const fs::path& dir, std::size_t k,
                        const fs::path& log) {
  const std::string index = std::to_string(k), folder = dir.string();
  std::vector<std::string> words = {binary, subcommand, "--run-point", folder, index};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0)
    throw std::runtime_error(fmt::format("cannot start {} to measure point {}: {}", binary, k, std::strerror(spawned)));
  int status = 0;
  rusage usage{};
  while (wait4(pid, &status, 0, &usage) < 0) {
    if (errno != EINTR) throw std::runtime_error(fmt::format("waiting for point {}: {}", k, std::strerror(errno)));
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error(fmt::format(
        "point {} failed when measured ({}): see {}", k,
        WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status)) : fmt::format("signal {}", WTERMSIG(status)),
        log.string()));
  }
  return {k, wall, static_cast<std::uint64_t>(usage.ru_maxrss) * 1024};  // ru_maxrss: KiB on Linux
}

slurm_limits slurm_limits_of(const std::vector<task_cost>& measured) {
  double wall = 0;
  std::uint64_t peak = 0;
  for (const task_cost& c : measured) {
    wall = std::max(wall, c.wall_seconds);
    peak = std::max(peak, c.peak_bytes);
  }
  constexpr std::uint64_t mib = 1 << 20;
  slurm_limits l;
  l.minutes = std::max<std::uint64_t>(5, static_cast<std::uint64_t>(std::ceil(3 * wall / 60)));
  l.mebibytes = static_cast<std::uint64_t>(std::ceil(1.5 * static_cast<double>(peak) / mib)) + 256;
  return l;
}

std::string slurm_script(const plan_tasks& t, unsigned throttle, const std::vector<task_cost>& measured) {
  const std::string d = shell_quoted(t.dir.string()), b = shell_quoted(t.binary);
  const slurm_limits l = slurm_limits_of(measured);
  std::string costs;
  for (const task_cost& c : measured)
    costs += fmt::format("#   point {}: {:.1f} s, peak {} MiB\n", c.point, c.wall_seconds, c.peak_bytes >> 20);
  // #SBATCH lines take no quoting: the log and work folders are written as they are (a path with
  // spaces would break them; sbatch refuses the script then, before any task runs).
  return fmt::format(
      "#!/bin/sh\n"
      "# The {0} points of the vtensor {11} plan in {8} as one Slurm job array (written by\n"
      "# `vtensor {11} ... --plan DIR --emit slurm`; Note [Plans] in tools/compare_plan.cpp).\n"
      "# Submit: sbatch {8}/run-slurm.sbatch   (tasks' logs: {8}/slurm/)\n"
      "# After a failure submit it again: a point already done is skipped; or only the points that\n"
      "# `vtensor {11} --merge` names: sbatch --array=3,7 {8}/run-slurm.sbatch\n"
      "# Each node needs this binary and the traces at the same paths and the plan folder shared (a\n"
      "# shared file system): every task checks both checksums and writes its result there.\n"
      "# Limits per task: DEFAULTS TO EDIT. Measured on the planning machine, each a task run alone:\n"
      "{2}"
      "# --time is 3x the longest (at least 5 minutes) and --mem 1.5x the largest peak + 256 MiB: an\n"
      "# assumption (the points of a plan differ by arm, budget and load; nodes differ in speed).\n"
      "# %{3} runs at most {3} tasks at once.\n"
      "# Each task runs in {10}, where the plan was made (its trace paths are as typed).\n"
      "# Then, from there: {9} {11} --merge {8} [outputs]\n"
      "#SBATCH --job-name=vtensor-plan\n"
      "#SBATCH --array=0-{5}%{3}\n"
      "#SBATCH --ntasks=1\n"
      "#SBATCH --cpus-per-task=1\n"
      "#SBATCH --time={6}\n"
      "#SBATCH --mem={7}M\n"
      "#SBATCH --output={8}/slurm/%A_%a.out\n"
      "#SBATCH --chdir={10}\n"
      "exec {4} {11} --run-point {1} \"$SLURM_ARRAY_TASK_ID\"\n",
      t.points, d, costs, throttle, b, t.points - 1, l.minutes, l.mebibytes, t.dir.string(), t.binary,
      t.workdir.string(), t.subcommand);
}

plan_manifest read_manifest(const fs::path& dir, const std::string& subcommand) {
  const fs::path path = dir / "manifest.json";
  if (!fs::is_regular_file(path)) throw usage_error(fmt::format("{}: no plan here (no manifest.json)", dir.string()));
  const nlohmann::ordered_json j = read_json(path, "plan manifest");
  plan_manifest m;
  try {
    if (j.at("format") != fmt::format("vtensor-{}-plan", subcommand) || j.at("version") != k_version)
      throw usage_error(fmt::format("{}: not a vtensor {} plan of version {}", path.string(), subcommand, k_version));
    m.subcommand = subcommand;
    m.args = j.at("args").get<std::vector<std::string>>();
    m.command = j.at("command").get<std::string>();
    m.build = j.at("build_sha256").get<std::string>();
    m.version = j.at("vtensor").get<std::string>();
    for (const auto& t : j.at("traces")) {
      m.traces.push_back(
          {t.at("path").get<std::string>(), t.at("bytes").get<std::uint64_t>(), t.at("sha256").get<std::string>()});
    }
    m.point_ids = j.at("points").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw usage_error(fmt::format("{}: {}", path.string(), e.what()));
  }
  return m;
}

void check_plan(const plan_manifest& m, const fs::path& dir, const std::vector<std::string>& only) {
  if (m.build != build_sha256()) {
    throw usage_error(
        fmt::format("plan {}: made by another build of vtensor ({} {}), not this one ({}): its points would not be the "
                    "replays planned; plan again with this binary",
                    dir.string(), m.version, m.build.substr(0, 12), build_sha256().substr(0, 12)));
  }
  for (const planned_trace& t : m.traces) {
    if (!only.empty() && std::find(only.begin(), only.end(), t.path) == only.end()) continue;
    std::error_code ec;
    const auto bytes = fs::file_size(t.path, ec);
    if (ec) throw usage_error(fmt::format("plan {}: trace {} cannot be read here", dir.string(), t.path));
    if (bytes != t.bytes || file_sha256(t.path) != t.sha256) {
      throw usage_error(fmt::format("plan {}: trace {} changed since it was planned ({} bytes, sha256 {}...)",
                                    dir.string(), t.path, t.bytes, t.sha256.substr(0, 12)));
    }
  }
}

nlohmann::ordered_json point_result_json(const point& p) {
  nlohmann::ordered_json j = {{"id", p.id}};
  j["summary"] = typed(p.result.summary);
  j["analysis"] = typed(p.analysis);
  j["goodput"] = p.goodput ? nlohmann::ordered_json(*p.goodput) : nlohmann::ordered_json(nullptr);
  j["rendered"] = {{"result", p.rendered ? p.rendered->result : replay_result_json(p.result)}};
  if (p.rendered) {
    j["rendered"]["cluster"] = p.rendered->cluster;
  } else {
    j["rendered"]["cluster"] = p.cluster ? sim::cluster_json(*p.cluster) : nlohmann::ordered_json(nullptr);
  }
  return j;
}

void read_point_result(const nlohmann::ordered_json& j, point& p) {
  if (j.at("id").get<std::string>() != p.id) {
    throw std::invalid_argument(fmt::format("holds point {}, not {}", j.at("id").get<std::string>(), p.id));
  }
  p.result.summary = untyped<sim::replay_summary>(j.at("summary"));
  p.analysis = untyped<point_analysis>(j.at("analysis"));
  p.goodput = j.at("goodput").is_null() ? std::nullopt : std::optional(j.at("goodput").get<double>());
  p.rendered = point::rendered_blocks{j.at("rendered").at("result"), j.at("rendered").at("cluster")};
}

}  // namespace vtensor::tools
