#pragma once
// Shared set-up for the simulator tests: small traces written to a temporary directory, and a
// replay of one through the vtensor policy.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "sim/policy_registry.hpp"
#include "sim/replay.hpp"
#include "sim/vtensor_policy.hpp"
#include "tests/support/scratch_dir.hpp"
#include "traces/trace_reader.hpp"

namespace vtensor::sim_testing {

/// A file in a per-suite temporary directory.
inline std::filesystem::path temp_file(const std::string& name) {
  const auto dir = vtensor::testing::scratch_dir("sim");
  std::filesystem::create_directories(dir);
  return dir / name;
}

/// Writes Mooncake JSONL `lines` to `name` and returns its path.
inline std::string write_trace(const std::string& name, const std::vector<std::string>& lines) {
  const auto path = temp_file(name);
  std::ofstream out(path);
  for (const auto& l : lines) out << l << '\n';
  return path.string();
}

/// A Mooncake line with fresh block keys first_key, first_key + 1, ... (512 tokens a block).
inline std::string mooncake_line(std::uint64_t timestamp_ms, std::uint32_t input, std::uint32_t output,
                                 std::uint64_t first_key) {
  std::string keys;
  for (std::uint32_t i = 0; i * 512 < input; ++i) {
    if (i != 0) keys += ", ";  // appended apart: GCC 12 warns falsely (-Wstringop-overflow) on "" + string
    keys += std::to_string(first_key + i);
  }
  return "{\"timestamp\": " + std::to_string(timestamp_ms) + ", \"input_length\": " + std::to_string(input) +
         ", \"output_length\": " + std::to_string(output) + ", \"hash_ids\": [" + keys + "]}";
}

/// Llama-3-8B on an H200, kv-fused, zero-latency sim backend, `memory` bytes of KV.
inline sim::kv_policy_options llama_policy(std::uint64_t memory, bool zero_latency = true) {
  sim::kv_policy_options o;
  o.kv = sim::model_compute_preset("llama-3-8b").kv;
  o.memory_bytes = memory;
  o.zero_latency = zero_latency;
  return o;
}

inline sim::replay_config llama_replay() {
  sim::replay_config c;
  c.model = sim::model_compute_preset("llama-3-8b");
  c.gpu = *sim::gpu_by_name("h200");
  c.replica.check_every_step = true;
  return c;
}

/// Replays `path` through a fresh vtensor policy with `settings`.
inline sim::replay_summary replay_file(const std::string& path, const sim::kv_policy_options& policy,
                                       const sim::vtensor_settings& settings, const sim::replay_config& config,
                                       std::vector<sim::replica_observer*> observers = {}) {
  auto reader = traces::open_trace(path, std::nullopt);
  auto p = sim::make_kv_policy(sim::policy_choice(settings), policy);
  return sim::run_replay(*reader, *p, config, observers);
}

/// Replays `path` through a fresh vtensor policy with the settings struct's defaults.
inline sim::replay_summary replay_file(const std::string& path, const sim::kv_policy_options& policy,
                                       const sim::replay_config& config,
                                       std::vector<sim::replica_observer*> observers = {}) {
  return replay_file(path, policy, sim::vtensor_settings{}, config, std::move(observers));
}

inline constexpr std::uint64_t k_unlimited = ~std::uint64_t{0};

}  // namespace vtensor::sim_testing
