// `vtensor capacity`: for each arm (a policy with its options, as compare takes them) and each
// cell of the other axes (memory, kernel factors, traces), the largest load at which the replay
// meets a latency objective (--slo), found by replays at compressed arrivals (Note [Capacity
// search] in tools/capacity.cpp). The probes of every search run in rounds, each round's replays
// in parallel (--jobs); results do not depend on --jobs.

#include "tools/capacity.hpp"
#include "tools/cli.hpp"
#include "tools/compare_experiment.hpp"
#include "tools/compare_run.hpp"
#include "tools/replay_options.hpp"

#include "traces/atomic_output_file.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
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
    if (!traces) traces = load_traces(x, g.points.front().options);
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

int run_capacity(const po::variables_map& v, const std::vector<std::string>& shared, const cli_streams& given) {
  if (v.count("slo") == 0) throw usage_error("--slo is required, e.g. --slo 'ttft_p90<=5s,tpot_p99<=100ms'");
  const slo objective = parse_slo(v["slo"].as<std::string>());
  std::optional<double> goodput;
  if (v.count("goodput") != 0) {
    goodput = v["goodput"].as<double>();
    if (!(*goodput > 0 && *goodput <= 1)) throw usage_error("--goodput must be a fraction in (0, 1]");
  }
  capacity_search bounds;
  bounds.tolerance = v["tolerance"].as<double>();
  bounds.min_load = v["min-load"].as<double>();
  bounds.max_load = v["max-load"].as<double>();
  if (!(bounds.tolerance > 0 && bounds.tolerance < 1)) throw usage_error("--tolerance must be between 0 and 1");
  if (!(bounds.min_load > 0 && bounds.min_load <= 1 && bounds.max_load >= 1 && std::isfinite(bounds.max_load)))
    throw usage_error("--min-load must be in (0, 1] and --max-load at least 1");
  const experiment x = read_experiment(v, bundled_trace_path());
  if (x.time_scale.size() != 1 || x.time_scale.front() != 1.0)
    throw usage_error("capacity searches the time scale itself: the experiment file's time_scale axis is not used");
  const bool json_on_stdout = v.count("json") != 0 && v["json"].as<std::string>() == "-";
  const cli_streams io{json_on_stdout ? given.err : given.out, given.err};
  unsigned jobs = v["jobs"].as<std::uint32_t>();
  if (jobs == 0) jobs = std::max(1u, std::thread::hardware_concurrency());

  std::optional<replica_search> fewest;
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
  std::vector<search> searches;
  for (std::size_t t = 0; t < x.traces.size(); ++t) {
    for (std::size_t k = 0; k < x.kernel_factors.size(); ++k) {
      for (std::size_t r = 0; r < x.replicas.size(); ++r) {
        for (std::size_t m = 0; m < x.memory.size(); ++m) {
          for (std::size_t a = 0; a < x.arms.size(); ++a) searches.push_back({a, m, k, t, r, bounds, fewest, {}, {}});
        }
      }
    }
  }
  const auto wall_start = std::chrono::steady_clock::now();
  run_searches(x, shared, objective, goodput, searches, jobs, io);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

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
    const std::vector<std::string> words(args.begin(), args.end());
    const po::parsed_options parsed =
        po::command_line_parser(words).options(capacity_table()).positional(positional).run();
    return run_capacity(*values, shared_tokens(parsed), io);
  });
}

}  // namespace vtensor::tools
