// The options of `vtensor replay` and what turns them into a run (the summary's "config", the
// policy, the VMM split), shared with `vtensor compare` (tools/replay_options.hpp).

#include "tools/replay_options.hpp"

#include "backends/registry.hpp"
#include "core/eviction_policy.hpp"
#include "core/manager.hpp"
#include "sim/compute_calibration.hpp"
#include "sim/policy_registry.hpp"
#include "sim/vtensor_policy.hpp"
#include "tools/bundled_data.hpp"
#include "traces/trace_reader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace vtensor::tools {
namespace po = boost::program_options;
namespace {

constexpr std::string_view k_bundled = "mooncake_conversation_excerpt.jsonl";

// The bundled excerpt, found wherever vtensor was built or installed (Note [Finding bundled data]).
std::string bundled_trace_impl() {
  try {
    return find_bundled(k_bundled, bundled_trace_dirs()).string();
  } catch (const usage_error& e) {
    throw usage_error(fmt::format("no --trace given and {}", e.what()));
  }
}

template <typename T>
T get(const po::variables_map& v, const char* key) {
  return v[key].as<T>();
}

}  // namespace

// The trace, its format and what to replay it with.
std::string bundled_trace_path() { return bundled_trace_impl(); }

po::options_description workload_options() {
  po::options_description o("trace and replica");
  o.add_options()("trace", po::value<std::string>(), "trace file (default: the bundled Mooncake conversation excerpt)")(
      "format", po::value<std::string>()->default_value("auto"),
      ("trace format: auto, " + traces::k_trace_format_names.list()).c_str())(
      "policy", po::value<std::string>()->default_value("vtensor"),
      "KV policy: vtensor, paged, radix, static, vattention (docs/policies.md)")(
      "model", po::value<std::string>()->default_value("llama-3-8b"), "model: llama-3-8b, yi-6b, yi-34b, llama-3-70b")(
      "gpu", po::value<std::string>()->default_value("h200"), "GPU: h200, a100-80gb")(
      "tp", po::value<std::uint32_t>()->default_value(1), "tensor-parallel degree (divides the KV heads)")(
      "memory", po::value<std::string>(),
      "KV memory per GPU: 80GiB, 500MiB, 1e9, or unlimited (default: GPU memory minus the weights)")(
      "seed", po::value<std::uint64_t>()->default_value(0), "seed (recorded; the replay itself is deterministic)")(
      "time-scale", po::value<double>()->default_value(1.0), "stretch arrivals: arrival x SCALE")(
      "max-requests", po::value<std::uint64_t>()->default_value(0), "replay at most N requests (0: all)")(
      "token-budget", po::value<std::uint32_t>()->default_value(8192), "tokens computed per step at most")(
      "max-running", po::value<std::uint32_t>()->default_value(256), "running requests at most")(
      "chunked-prefill", po::value<bool>()->default_value(true), "split prefills across steps (true/false)")(
      "max-context", po::value<std::uint64_t>()->default_value(131072), "prompt + output tokens at most")(
      "over-context", po::value<std::string>()->default_value("reject"),
      ("longer requests: " + sim::k_over_context_policy_names.list(" or ")).c_str())(
      "step-overhead-ms", po::value<double>()->default_value(sim::k_default_step_overhead_s * 1e3),
      "fixed cost per step, ms")("kernel-factors", po::value<std::string>()->default_value("modern"),
                                 "attention kernel factors of paged layouts: modern, 2024, or a JSON file "
                                 "(docs/kernel-factors.md)")(
      "compute-calibration", po::value<std::string>(),
      "measured step cost from `vtensor calibrate --compute` (docs/kernel-factors.md, Note [Measured step cost]); "
      "default: the roofline")("sample-ms", po::value<double>()->default_value(1000.0),
                               "time-series sample interval, simulated ms");
  return o;
}

