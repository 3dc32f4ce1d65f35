// The text summary of a replay, rendered from its typed result (tools/replay_result.hpp).

#include "tools/replay_result.hpp"

#include "sim/compute_calibration.hpp"
#include "tools/cli.hpp"

#include <fmt/format.h>

namespace vtensor::tools {
namespace {

std::string latency_text(const sim::latency_summary& l) {
  return fmt::format("p50 {:.1f}, p90 {:.1f}, p99 {:.1f} ms", l.p50, l.p90, l.p99);
}

std::string gib(std::uint64_t bytes) { return gib_text(static_cast<double>(bytes)); }

// The policy's options in effect, as it describes them (the backend and memory said apart).
std::string policy_settings_text(const nlohmann::ordered_json& described) {
  std::string settings;
  for (const auto& [key, value] : described.items()) {
    if (key == "backend" || key == "memory_bytes" || !value.is_primitive()) continue;
    settings += fmt::format("{}{} {}", settings.empty() ? "" : ", ", key,
                            value.is_string() ? value.get<std::string>() : value.dump());
  }
  return settings;
}

// The trace, the replica, the policy, the kernel factors and the step cost.
void print_settings(std::ostream& out, const run_config& c) {
  out << fmt::format("trace: {} ({}), time scale {}\n", c.trace, traces::to_string(c.format), c.time_scale);
  out << fmt::format("replica: {} on {} x{} ({}), policy {} over backend {}, memory {}\n", c.model, c.gpu.name, c.tp,
                     c.replica.chunked_prefill ? "chunked prefill" : "whole prefills", c.policy,
                     c.policy_options.value("backend", std::string("none")),
                     c.memory_bytes ? gib(*c.memory_bytes) : std::string("unlimited"));
  out << fmt::format("policy options: {}\n", policy_settings_text(c.policy_options));
  out << fmt::format("attention kernel factors: set {}, prefill {:.2f}, decode {:.2f}\n", c.kernel_factor_set,
                     c.replica.kernel_factors.prefill, c.replica.kernel_factors.decode);
  if (c.replica.compute) {
    const sim::compute_calibration& cc = *c.replica.compute;
    out << fmt::format(
        "step cost: measured on {} ({} x{}): linear layers and decode attention at its rates, the "
        "decode factor its paged/contiguous ratio\n",
        cc.device, cc.model, cc.tp);
  }
}

// Requests, tokens, prefix reuse, memory and VMM calls.
void print_counts(std::ostream& out, const sim::replay_summary& s) {
  const sim::replica_counters& c = s.counters;
  out << fmt::format(
      "requests: {} ({} completed, {} rejected: {} over context, {} over memory; {} truncated), "
      "{} preemptions\n",
      c.submitted, c.completed, s.rejected(), c.rejected_context, c.rejected_memory, c.truncated, c.preemptions);
  out << fmt::format("tokens: {} prompt, {} output, {} prefilled ({} recomputed)\n", c.prompt_tokens, c.output_tokens,
                     c.prefill_tokens, c.recomputed_tokens);
  out << fmt::format("prefix hit rate: {:.4f}\n", s.hit_rate());
  const memory_stats& peak = s.peak.memory;
  out << fmt::format(
      "memory: peak physical {}, peak mapped {}, peak used {}, peak cached {}; mean physical {}, "
      "mean mapped {}\n",
      gib(peak.physical_bytes), gib(peak.mapped_bytes), gib(peak.used_bytes), gib(peak.cached_bytes),
      gib_text(s.mean_physical_bytes), gib_text(s.mean_mapped_bytes));
  out << fmt::format(
      "internal fragmentation: mean {:.4f}, peak {:.4f}; sharing saving: mean {:.4f}; "
      "copy-on-write {}; evictions {}\n",
      s.mean_internal_fragmentation, s.peak.internal_fragmentation, s.mean_sharing_saving, gib(c.cow_bytes),
      s.final_memory.evictions);
  const sim::memory_breakdown_means& mb = s.mean_breakdown;
  out << fmt::format(
      "memory breakdown (mean): used {}, internal {}, reserved idle {}, external {}, cached {}, free {}; "
      "cached pinning {}, reclaimable {}\n",
      gib_text(mb.used), gib_text(mb.internal), gib_text(mb.reserved_idle), gib_text(mb.external), gib_text(mb.cached),
      gib_text(mb.free), gib_text(mb.cached_pinning), gib_text(mb.reclaimable));
  std::string calls;
  for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
    calls += fmt::format("{}{} {}", calls.empty() ? "" : ", ", to_string(static_cast<vmm_call>(k)),
                         s.final_memory.vmm.calls[k]);
  }
  out << fmt::format("vmm: {:.1f} ms charged, {:.1f} ms on the critical path; calls: {}\n", s.vmm_time_us() / 1000.0,
                     s.vmm_critical_time_us() / 1000.0, calls);
}

// Latency, throughput and load (Note [Overload] in sim/replay.hpp).
void print_service(std::ostream& out, const replay_result& r) {
  const sim::replay_summary& s = r.summary;
  out << fmt::format("ttft: {}\ntpot: {}\ne2e:  {}\n", latency_text(s.ttft), latency_text(s.tpot), latency_text(s.e2e));
  out << fmt::format(
      "throughput: {:.0f} output tokens/s, {:.0f} prefill tokens/s; {} steps, busy {:.1f}%, "
      "mean running {:.1f}, mean waiting {:.1f}\n",
      s.throughput_tokens_per_s(), s.prefill_tokens_per_s(), s.counters.steps, 100 * s.busy_fraction(), s.mean_running,
      s.mean_waiting);
  const sim::load_report load = sim::load_of(s, r.config.time_scale);
  if (load.overloaded) {
    out << fmt::format(
        "overloaded: {:.0f} s of steps for {:.0f} s of arrivals (offered load {:.2f}), {:.0f} s of backlog "
        "after the last arrival; TTFT is mostly queueing (queue p50 {:.1f} ms of TTFT p50 {:.1f} ms); it would "
        "keep up at --time-scale {:.2f} or more (a lower bound)\n",
        s.busy_fraction() * s.simulated_seconds, load.arrival_span_seconds, load.offered_load, load.drain_seconds,
        s.queue.p50, s.ttft.p50, load.keep_up_time_scale);
  } else {
    out << fmt::format("load: offered {:.2f} (busy step time over the arrival span); queue p50 {:.1f} ms\n",
                       load.offered_load, s.queue.p50);
  }
  out << fmt::format("simulated {:.1f} s in {:.2f} s wall\n", s.simulated_seconds, r.with_wall ? s.wall_seconds : 0.0);
}

// The measured block of the VMM split (only with wall time).
void print_measured(std::ostream& out, const vmm_split& v, const sim::replay_summary& s) {
  const sim::vmm_split_report& w = v.report;
  out << fmt::format(
      "measured: steps took {:.1f} ms wall ({:.1f} ms emulated compute); {} mapping waits = {:.3f} ms, "
      "{:.4f}% of step time; VMM charged (wall on cuda) {:.1f} ms on the step thread, {:.1f} ms on the worker; {} "
      "chunks "
      "created ({} ahead by the worker)\n",
      ms(s.counters.step_wall_ns), ms(v.emulated_ns), w.mapping_waits, ms(w.mapping_wait_ns),
      100 * measured_wait_share(v, s), ms(w.step.total_charged_ns()), ms(w.worker.total_charged_ns()), w.chunks_created,
      w.chunks_created_ahead);
  if (v.contention) {
    out << fmt::format(
        "driver contention: {} step-thread VMM calls waited behind the worker's call in flight, {:.3f} ms measured; "
        "modelled {} bookings, {:.3f} ms\n",
        w.driver_lock_waits, ms(w.driver_lock_wait_ns), v.contention->bookings, v.contention->us / 1e3);
  }
}

// The VMM split: modelled, chunk creation, measured.
void print_vmm_split(std::ostream& out, const replay_result& r) {
  if (!r.vmm) return;
  const vmm_split& v = *r.vmm;
  const sim::vmm_split_report& m = v.report;
  out << fmt::format(
      "vmm model: {:.1f} ms on the steps = {:.3f}% of step time ({:.1f} ms of step-thread calls, {} waits for the "
      "worker = {:.2f} ms, {:.3f}% of step time); worker: {} jobs, {:.1f} ms off the steps\n",
      us(m.critical_model_ns) / 1e3, 100 * critical_share(v, r.summary), us(m.step.total_model_ns()) / 1e3,
      m.modelled_waits, us(m.modelled_wait_ns) / 1e3, 100 * modelled_wait_share(v, r.summary), m.jobs,
      us(m.job_model_ns) / 1e3);
  const sim::creation_after_warmup& c = v.creation;
  out << fmt::format(
      "chunk creation: {} chunks created, {} after warm-up (first {} of {} steps), last at step {}; "
      "{} cuMemCreate calls by the step thread (failed ones at the memory cap included)\n",
      c.creates_total, c.creates_after, c.warmup_steps, c.steps, c.last_create_step,
      m.step.calls[static_cast<std::size_t>(vmm_call::create)]);
  if (r.with_wall) print_measured(out, v, r.summary);
}

}  // namespace

