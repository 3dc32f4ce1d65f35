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
#include "tools/compare_run.hpp"
#include "tools/compare_verdict.hpp"
#include "tools/replay_options.hpp"
#include "tools/report_render.hpp"

#include "traces/atomic_output_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
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
  return o;
}

po::options_description compare_table() {
  po::options_description all("options");
  all.add(compare_options()).add(shared_option_table());
  return all;
}

std::string shell_quoted(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./=,:@+%") ==
                        std::string::npos)
    return w;
  std::string out = "'";
  for (const char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
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

// Options -> experiment -> grid of points (every point's options checked before any work) ->
// traces and bounds -> the run -> outputs.
int run_compare(const po::variables_map& v, const std::vector<std::string>& shared, const std::string& command,
                const cli_streams& given) {
  const experiment x = read_experiment(v, bundled_trace_path());
  const bool json_on_stdout = v.count("json") != 0 && v["json"].as<std::string>() == "-";
  const cli_streams io{json_on_stdout ? given.err : given.out, given.err};
  compare_run_facts facts;
  facts.command = command;
  facts.with_wall = !v["no-wall"].as<bool>();
  if (v.count("tie") != 0) facts.tie = parse_tie(v["tie"].as<std::string>());
  facts.jobs = v["jobs"].as<std::uint32_t>();
  if (facts.jobs == 0) facts.jobs = std::max(1u, std::thread::hardware_concurrency());
  std::unique_ptr<output_folder> folder;
  if (v["report"].as<bool>() && v.count("out") == 0) throw usage_error("--report needs --out DIR");
  if (v.count("out") != 0) folder = std::make_unique<output_folder>(v["out"].as<std::string>());
  facts.timeseries = folder != nullptr;

  compare_grid grid = make_grid(x, shared);
  const replay_options& first = grid.points.front().options;
  const compare_traces traces = load_traces(x, first);
  add_bounds(grid.cells, traces, first.model.kv_bytes_per_token_per_gpu());

  const auto wall_start = std::chrono::steady_clock::now();
  const std::optional<std::filesystem::path> timeseries_dir =
      folder ? std::optional(folder->temp() / "timeseries") : std::nullopt;
  run_points(grid, traces, timeseries_dir, facts.jobs, io);
  facts.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  const nlohmann::ordered_json summary = summary_json(x, grid, traces, facts);
  return write_outputs(v, x, grid, summary, std::move(folder), io, given);
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
        "Example: vtensor compare trace.jsonl --arm vt=vtensor --arm paged=paged --memory 16GiB,unlimited",
        compare_table(), positional, args, io);
    if (!values) return exit_success;
    // The shared settings as typed: replayed into every point's replay options.
    const std::vector<std::string> words(args.begin(), args.end());
    const po::parsed_options parsed =
        po::command_line_parser(words).options(compare_table()).positional(positional).run();
    const std::vector<std::string> shared = shared_tokens(parsed);
    // --jobs changes no result: with --no-wall it leaves the command too, so that two runs compare
    // byte for byte whatever --jobs was.
    const bool no_wall = (*values)["no-wall"].as<bool>();
    std::string command = "vtensor compare";
    for (const po::option& opt : parsed.options) {
      if (no_wall && opt.string_key == "jobs") continue;
      for (const std::string& w : opt.original_tokens) command += " " + shell_quoted(w);
    }
    return run_compare(*values, shared, command, io);
  });
}

}  // namespace vtensor::tools