// The vtensor policy and its VMM backend.
po::options_description vtensor_options() {
  po::options_description o("vtensor policy and backend");
  o.add_options()("backend", po::value<std::string>()->default_value("sim"),
                  "VMM backend every policy holds its KV memory through: sim, or cuda (a real GPU)")(
      "device", po::value<int>()->default_value(0), "cuda backend: GPU index")(
      "compare-backends", po::value<std::string>(),
      "A,B (e.g. sim,cuda): replay twice, check that both runs agree step by step, compare VMM time")(
      "layout", po::value<std::string>()->default_value("kv-fused"),
      ("vtensor layout: " + k_kv_layout_names.list()).c_str())(
      "lookahead", po::value<std::uint32_t>(),
      "pages mapped ahead of need, vtensor and vattention (default 1; vtensor before the pipeline: 0)")(
      "lookahead-batch", po::value<std::uint32_t>()->default_value(1),
      "lookahead pages mapped at a time, 1 to --lookahead (runs per tensor: cheaper for the driver)")(
      "async-lookahead", po::value<bool>()->default_value(true),
      "map lookahead pages on the background worker (true/false; only with --lookahead > 0)")(
      "create-ahead", po::value<std::uint32_t>()->default_value(0),
      "the worker keeps N chunks created in the free pool")(
      "pipeline", po::value<bool>(),
      "pipelined admission: a step's admissions are decided while the previous step runs, the vtensor "
      "policy maps them and unmaps releases on the worker (true/false; default: true for vtensor, false "
      "for the others)")(
      "emulate-steps", po::value<bool>(),
      "spend each step's modelled compute in wall time so the worker overlaps it (default: on for cuda)")(
      "step-time-scale", po::value<double>()->default_value(1.0), "emulated step time = modelled compute x SCALE")(
      "warmup-fraction", po::value<double>()->default_value(0.1),
      "first fraction of steps counted as warm-up for chunk creation")(
      "eviction", po::value<std::string>()->default_value("lru"), "prefix-cache eviction: lru, fifo, lfu")(
      "partial", po::value<std::string>()->default_value("cow"),
      ("partial prefix page: " + k_partial_page_policy_names.list(" or ")).c_str())(
      "calibration", po::value<std::string>(), "VMM latency calibration file for the sim backend")(
      "zero-latency", po::bool_switch(), "the sim backend charges nothing for VMM calls");
  return o;
}

// The baseline policies (docs/policies.md).
po::options_description baseline_options() {
  po::options_description o("baseline policies (paged, radix, static, vattention)");
  o.add_options()("block-tokens", po::value<std::uint32_t>()->default_value(16), "paged: tokens per KV block")(
      "prefix-caching", po::value<bool>()->default_value(true), "paged, radix: cache and share prefixes (true/false)")(
      "page-tokens", po::value<std::uint32_t>()->default_value(1), "radix: tokens per page of the token pool")(
      "reserve", po::value<std::string>()->default_value("max"),
      ("static: tokens a request reserves: " + sim::k_static_reserve_names.list(" or ")).c_str())(
      "arena", po::value<std::string>()->default_value("first-fit"),
      ("static: arena allocator: " + sim::k_arena_fit_names.list(" or ")).c_str())(
      "megacache", po::value<bool>()->default_value(false),
      "vattention: one buffer for K and one for V over all layers (true/false)");
  return o;
}

po::options_description output_options() {
  po::options_description o("outputs");
  o.add_options()("json", po::value<std::string>(), "write the summary as JSON to FILE (- : standard output)")(
      "no-wall", po::bool_switch(),
      "leave wall_seconds and the measured block out of the JSON and read no clock per step "
      "(byte-comparable, faster runs)")("timeseries", po::value<std::string>(),
                                        "write the sampled state as CSV to FILE (- : standard output)")(
      "chrome-trace", po::value<std::string>(), "write Chrome / Perfetto trace events to FILE (- : standard output)");
  return o;
}

po::options_description replay_option_table() {
  po::options_description options("options");
  options.add(workload_options()).add(vtensor_options()).add(baseline_options()).add(output_options());
  return options;
}

