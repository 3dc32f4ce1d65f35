// `vtensor capacity`: for each arm (a policy with its options, as compare takes them) and each
// cell of the other axes (memory, kernel factors, traces), the largest load at which the replay
// meets a latency objective (--slo), found by replays at compressed arrivals (Note [Capacity
// search] in tools/capacity.cpp). The probes of every search run in rounds, each round's replays
// in parallel (--jobs); results do not depend on --jobs.

#include "tools/capacity.hpp"
#include "tools/cli.hpp"
#include "tools/compare_experiment.hpp"
#include "tools/compare_output.hpp"
#include "tools/compare_plan.hpp"
#include "tools/compare_run.hpp"
#include "tools/replay_options.hpp"

#include "traces/atomic_output_file.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

namespace vtensor::tools {
namespace po = boost::program_options;
namespace {

constexpr std::string_view name = "capacity";

po::options_description capacity_table() {
  po::options_description o("capacity");
  o.add_options()("trace", po::value<std::vector<std::string>>()->composing(),
                  "trace file; several make the trace axis (default: the bundled Mooncake excerpt)")(
      "arm", po::value<std::vector<std::string>>()->composing(),
      "NAME='POLICY [options]': an arm, as compare takes it (repeatable)")(
      "arms", po::value<std::string>(), "experiment file (compare's JSON, without a time_scale axis)")(
      "baseline", po::value<std::string>(), "the reference arm of the ratios (default: the first arm)")(
      "memory", po::value<std::vector<std::string>>()->composing(), "memory axis, as compare's (default: default)")(
      "kernel-factors", po::value<std::vector<std::string>>()->composing(),
      "kernel-factor axis, as compare's (default: modern)")(
      "replicas", po::value<std::vector<std::string>>()->composing(),
      "replicas axis, as compare's: each load is the cluster's (default: 1)")(
      "slo", po::value<std::string>(),
      "the objective, every clause at most its limit: e.g. 'ttft_p90<=5s,tpot_p99<=100ms' (metrics ttft, tpot, "
      "e2e; quantiles p50, p90, p99; units s, ms, us)")(
      "goodput", po::value<double>(),
      "FRACTION: meet the objective by goodput instead: at least this share of the requests each within every "
      "clause's limit (its quantile ignored; the smallest limit of a metric), e.g. 0.9")(
      "tolerance", po::value<double>()->default_value(0.05),
      "stop when the lightest failing load is within this fraction of the heaviest met one")(
      "max-load", po::value<double>()->default_value(64), "the heaviest load tried, x the trace's arrival rate")(
      "min-load", po::value<double>()->default_value(1.0 / 64), "the lightest load tried")(
      "fewest-replicas", po::value<std::uint32_t>(),
      "MAX: search instead the fewest replicas (each its own GPU behind the arm's --router) that meet the "
      "objective at the trace's own rate, from 1 to MAX")("jobs", po::value<std::uint32_t>()->default_value(0),
                                                          "replays at once (0: the machine's cores)")(
      "json", po::value<std::string>(), "write the searches, every probe included, to FILE (- : standard output)")(
      "no-wall", po::bool_switch(), "leave wall_seconds out (byte-comparable runs)");
  o.add(plan_options("capacity search", "run search K (an arm in a cell)", "print the capacities",
                     "(--json as a run's)"));
  po::options_description table("options");
  table.add(o).add(shared_option_table());
  return table;
}

// One search: an arm in a cell of the memory, kernel-factor and trace axes.
struct search {
  std::size_t arm = 0, memory = 0, kernel_factors = 0, trace = 0, replicas = 0;
  capacity_search bracket;
  std::optional<replica_search> fewest;  // --fewest-replicas: this search's, in place of the load's
  nlohmann::ordered_json probes = nlohmann::ordered_json::array();
  nlohmann::ordered_json at_capacity;  // the met probe's figures
};

// The per-request limits of `objective`: each metric's smallest limit.
request_limits limits_of(const slo& objective) {
  request_limits l;
  for (const slo_clause& c : objective.clauses) {
    double& limit = c.metric == "ttft" ? l.ttft_ms : c.metric == "tpot" ? l.tpot_ms : l.e2e_ms;
    limit = std::min(limit, c.limit_ms);
  }
  return l;
}

std::string format_ms(double ms) {
  return ms < 1000 ? fmt::format("{:.1f} ms", ms) : fmt::format("{:.2f} s", ms / 1e3);
}

std::string cell_name(const experiment& x, const search& s) {
  const std::string replicas = x.names_replicas() ? fmt::format(",replicas={}", x.replicas[s.replicas]) : "";
  return fmt::format("memory={},kernel_factors={},trace={}{} (trace {})", x.memory[s.memory],
                     x.kernel_factors[s.kernel_factors], s.trace, replicas, x.traces[s.trace]);
}

// Replays the probes of every search still open, round after round.
void run_searches(const experiment& x, const std::vector<std::string>& shared, const slo& objective,
                  std::optional<double> goodput, std::vector<search>& searches, unsigned jobs, const cli_streams& io) {
  const request_limits limits = limits_of(objective);
  std::optional<compare_traces> traces;
  for (;;) {
    std::vector<probe> probes;
    std::vector<std::size_t> owners;
    std::vector<double> loads;
    std::vector<std::uint32_t> counts;  // --fewest-replicas: each probe's replicas
    experiment round = x;               // with --fewest-replicas, a replicas axis of this round's counts
    if (searches.front().fewest) round.replicas.clear();
    for (std::size_t i = 0; i < searches.size(); ++i) {
      const search& s = searches[i];
      std::size_t replicas = s.replicas;
      double load = 1.0;
      if (s.fewest) {
        const std::optional<std::uint32_t> n = s.fewest->next();
        if (!n) continue;
        const auto at = std::find(round.replicas.begin(), round.replicas.end(), *n);
        replicas = static_cast<std::size_t>(at - round.replicas.begin());
        if (at == round.replicas.end()) round.replicas.push_back(*n);
        counts.push_back(*n);
      } else {
        const std::optional<double> l = s.bracket.next();
        if (!l) continue;
        load = *l;
      }
      probes.push_back({s.arm, s.memory, s.kernel_factors, s.trace, replicas, 1.0 / load});
      owners.push_back(i);
      loads.push_back(load);
    }
    if (probes.empty()) return;
    compare_grid g = make_probe_grid(round, shared, probes);
    if (!traces) {  // one search (a plan's task): its trace only
      const std::optional<std::size_t> only =
          searches.size() == 1 ? std::optional(searches.front().trace) : std::nullopt;
      traces = load_traces(x, g.points.front().options, only);
    }
    run_points(g, *traces, std::nullopt, jobs, io, limits);
    for (std::size_t j = 0; j < probes.size(); ++j) {
      search& s = searches[owners[j]];
      const sim::replay_summary& r = g.points[j].result.summary;
      const double good = g.points[j].goodput.value_or(0.0);
      const bool met = goodput ? good >= *goodput : objective.met(r);
      nlohmann::ordered_json p = {{"load", loads[j]}, {"time_scale", probes[j].time_scale}};
      bool best = false;
      if (s.fewest) {
        s.fewest->record(counts[j], met);
        p["replicas"] = counts[j];
        best = met && s.fewest->met == counts[j];
      } else {
        s.bracket.record(loads[j], met);
        best = met && s.bracket.met == loads[j];
      }
      p["met"] = met;
      for (const slo_clause& c : objective.clauses) p[c.metric + "_" + c.quantile + "_ms"] = slo::value(c, r);
      p["goodput"] = good;
      p["completed"] = r.counters.completed;
      p["rejected"] = r.rejected();
      p["throughput_tokens_per_s"] = r.throughput_tokens_per_s();
      p["hit_rate"] = r.hit_rate();
      if (best) s.at_capacity = p;
      s.probes.push_back(std::move(p));
    }
  }
}

// A capacity run's settings read and checked, and its searches (an arm in a cell each), in the
// order the table prints them.
struct capacity_setup {
  slo objective;
  std::optional<double> goodput;
  capacity_search bounds;
  experiment x;
  std::optional<replica_search> fewest;
  std::vector<search> searches;
  unsigned jobs = 1;
};

capacity_setup setup_capacity(const po::variables_map& v) {
  capacity_setup c;
  if (v.count("slo") == 0) throw usage_error("--slo is required, e.g. --slo 'ttft_p90<=5s,tpot_p99<=100ms'");
  c.objective = parse_slo(v["slo"].as<std::string>());
  std::optional<double>& goodput = c.goodput;
  if (v.count("goodput") != 0) {
    goodput = v["goodput"].as<double>();
    if (!(*goodput > 0 && *goodput <= 1)) throw usage_error("--goodput must be a fraction in (0, 1]");
  }
  capacity_search& bounds = c.bounds;
  bounds.tolerance = v["tolerance"].as<double>();
  bounds.min_load = v["min-load"].as<double>();
  bounds.max_load = v["max-load"].as<double>();
  if (!(bounds.tolerance > 0 && bounds.tolerance < 1)) throw usage_error("--tolerance must be between 0 and 1");
  if (!(bounds.min_load > 0 && bounds.min_load <= 1 && bounds.max_load >= 1 && std::isfinite(bounds.max_load)))
    throw usage_error("--min-load must be in (0, 1] and --max-load at least 1");
  c.x = read_experiment(v, bundled_trace_path());
  const experiment& x = c.x;
  if (x.time_scale.size() != 1 || x.time_scale.front() != 1.0)
    throw usage_error("capacity searches the time scale itself: the experiment file's time_scale axis is not used");
  c.jobs = v["jobs"].as<std::uint32_t>();
  if (c.jobs == 0) c.jobs = std::max(1u, std::thread::hardware_concurrency());

  std::optional<replica_search>& fewest = c.fewest;
  if (v.count("fewest-replicas") != 0) {
    fewest = replica_search{};
    fewest->max_replicas = v["fewest-replicas"].as<std::uint32_t>();
    if (fewest->max_replicas == 0) throw usage_error("--fewest-replicas must be at least 1");
    if (x.names_replicas()) throw usage_error("--fewest-replicas searches the replica count itself: drop --replicas");
    if (v.count("max-load") != 0 && !v["max-load"].defaulted())
      throw usage_error("--fewest-replicas replays at the trace's own rate: --max-load and --min-load do not apply");
    if (v.count("min-load") != 0 && !v["min-load"].defaulted())
      throw usage_error("--fewest-replicas replays at the trace's own rate: --max-load and --min-load do not apply");
  }
  for (std::size_t t = 0; t < x.traces.size(); ++t) {
    for (std::size_t k = 0; k < x.kernel_factors.size(); ++k) {
      for (std::size_t r = 0; r < x.replicas.size(); ++r) {
        for (std::size_t m = 0; m < x.memory.size(); ++m) {
          for (std::size_t a = 0; a < x.arms.size(); ++a) c.searches.push_back({a, m, k, t, r, bounds, fewest, {}, {}});
        }
      }
    }
  }
  return c;
}

// The table and --json of finished searches; `wall`: the searches' replays, wherever they ran.
int render_capacity(const po::variables_map& v, const capacity_setup& setup, double wall, const cli_streams& given) {
  const bool json_on_stdout = v.count("json") != 0 && v["json"].as<std::string>() == "-";
  const cli_streams io{json_on_stdout ? given.err : given.out, given.err};
  const experiment& x = setup.x;
  const slo& objective = setup.objective;
  const std::optional<double>& goodput = setup.goodput;
  const capacity_search& bounds = setup.bounds;
  const std::optional<replica_search>& fewest = setup.fewest;
  const std::vector<search>& searches = setup.searches;

  std::size_t base = 0;
  for (std::size_t a = 0; a < x.arms.size(); ++a) {
    if (x.arms[a].name == x.baseline) base = a;
  }
  std::vector<std::string> clause_texts;
  for (const slo_clause& c : objective.clauses) clause_texts.push_back(c.text);
  const std::string what =
      goodput ? fmt::format("goodput >= {} within {} (each request)", *goodput, fmt::join(clause_texts, ", "))
              : fmt::format("{}", fmt::join(clause_texts, ", "));
  if (fewest) {
    io.out << fmt::format(
        "objective: {}; at the trace's own rate, the fewest replicas (each a GPU) that meet it, searched in [1, {}]\n",
        what, fewest->max_replicas);
  } else {
    io.out << fmt::format(
        "objective: {}; load = the trace's arrival rate x L (replay --time-scale 1/L), searched in [{}, {}] to {}%\n",
        what, bounds.min_load, bounds.max_load, bounds.tolerance * 100);
  }
  nlohmann::ordered_json out = {{"command", "capacity"}, {"slo", clause_texts}};
  if (fewest) {
    out["fewest_replicas"] = {{"max_replicas", fewest->max_replicas}, {"load", 1.0}};
  } else {
    out["tolerance"] = bounds.tolerance;
    out["min_load"] = bounds.min_load;
    out["max_load"] = bounds.max_load;
  }
  out["baseline"] = x.baseline;
  out["goodput"] = goodput ? nlohmann::ordered_json(*goodput) : nlohmann::ordered_json(nullptr);
  nlohmann::ordered_json cells = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < searches.size(); i += x.arms.size()) {
    const search& first = searches[i];
    io.out << "\n== " << cell_name(x, first) << "\n";
    std::string header =
        fmt::format("{:<16}{:>14}{:>13}{:>9}", "arm", fewest ? "replicas" : "capacity", "vs baseline", "replays");
    for (const slo_clause& c : objective.clauses) header += fmt::format("{:>16}", c.metric + "_" + c.quantile);
    header += fmt::format("{:>10}", "goodput");
    io.out << header << "   (at capacity)\n";
    const search& b = searches[i + base];
    nlohmann::ordered_json arms = nlohmann::ordered_json::array();
    for (std::size_t a = 0; a < x.arms.size(); ++a) {
      const search& s = searches[i + a];
      const std::string status = s.fewest ? s.fewest->status() : s.bracket.status();
      std::string capacity, ratio = "-";
      std::size_t replays = 0;
      if (s.fewest) {
        capacity = s.fewest->met ? fmt::format("{}", *s.fewest->met) : fmt::format("> {}", s.fewest->max_replicas);
        if (s.fewest->met && b.fewest->met)
          ratio = fmt::format("x{:.3f}", static_cast<double>(*s.fewest->met) / *b.fewest->met);
        replays = s.fewest->replays;
      } else {
        capacity = status == "none" ? "none" : fmt::format("x{:.3f}", *s.bracket.met);
        if (status == "at least") capacity = ">= " + capacity;
        if (s.bracket.met && b.bracket.met) ratio = fmt::format("x{:.3f}", *s.bracket.met / *b.bracket.met);
        replays = s.bracket.replays;
      }
      std::string line = fmt::format("{:<16}{:>14}{:>13}{:>9}", x.arms[a].name, capacity, ratio, replays);
      for (const slo_clause& c : objective.clauses) {
        const std::string key = c.metric + "_" + c.quantile + "_ms";
        line += fmt::format("{:>16}", s.at_capacity.contains(key) ? format_ms(s.at_capacity[key].get<double>()) : "-");
      }
      line += fmt::format("{:>10}", s.at_capacity.contains("goodput")
                                        ? fmt::format("{:.3f}", s.at_capacity["goodput"].get<double>())
                                        : "-");
      io.out << line << "\n";
      nlohmann::ordered_json j = {{"arm", x.arms[a].name}, {"status", status}};
      const auto or_null = [](const auto& o) {
        return o ? nlohmann::ordered_json(*o) : nlohmann::ordered_json(nullptr);
      };
      if (s.fewest) {
        j["replicas"] = or_null(s.fewest->met);
        j["failed_replicas"] = or_null(s.fewest->failed);
      } else {
        j["capacity"] = or_null(s.bracket.met);
        j["failed_load"] = or_null(s.bracket.failed);
      }
      j["replays"] = replays;
      j["probes"] = s.probes;
      arms.push_back(std::move(j));
    }
    nlohmann::ordered_json cell = {{"memory", x.memory[first.memory]},
                                   {"kernel_factors", x.kernel_factors[first.kernel_factors]},
                                   {"trace", x.traces[first.trace]}};
    if (x.names_replicas()) cell["replicas"] = x.replicas[first.replicas];
    cell["arms"] = std::move(arms);
    cells.push_back(std::move(cell));
  }
  if (fewest) {
    io.out << "\nreplicas: the fewest that met the objective (one fewer failed, or it is 1); > MAX: not even MAX did\n";
  } else {
    io.out << "\ncapacity: the heaviest load tried that met the objective (the next heavier failed, within the "
              "tolerance, so capacities that close are a tie); none: not even the lightest met it; >=: the heaviest "
              "did\n";
  }
  out["cells"] = std::move(cells);
  if (!v["no-wall"].as<bool>()) out["wall_seconds"] = wall;
  if (v.count("json") != 0) {
    traces::atomic_output_file f(v["json"].as<std::string>(), &given.out);
    f.write(out.dump(2) + "\n");
    f.commit();
  }
  return exit_success;
}

int run_capacity(const po::variables_map& v, const std::vector<std::string>& shared, const cli_streams& given) {
  capacity_setup c = setup_capacity(v);
  const bool json_on_stdout = v.count("json") != 0 && v["json"].as<std::string>() == "-";
  const cli_streams io{json_on_stdout ? given.err : given.out, given.err};
  const auto wall_start = std::chrono::steady_clock::now();
  run_searches(c.x, shared, c.objective, c.goodput, c.searches, c.jobs, io);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return render_capacity(v, c, wall, given);
}

// A capacity run's arguments read: the options, the shared settings as typed, and the arguments
// again without the plan's own options (what a plan's manifest keeps).
struct capacity_args {
  po::variables_map values;
  std::vector<std::string> shared;
  std::vector<std::string> args;
};

capacity_args read_capacity_args(const std::vector<std::string>& words) {
  po::positional_options_description positional;
  positional.add("trace", -1);
  const po::options_description table = capacity_table();  // the parsed options point into it
  const po::parsed_options parsed = po::command_line_parser(words).options(table).positional(positional).run();
  capacity_args a;
  po::store(parsed, a.values);
  po::notify(a.values);
  a.shared = shared_tokens(parsed);
  for (const po::option& opt : parsed.options) {
    if (plan_only_option(opt.string_key)) continue;
    a.args.insert(a.args.end(), opt.original_tokens.begin(), opt.original_tokens.end());
  }
  return a;
}

std::string search_id(const experiment& x, const search& s) {
  std::string id = fmt::format("{}@memory={},kernel_factors={},trace={}", x.arms[s.arm].name, x.memory[s.memory],
                               x.kernel_factors[s.kernel_factors], s.trace);
  if (x.names_replicas()) id += fmt::format(",replicas={}", x.replicas[s.replicas]);
  return id;
}

nlohmann::ordered_json or_null(const auto& o) {
  return o ? nlohmann::ordered_json(*o) : nlohmann::ordered_json(nullptr);
}
template <typename T>
std::optional<T> optional_of(const nlohmann::ordered_json& j) {
  return j.is_null() ? std::nullopt : std::optional<T>(j.get<T>());
}

// A finished search as a plan's result, and back: the search's state (what the table and the JSON
// read), its probes and the figures at capacity, and the wall time its replays took.
nlohmann::ordered_json search_result_json(const std::string& id, const search& s, double wall) {
  nlohmann::ordered_json j = {{"id", id}};
  if (s.fewest) {
    j["fewest"] = {
        {"met", or_null(s.fewest->met)}, {"failed", or_null(s.fewest->failed)}, {"replays", s.fewest->replays}};
  } else {
    j["bracket"] = {
        {"met", or_null(s.bracket.met)}, {"failed", or_null(s.bracket.failed)}, {"replays", s.bracket.replays}};
  }
  j["probes"] = s.probes;
  j["at_capacity"] = s.at_capacity;
  j["wall_seconds"] = wall;
  return j;
}

double read_search_result(const nlohmann::ordered_json& j, const std::string& id, search& s) {
  if (j.at("id").get<std::string>() != id)
    throw std::invalid_argument(fmt::format("holds search {}, not {}", j.at("id").get<std::string>(), id));
  if (s.fewest) {
    const auto& f = j.at("fewest");
    s.fewest->met = optional_of<std::uint32_t>(f.at("met"));
    s.fewest->failed = optional_of<std::uint32_t>(f.at("failed"));
    s.fewest->replays = f.at("replays").get<std::size_t>();
  } else {
    const auto& b = j.at("bracket");
    s.bracket.met = optional_of<double>(b.at("met"));
    s.bracket.failed = optional_of<double>(b.at("failed"));
    s.bracket.replays = b.at("replays").get<std::size_t>();
  }
  s.probes = j.at("probes");
  s.at_capacity = j.at("at_capacity");
  return j.at("wall_seconds").get<double>();
}

// A plan's settings and searches, rebuilt from its manifest's arguments and checked against the
// searches it lists.
struct capacity_plan {
  plan_manifest manifest;
  capacity_args args;
  capacity_setup setup;
  std::vector<std::string> ids;
};

capacity_plan rebuild_capacity_plan(const std::filesystem::path& dir) {
  capacity_plan p;
  p.manifest = read_manifest(dir, "capacity");
  p.args = read_capacity_args(p.manifest.args);
  p.setup = setup_capacity(p.args.values);
  for (const search& s : p.setup.searches) p.ids.push_back(search_id(p.setup.x, s));
  if (p.ids != p.manifest.point_ids)
    throw usage_error(fmt::format("plan {}: its arguments no longer make the searches it lists", dir.string()));
  return p;
}

// --plan DIR: the searches, checked as a run checks them, written as a plan (Note [Plans] in
// tools/compare_plan.cpp): one task per search.
int write_capacity_plan(const capacity_args& a, const cli_streams& io) {
  if (a.values.count("json") != 0) throw usage_error("--plan writes no capacities: give --json to --merge");
  const capacity_setup c = setup_capacity(a.values);
  std::vector<std::string> ids;
  std::vector<nlohmann::ordered_json> files;
  for (const search& s : c.searches) {
    ids.push_back(search_id(c.x, s));
    nlohmann::ordered_json f = {{"index", files.size()}, {"id", ids.back()}};
    f["arm"] = {
        {"name", c.x.arms[s.arm].name}, {"policy", c.x.arms[s.arm].policy}, {"options", c.x.arms[s.arm].options}};
    f["cell"] = {{"memory", c.x.memory[s.memory]},
                 {"kernel_factors", c.x.kernel_factors[s.kernel_factors]},
                 {"trace", c.x.traces[s.trace]},
                 {"replicas", c.x.replicas[s.replicas]}};
    f["result"] = fmt::format("results/{}.json", files.size());
    files.push_back(std::move(f));
  }
  std::string command = "vtensor capacity";
  for (const std::string& w : a.args) command += " " + shell_quoted(w);
  const plan_manifest m = make_manifest("capacity", a.args, command, c.x.traces, std::move(ids));
  const plan_engine engine = engine_of(a.values, {0});
  const std::filesystem::path dir = a.values["plan"].as<std::string>();
  const std::vector<task_cost> measured = write_plan(dir, m, files, engine);
  io.out << plan_written(dir, m, engine, measured);
  return exit_success;
}

// --run-point DIR K: search K alone, its result written whole or not at all.
int run_capacity_point(const po::variables_map& v, const cli_streams& io) {
  only_plan_options(v, {"run-point", "force"}, "--run-point");
  const auto words = v["run-point"].as<std::vector<std::string>>();
  const std::filesystem::path dir = run_point_dir(words);
  capacity_plan p = rebuild_capacity_plan(dir);
  const std::size_t k = point_index(words, p.ids.size());
  search& s = p.setup.searches[k];
  check_plan(p.manifest, dir, {p.setup.x.traces[s.trace]});
  const std::filesystem::path result = point_result_path(dir, k);
  if (!v["force"].as<bool>() && point_done(dir, k, [&](const nlohmann::ordered_json& j) {
        search done = s;
        (void)read_search_result(j, p.ids[k], done);
      })) {
    io.out << fmt::format("point {} ({}): done already ({}; --force runs it again)\n", k, p.ids[k], result.string());
    return exit_success;
  }
  std::vector<search> one = {s};
  const auto wall_start = std::chrono::steady_clock::now();
  run_searches(p.setup.x, p.args.shared, p.setup.objective, p.setup.goodput, one, 1, io);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  write_file(result, search_result_json(p.ids[k], one.front(), wall).dump(1) + "\n");
  io.out << fmt::format("point {} ({}): searched in {} replays, {:.1f} s -> {}\n", k, p.ids[k],
                        one.front().fewest ? one.front().fewest->replays : one.front().bracket.replays, wall,
                        result.string());
  return exit_success;
}

// --merge DIR: the capacities from the searches' results, or the searches not done.
int merge_capacity_plan(const po::variables_map& v, const cli_streams& given) {
  only_plan_options(v, {"merge", "json"}, "--merge");
  const std::filesystem::path dir = v["merge"].as<std::string>();
  capacity_plan p = rebuild_capacity_plan(dir);
  check_plan(p.manifest, dir);
  double wall = 0;
  const std::string missing = read_results(dir, p.manifest, [&](std::size_t k, const nlohmann::ordered_json& j) {
    wall += read_search_result(j, p.ids[k], p.setup.searches[k]);
  });
  if (!missing.empty()) {
    given.err << missing;
    return exit_failure;
  }
  po::variables_map outputs = p.args.values;  // the plan's settings, the merge's --json
  outputs.erase("json");
  if (v.count("json") != 0) outputs.insert({"json", v["json"]});
  return render_capacity(outputs, p.setup, wall, given);
}

}  // namespace

