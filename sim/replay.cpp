#include "sim/replay.hpp"

#include "sim/cluster.hpp"

#include <fmt/format.h>

#include "backends/units.hpp"

#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace vtensor::sim {

replay_summary run_replay(traces::trace_reader& reader, kv_policy& policy, const replay_config& config,
                          std::span<replica_observer* const> observers) {
  kv_policy* const policies[] = {&policy};
  const std::vector<replica_observer*> lists[] = {{observers.begin(), observers.end()}};
  return run_cluster(reader, policies, config, nullptr, lists).total;
}

namespace {

nlohmann::ordered_json latency_json(const latency_summary& l) {
  return {{"p50", l.p50}, {"p90", l.p90}, {"p99", l.p99}, {"mean", l.mean}, {"count", l.count}};
}

double per_second(double value, double seconds) { return seconds > 0 ? value / seconds : 0.0; }

template <class B>
nlohmann::ordered_json breakdown_json(const B& b) {
  return {{"used", b.used},
          {"internal", b.internal},
          {"reserved_idle", b.reserved_idle},
          {"external", b.external},
          {"cached", b.cached},
          {"free", b.free},
          {"cached_pinning", b.cached_pinning},
          {"reclaimable", b.reclaimable}};
}

}  // namespace

double replay_summary::hit_rate() const { return prefix_hit_rate(counters.hit_tokens, counters.prompt_tokens); }
double replay_summary::throughput_tokens_per_s() const {
  return per_second(static_cast<double>(counters.output_tokens), simulated_seconds);
}
double replay_summary::prefill_tokens_per_s() const {
  return per_second(static_cast<double>(counters.prefill_tokens), simulated_seconds);
}
double replay_summary::busy_fraction() const {
  return per_second(static_cast<double>(counters.busy_us) / 1e6 / replicas, simulated_seconds);
}
double replay_summary::vmm_time_us() const { return static_cast<double>(final_memory.vmm.total_time_ns()) / 1000.0; }
double replay_summary::vmm_critical_time_us() const {
  return static_cast<double>(counters.vmm_critical.count()) / 1000.0;
}

load_report load_of(const replay_summary& s, double time_scale) {
  load_report l;
  l.arrival_span_seconds = s.last_arrival_seconds - s.first_arrival_seconds;
  l.drain_seconds = std::max(0.0, s.simulated_seconds - s.last_arrival_seconds);
  const double busy = static_cast<double>(s.counters.busy_us) / 1e6 / s.replicas;
  if (l.arrival_span_seconds > 0) {
    l.offered_load = busy / l.arrival_span_seconds;
    l.overloaded = l.offered_load > 1 && l.drain_seconds > 0.1 * l.arrival_span_seconds;
    l.keep_up_time_scale = time_scale * l.offered_load;
  }
  return l;
}