namespace {

// --backend, or the two of --compare-backends; every one must be in this build.
void parse_backends(const po::variables_map& v, replay_options& o) {
  o.backends = {o.policy.backend};
  o.comparing = v.count("compare-backends") != 0;
  if (o.comparing) {
    const std::string text = get<std::string>(v, "compare-backends");
    const auto comma = text.find(',');
    if (comma == std::string::npos || comma == 0 || comma + 1 == text.size() ||
        text.find(',', comma + 1) != std::string::npos) {
      throw usage_error(fmt::format("--compare-backends: '{}' is not two backends A,B (e.g. sim,cuda)", text));
    }
    o.backends = {text.substr(0, comma), text.substr(comma + 1)};
    if (!v["backend"].defaulted()) throw usage_error("--compare-backends and --backend exclude each other");
  }
  const auto known = backend_names();
  for (const std::string& b : o.backends) {
    if (std::find(known.begin(), known.end(), b) != known.end()) continue;
    if (b == "cuda")
      throw std::runtime_error("the cuda backend is not in this build (no CUDA toolkit at configure time)");
    throw usage_error(fmt::format("unknown backend '{}' (this build has: {})", b, fmt::join(known, ", ")));
  }
}

// The KV memory: --memory, else what the GPU has left after the model's weights.
void parse_memory(const po::variables_map& v, replay_options& o) {
  if (v.count("memory") != 0) {
    o.policy.memory_bytes = parse_size_option("--memory", get<std::string>(v, "memory"), size_rule::budget);
  } else {
    const std::uint64_t weights = o.model.weight_bytes_per_gpu();
    if (weights >= o.gpu.memory_bytes) {
      throw usage_error(
          fmt::format("model {} (tp {}) needs {} of weights per GPU, more than the {} of a {}: raise --tp "
                      "or give --memory",
                      o.model.name, o.model.tp, gib_text(static_cast<double>(weights)),
                      gib_text(static_cast<double>(o.gpu.memory_bytes)), o.gpu.name));
    }
    o.policy.memory_bytes = o.gpu.memory_bytes - weights;
  }
  const bool unlimited = o.policy.memory_bytes == std::numeric_limits<std::uint64_t>::max();
  o.memory_json = unlimited ? nlohmann::ordered_json("unlimited") : nlohmann::ordered_json(o.policy.memory_bytes);
}

// Options that only some policies read: given for another policy, they are a usage error rather
// than silently ignored.
void check_policy_options(const po::variables_map& v, const std::string& policy) {
  struct rule {
    const char* option;
    std::vector<std::string_view> policies;
  };
  const std::vector<rule> rules = {
      {"block-tokens", {"paged"}},
      {"prefix-caching", {"paged", "radix"}},
      {"page-tokens", {"radix"}},
      {"reserve", {"static"}},
      {"arena", {"static"}},
      {"megacache", {"vattention"}},
      {"layout", {"vtensor"}},
      {"lookahead", {"vtensor", "vattention"}},
      {"lookahead-batch", {"vtensor"}},
      {"async-lookahead", {"vtensor", "vattention"}},
      {"create-ahead", {"vtensor"}},
      {"eviction", {"vtensor"}},
      {"partial", {"vtensor"}},
  };
  for (const rule& r : rules) {
    if (v.count(r.option) == 0 || v[r.option].defaulted()) continue;
    if (std::find(r.policies.begin(), r.policies.end(), policy) != r.policies.end()) continue;
    throw usage_error(
        fmt::format("--{} applies to policy {}, not {}", r.option, fmt::join(r.policies, " and "), policy));
  }
}

// The baseline policies' options.
void parse_baseline(const po::variables_map& v, replay_options& o) {
  sim::kv_policy_options& p = o.policy;
  p.block_tokens = get<std::uint32_t>(v, "block-tokens");
  if (p.block_tokens == 0) throw usage_error("--block-tokens must be at least 1");
  p.prefix_caching = v["prefix-caching"].as<bool>();
  p.page_tokens = get<std::uint32_t>(v, "page-tokens");
  if (p.page_tokens == 0) throw usage_error("--page-tokens must be at least 1");
  const auto reserve = sim::k_static_reserve_names.parse(get<std::string>(v, "reserve"));
  if (!reserve) {
    throw usage_error(fmt::format("--reserve: unknown value '{}' ({})", get<std::string>(v, "reserve"),
                                  sim::k_static_reserve_names.list()));
  }
  p.reserve = *reserve;
  const auto arena = sim::k_arena_fit_names.parse(get<std::string>(v, "arena"));
  if (!arena) {
    throw usage_error(fmt::format("--arena: unknown allocator '{}' ({})", get<std::string>(v, "arena"),
                                  sim::k_arena_fit_names.list()));
  }
  p.arena = *arena;
  p.megacache = v["megacache"].as<bool>();
  check_policy_options(v, o.policy_name);
}

// The vtensor policy's options (the backend and the memory are parsed apart).
void parse_policy(const po::variables_map& v, replay_options& o) {
  sim::kv_policy_options& p = o.policy;
  p.kv = o.model.kv;
  p.backend = get<std::string>(v, "backend");
  p.max_context_tokens = get<std::uint64_t>(v, "max-context");
  if (p.max_context_tokens == 0) throw usage_error("--max-context must be at least 1");
  const std::string layout_text = get<std::string>(v, "layout");
  const auto layout = kv_layout_from_string(layout_text);
  if (!layout)
    throw usage_error(fmt::format("--layout: unknown layout '{}' ({})", layout_text, k_kv_layout_names.list()));
  p.layout = *layout;
  p.lookahead_pages = v.count("lookahead") != 0 ? get<std::uint32_t>(v, "lookahead") : 1;
  p.lookahead_batch = get<std::uint32_t>(v, "lookahead-batch");
  if (p.lookahead_batch == 0 || p.lookahead_batch > std::max<std::uint32_t>(1, p.lookahead_pages)) {
    throw usage_error(fmt::format("--lookahead-batch must be between 1 and --lookahead ({})", p.lookahead_pages));
  }
  p.async_lookahead = v["async-lookahead"].as<bool>();
  p.create_ahead_chunks = get<std::uint32_t>(v, "create-ahead");
  p.device_index = get<int>(v, "device");
  if (p.device_index < 0) throw usage_error("--device must be 0 or more");
  p.eviction = get<std::string>(v, "eviction");
  const auto partial = partial_page_policy_from_string(get<std::string>(v, "partial"));
  if (!partial)
    throw usage_error(fmt::format("--partial: '{}' is neither cow nor recompute", get<std::string>(v, "partial")));
  p.partial = *partial;
  if (v.count("calibration") != 0) p.calibration_file = get<std::string>(v, "calibration");
  p.zero_latency = v["zero-latency"].as<bool>();
  parse_baseline(v, o);
}

// Step emulation and the warm-up share of the chunk-creation figures.
void parse_emulation(const po::variables_map& v, replay_options& o) {
  if (v.count("emulate-steps") != 0) o.emulate_steps = v["emulate-steps"].as<bool>();
  o.step_scale = get<double>(v, "step-time-scale");
  if (!(o.step_scale > 0) || !std::isfinite(o.step_scale)) throw usage_error("--step-time-scale must be positive");
  o.warmup_fraction = get<double>(v, "warmup-fraction");
  if (!(o.warmup_fraction >= 0 && o.warmup_fraction <= 1))
    throw usage_error("--warmup-fraction must be between 0 and 1");
}

// The replica: batching, context limit and step cost.
void parse_replica(const po::variables_map& v, replay_options& o) {
  sim::replay_config& c = o.config;
  c.model = o.model;
  c.gpu = o.gpu;
  c.time_scale = get<double>(v, "time-scale");
  if (!(c.time_scale > 0)) throw usage_error("--time-scale must be positive");
  c.max_requests = get<std::uint64_t>(v, "max-requests");
  c.replica.token_budget = get<std::uint32_t>(v, "token-budget");
  c.replica.max_running = get<std::uint32_t>(v, "max-running");
  if (c.replica.token_budget == 0) throw usage_error("--token-budget must be at least 1");
  if (c.replica.max_running == 0) throw usage_error("--max-running must be at least 1");
  c.replica.chunked_prefill = v["chunked-prefill"].as<bool>();
  c.replica.max_context_tokens = o.policy.max_context_tokens;
  const auto over = sim::over_context_policy_from_string(get<std::string>(v, "over-context"));
  if (!over)
    throw usage_error(
        fmt::format("--over-context: '{}' is neither reject nor truncate", get<std::string>(v, "over-context")));
  c.replica.over_context = *over;
  o.pipeline = v.count("pipeline") != 0 ? v["pipeline"].as<bool>() : o.policy_name == "vtensor";
  c.replica.pipeline = o.pipeline;
  o.overhead_ms = get<double>(v, "step-overhead-ms");
  if (!(o.overhead_ms >= 0)) throw usage_error("--step-overhead-ms must not be negative");
  c.replica.step_overhead_s = o.overhead_ms / 1e3;
  try {
    o.kernel_factors = sim::load_kernel_factors(get<std::string>(v, "kernel-factors"));
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  c.replica.kernel_factors = o.kernel_factors.of(o.policy_name);
  if (v.count("compute-calibration") != 0) {
    try {
      c.replica.compute = std::make_shared<const sim::compute_calibration>(
          sim::load_compute_calibration(get<std::string>(v, "compute-calibration")));
    } catch (const std::invalid_argument& e) {
      throw usage_error(fmt::format("--compute-calibration: {}", e.what()));
    }
    auto p = o.policy;
    p.backend = "sim";
    c.replica.kernel_factors = sim::calibrated_factors(
        c.replica.kernel_factors, sim::make_kv_policy(o.policy_name, p)->access(), *c.replica.compute);
  }
  o.sample_ms = get<double>(v, "sample-ms");
  if (!(o.sample_ms > 0)) throw usage_error("--sample-ms must be positive");
  c.replica.sample_interval_us = static_cast<sim::time_us>(o.sample_ms * 1e3);
#ifndef NDEBUG
  c.replica.check_sampled = true;  // Note [Sampled invariant checks of a replay] in sim/replica.cpp
#endif
}

// The trace, its format, the model and the GPU.
void parse_workload(const po::variables_map& v, replay_options& o) {
  o.trace_path = v.count("trace") != 0 ? get<std::string>(v, "trace") : bundled_trace_impl();
  const std::string format_text = get<std::string>(v, "format");
  if (format_text != "auto") {
    o.format = traces::parse_trace_format(format_text);
    if (!o.format)
      throw usage_error(
          fmt::format("--format: unknown format '{}' (auto, {})", format_text, traces::k_trace_format_names.list()));
  }
  const auto gpu = sim::gpu_by_name(get<std::string>(v, "gpu"));
  if (!gpu) {
    throw usage_error(fmt::format("--gpu: unknown GPU '{}' (known: {})", get<std::string>(v, "gpu"),
                                  fmt::join(sim::gpu_names(), ", ")));
  }
  o.gpu = *gpu;
  o.model = sim::model_compute_preset(get<std::string>(v, "model"), get<std::uint32_t>(v, "tp"));
  o.policy_name = get<std::string>(v, "policy");
  const auto policies = sim::kv_policy_names();
  if (std::find(policies.begin(), policies.end(), o.policy_name) == policies.end()) {
    throw usage_error(
        fmt::format("--policy: unknown policy '{}' (known: {})", o.policy_name, fmt::join(policies, ", ")));
  }
  o.seed = get<std::uint64_t>(v, "seed");
}

}  // namespace

replay_options parse_replay_options(const po::variables_map& v) {
  replay_options o;
  parse_workload(v, o);
  parse_policy(v, o);
  parse_emulation(v, o);
  parse_backends(v, o);
  parse_memory(v, o);
  parse_replica(v, o);
  o.with_wall = !v["no-wall"].as<bool>();
  o.config.replica.measure_wall = o.with_wall;  // the step wall clock is reported only with_wall
  if (v.count("json") != 0) o.json = get<std::string>(v, "json");
  if (v.count("timeseries") != 0) o.timeseries = get<std::string>(v, "timeseries");
  if (v.count("chrome-trace") != 0) o.chrome_trace = get<std::string>(v, "chrome-trace");
  if ((o.json == "-") + (o.timeseries == "-") + (o.chrome_trace == "-") > 1) {
    throw usage_error("--json, --timeseries and --chrome-trace: only one of them can be '-' (standard output)");
  }
  // Build everything that can fail on bad input before any output file is opened; a missing GPU
  // fails here, before any replay.
  for (const std::string& b : o.backends) {
    auto p = o.policy;
    p.backend = b;
    (void)sim::make_kv_policy(o.policy_name, p);
  }
  (void)traces::open_trace(o.trace_path, o.format);
  return o;
}

double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }
double us(std::uint64_t ns) { return static_cast<double>(ns) / 1e3; }

