#include "tools/cli.hpp"

#include "core/eviction_policy.hpp"
#include "sim/outputs.hpp"
#include "sim/policy_registry.hpp"
#include "sim/replay.hpp"
#include "sim/step_emulator.hpp"
#include "sim/step_log.hpp"
#include "sim/vtensor_policy.hpp"
#include "backends/registry.hpp"
#include "core/manager.hpp"

#if VTENSOR_HAVE_CUDA
#include "backends/cuda_backend.hpp"
#include "tools/map_overhead.hpp"
#endif
#include "traces/atomic_output_file.hpp"
#include "traces/trace_reader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <iostream>
#include <limits>
#include <memory>
#include <ostream>
#include <vector>

namespace vtensor::tools {
namespace po = boost::program_options;
namespace fs = std::filesystem;
namespace {

constexpr std::string_view name = "replay";
constexpr std::string_view k_bundled = "mooncake_conversation_excerpt.jsonl";

// The bundled excerpt: traces/data/ of the source tree, found from the executable
// (build/bin/../../traces/data) or from the working directory.
std::string bundled_trace() {
  std::vector<fs::path> tried;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) tried.push_back(exe.parent_path() / ".." / ".." / "traces" / "data" / k_bundled);
  tried.push_back(fs::current_path(ec) / "traces" / "data" / k_bundled);
  for (const fs::path& p : tried) {
    if (fs::exists(p, ec)) return p.lexically_normal().string();
  }
  std::vector<std::string> names;
  for (const fs::path& p : tried) names.push_back(p.lexically_normal().string());
  throw usage_error(fmt::format("no --trace given and the bundled trace {} is missing (looked in: {})", k_bundled,
                                fmt::join(names, ", ")));
}

template <typename T>
T get(const po::variables_map& v, const char* key) {
  return v[key].as<T>();
}

std::string bytes_text(double bytes) {
  return fmt::format("{:.2f} GiB", bytes / 1073741824.0);
}

void print_summary(std::ostream& out, const nlohmann::ordered_json& j) {
  const auto& c = j["config"];
  const auto lat = [](const nlohmann::ordered_json& l) {
    return fmt::format("p50 {:.1f}, p90 {:.1f}, p99 {:.1f} ms", l["p50"].get<double>(), l["p90"].get<double>(),
                       l["p99"].get<double>());
  };
  out << fmt::format("trace: {} ({}), time scale {}\n", c["trace"].get<std::string>(),
                     c["format"].get<std::string>(), c["time_scale"].get<double>());
  out << fmt::format("replica: {} on {} x{} ({}), policy {} over backend {}, {} layout, memory {}\n",
                     c["model"].get<std::string>(), c["gpu"].get<std::string>(), c["tp"].get<std::uint32_t>(),
                     c["chunked_prefill"].get<bool>() ? "chunked prefill" : "whole prefills",
                     c["policy"].get<std::string>(), c["policy_options"]["backend"].get<std::string>(),
                     c["policy_options"]["layout"].get<std::string>(),
                     c["memory"].is_string() ? c["memory"].get<std::string>()
                                             : bytes_text(c["memory"].get<double>()));
  out << fmt::format("requests: {} ({} completed, {} rejected: {} over context, {} over memory; {} truncated), "
                     "{} preemptions\n",
                     j["requests"].get<std::uint64_t>(), j["completed"].get<std::uint64_t>(),
                     j["rejected"].get<std::uint64_t>(), j["rejected_context"].get<std::uint64_t>(),
                     j["rejected_memory"].get<std::uint64_t>(), j["truncated"].get<std::uint64_t>(),
                     j["preemptions"].get<std::uint64_t>());
  out << fmt::format("tokens: {} prompt, {} output, {} prefilled ({} recomputed)\n",
                     j["prompt_tokens"].get<std::uint64_t>(), j["output_tokens"].get<std::uint64_t>(),
                     j["prefill_tokens"].get<std::uint64_t>(), j["recomputed_tokens"].get<std::uint64_t>());
  out << fmt::format("prefix hit rate: {:.4f}\n", j["prefix_hit_rate"].get<double>());
  out << fmt::format("memory: peak physical {}, peak mapped {}, peak used {}, peak cached {}; mean physical {}, "
                     "mean mapped {}\n",
                     bytes_text(j["peak_physical_bytes"].get<double>()), bytes_text(j["peak_mapped_bytes"].get<double>()),
                     bytes_text(j["peak_used_bytes"].get<double>()), bytes_text(j["peak_cached_bytes"].get<double>()),
                     bytes_text(j["mean_physical_bytes"].get<double>()), bytes_text(j["mean_mapped_bytes"].get<double>()));
  out << fmt::format("internal fragmentation: mean {:.4f}, peak {:.4f}; sharing saving: mean {:.4f}; "
                     "copy-on-write {}; evictions {}\n",
                     j["mean_internal_fragmentation"].get<double>(), j["peak_internal_fragmentation"].get<double>(),
                     j["mean_sharing_saving"].get<double>(), bytes_text(j["cow_bytes"].get<double>()),
                     j["evictions"].get<std::uint64_t>());
  std::string calls;
  for (const auto& [kind, n] : j["vmm_calls"].items()) calls += fmt::format("{}{} {}", calls.empty() ? "" : ", ", kind, n.get<std::uint64_t>());
  out << fmt::format("vmm: {:.1f} ms charged, {:.1f} ms on the critical path; calls: {}\n",
                     j["vmm_time_us"].get<double>() / 1000.0, j["vmm_critical_time_us"].get<double>() / 1000.0, calls);
  out << fmt::format("ttft: {}\ntpot: {}\ne2e:  {}\n", lat(j["ttft_ms"]), lat(j["tpot_ms"]), lat(j["e2e_ms"]));
  out << fmt::format("throughput: {:.0f} output tokens/s, {:.0f} prefill tokens/s; {} steps, busy {:.1f}%, "
                     "mean running {:.1f}, mean waiting {:.1f}\n",
                     j["throughput_tokens_per_s"].get<double>(), j["prefill_tokens_per_s"].get<double>(),
                     j["steps"].get<std::uint64_t>(), 100 * j["busy_fraction"].get<double>(),
                     j["mean_running"].get<double>(), j["mean_waiting"].get<double>());
  out << fmt::format("simulated {:.1f} s in {:.2f} s wall\n", j["simulated_seconds"].get<double>(),
                     j.contains("wall_seconds") ? j["wall_seconds"].get<double>() : 0.0);
}


// What one replay produced, beyond its summary.
struct replay_run {
  std::string backend;
  nlohmann::ordered_json json;
  std::vector<sim::step_entry> log;
  std::optional<sim::vtensor_vmm_report> vmm;
};

double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }
double us(std::uint64_t ns) { return static_cast<double>(ns) / 1e3; }

