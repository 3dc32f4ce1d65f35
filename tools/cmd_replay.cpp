#include "tools/cli.hpp"

#include "core/eviction_policy.hpp"
#include "sim/outputs.hpp"
#include "sim/policy_registry.hpp"
#include "sim/replay.hpp"
#include "traces/atomic_output_file.hpp"
#include "traces/trace_reader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
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

} // namespace

int cmd_replay(std::span<const std::string> args, const cli_streams& io) {
  return guarded_run(name, io, [&] {
    po::options_description options("options");
    options.add_options()
        ("trace", po::value<std::string>(), "trace file (default: the bundled Mooncake conversation excerpt)")
        ("format", po::value<std::string>()->default_value("auto"), "trace format: auto, mooncake, azure, vtensor")
        ("policy", po::value<std::string>()->default_value("vtensor"), "KV policy")
        ("backend", po::value<std::string>()->default_value("sim"), "VMM backend of the vtensor policy")
        ("model", po::value<std::string>()->default_value("llama-3-8b"), "model: llama-3-8b, yi-6b, yi-34b, llama-3-70b")
        ("gpu", po::value<std::string>()->default_value("h200"), "GPU: h200, a100-80gb")
        ("tp", po::value<std::uint32_t>()->default_value(1), "tensor-parallel degree (divides the KV heads)")
        ("memory", po::value<std::string>(),
         "KV memory per GPU: 80GiB, 500MiB, 1e9, or unlimited (default: GPU memory minus the weights)")
        ("layout", po::value<std::string>()->default_value("kv-fused"), "vtensor layout: kv-split, kv-fused, token-major")
        ("lookahead", po::value<std::uint32_t>()->default_value(0), "vtensor pages mapped ahead of need")
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
        "reuse, VMM cost and latency. Outputs are written whole or not at all.",
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
    const auto policy = sim::make_kv_policy(policy_name, po_opts);
    const auto reader = traces::open_trace(trace_path, format);

    std::unique_ptr<sim::timeseries_writer> timeseries;
    std::unique_ptr<sim::chrome_trace_writer> chrome;
    std::vector<sim::replica_observer*> observers;
    if (v.count("timeseries") != 0) {
      timeseries = std::make_unique<sim::timeseries_writer>(get<std::string>(v, "timeseries"));
      observers.push_back(timeseries.get());
    }
    if (v.count("chrome-trace") != 0) {
      chrome = std::make_unique<sim::chrome_trace_writer>(get<std::string>(v, "chrome-trace"));
      observers.push_back(chrome.get());
    }
    const bool tty = &io.err == &std::cerr && isatty(STDERR_FILENO) == 1;
    if (tty) {
      config.progress = [&io](const sim::replay_progress& p) {
        io.err << fmt::format("\rreplay: {:.1f} s simulated, {} requests arrived, {} completed, {:.1f} s wall   ",
                              static_cast<double>(p.now) / 1e6, p.submitted, p.completed, p.wall_seconds)
               << std::flush;
      };
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
    cfg["vmm_critical_path"] = policy->maps_ahead() ? "admissions only (lookahead maps off the step)"
                                                    : "all VMM calls (synchronous mapping)";
    const nlohmann::ordered_json json = sim::summary_json(summary, cfg, seed, !v["no-wall"].as<bool>());
    print_summary(io.out, json);

    if (v.count("json") != 0) {
      traces::atomic_output_file file(get<std::string>(v, "json"));
      file.write(json.dump(2) + "\n");
      file.commit();
    }
    if (timeseries) timeseries->commit();
    if (chrome) chrome->commit();
    return exit_success;
  });
}

} // namespace vtensor::tools