namespace {

nlohmann::ordered_json by_kind(const std::array<std::uint64_t, k_vmm_call_kinds>& a, double scale) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
    j[std::string(to_string(static_cast<vmm_call>(k)))] = static_cast<double>(a[k]) * scale;
  }
  return j;
}

}  // namespace

// Adds the vtensor policy's VMM split (modelled: deterministic; measured: only `with_wall`).
void add_vmm_split(nlohmann::ordered_json& j, const sim::vmm_split_report& r, const sim::replay_summary& s,
                   const sim::creation_after_warmup& c, double warmup_fraction, std::uint64_t emulated_ns,
                   bool with_wall) {
  nlohmann::ordered_json model;
  model["critical_us"] = us(r.critical_model_ns);
  model["step_thread_calls_us"] = us(r.step.total_model_ns());
  model["worker_jobs"] = r.jobs;
  model["worker_time_us"] = us(r.job_model_ns);
  model["waits"] = r.modelled_waits;
  model["wait_us"] = us(r.modelled_wait_ns);
  model["wait_share_of_step_time"] =
      s.counters.busy_us == 0 ? 0.0 : us(r.modelled_wait_ns) / static_cast<double>(s.counters.busy_us);
  model["critical_share_of_step_time"] =
      s.counters.busy_us == 0 ? 0.0 : us(r.critical_model_ns) / static_cast<double>(s.counters.busy_us);
  j["vmm_model"] = model;
  nlohmann::ordered_json creation;
  creation["warmup_fraction"] = warmup_fraction;
  creation["warmup_steps"] = c.warmup_steps;
  creation["steps"] = c.steps;
  creation["creates_total"] = c.creates_total;
  creation["creates_after_warmup"] = c.creates_after;
  creation["last_create_step"] = c.last_create_step;
  creation["create_calls_by_step_thread"] = r.step.calls[static_cast<std::size_t>(vmm_call::create)];
  j["chunk_creation"] = creation;
  if (!with_wall) return;
  nlohmann::ordered_json m;
  m["step_wall_ms"] = ms(s.counters.step_wall_ns);
  m["emulated_compute_ms"] = ms(emulated_ns);
  m["mapping_waits"] = r.mapping_waits;
  m["mapping_wait_ms"] = ms(r.mapping_wait_ns);
  m["wait_share_of_step_time"] = s.counters.step_wall_ns == 0 ? 0.0
                                                              : static_cast<double>(r.mapping_wait_ns) /
                                                                    static_cast<double>(s.counters.step_wall_ns);
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
  j["measured"] = m;
}