nlohmann::ordered_json by_kind(const std::array<std::uint64_t, k_vmm_call_kinds>& a, double scale) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
    j[std::string(to_string(static_cast<vmm_call>(k)))] = static_cast<double>(a[k]) * scale;
  }
  return j;
}

// Adds the vtensor policy's VMM split (modelled: deterministic; measured: only `with_wall`).
void add_vmm_split(nlohmann::ordered_json& j, const sim::vtensor_vmm_report& r, const sim::replay_summary& s,
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
  m["wait_share_of_step_time"] =
      s.counters.step_wall_ns == 0 ? 0.0 : static_cast<double>(r.mapping_wait_ns) / static_cast<double>(s.counters.step_wall_ns);
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

void print_vmm_split(std::ostream& out, const nlohmann::ordered_json& j) {
  if (!j.contains("vmm_model")) return;
  const auto& m = j["vmm_model"];
  out << fmt::format("vmm model: {:.1f} ms on the steps ({:.1f} ms of step-thread calls, {} waits for the worker "
                     "= {:.2f} ms, {:.3f}% of step time); worker: {} jobs, {:.1f} ms off the steps\n",
                     m["critical_us"].get<double>() / 1e3, m["step_thread_calls_us"].get<double>() / 1e3,
                     m["waits"].get<std::uint64_t>(), m["wait_us"].get<double>() / 1e3,
                     100 * m["wait_share_of_step_time"].get<double>(), m["worker_jobs"].get<std::uint64_t>(),
                     m["worker_time_us"].get<double>() / 1e3);
  const auto& c = j["chunk_creation"];
  out << fmt::format("chunk creation: {} chunks created, {} after warm-up (first {} of {} steps), last at step {}; "
                     "{} cuMemCreate calls by the step thread (failed ones at the memory cap included)\n",
                     c["creates_total"].get<std::uint64_t>(), c["creates_after_warmup"].get<std::uint64_t>(),
                     c["warmup_steps"].get<std::uint64_t>(), c["steps"].get<std::uint64_t>(),
                     c["last_create_step"].get<std::uint64_t>(), c["create_calls_by_step_thread"].get<std::uint64_t>());
  if (!j.contains("measured")) return;
  const auto& w = j["measured"];
  out << fmt::format("measured: steps took {:.1f} ms wall ({:.1f} ms emulated compute); {} mapping waits = {:.3f} ms, "
                     "{:.4f}% of step time; VMM charged (wall on cuda) {:.1f} ms on the step thread, {:.1f} ms on the worker; {} chunks "
                     "created ({} ahead by the worker)\n",
                     w["step_wall_ms"].get<double>(), w["emulated_compute_ms"].get<double>(),
                     w["mapping_waits"].get<std::uint64_t>(), w["mapping_wait_ms"].get<double>(),
                     100 * w["wait_share_of_step_time"].get<double>(), w["step_thread_vmm_ms"].get<double>(),
                     w["worker_vmm_ms"].get<double>(), w["chunks_created"].get<std::uint64_t>(),
                     w["chunks_created_ahead"].get<std::uint64_t>());
}


} // namespace

