// `vtensor replay`: a trace through the serving simulator over a KV policy. In three parts
// (the options and their parsing are in tools/replay_options.cpp, shared with `compare`): one
// run, the outputs (summary, JSON, time series, Chrome trace), and the comparison of two
// backends (--compare-backends).

#include "tools/cli.hpp"
#include "tools/replay_options.hpp"

#include "backends/registry.hpp"
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

// ---- report --------------------------------------------------------------------------------

void print_summary(std::ostream& out, const nlohmann::ordered_json& j) {
  const auto& c = j["config"];
  const auto lat = [](const nlohmann::ordered_json& l) {
    return fmt::format("p50 {:.1f}, p90 {:.1f}, p99 {:.1f} ms", l["p50"].get<double>(), l["p90"].get<double>(),
                       l["p99"].get<double>());
  };
  out << fmt::format("trace: {} ({}), time scale {}\n", c["trace"].get<std::string>(), c["format"].get<std::string>(),
                     c["time_scale"].get<double>());
  const auto& po = c["policy_options"];
  out << fmt::format("replica: {} on {} x{} ({}), policy {} over backend {}, memory {}\n",
                     c["model"].get<std::string>(), c["gpu"].get<std::string>(), c["tp"].get<std::uint32_t>(),
                     c["chunked_prefill"].get<bool>() ? "chunked prefill" : "whole prefills",
                     c["policy"].get<std::string>(), po.value("backend", std::string("none")),
                     c["memory"].is_string() ? c["memory"].get<std::string>() : gib_text(c["memory"].get<double>()));
  std::string settings;
  for (const auto& [key, value] : po.items()) {
    if (key == "backend" || key == "memory_bytes" || !value.is_primitive()) continue;
    settings += fmt::format("{}{} {}", settings.empty() ? "" : ", ", key,
                            value.is_string() ? value.get<std::string>() : value.dump());
  }
  out << fmt::format("policy options: {}\n", settings);
  if (c.contains("kernel_factors")) {
    const auto& kf = c["kernel_factors"];
    out << fmt::format("attention kernel factors: set {}, prefill {:.2f}, decode {:.2f}\n",
                       kf["set"].get<std::string>(), kf["prefill"].get<double>(), kf["decode"].get<double>());
  }
  if (c.contains("compute_calibration")) {
    const auto& cc = c["compute_calibration"];
    out << fmt::format(
        "step cost: measured on {} ({} x{}): linear layers and decode attention at its rates, the "
        "decode factor its paged/contiguous ratio\n",
        cc["device"].get<std::string>(), cc["model"].get<std::string>(), cc["tp"].get<std::uint32_t>());
  }
  out << fmt::format(
      "requests: {} ({} completed, {} rejected: {} over context, {} over memory; {} truncated), "
      "{} preemptions\n",
      j["requests"].get<std::uint64_t>(), j["completed"].get<std::uint64_t>(), j["rejected"].get<std::uint64_t>(),
      j["rejected_context"].get<std::uint64_t>(), j["rejected_memory"].get<std::uint64_t>(),
      j["truncated"].get<std::uint64_t>(), j["preemptions"].get<std::uint64_t>());
  out << fmt::format("tokens: {} prompt, {} output, {} prefilled ({} recomputed)\n",
                     j["prompt_tokens"].get<std::uint64_t>(), j["output_tokens"].get<std::uint64_t>(),
                     j["prefill_tokens"].get<std::uint64_t>(), j["recomputed_tokens"].get<std::uint64_t>());
  out << fmt::format("prefix hit rate: {:.4f}\n", j["prefix_hit_rate"].get<double>());
  out << fmt::format(
      "memory: peak physical {}, peak mapped {}, peak used {}, peak cached {}; mean physical {}, "
      "mean mapped {}\n",
      gib_text(j["peak_physical_bytes"].get<double>()), gib_text(j["peak_mapped_bytes"].get<double>()),
      gib_text(j["peak_used_bytes"].get<double>()), gib_text(j["peak_cached_bytes"].get<double>()),
      gib_text(j["mean_physical_bytes"].get<double>()), gib_text(j["mean_mapped_bytes"].get<double>()));
  out << fmt::format(
      "internal fragmentation: mean {:.4f}, peak {:.4f}; sharing saving: mean {:.4f}; "
      "copy-on-write {}; evictions {}\n",
      j["mean_internal_fragmentation"].get<double>(), j["peak_internal_fragmentation"].get<double>(),
      j["mean_sharing_saving"].get<double>(), gib_text(j["cow_bytes"].get<double>()),
      j["evictions"].get<std::uint64_t>());
  const auto& mb = j["memory_breakdown"]["mean_bytes"];
  out << fmt::format(
      "memory breakdown (mean): used {}, internal {}, reserved idle {}, external {}, cached {}, free {}; "
      "cached pinning {}, reclaimable {}\n",
      gib_text(mb["used"].get<double>()), gib_text(mb["internal"].get<double>()),
      gib_text(mb["reserved_idle"].get<double>()), gib_text(mb["external"].get<double>()),
      gib_text(mb["cached"].get<double>()), gib_text(mb["free"].get<double>()),
      gib_text(mb["cached_pinning"].get<double>()), gib_text(mb["reclaimable"].get<double>()));
  std::string calls;
  for (const auto& [kind, n] : j["vmm_calls"].items())
    calls += fmt::format("{}{} {}", calls.empty() ? "" : ", ", kind, n.get<std::uint64_t>());
  out << fmt::format("vmm: {:.1f} ms charged, {:.1f} ms on the critical path; calls: {}\n",
                     j["vmm_time_us"].get<double>() / 1000.0, j["vmm_critical_time_us"].get<double>() / 1000.0, calls);
  out << fmt::format("ttft: {}\ntpot: {}\ne2e:  {}\n", lat(j["ttft_ms"]), lat(j["tpot_ms"]), lat(j["e2e_ms"]));
  out << fmt::format(
      "throughput: {:.0f} output tokens/s, {:.0f} prefill tokens/s; {} steps, busy {:.1f}%, "
      "mean running {:.1f}, mean waiting {:.1f}\n",
      j["throughput_tokens_per_s"].get<double>(), j["prefill_tokens_per_s"].get<double>(),
      j["steps"].get<std::uint64_t>(), 100 * j["busy_fraction"].get<double>(), j["mean_running"].get<double>(),
      j["mean_waiting"].get<double>());
  const auto& load = j["load"];
  if (load["overloaded"].get<bool>()) {
    out << fmt::format(
        "overloaded: {:.0f} s of steps for {:.0f} s of arrivals (offered load {:.2f}), {:.0f} s of backlog "
        "after the last arrival; TTFT is mostly queueing (queue p50 {:.1f} ms of TTFT p50 {:.1f} ms); it would "
        "keep up at --time-scale {:.2f} or more (a lower bound)\n",
        j["busy_fraction"].get<double>() * j["simulated_seconds"].get<double>(),
        load["arrival_span_seconds"].get<double>(), load["offered_load"].get<double>(),
        load["drain_seconds"].get<double>(), j["queue_ms"]["p50"].get<double>(), j["ttft_ms"]["p50"].get<double>(),
        load["keep_up_time_scale"].get<double>());
  } else {
    out << fmt::format("load: offered {:.2f} (busy step time over the arrival span); queue p50 {:.1f} ms\n",
                       load["offered_load"].get<double>(), j["queue_ms"]["p50"].get<double>());
  }
  out << fmt::format("simulated {:.1f} s in {:.2f} s wall\n", j["simulated_seconds"].get<double>(),
                     j.contains("wall_seconds") ? j["wall_seconds"].get<double>() : 0.0);
}

