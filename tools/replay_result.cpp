// A replay's typed result, built from a finished run, and its JSON rendering (tools/replay_result.hpp).
// The text rendering is in tools/replay_text.cpp.

#include "tools/replay_result.hpp"

#include "sim/compute_calibration.hpp"

#include <limits>

namespace vtensor::tools {

double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }
double us(std::uint64_t ns) { return static_cast<double>(ns) / 1e3; }

double modelled_wait_share(const vmm_split& v, const sim::replay_summary& s) {
  return s.counters.busy_us == 0 ? 0.0 : us(v.report.modelled_wait_ns) / static_cast<double>(s.counters.busy_us);
}

double critical_share(const vmm_split& v, const sim::replay_summary& s) {
  return s.counters.busy_us == 0 ? 0.0 : us(v.report.critical_model_ns) / static_cast<double>(s.counters.busy_us);
}

double measured_wait_share(const vmm_split& v, const sim::replay_summary& s) {
  return s.counters.step_wall_ns == 0
             ? 0.0
             : static_cast<double>(v.report.mapping_wait_ns) / static_cast<double>(s.counters.step_wall_ns);
}

namespace {

// The settings of `o` as run by `policy` (options `p`) over a trace read as `format`.
run_config config_of(const replay_options& o, const sim::kv_policy_options& p, const sim::kv_policy& policy,
                     traces::trace_format format, bool emulated) {
  run_config c;
  c.trace = o.trace_path;
  c.format = format;
  c.policy = policy.name();
  c.policy_options = policy.describe();
  c.policy_run_config = nlohmann::ordered_json::object();
  policy.add_run_config(c.policy_run_config);
  c.model = o.model.name;
  c.tp = o.model.tp;
  c.gpu = o.gpu;
  c.weight_bytes_per_gpu = o.model.weight_bytes_per_gpu();
  if (o.policy.memory_bytes != std::numeric_limits<std::uint64_t>::max()) c.memory_bytes = o.policy.memory_bytes;
  c.time_scale = o.config.time_scale;
  c.max_requests = o.config.max_requests;
  c.replica = o.config.replica;
  c.step_overhead_ms = o.overhead_ms;
  c.kernel_factor_set = o.kernel_factors.name;
  c.sample_ms = o.sample_ms;
  c.emulate_steps = emulated;
  c.step_time_scale = o.step_scale;
  c.device = p.device_index;
  return c;
}

// The VMM split of `policy` after its replay; nullopt for a policy without VMM calls.
std::optional<vmm_split> split_of(const replay_options& o, const sim::kv_policy& policy, const sim::step_log& log,
                                  std::optional<std::uint64_t> emulated_ns) {
  const auto report = policy.vmm_report();
  if (!report) return std::nullopt;
  vmm_split v;
  v.report = *report;
  v.creation = log.creation(o.warmup_fraction);
  v.warmup_fraction = o.warmup_fraction;
  v.emulated_ns = emulated_ns.value_or(0);
  v.extra_figures = nlohmann::ordered_json::object();
  policy.extra_figures(v.extra_figures);
  if (v.extra_figures.contains("contention_us")) {
    v.contention = modelled_contention{v.extra_figures["contended_bookings"].get<std::uint64_t>(),
                                       v.extra_figures["contention_us"].get<double>()};
  }
  return v;
}

}  // namespace

replay_result make_replay_result(const replay_options& o, const sim::kv_policy_options& p, const sim::kv_policy& policy,
                                 const sim::replay_summary& summary, traces::trace_format format,
                                 const sim::step_log& log, std::optional<std::uint64_t> emulated_ns, bool with_wall) {
  replay_result r;
  r.config = config_of(o, p, policy, format, emulated_ns.has_value());
  r.seed = o.seed;
  r.summary = summary;
  r.vmm = split_of(o, policy, log, emulated_ns);
  r.with_wall = with_wall;
  return r;
}

// ---- JSON ------------------------------------------------------------------------------------

namespace {

nlohmann::ordered_json by_kind(const std::array<std::uint64_t, k_vmm_call_kinds>& a, double scale) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
    j[std::string(to_string(static_cast<vmm_call>(k)))] = static_cast<double>(a[k]) * scale;
  }
  return j;
}

