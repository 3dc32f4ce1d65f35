#pragma once
// Shared set-up for the benchmarks: Llama-3-8B on the simulated device with every VMM call free
// (latency_model::zero()) and unlimited capacity, so the figures are the host cost of vtensor
// itself. Not a *_bench.cpp file, so the bench/CMakeLists.txt glob leaves it out.

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "backends/sim_backend.hpp"
#include "core/ids.hpp"
#include "core/kv_geometry.hpp"
#include "core/manager.hpp"

namespace vtensor::bench {

/// Llama-3-8B in `layout`, 128k context, the given lookahead, LRU prefix cache.
inline manager_config llama_config(kv_layout layout, std::uint32_t lookahead = 0) {
  manager_config c{kv_geometry(*model_preset("llama-3-8b"), layout), {}, "lru"};
  c.scheduler.max_context_tokens = 131072;
  c.scheduler.lookahead_pages = lookahead;
  return c;
}

/// A free, unlimited simulated device.
inline sim_backend zero_cost_device() { return sim_backend(sim_backend::k_unlimited, latency_model::zero()); }

/// splitmix64: block keys that look like content hashes.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// `count` blocks of `tokens` tokens whose keys are chained from `seed` (like Mooncake hash ids).
inline std::vector<token_block> chained_blocks(std::uint64_t seed, std::size_t count, std::uint32_t tokens) {
  std::vector<token_block> v;
  v.reserve(count);
  std::uint64_t k = mix(seed);
  for (std::size_t i = 0; i < count; ++i) {
    k = mix(k ^ (i + 1));
    v.push_back({k, tokens});
  }
  return v;
}

/// Seconds between two steady_clock points, for UseManualTime benchmarks.
inline double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace vtensor::bench
