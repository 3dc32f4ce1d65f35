// The options of `vtensor replay`, parsed and checked, shared with `vtensor compare`
// (tools/replay_options.hpp).

#include "tools/replay_options.hpp"

#include "backends/registry.hpp"
#include "sim/compute_calibration.hpp"
#include "sim/policy_registry.hpp"
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
      "policy", po::value<std::string>()->default_value(sim::kv_policy_names().front()),
      fmt::format("KV policy: {} (docs/policies.md)", fmt::join(sim::kv_policy_names(), ", ")).c_str())(
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

// The VMM backend every policy holds its memory through, and the figures of its VMM time.
po::options_description backend_options() {
  po::options_description o("VMM backend");
  o.add_options()("backend", po::value<std::string>()->default_value("sim"),
                  "VMM backend every policy holds its KV memory through: sim, or cuda (a real GPU)")(
      "device", po::value<int>()->default_value(0), "cuda backend: GPU index")(
      "compare-backends", po::value<std::string>(),
      "A,B (e.g. sim,cuda): replay twice, check that both runs agree step by step, compare VMM time")(
      "emulate-steps", po::value<bool>(),
      "spend each step's modelled compute in wall time so the worker overlaps it (default: on for cuda)")(
      "step-time-scale", po::value<double>()->default_value(1.0), "emulated step time = modelled compute x SCALE")(
      "warmup-fraction", po::value<double>()->default_value(0.1),
      "first fraction of steps counted as warm-up for chunk creation")(
      "calibration", po::value<std::string>(), "VMM latency calibration file for the sim backend")(
      "zero-latency", po::bool_switch(), "the sim backend charges nothing for VMM calls");
  return o;
}

namespace {

// Option `o` of the policies' tables: a text, parsed by the table (sim::choose_policy).
void add_policy_option(po::options_description& into, const sim::policy_option& o) {
  into.add_options()(o.name.c_str(), po::value<std::string>()->default_value(o.default_text), o.help.c_str());
}

}  // namespace

void add_policy_groups(po::options_description& into) {
  for (const std::string& policy : sim::kv_policy_names()) {
    po::options_description group(policy + " policy");
    for (const sim::policy_option& o : sim::kv_policy_option_table()) {
      if (o.policies.front() == policy) add_policy_option(group, o);
    }
    if (!group.options().empty()) into.add(group);
  }
}

po::options_description policy_option_table(const std::string& caption) {
  po::options_description group(caption);
  for (const sim::policy_option& o : sim::kv_policy_option_table()) add_policy_option(group, o);
  return group;
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

po::options_description cluster_options() {
  po::options_description o("cluster (sim/router.hpp, Note [Routers])");
  o.add_options()("replicas", po::value<std::uint32_t>()->default_value(1),
                  "identical replicas, each its own policy, memory and GPU (--memory is per replica)")(
      "router", po::value<std::string>()->default_value("round-robin"),
      ("where each arrival goes with more than one replica:\n" + sim::router_help()).c_str())(
      "router-cache-threshold", po::value<double>()->default_value(0.3),
      "prefix-approx: share of the prompt a tree match must exceed")(
      "router-balance-abs", po::value<std::uint32_t>()->default_value(64),
      "prefix-approx: imbalance, in requests, that routes to the least loaded (with --router-balance-rel)")(
      "router-balance-rel", po::value<double>()->default_value(1.5),
      "prefix-approx: and as a ratio most / least loaded")(
      "router-tree-tokens", po::value<std::string>()->default_value("auto"),
      "prefix-approx: tokens each replica's tree keeps (auto: one replica's KV memory in tokens; 0: unlimited)")(
      "router-decode-weight", po::value<double>()->default_value(1.0),
      "prefix-precise: weight of the running requests' context tokens in the cost")(
      "router-temperature", po::value<double>()->default_value(0.0),
      "prefix-precise: 0 picks the cheapest replica; above 0 draws one (softmax over cost, seeded by --seed)");
  return o;
}

po::options_description replay_option_table() {
  po::options_description options("options");
  options.add(workload_options()).add(cluster_options()).add(backend_options());
  add_policy_groups(options);
  options.add(output_options());
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
void parse_memory(const replay_axes& axes, replay_options& o) {
  if (axes.memory) {
    o.policy.memory_bytes = parse_size_option("--memory", *axes.memory, size_rule::budget);
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
}

// The settings every policy shares (the backend and the memory are parsed apart; the policy's
// own options are its table's). A bad calibration file fails here, before any output.
void parse_shared(const po::variables_map& v, replay_options& o) {
  sim::kv_policy_options& p = o.policy;
  p.kv = o.model.kv;
  p.backend = get<std::string>(v, "backend");
  p.max_context_tokens = get<std::uint64_t>(v, "max-context");
  if (p.max_context_tokens == 0) throw usage_error("--max-context must be at least 1");
  p.device_index = get<int>(v, "device");
  if (p.device_index < 0) throw usage_error("--device must be 0 or more");
  if (v.count("calibration") != 0) p.calibration_file = get<std::string>(v, "calibration");
  p.zero_latency = v["zero-latency"].as<bool>();
  (void)latency_model_for(sim::device_config(p));
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
void parse_replica(const po::variables_map& v, const replay_axes& axes, replay_options& o) {
  sim::replay_config& c = o.config;
  c.model = o.model;
  c.gpu = o.gpu;
  c.time_scale = axes.time_scale;
  if (!(c.time_scale > 0) || !std::isfinite(c.time_scale)) throw usage_error("--time-scale must be positive");
  c.max_requests = get<std::uint64_t>(v, "max-requests");
  c.replica.token_budget = get<std::uint32_t>(v, "token-budget");
  c.replica.max_running = get<std::uint32_t>(v, "max-running");
  if (c.replica.token_budget == 0) throw usage_error("--token-budget must be at least 1");
  if (c.replica.max_running == 0) throw usage_error("--max-running must be at least 1");
  c.replica.chunked_prefill = v["chunked-prefill"].as<bool>();
  c.replica.max_context_tokens = o.policy.max_context_tokens;
  o.policy.prefill_chunk_tokens = c.replica.chunked_prefill ? c.replica.token_budget : 0;
  const auto over = sim::over_context_policy_from_string(get<std::string>(v, "over-context"));
  if (!over)
    throw usage_error(
        fmt::format("--over-context: '{}' is neither reject nor truncate", get<std::string>(v, "over-context")));
  c.replica.over_context = *over;
  o.overhead_ms = get<double>(v, "step-overhead-ms");
  if (!(o.overhead_ms >= 0) || !std::isfinite(o.overhead_ms))
    throw usage_error("--step-overhead-ms must be a number of 0 or more");
  c.replica.step_overhead_s = o.overhead_ms / 1e3;
  try {
    o.kernel_factors = sim::load_kernel_factors(axes.kernel_factors);
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  c.replica.kernel_factors = o.kernel_factors.of(o.choice.name());
  if (v.count("compute-calibration") != 0) {
    try {
      c.replica.compute = std::make_shared<const sim::compute_calibration>(
          sim::load_compute_calibration(get<std::string>(v, "compute-calibration")));
    } catch (const std::invalid_argument& e) {
      throw usage_error(fmt::format("--compute-calibration: {}", e.what()));
    }
    c.replica.kernel_factors =
        sim::calibrated_factors(c.replica.kernel_factors, sim::policy_access(o.choice, o.policy), *c.replica.compute);
  }
  o.sample_ms = get<double>(v, "sample-ms");
  if (!(o.sample_ms > 0) || !std::isfinite(o.sample_ms)) throw usage_error("--sample-ms must be positive");
  c.replica.sample_interval_us = static_cast<sim::time_us>(o.sample_ms * 1e3);
#ifndef NDEBUG
  c.replica.check_sampled = true;  // Note [Sampled invariant checks of a replay] in sim/replica.cpp
#endif
}

// The trace, its format, the model and the GPU.
void parse_workload(const po::variables_map& v, const replay_axes& axes, replay_options& o) {
  o.trace_path = axes.trace ? *axes.trace : bundled_trace_impl();
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
  o.seed = get<std::uint64_t>(v, "seed");
}

}  // namespace

void parse_cluster_options(const po::variables_map& v, replay_options& o) {
  if (v.count("replicas") == 0) return;
  o.replicas = get<std::uint32_t>(v, "replicas");
  if (o.replicas == 0) throw usage_error("--replicas must be at least 1");
  o.router = get<std::string>(v, "router");
  const auto known = sim::router_names();
  if (std::find(known.begin(), known.end(), o.router) == known.end()) {
    throw usage_error(fmt::format("--router: unknown router '{}' (known: {})", o.router, fmt::join(known, ", ")));
  }
  sim::router_options& r = o.router_options;
  r.cache_threshold = get<double>(v, "router-cache-threshold");
  r.balance_abs = get<std::uint32_t>(v, "router-balance-abs");
  r.balance_rel = get<double>(v, "router-balance-rel");
  r.decode_weight = get<double>(v, "router-decode-weight");
  r.temperature = get<double>(v, "router-temperature");
  r.seed = o.seed;
  const std::string tree = get<std::string>(v, "router-tree-tokens");
  if (tree == "auto") {
    const std::uint64_t token_bytes = o.policy.kv.kv_bytes_per_token();
    r.tree_tokens = o.policy.memory_bytes == std::numeric_limits<std::uint64_t>::max() || token_bytes == 0
                        ? 0
                        : o.policy.memory_bytes / token_bytes;
  } else {
    try {
      std::size_t used = 0;
      r.tree_tokens = std::stoull(tree, &used);
      if (used != tree.size() || tree.front() == '-') throw std::invalid_argument(tree);
    } catch (const std::logic_error&) {
      throw usage_error(fmt::format("--router-tree-tokens: '{}' is not a token count or auto", tree));
    }
  }
  try {
    (void)sim::make_router(o.router, r);  // a bad router option fails here, before any output
  } catch (const std::invalid_argument& e) {
    throw usage_error(fmt::format("--router {}: {}", o.router, e.what()));
  }
}

sim::policy_choice parse_policy_choice(const std::string& policy, const po::variables_map& v) {
  const auto policies = sim::kv_policy_names();
  if (std::find(policies.begin(), policies.end(), policy) == policies.end()) {
    throw usage_error(fmt::format("--policy: unknown policy '{}' (known: {})", policy, fmt::join(policies, ", ")));
  }
  sim::option_texts given;
  for (const sim::policy_option& option : sim::kv_policy_option_table()) {
    if (v.count(option.name) != 0 && !v[option.name].defaulted()) given[option.name] = v[option.name].as<std::string>();
  }
  return sim::choose_policy(policy, given);
}

replay_axes replay_axes_of(const po::variables_map& v) {
  replay_axes a;
  if (v.count("memory") != 0) a.memory = get<std::string>(v, "memory");
  a.time_scale = get<double>(v, "time-scale");
  a.kernel_factors = get<std::string>(v, "kernel-factors");
  if (v.count("trace") != 0) a.trace = get<std::string>(v, "trace");
  return a;
}

// Note [The main job's operating point]
// The bundled excerpt is a fleet's load: at its own rate it offers 1.87x what one H200 serves,
// and a replay of it there is mostly queueing (TTFT p50 273 s). `vtensor replay` without a trace
// and without --time-scale replays it at a third of its rate (--time-scale 3), a load one replica
// serves within ttft_p90<=10s,tpot_p90<=100ms under every policy but static: by the capacity
// search committed in results/capacity/excerpt.txt (tools/capacity-results.sh) one H200 serves
// x0.390 of the excerpt's rate under vtensor, x0.361 under paged and radix, x0.365 under
// vattention, x0.261 under static. The summary's first line says so; --time-scale 1 (or
// --replicas) asks for the fleet's rate.
replay_options parse_replay_options(const po::variables_map& v) {
  replay_axes axes = replay_axes_of(v);
  const bool main_job = !axes.trace && v["time-scale"].defaulted();
  if (main_job) axes.time_scale = k_main_job_time_scale;
  replay_options o = parse_replay_options(v, parse_policy_choice(get<std::string>(v, "policy"), v), axes);
  if (main_job) {
    o.operating_point = fmt::format(
        "operating point: the bundled excerpt at 1/{:g} of its arrival rate (--time-scale {:g}), a load one H200 "
        "serves within ttft_p90<=10s,tpot_p90<=100ms (capacity x0.390 under vtensor, x0.361 under paged: "
        "results/capacity/excerpt.txt); --time-scale 1 replays the fleet's rate",
        k_main_job_time_scale, k_main_job_time_scale);
  }
  return o;
}

replay_options parse_replay_options(const po::variables_map& v, sim::policy_choice policy, const replay_axes& axes) {
  replay_options o;
  o.choice = std::move(policy);
  parse_workload(v, axes, o);
  parse_shared(v, o);
  parse_emulation(v, o);
  parse_backends(v, o);
  parse_memory(axes, o);
  parse_replica(v, axes, o);
  parse_cluster_options(v, o);
  o.with_wall = !v["no-wall"].as<bool>();
  o.config.replica.measure_wall = o.with_wall;  // the step wall clock is reported only with_wall
  if (v.count("json") != 0) o.json = get<std::string>(v, "json");
  if (v.count("timeseries") != 0) o.timeseries = get<std::string>(v, "timeseries");
  if (v.count("chrome-trace") != 0) o.chrome_trace = get<std::string>(v, "chrome-trace");
  if (o.replicas > 1 && (o.timeseries || o.chrome_trace)) {
    throw usage_error("--timeseries and --chrome-trace follow one replica: not with --replicas above 1");
  }
  if ((o.json == "-") + (o.timeseries == "-") + (o.chrome_trace == "-") > 1) {
    throw usage_error("--json, --timeseries and --chrome-trace: only one of them can be '-' (standard output)");
  }
  (void)traces::open_trace(o.trace_path, o.format);  // a trace that cannot be read fails before any output
  return o;
}

}  // namespace vtensor::tools