// The "config" object of a run's summary.
nlohmann::ordered_json config_json(const run_config& c) {
  const sim::replica_config& r = c.replica;
  nlohmann::ordered_json cfg;
  cfg["trace"] = c.trace;
  cfg["format"] = std::string(traces::to_string(c.format));
  cfg["policy"] = c.policy;
  cfg["policy_options"] = c.policy_options;
  cfg["model"] = c.model;
  cfg["gpu"] = c.gpu.name;
  cfg["tp"] = c.tp;
  cfg["gpu_flop_rate"] = c.gpu.flop_rate;
  cfg["gpu_bandwidth"] = c.gpu.bandwidth;
  cfg["weight_bytes_per_gpu"] = c.weight_bytes_per_gpu;
  cfg["memory"] = c.memory_bytes ? nlohmann::ordered_json(*c.memory_bytes) : nlohmann::ordered_json("unlimited");
  cfg["time_scale"] = c.time_scale;
  cfg["max_requests"] = c.max_requests;
  add_replica_settings(cfg, r, c.step_overhead_ms);
  cfg["kernel_factors"] = {
      {"set", c.kernel_factor_set}, {"prefill", r.kernel_factors.prefill}, {"decode", r.kernel_factors.decode}};
  if (r.compute) {
    const sim::compute_calibration& cc = *r.compute;
    cfg["compute_calibration"] = {{"device", cc.device}, {"model", cc.model}, {"tp", cc.tp}, {"source", cc.source}};
  }
  cfg["sample_ms"] = c.sample_ms;
  for (const auto& [key, value] : c.policy_run_config.items()) cfg[key] = value;
  cfg["vmm_clock"] = "latency model (measured VMM time is reported, never fed to the clock)";
  cfg["emulate_steps"] = c.emulate_steps;
  cfg["step_time_scale"] = c.step_time_scale;
  cfg["device"] = c.device;
  return cfg;
}

// "vmm_model": the modelled split (deterministic), then the policy's own figures.
nlohmann::ordered_json vmm_model_json(const vmm_split& v, const sim::replay_summary& s) {
  const sim::vmm_split_report& r = v.report;
  nlohmann::ordered_json model;
  model["critical_us"] = us(r.critical_model_ns);
  model["step_thread_calls_us"] = us(r.step.total_model_ns());
  model["worker_jobs"] = r.jobs;
  model["worker_time_us"] = us(r.job_model_ns);
  model["waits"] = r.modelled_waits;
  model["wait_us"] = us(r.modelled_wait_ns);
  model["wait_share_of_step_time"] = modelled_wait_share(v, s);
  model["critical_share_of_step_time"] = critical_share(v, s);
  for (const auto& [key, value] : v.extra_figures.items()) model[key] = value;
  return model;
}

nlohmann::ordered_json chunk_creation_json(const vmm_split& v) {
  const sim::creation_after_warmup& c = v.creation;
  nlohmann::ordered_json creation;
  creation["warmup_fraction"] = v.warmup_fraction;
  creation["warmup_steps"] = c.warmup_steps;
  creation["steps"] = c.steps;
  creation["creates_total"] = c.creates_total;
  creation["creates_after_warmup"] = c.creates_after;
  creation["last_create_step"] = c.last_create_step;
  creation["create_calls_by_step_thread"] = v.report.step.calls[static_cast<std::size_t>(vmm_call::create)];
  return creation;
}

// "measured": wall-clock figures (only with_wall).
nlohmann::ordered_json measured_json(const vmm_split& v, const sim::replay_summary& s) {
  const sim::vmm_split_report& r = v.report;
  nlohmann::ordered_json m;
  m["step_wall_ms"] = ms(s.counters.step_wall_ns);
  m["emulated_compute_ms"] = ms(v.emulated_ns);
  m["mapping_waits"] = r.mapping_waits;
  m["mapping_wait_ms"] = ms(r.mapping_wait_ns);
  m["wait_share_of_step_time"] = measured_wait_share(v, s);
  m["driver_lock_waits"] = r.driver_lock_waits;  // measured side of Note [Driver contention]
  m["driver_lock_wait_ms"] = ms(r.driver_lock_wait_ns);
  m["step_thread_vmm_ms"] = ms(r.step.total_charged_ns());
  m["worker_vmm_ms"] = ms(r.worker.total_charged_ns());
  m["step_thread_calls"] = by_kind(r.step.calls, 1.0);
  m["step_thread_vmm_us_by_call"] = by_kind(r.step.charged_ns, 1e-3);
  m["worker_calls"] = by_kind(r.worker.calls, 1.0);
  m["worker_vmm_us_by_call"] = by_kind(r.worker.charged_ns, 1e-3);
  m["chunks_created"] = r.chunks_created;
  m["chunks_created_ahead"] = r.chunks_created_ahead;
  m["creates_by_worker"] = r.worker.calls[static_cast<std::size_t>(vmm_call::create)];
  return m;
}

}  // namespace

void add_replica_settings(nlohmann::ordered_json& j, const sim::replica_config& r, double step_overhead_ms) {
  j["token_budget"] = r.token_budget;
  j["max_running"] = r.max_running;
  j["chunked_prefill"] = r.chunked_prefill;
  j["max_context_tokens"] = r.max_context_tokens;
  j["over_context"] = std::string(sim::to_string(r.over_context));
  j["step_overhead_ms"] = step_overhead_ms;
}

nlohmann::ordered_json replay_result_json(const replay_result& r) {
  nlohmann::ordered_json json = sim::summary_json(r.summary, config_json(r.config), r.seed, r.with_wall);
  if (!r.vmm) return json;
  json["vmm_model"] = vmm_model_json(*r.vmm, r.summary);
  json["chunk_creation"] = chunk_creation_json(*r.vmm);
  if (r.with_wall) json["measured"] = measured_json(*r.vmm, r.summary);
  return json;
}

}  // namespace vtensor::tools