// The "config" object of a run's summary.
nlohmann::ordered_json run_config_json(const replay_options& o, const sim::kv_policy_options& p,
                                       const sim::kv_policy& policy, traces::trace_format format, bool emulated) {
  const sim::replay_config& config = o.config;
  nlohmann::ordered_json cfg;
  cfg["trace"] = o.trace_path;
  cfg["format"] = std::string(traces::to_string(format));
  cfg["policy"] = policy.name();
  cfg["policy_options"] = policy.describe();
  cfg["model"] = o.model.name;
  cfg["gpu"] = o.gpu.name;
  cfg["tp"] = o.model.tp;
  cfg["gpu_flop_rate"] = o.gpu.flop_rate;
  cfg["gpu_bandwidth"] = o.gpu.bandwidth;
  cfg["weight_bytes_per_gpu"] = o.model.weight_bytes_per_gpu();
  cfg["memory"] = o.memory_json;
  cfg["time_scale"] = config.time_scale;
  cfg["max_requests"] = config.max_requests;
  cfg["token_budget"] = config.replica.token_budget;
  cfg["max_running"] = config.replica.max_running;
  cfg["chunked_prefill"] = config.replica.chunked_prefill;
  cfg["max_context_tokens"] = config.replica.max_context_tokens;
  cfg["over_context"] = std::string(sim::to_string(config.replica.over_context));
  cfg["step_overhead_ms"] = o.overhead_ms;
  cfg["kernel_factors"] = {{"set", o.kernel_factors.name},
                           {"prefill", config.replica.kernel_factors.prefill},
                           {"decode", config.replica.kernel_factors.decode}};
  if (config.replica.compute) {
    const sim::compute_calibration& cc = *config.replica.compute;
    cfg["compute_calibration"] = {{"device", cc.device}, {"model", cc.model}, {"tp", cc.tp}, {"source", cc.source}};
  }
  cfg["sample_ms"] = o.sample_ms;
  cfg["pipeline"] = o.pipeline;
  const scheduler_config sched = sim::vtensor_options(p).manager.scheduler;
  cfg["vmm_critical_path"] =
      o.pipeline && o.policy_name == "vtensor"
          ? "step-thread calls but pipelined admissions + modelled waits (admissions mapped beside the previous "
            "step, lookahead and releases on the worker) + waits behind the worker's call in flight"
      : !sched.runs_worker() ? "all VMM calls (synchronous mapping)"
      : sched.create_ahead_chunks == 0
          ? "step-thread calls + modelled waits (lookahead mapped by the worker)"
          : "step-thread calls but chunk creation + modelled waits (lookahead mapped and chunks "
            "created ahead by the worker)";
  cfg["vmm_clock"] = "latency model (measured VMM time is reported, never fed to the clock)";
  cfg["emulate_steps"] = emulated;
  cfg["step_time_scale"] = o.step_scale;
  cfg["device"] = p.device_index;
  return cfg;
}