int cmd_capacity(std::span<const std::string> args, const cli_streams& io) {
  return guarded_run(name, io, [&] {
    po::positional_options_description positional;
    positional.add("trace", -1);
    const auto values = parse_command_line(
        name, "[TRACE...] --arm NAME='POLICY [options]' ... --slo OBJECTIVE [options]",
        "For each arm and each cell of the other axes (--memory, --kernel-factors, traces), the\n"
        "largest load, as a multiple of the trace's own arrival rate, at which the replay meets the\n"
        "objective: replays at compressed arrivals (--time-scale 1/L), doubling or halving from L = 1\n"
        "and then bisecting (Note [Capacity search] in tools/capacity.cpp). Prints capacity per arm,\n"
        "its ratio to the baseline's and the replays used; --json adds every probe. --fewest-replicas MAX\n"
        "searches instead the fewest replicas that meet it at the trace's own rate (Note [Fewest replicas]).\n"
        "Example: vtensor capacity trace.jsonl --arm vt=vtensor --arm paged=paged --slo 'ttft_p90<=5s'",
        capacity_table(), positional, args, io);
    if (!values) return exit_success;
    if (values->count("run-point") != 0) return run_capacity_point(*values, io);
    if (values->count("merge") != 0) return merge_capacity_plan(*values, io);
    const capacity_args a = read_capacity_args(std::vector<std::string>(args.begin(), args.end()));
    check_plan_options(a.values);
    if (a.values.count("plan") != 0) return write_capacity_plan(a, io);
    return run_capacity(a.values, a.shared, io);
  });
}

}  // namespace vtensor::tools
