// `vtensor compare`: arms (named policies with their options) replayed over axes (memory
// budgets, time scales, kernel-factor sets, traces) in parallel, beside the bounds of each cell
// (infinite cache, offline Belady), with why each missed token missed. The command reads its
// options into an experiment (tools/compare_experiment.hpp), runs its grid of points
// (tools/compare_run.hpp) and renders the typed results (tools/compare_output.hpp).
// The output contract: docs/compare-output.md; the definitions: docs/compare.md.

#include "tools/cli.hpp"
#include "tools/compare_eviction.hpp"
#include "tools/compare_experiment.hpp"
#include "tools/compare_output.hpp"
#include "tools/compare_plan.hpp"
#include "tools/compare_run.hpp"
#include "tools/compare_verdict.hpp"
#include "tools/replay_options.hpp"
#include "tools/report_render.hpp"

#include "traces/atomic_output_file.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace vtensor::tools {
namespace po = boost::program_options;
namespace {

constexpr std::string_view name = "compare";

po::options_description compare_options() {
  po::options_description o("experiment");
  o.add_options()("trace", po::value<std::vector<std::string>>()->composing(),
                  "trace file; several make the trace axis (default: the bundled Mooncake excerpt)")(
      "arm", po::value<std::vector<std::string>>()->composing(),
      "NAME='POLICY [options]': an arm, e.g. paged32='paged --block-tokens 32' (repeatable; options: the "
      "policy's own and the router's, --router R --router-*, as replay takes them)")(
      "arms", po::value<std::string>(), "experiment file (JSON: arms and axes; docs/compare.md)")(
      "baseline", po::value<std::string>(), "the reference arm of the ratios (default: the first arm)")(
      "memory", po::value<std::vector<std::string>>()->composing(),
      "memory axis: budgets per GPU, comma-separated or repeated: default, 16GiB, unlimited (default: default)")(
      "time-scale", po::value<std::vector<std::string>>()->composing(),
      "time-scale axis: arrival x SCALE, comma-separated or repeated (default: 1)")(
      "kernel-factors", po::value<std::vector<std::string>>()->composing(),
      "kernel-factor axis: modern, 2024 or a JSON file, comma-separated or repeated (default: modern)")(
      "replicas", po::value<std::vector<std::string>>()->composing(),
      "replicas axis: replicas per point, each its own policy and memory, behind the arm's --router "
      "(default: 1; sim/cluster.hpp)")("jobs", po::value<std::uint32_t>()->default_value(0),
                                       "points replayed at once (0: the machine's cores)")(
      "out", po::value<std::string>(),
      "write the comparison to folder DIR, whole or not at all (docs/compare-output.md)")(
      "json", po::value<std::string>(), "write summary.json to FILE too (- : standard output)")(
      "no-wall", po::bool_switch(), "leave wall_seconds and jobs out (byte-comparable runs)")(
      "report", po::bool_switch(),
      "also render DIR/report.html and DIR/figures/ (needs --out; matplotlib, as `vtensor report DIR`)")(
      "report-cell", po::value<std::string>(), "the cell of the figures drawn at one cell (default: the first)")(
      "tie", po::value<std::string>(),
      "FRACTION: differences from the baseline within it are ties in the verdicts, e.g. 0.01 or 1% (default: "
      "0.01)");
  o.add(plan_options("comparison", "replay point K", "render the comparison", "(--out, --json, --report as a run's)"));
  return o;
}

po::options_description compare_table() {
  po::options_description all("options");
  all.add(compare_options()).add(shared_option_table());
  return all;
}

// The outputs: the table, then the folder of --out (its report rendered inside it), then --json.
int write_outputs(const po::variables_map& v, const experiment& x, const compare_grid& g,
                  const nlohmann::ordered_json& summary_object, std::unique_ptr<output_folder> folder,
                  const cli_streams& io, const cli_streams& given) {
  print_table(io.out, x, g, summary_object.at("verdicts"));
  if (summary_object.contains("eviction"))  // the same groups as summary.json's, from the same points
    print_eviction_table(io.out, eviction_groups(nlohmann::json::parse(summary_object.dump())));
  const std::string summary = summary_object.dump(2) + "\n";
  if (folder) {
    write_file(folder->temp() / "summary.json", summary);
    write_file(folder->temp() / "arms.csv", arms_csv(x, g));
    // The report renders inside the temporary folder, so that DIR still appears whole or not at all.
    if (v["report"].as<bool>()) {
      report_options ro;
      if (v.count("report-cell") != 0) ro.cell = v["report-cell"].as<std::string>();
      ro.tie = summary_object.at("verdicts").at("tie").get<double>();
      if (const int rc = render_report(folder->temp(), io, ro); rc != exit_success) return rc;
    }
    folder->commit();
  }
  if (v.count("json") != 0) {
    traces::atomic_output_file f(v["json"].as<std::string>(), &given.out);
    f.write(summary);
    f.commit();
  }
  if (!all_within_bound(g)) {
    io.err << "vtensor compare: some point's hit exceeds the infinite-cache bound: a simulator bug (see the table)\n";
    return exit_failure;
  }
  return exit_success;
}

// A comparison's arguments read: the options, the shared settings as typed, the command line
// summary.json names (without --jobs when --no-wall: it changes no result) and the arguments
// again without the plan's own options (what a plan's manifest keeps).
struct compare_args {
  po::variables_map values;
  std::vector<std::string> shared;
  std::string command = "vtensor compare";
  std::vector<std::string> args;
};

compare_args read_compare_args(const std::vector<std::string>& words) {
  po::positional_options_description positional;
  positional.add("trace", -1);
  const po::options_description table = compare_table();  // the parsed options point into it
  const po::parsed_options parsed = po::command_line_parser(words).options(table).positional(positional).run();
  compare_args a;
  po::store(parsed, a.values);
  po::notify(a.values);
  a.shared = shared_tokens(parsed);
  const bool no_wall = a.values["no-wall"].as<bool>();
  for (const po::option& opt : parsed.options) {
    if (plan_only_option(opt.string_key)) continue;
    a.args.insert(a.args.end(), opt.original_tokens.begin(), opt.original_tokens.end());
    if (no_wall && opt.string_key == "jobs") continue;
    for (const std::string& w : opt.original_tokens) a.command += " " + shell_quoted(w);
  }
  return a;
}

unsigned jobs_of(const po::variables_map& v) {
  const unsigned jobs = v["jobs"].as<std::uint32_t>();
  return jobs == 0 ? std::max(1u, std::thread::hardware_concurrency()) : jobs;
}

compare_run_facts facts_of(const compare_args& a) {
  compare_run_facts facts;
  facts.command = a.command;
  facts.with_wall = !a.values["no-wall"].as<bool>();
  if (a.values.count("tie") != 0) facts.tie = parse_tie(a.values["tie"].as<std::string>());
  facts.jobs = jobs_of(a.values);
  return facts;
}

// The streams and the --out folder of a run or a merge: with --json - the table goes to standard
// error; --report needs --out.
struct compare_outputs {
  cli_streams io;
  std::unique_ptr<output_folder> folder;
};

compare_outputs open_compare_outputs(const po::variables_map& v, const cli_streams& given) {
  const bool json_on_stdout = v.count("json") != 0 && v["json"].as<std::string>() == "-";
  compare_outputs o{{json_on_stdout ? given.err : given.out, given.err}, nullptr};
  if (v["report"].as<bool>() && v.count("out") == 0) throw usage_error("--report needs --out DIR");
  if (v.count("out") != 0) o.folder = std::make_unique<output_folder>(v["out"].as<std::string>());
  return o;
}

// Every trace of `x` read and indexed once, and each cell's bounds filled.
compare_traces traces_with_bounds(const experiment& x, compare_grid& grid) {
  const replay_options& first = grid.points.front().options;
  compare_traces traces = load_traces(x, first);
  add_bounds(grid.cells, traces, first.model.kv_bytes_per_token_per_gpu());
  return traces;
}

// Options -> experiment -> grid of points (every point's options checked before any work) ->
// traces and bounds -> the run -> outputs.
int run_compare(const compare_args& a, const cli_streams& given) {
  const po::variables_map& v = a.values;
  const experiment x = read_experiment(v, bundled_trace_path());
  auto [io, folder] = open_compare_outputs(v, given);
  compare_run_facts facts = facts_of(a);
  facts.timeseries = folder != nullptr;

  compare_grid grid = make_grid(x, a.shared);
  const compare_traces traces = traces_with_bounds(x, grid);

  const auto wall_start = std::chrono::steady_clock::now();
  const std::optional<std::filesystem::path> timeseries_dir =
      folder ? std::optional(folder->temp() / "timeseries") : std::nullopt;
  run_points(grid, traces, timeseries_dir, facts.jobs, io);
  facts.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  const nlohmann::ordered_json summary = summary_json(x, grid, traces, facts);
  return write_outputs(v, x, grid, summary, std::move(folder), io, given);
}

// The points a slurm plan runs while planning to set its tasks' limits: point 0, and the first
// arm's point in the cell of the largest trace (in bytes, as the manifest has them), the largest
// budget (unlimited, else the axis's last) and the most replicas, likely the costliest (an
// assumption the script states).
std::vector<std::size_t> heaviest_points(const experiment& x, const compare_grid& grid, const plan_manifest& m) {
  auto weight = [&](std::size_t k) {
    const cell& c = grid.cells[grid.points[k].cell];
    return std::tuple(m.traces[c.trace].bytes, x.memory[c.memory] == "unlimited", c.memory, c.replica_count);
  };
  std::size_t best = 0;
  for (std::size_t k = 0; k < grid.points.size(); ++k) {
    if (grid.points[k].arm == 0 && weight(k) > weight(best)) best = k;
  }
  if (best == 0) return {0};
  return {0, best};
}

// --plan DIR: the grid, checked as a run checks it, written as a plan (Note [Plans]).
int write_compare_plan(const compare_args& a, const cli_streams& io) {
  const po::variables_map& v = a.values;
  for (const char* output : {"out", "json", "report", "report-cell"}) {
    if (v.count(output) != 0 && !v[output].defaulted())
      throw usage_error(fmt::format("--plan writes no comparison: give --{} to --merge", output));
  }
  const experiment x = read_experiment(v, bundled_trace_path());
  const compare_grid grid = make_grid(x, a.shared);
  std::vector<std::string> ids;
  for (const point& p : grid.points) ids.push_back(p.id);
  const plan_manifest m = make_manifest("compare", a.args, a.command, x.traces, std::move(ids));
  const plan_engine engine = engine_of(v, heaviest_points(x, grid, m));
  const std::filesystem::path dir = v["plan"].as<std::string>();
  const std::vector<task_cost> measured = write_plan(dir, m, compare_point_files(x, grid), engine);
  io.out << plan_written(dir, m, engine, measured);
  return exit_success;
}

// A plan's experiment and grid, rebuilt from its manifest's arguments and checked against the
// points it lists.
struct plan_grid {
  plan_manifest manifest;
  compare_args args;
  experiment x;
  compare_grid grid;
};

plan_grid rebuild_plan(const std::filesystem::path& dir) {
  plan_grid g;
  g.manifest = read_manifest(dir, "compare");
  g.args = read_compare_args(g.manifest.args);
  g.x = read_experiment(g.args.values, bundled_trace_path());
  g.grid = make_grid(g.x, g.args.shared);
  bool same = g.grid.points.size() == g.manifest.point_ids.size();
  for (std::size_t k = 0; same && k < g.grid.points.size(); ++k) same = g.grid.points[k].id == g.manifest.point_ids[k];
  if (!same) throw usage_error(fmt::format("plan {}: its arguments no longer make the points it lists", dir.string()));
  return g;
}

// --run-point DIR K.
int run_plan_point(const po::variables_map& v, const cli_streams& io) {
  only_plan_options(v, {"run-point", "force"}, "--run-point");
  const auto words = v["run-point"].as<std::vector<std::string>>();
  const std::filesystem::path dir = run_point_dir(words);
  plan_grid g = rebuild_plan(dir);
  const std::size_t k = point_index(words, g.grid.points.size());
  point& p = g.grid.points[k];
  const std::size_t trace = g.grid.cells[p.cell].trace;
  check_plan(g.manifest, dir, {g.x.traces[trace]});
  const std::filesystem::path result = point_result_path(dir, k);
  if (!v["force"].as<bool>() && point_done(dir, k, [&](const nlohmann::ordered_json& j) {
        point done = p;
        read_point_result(j, done);
      })) {
    io.out << fmt::format("point {} ({}): done already ({}; --force replays it)\n", k, p.id, result.string());
    return exit_success;
  }
  const auto wall_start = std::chrono::steady_clock::now();
  const compare_traces traces = load_traces(g.x, p.options, trace);
  run_point_at(g.grid, k, traces, point_timeseries_dir(dir), std::nullopt);
  write_file(result, point_result_json(p).dump(1) + "\n");
  io.out << fmt::format("point {} ({}): replayed in {:.1f} s -> {}\n", k, p.id,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count(),
                        result.string());
  return exit_success;
}

// --merge DIR: the comparison from the points' results, or the points not done and how to run them.
// `outputs`: the merge's output options as typed, which summary.json's command names after the
// plan's arguments (as a single run typed with them last would).
int merge_plan(const po::variables_map& v, const std::string& outputs, const cli_streams& given) {
  only_plan_options(v, {"merge", "out", "json", "report", "report-cell"}, "--merge");
  const std::filesystem::path dir = v["merge"].as<std::string>();
  plan_grid g = rebuild_plan(dir);
  check_plan(g.manifest, dir);
  double points_wall = 0;
  const std::string missing = read_results(dir, g.manifest, [&](std::size_t k, const nlohmann::ordered_json& j) {
    read_point_result(j, g.grid.points[k]);
    points_wall += g.grid.points[k].result.summary.wall_seconds;
  });
  if (!missing.empty()) {
    given.err << missing;
    return exit_failure;
  }
  auto [io, folder] = open_compare_outputs(v, given);
  compare_run_facts facts = facts_of(g.args);
  facts.command += outputs;
  facts.wall_seconds = points_wall;  // the points' replays, wherever they ran
  if (folder) {
    for (const point& p : g.grid.points) {
      const std::filesystem::path csv = point_timeseries_dir(dir) / (p.id + ".csv");
      if (!std::filesystem::is_regular_file(csv))
        throw usage_error(fmt::format("plan {}: point {} has no time series ({})", dir.string(), p.id, csv.string()));
      std::filesystem::copy_file(csv, folder->temp() / "timeseries" / (p.id + ".csv"));
    }
  }
  facts.timeseries = folder != nullptr;
  const compare_traces traces = traces_with_bounds(g.x, g.grid);
  const nlohmann::ordered_json summary = summary_json(g.x, g.grid, traces, facts);
  return write_outputs(v, g.x, g.grid, summary, std::move(folder), io, given);
}

}  // namespace