void print_replay_summary(std::ostream& out, const replay_result& r) {
  print_settings(out, r.config);
  print_counts(out, r.summary);
  print_service(out, r);
  print_vmm_split(out, r);
}

}  // namespace vtensor::tools

namespace vtensor::tools {

void print_cluster_summary(std::ostream& out, const sim::cluster_summary& c) {
  const std::uint64_t prompt = c.total.counters.prompt_tokens;
  out << fmt::format(
      "cluster: {} replicas (memory, policy and step loop each; figures above are the cluster's), "
      "router {}\n",
      c.replicas.size(), c.router);
  std::string decisions;
  for (const auto& [reason, count] : c.decisions) {
    decisions += fmt::format("{}{} {}", decisions.empty() ? "" : ", ", reason, count);
  }
  out << fmt::format("routing decisions: {}\n", decisions);
  out << fmt::format("load imbalance (max / mean over replicas): busy time {:.2f}, queued tokens {:.2f}\n",
                     c.busy_imbalance(), c.queued_imbalance());
  out << fmt::format(
      "prefix bound (infinite cache): one global cache {:.4f}, one per replica as routed {:.4f}; achieved {:.4f}\n",
      prefix_hit_rate(c.global_bound_hit_tokens, prompt), prefix_hit_rate(c.split_bound_hit_tokens(), prompt),
      c.total.hit_rate());
  for (std::size_t i = 0; i < c.replicas.size(); ++i) {
    const sim::replica_figures& f = c.replicas[i];
    const sim::replay_summary& s = f.summary;
    out << fmt::format(
        "  replica {}: {} requests, hit {:.4f} (bound {:.4f}), TTFT {}, TPOT p90 {:.1f} ms, busy {:.2f}, "
        "queued tokens {:.0f}\n",
        i, s.counters.submitted, s.hit_rate(), prefix_hit_rate(f.bound_hit_tokens, s.counters.prompt_tokens),
        latency_text(s.ttft), s.tpot.p90, s.busy_fraction(), f.mean_queued_tokens);
  }
}

}  // namespace vtensor::tools