// The policy of a replay: the registry's, with the pipeline for vtensor (Note [Pipelined
// admission] in core/scheduler.cpp).
std::unique_ptr<sim::kv_policy> make_policy(const replay_options& o, const sim::kv_policy_options& p) {
  if (o.policy_name != "vtensor") return sim::make_kv_policy(o.policy_name, p);
  sim::vtensor_policy_options v = sim::vtensor_options(p);
  v.manager.scheduler.pipeline = o.pipeline;
  // The step that computes a prompt's first chunk needs only that chunk's pages (and the cached prefix's).
  v.manager.scheduler.pipeline_chunk_tokens = o.config.replica.chunked_prefill ? o.config.replica.token_budget : 0;
  return std::make_unique<sim::vtensor_policy>(std::move(v));
}

nlohmann::ordered_json replay_run_json(const replay_options& o, const sim::kv_policy_options& p,
                                       const sim::kv_policy& policy, const sim::replay_summary& summary,
                                       traces::trace_format format, const sim::step_log& log,
                                       std::optional<std::uint64_t> emulated_ns, bool with_wall) {
  const nlohmann::ordered_json cfg = run_config_json(o, p, policy, format, emulated_ns.has_value());
  nlohmann::ordered_json json = sim::summary_json(summary, cfg, o.seed, with_wall);
  const auto vmm = policy.vmm_report();
  if (!vmm) return json;
  add_vmm_split(json, *vmm, summary, log.creation(o.warmup_fraction), o.warmup_fraction, emulated_ns.value_or(0),
                with_wall);
  if (const auto* v = dynamic_cast<const sim::vtensor_policy*>(&policy)) {
    const auto f = v->pipeline_figures();
    auto& m = json["vmm_model"];
    m["pipelined_admission_calls_us"] = us(f.hidden_ns);
    m["admission_waits"] = f.admission_waits;
    m["admission_wait_us"] = us(f.admission_wait_ns);
    m["release_unmaps_on_worker_us"] = us(f.release_ns);
    m["contended_bookings"] = f.contended_calls;
    m["contention_us"] = us(f.contention_ns);
    m["prompt_rest_waits"] = f.rest_waits;
    m["prompt_rest_wait_us"] = us(f.rest_wait_ns);
  }
  return json;
}

}  // namespace vtensor::tools
