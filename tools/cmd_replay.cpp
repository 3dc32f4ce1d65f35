// `vtensor replay`: a trace through the serving simulator over a KV policy. In three parts
// (the options and their parsing are in tools/replay_options.cpp, shared with `compare`; a run's
// typed result and its renderings in tools/replay_result.hpp): one run, the outputs (summary,
// JSON, time series, Chrome trace), and the comparison of two backends (--compare-backends).

#include "tools/cli.hpp"
#include "tools/replay_options.hpp"
#include "tools/replay_result.hpp"

#include "backends/registry.hpp"
#include "sim/cluster.hpp"
#include "sim/eviction_feed.hpp"
#include "sim/kernel_factors.hpp"
#include "sim/outputs.hpp"
#include "sim/policy_registry.hpp"
#include "sim/replay.hpp"
#include "sim/step_emulator.hpp"
#include "sim/step_log.hpp"
#include "tools/bundled_data.hpp"
#include "traces/atomic_output_file.hpp"
#include "traces/trace_reader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <vector>

namespace vtensor::tools {
namespace po = boost::program_options;
namespace {

constexpr std::string_view name = "replay";

// ---- one run ---------------------------------------------------------------------------------

// What one replay produced, beyond its summary (a cluster's: the total, then each replica's log).
struct replay_run {
  std::string backend;
  replay_result result;
  std::vector<std::vector<sim::step_entry>> logs;  // one per replica
  bool pool_on_wall_time = false;  // the free pool's size follows wall time (kv_policy::free_pool_on_wall_time())
  std::optional<sim::cluster_summary> cluster;  // more than one replica
};

// The output files (the time series and the Chrome trace observe the last run only).
struct replay_outputs {
  std::unique_ptr<sim::timeseries_writer> timeseries;
  std::unique_ptr<sim::chrome_trace_writer> chrome;
};

// The progress line on a terminal's stderr (none in tests or pipes).
bool progress_on_terminal(const cli_streams& io, sim::replay_config& config) {
  const bool tty = &io.err == &std::cerr && isatty(STDERR_FILENO) == 1;
  if (tty) {
    config.progress = [&io](const sim::replay_progress& p) {
      io.err << fmt::format("\rreplay: {:.1f} s simulated, {} requests arrived, {} completed, {:.1f} s wall   ",
                            static_cast<double>(p.now) / 1e6, p.submitted, p.completed, p.wall_seconds)
             << std::flush;
    };
  }
  return tty;
}

// The settings every policy shares, over `backend`.
sim::kv_policy_options over(const replay_options& o, const std::string& backend) {
  sim::kv_policy_options p = o.policy;
  p.backend = backend;
  return p;
}

// The trace's next uses for the offline eviction order: the trace read once more, as far as the
// replay reads it.
sim::shared_foresight trace_foresight(const replay_options& o) {
  return sim::shared_foresight([&o](traces::next_use_index& index) {
    const auto reader = traces::open_trace(o.trace_path, o.format);
    traces::trace_request r;
    while ((o.config.max_requests == 0 || index.requests() < o.config.max_requests) && reader->next(r)) index.add(r);
  });
}

// One replay of `policies` (one per replica) over `backend`; `last` gets the output files'
// observers (one replica only: parse_replay_options() refuses them for a cluster).
replay_run run_one(const replay_options& o, const std::string& backend,
                   const std::vector<std::unique_ptr<sim::kv_policy>>& policies, sim::eviction_feed& feed, bool last,
                   replay_outputs& outputs, const cli_streams& io) {
  const sim::kv_policy_options p = over(o, backend);
  const auto reader = traces::open_trace(o.trace_path, o.format);
  std::vector<std::unique_ptr<sim::step_log>> logs;
  std::vector<std::unique_ptr<sim::step_emulator>> emulators;
  std::vector<std::vector<sim::replica_observer*>> observers(policies.size());
  std::vector<sim::kv_policy*> raw;
  for (std::size_t i = 0; i < policies.size(); ++i) {
    raw.push_back(policies[i].get());
    logs.push_back(std::make_unique<sim::step_log>(*policies[i], o.comparing));
    observers[i].push_back(logs.back().get());
    if (o.emulate_for(backend)) {
      emulators.push_back(std::make_unique<sim::step_emulator>(o.step_scale));
      observers[i].push_back(emulators.back().get());
    }
  }
  if (last && outputs.timeseries) observers[0].push_back(outputs.timeseries.get());
  if (last && outputs.chrome) observers[0].push_back(outputs.chrome.get());
  const std::unique_ptr<sim::router> router =
      policies.size() > 1 ? sim::make_router(o.router, o.router_options) : nullptr;
  sim::replay_config config = o.config;
  feed.attach(config);
  const bool tty = progress_on_terminal(io, config);
  sim::cluster_summary cluster = sim::run_cluster(*reader, raw, config, router.get(), observers);
  if (tty) io.err << "\r" << std::string(90, ' ') << "\r" << std::flush;
  std::optional<std::uint64_t> emulated;
  for (const auto& e : emulators) emulated = emulated.value_or(0) + e->emulated_ns();
  replay_run run;
  run.backend = backend;
  run.result = make_replay_result(o, p, *policies[0], cluster.total, reader->format(), *logs[0], emulated, o.with_wall);
  for (const auto& log : logs) run.logs.push_back(log->steps());
  run.pool_on_wall_time = policies[0]->free_pool_on_wall_time();
  if (policies.size() > 1) {
    run.result.vmm.reset();  // one policy's split would not be the cluster's: each replica's is in "cluster"
    run.cluster = std::move(cluster);
  }
  return run;
}

// The run's summary JSON, with the cluster's part when it had more than one replica.
nlohmann::ordered_json run_json(const replay_run& run) {
  nlohmann::ordered_json j = replay_result_json(run.result);
  if (run.cluster) j["cluster"] = sim::cluster_json(*run.cluster);
  return j;
}

// ---- backend comparison (--compare-backends) -------------------------------------------------

double ratio(std::uint64_t a, std::uint64_t b) {
  return a == 0 ? 0.0 : static_cast<double>(b) / static_cast<double>(a);
}

// Per call kind: what each run charged (modelled on sim, measured on cuda) for the same calls.
void compare_vmm_time(const replay_options& o, const sim::vmm_split_report& a, const sim::vmm_split_report& c,
                      nlohmann::ordered_json& cmp, std::ostream& out) {
  nlohmann::ordered_json kinds = nlohmann::ordered_json::object();
  out << fmt::format("VMM time per call kind, {} vs {} (both threads; ms, calls):\n", o.backends[0], o.backends[1]);
  for (const vmm_call call : k_vmm_calls) {
    const auto k = static_cast<std::size_t>(call);
    const std::uint64_t ta = a.step.charged_ns[k] + a.worker.charged_ns[k];
    const std::uint64_t tb = c.step.charged_ns[k] + c.worker.charged_ns[k];
    const std::uint64_t na = a.step.calls[k] + a.worker.calls[k];
    const std::uint64_t nb = c.step.calls[k] + c.worker.calls[k];
    const std::string kind(to_string(call));
    kinds[kind] = {{"calls", {na, nb}}, {"ms", {ms(ta), ms(tb)}}, {"ratio", ratio(ta, tb)}};
    out << fmt::format("  {:<10} {:>10.1f} {:>10.1f}  x{:<6.3f} calls {} / {}\n", kind, ms(ta), ms(tb), ratio(ta, tb),
                       na, nb);
  }
  const std::uint64_t ta = a.step.total_charged_ns() + a.worker.total_charged_ns();
  const std::uint64_t tb = c.step.total_charged_ns() + c.worker.total_charged_ns();
  out << fmt::format("  {:<10} {:>10.1f} {:>10.1f}  x{:.3f}\n", "total", ms(ta), ms(tb), ratio(ta, tb));
  cmp["vmm_by_call"] = kinds;
  cmp["vmm_total_ms"] = {ms(ta), ms(tb)};
  cmp["vmm_ratio"] = ratio(ta, tb);
}

// Checks that the two runs agree step by step; returns the JSON of both and whether they differ.
std::pair<nlohmann::ordered_json, bool> compare_backends(const replay_options& o, const std::vector<replay_run>& runs,
                                                         std::ostream& out) {
  const bool with_pool = !runs[0].pool_on_wall_time && !runs[1].pool_on_wall_time;
  std::optional<std::string> diff;
  std::size_t steps = 0;
  for (std::size_t i = 0; i < runs[0].logs.size() && !diff; ++i) {
    diff = sim::compare_step_logs(runs[0].logs[i], runs[1].logs[i], with_pool);
    if (diff && runs[0].logs.size() > 1) *diff = fmt::format("replica {}: {}", i, *diff);
    steps += runs[0].logs[i].size();
  }
  nlohmann::ordered_json cmp;
  cmp["backends"] = o.backends;
  cmp["steps"] = steps;
  cmp["identical"] = !diff.has_value();
  cmp["first_mismatch"] = diff ? nlohmann::ordered_json(*diff) : nlohmann::ordered_json(nullptr);
  cmp["compared"] = with_pool ? "batch, timing, physical/mapped/cached/free-pool chunks, used and logical bytes, "
                                "fragmentation, cuMemCreate calls, modelled VMM time"
                              : "batch, timing, physical chunks net of the free pool (creation ahead runs on wall "
                                "time), mapped/cached chunks, used and logical bytes, fragmentation, modelled VMM time";
  out << (diff ? fmt::format("compare {} vs {}: MISMATCH at {}\n", o.backends[0], o.backends[1], *diff)
               : fmt::format("compare {} vs {}: identical over {} steps\n", o.backends[0], o.backends[1], steps));
  const auto& a = runs[0].result.vmm;
  const auto& b = runs[1].result.vmm;
  if (a && b) compare_vmm_time(o, a->report, b->report, cmp, out);
  return {nlohmann::ordered_json{{"compare", cmp}, {"runs", {run_json(runs[0]), run_json(runs[1])}}}, diff.has_value()};
}

// ---- outputs ---------------------------------------------------------------------------------

replay_outputs open_outputs(const replay_options& o, std::ostream& standard_output) {
  replay_outputs outputs;
  if (o.timeseries) outputs.timeseries = std::make_unique<sim::timeseries_writer>(*o.timeseries, &standard_output);
  if (o.chrome_trace) {
    outputs.chrome = std::make_unique<sim::chrome_trace_writer>(*o.chrome_trace, &standard_output);
  }
  return outputs;
}

void commit_outputs(const replay_options& o, const nlohmann::ordered_json& json, replay_outputs& outputs,
                    std::ostream& standard_output) {
  if (o.json) {
    traces::atomic_output_file file(*o.json, &standard_output);
    file.write(json.dump(2) + "\n");
    file.commit();
  }
  if (outputs.timeseries) outputs.timeseries->commit();
  if (outputs.chrome) outputs.chrome->commit();
}

// Every run, its summary printed; then the comparison when two backends were asked for.
int run_replays(const replay_options& o, const cli_streams& given) {
  // Note [Where an output goes] (traces/atomic_output_file.hpp): with an output on standard
  // output, the report goes to standard error so that standard output holds the data alone.
  const bool data_on_stdout = o.json == "-" || o.timeseries == "-" || o.chrome_trace == "-";
  const cli_streams io{data_on_stdout ? given.err : given.out, given.err};
  // Every policy is built before any output opens: what fails on bad input (a missing GPU, an
  // option the policy's constructor rejects) fails first.
  sim::shared_foresight foresight = trace_foresight(o);
  std::vector<std::unique_ptr<sim::eviction_feed>> feeds;
  std::vector<std::vector<std::unique_ptr<sim::kv_policy>>> policies;  // per backend, one per replica
  for (const std::string& backend : o.backends) {
    feeds.push_back(std::make_unique<sim::eviction_feed>(&foresight));
    sim::kv_policy_options p = over(o, backend);
    feeds.back()->attach(p);
    policies.emplace_back();
    for (std::uint32_t r = 0; r < o.replicas; ++r) policies.back().push_back(sim::make_kv_policy(o.choice, p));
  }
  replay_outputs outputs = open_outputs(o, given.out);
  if (o.operating_point) io.out << *o.operating_point << "\n";
  std::vector<replay_run> runs;
  for (std::size_t i = 0; i < o.backends.size(); ++i) {
    runs.push_back(run_one(o, o.backends[i], policies[i], *feeds[i], i + 1 == o.backends.size(), outputs, io));
    if (o.comparing) io.out << fmt::format("== run {}: backend {}\n", i + 1, o.backends[i]);
    print_replay_summary(io.out, runs.back().result);
    if (runs.back().cluster) print_cluster_summary(io.out, *runs.back().cluster);
  }
  nlohmann::ordered_json json = run_json(runs.front());
  bool mismatch = false;
  if (o.comparing) std::tie(json, mismatch) = compare_backends(o, runs, io.out);
  commit_outputs(o, json, outputs, given.out);
  return mismatch ? exit_failure : exit_success;
}

// The policies' own paragraphs of --help, each on lines of its own.
std::string policy_paragraphs() {
  std::string text;
  for (const std::string& policy : sim::kv_policy_names()) {
    if (const std::string about = sim::kv_policy_about(policy); !about.empty()) text += "\n" + about;
  }
  return text;
}

}  // namespace

int cmd_replay(std::span<const std::string> args, const cli_streams& io) {
  return guarded_run(name, io, [&] {
    po::positional_options_description positional;
    positional.add("trace", 1);
    const auto values = parse_command_line(
        name, "[TRACE] [options]",
        "Replays a trace through a simulated serving replica (continuous batching, roofline step\n"
        "cost, preemption by recompute) over a KV policy, and reports memory, fragmentation, prefix\n"
        "reuse, VMM cost and latency. Outputs are written whole or not at all, through symlinks; '-'\n"
        "is standard output (the report then goes to standard error).\n"
        "With --backend cuda the vtensor policy makes real VMM calls on a GPU (--memory caps it) and\n"
        "each step's compute is emulated in wall time; the simulated clock still runs on the latency\n"
        "model, so decisions match a sim replay (--compare-backends sim,cuda checks it step by step).\n"
        "--lookahead N maps N pages ahead on the background worker unless --async-lookahead false." +
            policy_paragraphs(),
        replay_option_table(), positional, args, io);
    if (!values) return exit_success;
    return run_replays(parse_replay_options(*values), io);
  });
}

}  // namespace vtensor::tools