void print_vmm_split(std::ostream& out, const nlohmann::ordered_json& j) {
  if (!j.contains("vmm_model")) return;
  const auto& m = j["vmm_model"];
  out << fmt::format(
      "vmm model: {:.1f} ms on the steps = {:.3f}% of step time ({:.1f} ms of step-thread calls, {} waits for the "
      "worker = {:.2f} ms, {:.3f}% of step time); worker: {} jobs, {:.1f} ms off the steps\n",
      m["critical_us"].get<double>() / 1e3, 100 * m["critical_share_of_step_time"].get<double>(),
      m["step_thread_calls_us"].get<double>() / 1e3, m["waits"].get<std::uint64_t>(), m["wait_us"].get<double>() / 1e3,
      100 * m["wait_share_of_step_time"].get<double>(), m["worker_jobs"].get<std::uint64_t>(),
      m["worker_time_us"].get<double>() / 1e3);
  const auto& c = j["chunk_creation"];
  out << fmt::format(
      "chunk creation: {} chunks created, {} after warm-up (first {} of {} steps), last at step {}; "
      "{} cuMemCreate calls by the step thread (failed ones at the memory cap included)\n",
      c["creates_total"].get<std::uint64_t>(), c["creates_after_warmup"].get<std::uint64_t>(),
      c["warmup_steps"].get<std::uint64_t>(), c["steps"].get<std::uint64_t>(),
      c["last_create_step"].get<std::uint64_t>(), c["create_calls_by_step_thread"].get<std::uint64_t>());
  if (!j.contains("measured")) return;
  const auto& w = j["measured"];
  out << fmt::format(
      "measured: steps took {:.1f} ms wall ({:.1f} ms emulated compute); {} mapping waits = {:.3f} ms, "
      "{:.4f}% of step time; VMM charged (wall on cuda) {:.1f} ms on the step thread, {:.1f} ms on the worker; {} "
      "chunks "
      "created ({} ahead by the worker)\n",
      w["step_wall_ms"].get<double>(), w["emulated_compute_ms"].get<double>(), w["mapping_waits"].get<std::uint64_t>(),
      w["mapping_wait_ms"].get<double>(), 100 * w["wait_share_of_step_time"].get<double>(),
      w["step_thread_vmm_ms"].get<double>(), w["worker_vmm_ms"].get<double>(), w["chunks_created"].get<std::uint64_t>(),
      w["chunks_created_ahead"].get<std::uint64_t>());
  if (j["vmm_model"].contains("contention_us")) {
    out << fmt::format(
        "driver contention: {} step-thread VMM calls waited behind the worker's call in flight, {:.3f} ms measured; "
        "modelled {} bookings, {:.3f} ms\n",
        w["driver_lock_waits"].get<std::uint64_t>(), w["driver_lock_wait_ms"].get<double>(),
        j["vmm_model"]["contended_bookings"].get<std::uint64_t>(), j["vmm_model"]["contention_us"].get<double>() / 1e3);
  }
}