nlohmann::ordered_json summary_json(const replay_summary& s, const nlohmann::ordered_json& config, std::uint64_t seed,
                                    bool with_wall) {
  const replica_counters& c = s.counters;
  nlohmann::ordered_json vmm_calls = nlohmann::ordered_json::object();
  nlohmann::ordered_json vmm_time = nlohmann::ordered_json::object();
  for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
    const std::string kind(to_string(static_cast<vmm_call>(k)));
    vmm_calls[kind] = s.final_memory.vmm.calls[k];
    vmm_time[kind] = static_cast<double>(s.final_memory.vmm.time_ns[k]) / 1000.0;
  }
  nlohmann::ordered_json j;
  j["requests"] = c.submitted;
  j["completed"] = c.completed;
  j["rejected"] = s.rejected();
  j["rejected_context"] = c.rejected_context;
  j["rejected_memory"] = c.rejected_memory;
  j["truncated"] = c.truncated;
  j["preemptions"] = c.preemptions;
  j["prompt_tokens"] = c.prompt_tokens;
  j["admitted_prompt_tokens"] = c.admitted_prompt_tokens;
  j["output_tokens"] = c.output_tokens;
  j["prefix_hit_tokens"] = c.hit_tokens;
  j["prefix_hit_rate"] = s.hit_rate();
  j["prefill_tokens"] = c.prefill_tokens;
  j["recomputed_tokens"] = c.recomputed_tokens;
  j["peak_physical_bytes"] = s.peak.memory.physical_bytes;
  j["peak_mapped_bytes"] = s.peak.memory.mapped_bytes;
  j["peak_used_bytes"] = s.peak.memory.used_bytes;
  j["peak_cached_bytes"] = s.peak.memory.cached_bytes;
  j["mean_physical_bytes"] = s.mean_physical_bytes;
  j["mean_mapped_bytes"] = s.mean_mapped_bytes;
  j["mean_used_bytes"] = s.mean_used_bytes;
  j["mean_internal_fragmentation"] = s.mean_internal_fragmentation;
  j["peak_internal_fragmentation"] = s.peak.internal_fragmentation;
  j["mean_sharing_saving"] = s.mean_sharing_saving;
  j["memory_breakdown"] = {{"mean_bytes", breakdown_json(s.mean_breakdown)},
                           {"final_bytes", breakdown_json(s.final_memory.breakdown)}};
  j["final_physical_bytes"] = s.final_memory.memory.physical_bytes;
  j["final_cached_bytes"] = s.final_memory.memory.cached_bytes;
  j["evictions"] = s.final_memory.evictions;
  j["cow_bytes"] = c.cow_bytes;
  j["vmm_calls"] = vmm_calls;
  j["vmm_time_us_by_call"] = vmm_time;
  j["vmm_time_us"] = s.vmm_time_us();
  j["vmm_critical_time_us"] = s.vmm_critical_time_us();
  j["ttft_ms"] = latency_json(s.ttft);
  j["tpot_ms"] = latency_json(s.tpot);
  j["e2e_ms"] = latency_json(s.e2e);
  j["queue_ms"] = latency_json(s.queue);
  j["throughput_tokens_per_s"] = s.throughput_tokens_per_s();
  j["prefill_tokens_per_s"] = s.prefill_tokens_per_s();
  j["steps"] = c.steps;
  j["compute_bound_steps"] = c.compute_bound_steps;
  j["busy_fraction"] = s.busy_fraction();
  j["mean_running"] = s.mean_running;
  j["peak_running"] = s.peak.running;
  j["mean_waiting"] = s.mean_waiting;
  j["peak_waiting"] = s.peak.waiting;
  const double time_scale = config.contains("time_scale") ? config["time_scale"].get<double>() : 1.0;
  const load_report l = load_of(s, time_scale);
  j["load"] = {{"arrival_span_seconds", l.arrival_span_seconds},
               {"drain_seconds", l.drain_seconds},
               {"offered_load", l.offered_load},
               {"overloaded", l.overloaded},
               {"keep_up_time_scale", l.keep_up_time_scale}};
  j["simulated_seconds"] = s.simulated_seconds;
  j["events"] = s.events;
  if (with_wall) j["wall_seconds"] = s.wall_seconds;
  j["seed"] = seed;
  j["config"] = config;
  return j;
}

std::uint64_t parse_byte_size(std::string_view text) {
  if (text == "unlimited") return std::numeric_limits<std::uint64_t>::max();
  const auto bad = [&](std::string_view why) {
    return std::invalid_argument(fmt::format("bad size '{}': {} (e.g. 80GiB, 500MiB, 1e9, unlimited)", text, why));
  };
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) != 0 || text[i] == '.' ||
                             text[i] == 'e' || text[i] == 'E' || text[i] == '+')) {
    if ((text[i] == 'e' || text[i] == 'E') && i + 1 < text.size() &&
        std::isalpha(static_cast<unsigned char>(text[i + 1])) != 0)
      break;
    ++i;
  }
  if (i == 0) throw bad("no number");
  double value = 0;
  try {
    std::size_t used = 0;
    value = std::stod(std::string(text.substr(0, i)), &used);
    if (used != i) throw bad("not a number");
  } catch (const std::logic_error&) {
    throw bad("not a number");
  }
  std::string_view unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  struct suffix {
    std::string_view name;
    double factor;
  };
  constexpr std::array<suffix, 10> units{{{"", 1},
                                          {"B", 1},
                                          {"KB", 1e3},
                                          {"MB", 1e6},
                                          {"GB", 1e9},
                                          {"TB", 1e12},
                                          {"KiB", double(k_kib)},
                                          {"MiB", double(k_mib)},
                                          {"GiB", double(k_gib)},
                                          {"TiB", double(k_gib * k_kib)}}};
  for (const auto& u : units) {
    if (u.name == unit) {
      const double bytes = value * u.factor;
      if (!(bytes >= 0) || bytes >= 1.8e19) throw bad("out of range");
      return static_cast<std::uint64_t>(bytes);
    }
  }
  throw bad(fmt::format("unknown unit '{}'", unit));
}

}  // namespace vtensor::sim
