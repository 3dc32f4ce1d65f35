// The run operations of issue 13 against the chunk-by-chunk paths they replace, on the simulated
// device with every VMM call free (bench_support.hpp). Time is per chunk (items/s = chunks/s):
//   BM_take_chunks/one_by_one   chunk_pool::alloc() n times from a warm free pool (before issue 13)
//   BM_take_chunks/run          chunk_pool::alloc_run(n): the pool's part in one step (Note [Allocating a
//                               run of chunks] in core/chunk_pool.cpp)
//   BM_map_chunks/one_by_one    map_with_access per chunk on sim_backend, then one unmap of the run
//   BM_map_chunks/run           map_run_with_access over the run (Note [Runs of maps])
//   BM_worker_job/thread        a job of n maps handed to the worker thread, waited for, unmapped
//   BM_worker_job/inline        the same job run inline (Note [Inline worker] in core/async_mapper.hpp)
// n (the argument) is the run: 32 chunks is one page of Llama-3-8B kv-fused, 800 a 25-page prompt.
//   BM_map_job/per_run          a mapping job of 32 runs of r chunks (one per tensor, as the pool
//                               maps r pages of Llama-3-8B) through accounting(sim), the replay's
//                               stack: map_run_with_access per run (before session 16)
//   BM_map_job/job              the same job in one map_runs_with_access call (Note [Runs of maps])
// r = 1 is a decode step's page, 6 about a Mooncake admission's mean run.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "bench/bench_support.hpp"
#include "core/async_mapper.hpp"
#include "core/eviction_order.hpp"
#include "core/mutex.hpp"
#include "core/operations.hpp"
#include "sim/accounting_backend.hpp"

using namespace vtensor;
using namespace vtensor::bench;

namespace {

constexpr std::uint64_t k_vtensor_bytes = std::uint64_t{4096} * k_chunk_bytes;

// An operations pool whose free pool holds `warm` chunks.
struct warm_pool {
  sim_backend sim = zero_cost_device();
  kv_geometry geometry{*model_preset("llama-3-8b"), kv_layout::kv_fused};
  operations ops{sim, geometry, k_vtensor_bytes, make_eviction_order({}), 0};
  explicit warm_pool(std::size_t warm) {
    std::vector<chunk_id> chunks;
    if (!ops.pool().alloc_run(warm, nullptr, chunks)) throw std::runtime_error("bench: cannot warm the pool");
    for (chunk_id c : chunks) ops.pool().unuse(c);
  }
};

void BM_take_chunks(benchmark::State& state, bool run) {
  const auto n = static_cast<std::size_t>(state.range(0));
  warm_pool pool(4 * n);
  std::vector<chunk_id> chunks;
  chunks.reserve(n);
  for (auto _ : state) {
    chunks.clear();
    if (run) {
      if (!pool.ops.pool().alloc_run(n, nullptr, chunks)) state.SkipWithError("alloc_chunks failed");
    } else {
      for (std::size_t i = 0; i < n; ++i) chunks.push_back(*pool.ops.pool().alloc());
    }
    benchmark::DoNotOptimize(chunks.data());
    for (chunk_id c : chunks) pool.ops.pool().unuse(c);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK_CAPTURE(BM_take_chunks, one_by_one, false)->ArgName("n")->Arg(32)->Arg(800);
BENCHMARK_CAPTURE(BM_take_chunks, run, true)->ArgName("n")->Arg(32)->Arg(800);

void BM_map_chunks(benchmark::State& state, bool run) {
  const auto n = static_cast<std::size_t>(state.range(0));
  sim_backend sim = zero_cost_device();
  const device_addr base = sim.reserve(n * k_chunk_bytes);
  std::vector<chunk_handle> handles;
  for (std::size_t i = 0; i < n; ++i) handles.push_back(*sim.create_chunk());
  for (auto _ : state) {
    if (run) {
      std::size_t mapped = 0;
      sim.map_run_with_access(base, handles, mapped);
    } else {
      for (std::size_t i = 0; i < n; ++i) sim.map_with_access(base + i * k_chunk_bytes, handles[i]);
    }
    sim.unmap(base, n * k_chunk_bytes);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK_CAPTURE(BM_map_chunks, one_by_one, false)->ArgName("n")->Arg(32)->Arg(800);
BENCHMARK_CAPTURE(BM_map_chunks, run, true)->ArgName("n")->Arg(32)->Arg(800);

void BM_worker_job(benchmark::State& state, bool inline_jobs) {
  const auto n = static_cast<std::size_t>(state.range(0));
  sim_backend sim = zero_cost_device();
  vtensor::mutex backend_mutex;
  const device_addr base = sim.reserve(n * k_chunk_bytes);
  std::vector<chunk_handle> handles;
  for (std::size_t i = 0; i < n; ++i) handles.push_back(*sim.create_chunk());
  async_mapper mapper(sim, backend_mutex, inline_jobs);
  for (auto _ : state) {
    mapping_job job;
    job.maps.reserve(n);
    for (std::size_t i = 0; i < n; ++i) job.maps.push_back({base + i * k_chunk_bytes, handles[i]});
    mapper.wait(mapper.submit(std::move(job)), true);
    mapping_job release;
    release.unmaps.push_back({base, n * k_chunk_bytes});
    mapper.wait(mapper.submit(std::move(release)), false);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK_CAPTURE(BM_worker_job, thread, false)->ArgName("n")->Arg(32)->Arg(800)->UseRealTime();
BENCHMARK_CAPTURE(BM_worker_job, inline, true)->ArgName("n")->Arg(32)->Arg(800)->UseRealTime();

void BM_map_job(benchmark::State& state, bool job) {
  constexpr std::size_t k_tensors = 32;
  const auto r = static_cast<std::size_t>(state.range(0));
  sim::accounting_backend b(std::make_unique<sim_backend>(sim_backend::k_unlimited, latency_model::zero()),
                            latency_model::zero());
  const std::uint64_t span = 64 * k_chunk_bytes;  // a tensor's span of the request's range
  const device_addr base = b.reserve(k_tensors * span);
  std::vector<mapping_entry> maps;
  for (std::size_t t = 0; t < k_tensors; ++t) {
    for (std::size_t i = 0; i < r; ++i) maps.push_back({base + t * span + i * k_chunk_bytes, *b.create_chunk()});
  }
  std::vector<chunk_handle> handles(r);
  for (auto _ : state) {
    if (job) {
      std::size_t done = 0;
      b.map_runs_with_access(maps, done);
    } else {
      for (std::size_t t = 0; t < k_tensors; ++t) {
        for (std::size_t i = 0; i < r; ++i) handles[i] = maps[t * r + i].handle;
        std::size_t mapped = 0;
        b.map_run_with_access(maps[t * r].va, handles, mapped);
      }
    }
    for (std::size_t t = 0; t < k_tensors; ++t) b.unmap(base + t * span, r * k_chunk_bytes);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * k_tensors * r));
}
BENCHMARK_CAPTURE(BM_map_job, per_run, false)->ArgName("r")->Arg(1)->Arg(6);
BENCHMARK_CAPTURE(BM_map_job, job, true)->ArgName("r")->Arg(1)->Arg(6);

}  // namespace