int cmd_replay(std::span<const std::string> args, const cli_streams& io) {
  return guarded_run(name, io, [&] {
    po::options_description options("options");
    options.add_options()
        ("trace", po::value<std::string>(), "trace file (default: the bundled Mooncake conversation excerpt)")
        ("format", po::value<std::string>()->default_value("auto"), "trace format: auto, mooncake, azure, vtensor")
        ("policy", po::value<std::string>()->default_value("vtensor"), "KV policy")
        ("backend", po::value<std::string>()->default_value("sim"), "VMM backend of the vtensor policy: sim, or cuda (a real GPU)")
        ("device", po::value<int>()->default_value(0), "cuda backend: GPU index")
        ("compare-backends", po::value<std::string>(),
         "A,B (e.g. sim,cuda): replay twice, check that both runs agree step by step, compare VMM time")
        ("model", po::value<std::string>()->default_value("llama-3-8b"), "model: llama-3-8b, yi-6b, yi-34b, llama-3-70b")
        ("gpu", po::value<std::string>()->default_value("h200"), "GPU: h200, a100-80gb")
        ("tp", po::value<std::uint32_t>()->default_value(1), "tensor-parallel degree (divides the KV heads)")
        ("memory", po::value<std::string>(),
         "KV memory per GPU: 80GiB, 500MiB, 1e9, or unlimited (default: GPU memory minus the weights)")
        ("layout", po::value<std::string>()->default_value("kv-fused"), "vtensor layout: kv-split, kv-fused, token-major")
        ("lookahead", po::value<std::uint32_t>()->default_value(0), "vtensor pages mapped ahead of need")
        ("lookahead-batch", po::value<std::uint32_t>()->default_value(1),
         "lookahead pages mapped at a time, 1 to --lookahead (runs per tensor: cheaper for the driver)")
        ("async-lookahead", po::value<bool>()->default_value(true),
         "map lookahead pages on the background worker (true/false; only with --lookahead > 0)")
        ("create-ahead", po::value<std::uint32_t>()->default_value(0), "the worker keeps N chunks created in the free pool")
        ("emulate-steps", po::value<bool>(),
         "spend each step's modelled compute in wall time so the worker overlaps it (default: on for cuda)")
        ("step-time-scale", po::value<double>()->default_value(1.0), "emulated step time = modelled compute x SCALE")
        ("warmup-fraction", po::value<double>()->default_value(0.1),
         "first fraction of steps counted as warm-up for chunk creation")
        ("map-overhead", po::value<std::uint64_t>()->default_value(0),
         "cuda: first compare chunks mapped through the manager with raw cuMemMap + cuMemSetAccess, in blocks "
         "of N chunks (256 to 65536; Note [Mapping overhead of the manager])")
        ("map-overhead-patterns", po::bool_switch(),
         "with --map-overhead: also time bare map + set-access by address pattern (strides, runs, neighbours)")
        ("eviction", po::value<std::string>()->default_value("lru"), "prefix-cache eviction: lru, fifo, lfu")
        ("partial", po::value<std::string>()->default_value("cow"), "partial prefix page: cow or recompute")
        ("seed", po::value<std::uint64_t>()->default_value(0), "seed (recorded; the replay itself is deterministic)")
        ("time-scale", po::value<double>()->default_value(1.0), "stretch arrivals: arrival x SCALE")
        ("max-requests", po::value<std::uint64_t>()->default_value(0), "replay at most N requests (0: all)")
        ("token-budget", po::value<std::uint32_t>()->default_value(8192), "tokens computed per step at most")
        ("max-running", po::value<std::uint32_t>()->default_value(256), "running requests at most")
        ("chunked-prefill", po::value<bool>()->default_value(true), "split prefills across steps (true/false)")
        ("max-context", po::value<std::uint64_t>()->default_value(131072), "prompt + output tokens at most")
        ("over-context", po::value<std::string>()->default_value("reject"), "longer requests: reject or truncate")
        ("step-overhead-ms", po::value<double>()->default_value(sim::k_default_step_overhead_s * 1e3),
         "fixed cost per step, ms")
        ("sample-ms", po::value<double>()->default_value(1000.0), "time-series sample interval, simulated ms")
        ("calibration", po::value<std::string>(), "VMM latency calibration file for the sim backend")
        ("zero-latency", po::bool_switch(), "the sim backend charges nothing for VMM calls")
        ("json", po::value<std::string>(), "write the summary as JSON to FILE")
        ("no-wall", po::bool_switch(), "leave wall_seconds out of the JSON (byte-comparable runs)")
        ("timeseries", po::value<std::string>(), "write the sampled state as CSV to FILE")
        ("chrome-trace", po::value<std::string>(), "write Chrome / Perfetto trace events to FILE");
    po::positional_options_description positional;
    positional.add("trace", 1);
    const auto values = parse_command_line(
        name, "[TRACE] [options]",
        "Replays a trace through a simulated serving replica (continuous batching, roofline step\n"
        "cost, preemption by recompute) over a KV policy, and reports memory, fragmentation, prefix\n"
        "reuse, VMM cost and latency. Outputs are written whole or not at all.\n"
        "With --backend cuda the vtensor policy makes real VMM calls on a GPU (--memory caps it) and\n"
        "each step's compute is emulated in wall time; the simulated clock still runs on the latency\n"
        "model, so decisions match a sim replay (--compare-backends sim,cuda checks it step by step).\n"
        "--lookahead N maps N pages ahead on the background worker unless --async-lookahead false.",
        options, positional, args, io);
    if (!values) return exit_success;
    const po::variables_map& v = *values;

    const std::string trace_path = v.count("trace") != 0 ? get<std::string>(v, "trace") : bundled_trace();
    const std::string format_text = get<std::string>(v, "format");
    std::optional<traces::trace_format> format;
    if (format_text != "auto") {
      format = traces::parse_trace_format(format_text);
      if (!format) throw usage_error(fmt::format("--format: unknown format '{}' (auto, mooncake, azure, vtensor)", format_text));
    }
    const auto gpu = sim::gpu_by_name(get<std::string>(v, "gpu"));
    if (!gpu) {
      throw usage_error(fmt::format("--gpu: unknown GPU '{}' (known: {})", get<std::string>(v, "gpu"),
                                    fmt::join(sim::gpu_names(), ", ")));
    }
    const sim::model_compute model = sim::model_compute_preset(get<std::string>(v, "model"), get<std::uint32_t>(v, "tp"));

    sim::kv_policy_options po_opts;
    po_opts.kv = model.kv;
    po_opts.backend = get<std::string>(v, "backend");
    po_opts.max_context_tokens = get<std::uint64_t>(v, "max-context");
    if (po_opts.max_context_tokens == 0) throw usage_error("--max-context must be at least 1");
    const std::string layout_text = get<std::string>(v, "layout");
    const auto layout = kv_layout_from_string(layout_text);
    if (!layout) throw usage_error(fmt::format("--layout: unknown layout '{}' (kv-split, kv-fused, token-major)", layout_text));
    po_opts.layout = *layout;
    po_opts.lookahead_pages = get<std::uint32_t>(v, "lookahead");
    po_opts.lookahead_batch = get<std::uint32_t>(v, "lookahead-batch");
    if (po_opts.lookahead_batch == 0 || po_opts.lookahead_batch > std::max<std::uint32_t>(1, po_opts.lookahead_pages)) {
      throw usage_error(fmt::format("--lookahead-batch must be between 1 and --lookahead ({})", po_opts.lookahead_pages));
    }
    po_opts.async_lookahead = v["async-lookahead"].as<bool>();
    po_opts.create_ahead_chunks = get<std::uint32_t>(v, "create-ahead");
    po_opts.device_index = get<int>(v, "device");
    if (po_opts.device_index < 0) throw usage_error("--device must be 0 or more");
    const double step_scale = get<double>(v, "step-time-scale");
    if (!(step_scale > 0) || !std::isfinite(step_scale)) throw usage_error("--step-time-scale must be positive");
    const double warmup_fraction = get<double>(v, "warmup-fraction");
    if (!(warmup_fraction >= 0 && warmup_fraction <= 1)) throw usage_error("--warmup-fraction must be between 0 and 1");
    const std::uint64_t map_overhead_chunks = get<std::uint64_t>(v, "map-overhead");
    if (map_overhead_chunks != 0 && (map_overhead_chunks < 256 || map_overhead_chunks > 65536)) {
      throw usage_error("--map-overhead must be 0 or between 256 and 65536 chunks");
    }
    if (map_overhead_chunks == 0 && v["map-overhead-patterns"].as<bool>()) {
      throw usage_error("--map-overhead-patterns needs --map-overhead");
    }
    std::vector<std::string> backends{po_opts.backend};
    const bool comparing = v.count("compare-backends") != 0;
    if (comparing) {
      const std::string text = get<std::string>(v, "compare-backends");
      const auto comma = text.find(',');
      if (comma == std::string::npos || comma == 0 || comma + 1 == text.size() ||
          text.find(',', comma + 1) != std::string::npos) {
        throw usage_error(fmt::format("--compare-backends: '{}' is not two backends A,B (e.g. sim,cuda)", text));
      }
      backends = {text.substr(0, comma), text.substr(comma + 1)};
      if (!v["backend"].defaulted()) throw usage_error("--compare-backends and --backend exclude each other");
    }
    for (const std::string& b : backends) {
      const auto known = backend_names();
      if (std::find(known.begin(), known.end(), b) == known.end()) {
        if (b == "cuda") {
          throw std::runtime_error("the cuda backend is not in this build (no CUDA toolkit at configure time)");
        }
        throw usage_error(fmt::format("unknown backend '{}' (this build has: {})", b, fmt::join(known, ", ")));
      }
    }
    const auto emulate_for = [&](const std::string& b) {
      return v.count("emulate-steps") != 0 ? v["emulate-steps"].as<bool>() : b == "cuda";
    };
    po_opts.eviction = get<std::string>(v, "eviction");
    const auto partial = partial_page_policy_from_string(get<std::string>(v, "partial"));
    if (!partial) throw usage_error(fmt::format("--partial: '{}' is neither cow nor recompute", get<std::string>(v, "partial")));
    po_opts.partial = *partial;
    if (v.count("calibration") != 0) po_opts.calibration_file = get<std::string>(v, "calibration");
    po_opts.zero_latency = v["zero-latency"].as<bool>();
    nlohmann::ordered_json memory_json;
    if (v.count("memory") != 0) {
      po_opts.memory_bytes = sim::parse_byte_size(get<std::string>(v, "memory"));
    } else {
      const std::uint64_t weights = model.weight_bytes_per_gpu();
      if (weights >= gpu->memory_bytes) {
        throw usage_error(fmt::format("model {} (tp {}) needs {} of weights per GPU, more than the {} of a {}: raise --tp "
                                      "or give --memory",
                                      model.name, model.tp, bytes_text(static_cast<double>(weights)),
                                      bytes_text(static_cast<double>(gpu->memory_bytes)), gpu->name));
      }
      po_opts.memory_bytes = gpu->memory_bytes - weights;
    }
    const bool unlimited = po_opts.memory_bytes == std::numeric_limits<std::uint64_t>::max();
    memory_json = unlimited ? nlohmann::ordered_json("unlimited") : nlohmann::ordered_json(po_opts.memory_bytes);

    sim::replay_config config;
    config.model = model;
    config.gpu = *gpu;
    config.time_scale = get<double>(v, "time-scale");
    if (!(config.time_scale > 0)) throw usage_error("--time-scale must be positive");
    config.max_requests = get<std::uint64_t>(v, "max-requests");
    config.replica.token_budget = get<std::uint32_t>(v, "token-budget");
    config.replica.max_running = get<std::uint32_t>(v, "max-running");
    if (config.replica.token_budget == 0) throw usage_error("--token-budget must be at least 1");
    if (config.replica.max_running == 0) throw usage_error("--max-running must be at least 1");
    config.replica.chunked_prefill = v["chunked-prefill"].as<bool>();
    config.replica.max_context_tokens = po_opts.max_context_tokens;
    const auto over = sim::over_context_policy_from_string(get<std::string>(v, "over-context"));
    if (!over) throw usage_error(fmt::format("--over-context: '{}' is neither reject nor truncate", get<std::string>(v, "over-context")));
    config.replica.over_context = *over;
    const double overhead_ms = get<double>(v, "step-overhead-ms");
    if (!(overhead_ms >= 0)) throw usage_error("--step-overhead-ms must not be negative");
    config.replica.step_overhead_s = overhead_ms / 1e3;
    const double sample_ms = get<double>(v, "sample-ms");
    if (!(sample_ms > 0)) throw usage_error("--sample-ms must be positive");
    config.replica.sample_interval_us = static_cast<sim::time_us>(sample_ms * 1e3);
#ifndef NDEBUG
    config.replica.check_every_step = true;
#endif
    const std::uint64_t seed = get<std::uint64_t>(v, "seed");

    // Build everything that can fail on bad input before any output file is opened.
    const std::string policy_name = get<std::string>(v, "policy");
    for (const std::string& b : backends) {  // options check; a missing GPU fails here, before any replay
      auto o = po_opts;
      o.backend = b;
      (void)sim::make_kv_policy(policy_name, o);
    }
    (void)traces::open_trace(trace_path, format);

    std::unique_ptr<sim::timeseries_writer> timeseries;
    std::unique_ptr<sim::chrome_trace_writer> chrome;
    if (v.count("timeseries") != 0) timeseries = std::make_unique<sim::timeseries_writer>(get<std::string>(v, "timeseries"));
    if (v.count("chrome-trace") != 0) chrome = std::make_unique<sim::chrome_trace_writer>(get<std::string>(v, "chrome-trace"));
    const bool tty = &io.err == &std::cerr && isatty(STDERR_FILENO) == 1;
    if (tty) {
      config.progress = [&io](const sim::replay_progress& p) {
        io.err << fmt::format("\rreplay: {:.1f} s simulated, {} requests arrived, {} completed, {:.1f} s wall   ",
                              static_cast<double>(p.now) / 1e6, p.submitted, p.completed, p.wall_seconds)
               << std::flush;
      };
    }
    const bool with_wall = !v["no-wall"].as<bool>();

    nlohmann::ordered_json overhead;
    if (map_overhead_chunks != 0) {
#if VTENSOR_HAVE_CUDA
      overhead = measure_map_overhead(
          {po_opts.device_index, po_opts.layout, map_overhead_chunks, 16, v["map-overhead-patterns"].as<bool>()}, io.out);
#else
      throw std::runtime_error("--map-overhead needs the cuda backend, which this build lacks");
#endif
    }

    const auto replay_on = [&](const std::string& backend, bool last) {
      auto o = po_opts;
      o.backend = backend;
      const auto policy = sim::make_kv_policy(policy_name, o);
      const auto reader = traces::open_trace(trace_path, format);
      sim::step_log log(*policy, comparing);
      std::vector<sim::replica_observer*> observers{&log};
      if (last && timeseries) observers.push_back(timeseries.get());
      if (last && chrome) observers.push_back(chrome.get());
      std::optional<sim::step_emulator> emulator;
      if (emulate_for(backend)) {
        emulator.emplace(step_scale);
        observers.push_back(&*emulator);
      }
      const sim::replay_summary summary = sim::run_replay(*reader, *policy, config, observers);
      if (tty) io.err << "\r" << std::string(90, ' ') << "\r" << std::flush;
    nlohmann::ordered_json cfg;
    cfg["trace"] = trace_path;
    cfg["format"] = std::string(traces::to_string(reader->format()));
    cfg["policy"] = policy->name();
    cfg["policy_options"] = policy->describe();
    cfg["model"] = model.name;
    cfg["gpu"] = gpu->name;
    cfg["tp"] = model.tp;
    cfg["gpu_flop_rate"] = gpu->flop_rate;
    cfg["gpu_bandwidth"] = gpu->bandwidth;
    cfg["weight_bytes_per_gpu"] = model.weight_bytes_per_gpu();
    cfg["memory"] = memory_json;
    cfg["time_scale"] = config.time_scale;
    cfg["max_requests"] = config.max_requests;
    cfg["token_budget"] = config.replica.token_budget;
    cfg["max_running"] = config.replica.max_running;
    cfg["chunked_prefill"] = config.replica.chunked_prefill;
    cfg["max_context_tokens"] = config.replica.max_context_tokens;
    cfg["over_context"] = std::string(sim::to_string(config.replica.over_context));
    cfg["step_overhead_ms"] = overhead_ms;
    cfg["sample_ms"] = sample_ms;
    cfg["vmm_critical_path"] = o.lookahead_pages > 0 && o.async_lookahead
                                   ? "step-thread calls + modelled waits (lookahead mapped by the worker)"
                                   : "all VMM calls (synchronous mapping)";
    cfg["vmm_clock"] = "latency model (measured VMM time is reported, never fed to the clock)";
    cfg["emulate_steps"] = emulator.has_value();
    cfg["step_time_scale"] = step_scale;
    cfg["device"] = o.device_index;
    replay_run run;
    run.backend = backend;
    run.json = sim::summary_json(summary, cfg, seed, with_wall);
    if (const auto* vp = dynamic_cast<const sim::vtensor_policy*>(policy.get())) {
      run.vmm = vp->report();
      add_vmm_split(run.json, *run.vmm, summary, log.creation(warmup_fraction),
                    warmup_fraction, emulator ? emulator->emulated_ns() : 0, with_wall);
    }
    if (!overhead.is_null()) run.json["map_overhead"] = overhead;
    run.log = log.steps();
    return run;
    };

    std::vector<replay_run> runs;
    for (std::size_t i = 0; i < backends.size(); ++i) {
      runs.push_back(replay_on(backends[i], i + 1 == backends.size()));
      if (comparing) io.out << fmt::format("== run {}: backend {}\n", i + 1, backends[i]);
      print_summary(io.out, runs.back().json);
      print_vmm_split(io.out, runs.back().json);
    }
    nlohmann::ordered_json json = runs.front().json;
    bool mismatch = false;
    if (comparing) {
      const bool with_pool = po_opts.create_ahead_chunks == 0;
      const auto diff = sim::compare_step_logs(runs[0].log, runs[1].log, with_pool);
      mismatch = diff.has_value();
      nlohmann::ordered_json cmp;
      cmp["backends"] = backends;
      cmp["steps"] = runs[0].log.size();
      cmp["identical"] = !mismatch;
      cmp["first_mismatch"] = diff ? nlohmann::ordered_json(*diff) : nlohmann::ordered_json(nullptr);
      cmp["compared"] = with_pool ? "batch, timing, physical/mapped/cached/free-pool chunks, used and logical bytes, "
                                    "fragmentation, cuMemCreate calls, modelled VMM time"
                                  : "batch, timing, physical chunks net of the free pool (creation ahead runs on wall "
                                    "time), mapped/cached chunks, used and logical bytes, fragmentation, modelled VMM time";
      io.out << (mismatch ? fmt::format("compare {} vs {}: MISMATCH at {}\n", backends[0], backends[1], *diff)
                          : fmt::format("compare {} vs {}: identical over {} steps\n", backends[0], backends[1],
                                        runs[0].log.size()));
      if (runs[0].vmm && runs[1].vmm) {
        // Per call kind: what each run charged (modelled on sim, measured on cuda) for the same calls.
        const auto& a = *runs[0].vmm;
        const auto& c = *runs[1].vmm;
        nlohmann::ordered_json kinds = nlohmann::ordered_json::object();
        io.out << fmt::format("VMM time per call kind, {} vs {} (both threads; ms, calls):\n", backends[0], backends[1]);
        for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
          const std::uint64_t ta = a.step.charged_ns[k] + a.worker.charged_ns[k];
          const std::uint64_t tb = c.step.charged_ns[k] + c.worker.charged_ns[k];
          const std::uint64_t na = a.step.calls[k] + a.worker.calls[k];
          const std::uint64_t nb = c.step.calls[k] + c.worker.calls[k];
          const std::string kind(to_string(static_cast<vmm_call>(k)));
          kinds[kind] = {{"calls", {na, nb}}, {"ms", {ms(ta), ms(tb)}},
                         {"ratio", ta == 0 ? 0.0 : static_cast<double>(tb) / static_cast<double>(ta)}};
          io.out << fmt::format("  {:<10} {:>10.1f} {:>10.1f}  x{:<6.3f} calls {} / {}\n", kind, ms(ta), ms(tb),
                                ta == 0 ? 0.0 : static_cast<double>(tb) / static_cast<double>(ta), na, nb);
        }
        const std::uint64_t ta = a.step.total_charged_ns() + a.worker.total_charged_ns();
        const std::uint64_t tb = c.step.total_charged_ns() + c.worker.total_charged_ns();
        io.out << fmt::format("  {:<10} {:>10.1f} {:>10.1f}  x{:.3f}\n", "total", ms(ta), ms(tb),
                              ta == 0 ? 0.0 : static_cast<double>(tb) / static_cast<double>(ta));
        cmp["vmm_by_call"] = kinds;
        cmp["vmm_total_ms"] = {ms(ta), ms(tb)};
        cmp["vmm_ratio"] = ta == 0 ? 0.0 : static_cast<double>(tb) / static_cast<double>(ta);
      }
      json = nlohmann::ordered_json{{"compare", cmp}, {"runs", {runs[0].json, runs[1].json}}};
    }

    if (v.count("json") != 0) {
      traces::atomic_output_file file(get<std::string>(v, "json"));
      file.write(json.dump(2) + "\n");
      file.commit();
    }
    if (timeseries) timeseries->commit();
    if (chrome) chrome->commit();
    return mismatch ? exit_failure : exit_success;
  });
}

} // namespace vtensor::tools