int cmd_compare(std::span<const std::string> args, const cli_streams& io) {
  return guarded_run(name, io, [&] {
    po::positional_options_description positional;
    positional.add("trace", -1);
    const auto values = parse_command_line(
        name, "[TRACE...] --arm NAME='POLICY [options]' ... [options]",
        "Replays the same requests through several arms (named KV policies with their options)\n"
        "at every point of the axes (--memory, --time-scale, --kernel-factors, traces), in parallel,\n"
        "and prints per cell each arm's metrics with the ratio to the baseline arm, the best arm per\n"
        "metric, the bounds (infinite cache; offline Belady at the budget), each arm's hit rate as a\n"
        "fraction of both, why each missed prompt token missed, and per arm and cell a verdict: where\n"
        "it wins, where it loses (largest first) and where it ties within --tie (docs/compare.md). Each trace is\n"
        "read once; results are identical whatever --jobs is (wall-clock fields aside).\n"
        "--out DIR writes summary.json, arms.csv and each point's time series, whole or not at all.\n"
        "--plan DIR writes the grid as tasks instead, --run-point DIR K runs one, --merge DIR renders\n"
        "the comparison from them (byte-identical with --no-wall; Note [Plans] in tools/compare_plan.cpp).\n"
        "Example: vtensor compare trace.jsonl --arm vt=vtensor --arm paged=paged --memory 16GiB,unlimited",
        compare_table(), positional, args, io);
    if (!values) return exit_success;
    if (values->count("run-point") != 0) return run_plan_point(*values, io);
    if (values->count("merge") != 0) {
      const po::options_description table = compare_table();
      std::string outputs;
      for (const po::option& opt :
           po::command_line_parser(std::vector<std::string>(args.begin(), args.end())).options(table).run().options) {
        if (opt.string_key == "merge") continue;
        for (const std::string& w : opt.original_tokens) outputs += " " + shell_quoted(w);
      }
      return merge_plan(*values, outputs, io);
    }
    const compare_args a = read_compare_args(std::vector<std::string>(args.begin(), args.end()));
    check_plan_options(a.values);
    if (a.values.count("plan") != 0) return write_compare_plan(a, io);
    return run_compare(a, io);
  });
}

}  // namespace vtensor::tools