// ---- one run ---------------------------------------------------------------------------------

// What one replay produced, beyond its summary.
struct replay_run {
  std::string backend;
  nlohmann::ordered_json json;
  std::vector<sim::step_entry> log;
  std::optional<sim::vmm_split_report> vmm;
  bool pool_on_wall_time = false;  // the free pool's size follows wall time (kv_policy::free_pool_on_wall_time())
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

// One replay of `policy` over `backend`; `last` gets the output files' observers.
replay_run run_one(const replay_options& o, const std::string& backend, sim::kv_policy& policy, bool last,
                   replay_outputs& outputs, const cli_streams& io) {
  const sim::kv_policy_options p = over(o, backend);
  const auto reader = traces::open_trace(o.trace_path, o.format);
  sim::step_log log(policy, o.comparing);
  std::vector<sim::replica_observer*> observers{&log};
  if (last && outputs.timeseries) observers.push_back(outputs.timeseries.get());
  if (last && outputs.chrome) observers.push_back(outputs.chrome.get());
  std::optional<sim::step_emulator> emulator;
  if (o.emulate_for(backend)) {
    emulator.emplace(o.step_scale);
    observers.push_back(&*emulator);
  }
  sim::replay_config config = o.config;
  const bool tty = progress_on_terminal(io, config);
  const sim::replay_summary summary = sim::run_replay(*reader, policy, config, observers);
  if (tty) io.err << "\r" << std::string(90, ' ') << "\r" << std::flush;
  replay_run run;
  run.backend = backend;
  run.json =
      replay_run_json(o, p, policy, summary, reader->format(), log,
                      emulator ? std::optional<std::uint64_t>(emulator->emulated_ns()) : std::nullopt, o.with_wall);
  run.vmm = policy.vmm_report();
  run.log = log.steps();
  run.pool_on_wall_time = policy.free_pool_on_wall_time();
  return run;
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
  const auto diff = sim::compare_step_logs(runs[0].log, runs[1].log, with_pool);
  nlohmann::ordered_json cmp;
  cmp["backends"] = o.backends;
  cmp["steps"] = runs[0].log.size();
  cmp["identical"] = !diff.has_value();
  cmp["first_mismatch"] = diff ? nlohmann::ordered_json(*diff) : nlohmann::ordered_json(nullptr);
  cmp["compared"] = with_pool ? "batch, timing, physical/mapped/cached/free-pool chunks, used and logical bytes, "
                                "fragmentation, cuMemCreate calls, modelled VMM time"
                              : "batch, timing, physical chunks net of the free pool (creation ahead runs on wall "
                                "time), mapped/cached chunks, used and logical bytes, fragmentation, modelled VMM time";
  out << (diff ? fmt::format("compare {} vs {}: MISMATCH at {}\n", o.backends[0], o.backends[1], *diff)
               : fmt::format("compare {} vs {}: identical over {} steps\n", o.backends[0], o.backends[1],
                             runs[0].log.size()));
  if (runs[0].vmm && runs[1].vmm) compare_vmm_time(o, *runs[0].vmm, *runs[1].vmm, cmp, out);
  return {nlohmann::ordered_json{{"compare", cmp}, {"runs", {runs[0].json, runs[1].json}}}, diff.has_value()};
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
  std::vector<std::unique_ptr<sim::kv_policy>> policies;
  for (const std::string& backend : o.backends) policies.push_back(sim::make_kv_policy(o.choice, over(o, backend)));
  replay_outputs outputs = open_outputs(o, given.out);
  std::vector<replay_run> runs;
  for (std::size_t i = 0; i < o.backends.size(); ++i) {
    runs.push_back(run_one(o, o.backends[i], *policies[i], i + 1 == o.backends.size(), outputs, io));
    if (o.comparing) io.out << fmt::format("== run {}: backend {}\n", i + 1, o.backends[i]);
    print_summary(io.out, runs.back().json);
    print_vmm_split(io.out, runs.back().json);
  }
  nlohmann::ordered_json json = runs.front().json;
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
