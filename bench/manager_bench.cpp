// Manager hot paths on the simulated device (zero latency, unlimited capacity, Llama-3-8B):
//   BM_extend_per_token            one decode step, extend(id, 1); Time is per token
//   BM_create_prefix_hit_64_chunks create whose cached prefix maps 64 shared chunks; Time is create alone
//   BM_finish_record_64_chunks     finish of a 1024-token (64-chunk) prompt, recorded in the rTree
//   BM_create_own_pages            create of a request of 4 new pages (256 own chunks in kv-split);
//                                  Time is per chunk mapped: the host cost the manager adds to each
//                                  cuMemMap + cuMemSetAccess (Note [Mapping overhead of the manager])
// Targets (docs/architecture.md, "Speed targets"): extend <= 50 ns a token, create with 64 shared chunks <= 20 us.

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "bench/bench_support.hpp"

using namespace vtensor;
using namespace vtensor::bench;
using clk = std::chrono::steady_clock;

namespace {

// One live request grows a token per iteration over the whole 128k context; when it is full it is
// finished and a fresh one created with timing paused (once every 131072 iterations, so the pause
// costs nothing measurable). Page mapping (and lookahead) is amortised into the per-token figure.
void BM_extend_per_token(benchmark::State& state, kv_layout layout) {
  auto sim = zero_cost_device();
  manager m(sim, llama_config(layout, static_cast<std::uint32_t>(state.range(0))));
  const std::uint64_t max_tokens = 131072;
  std::uint64_t next_id = 1;
  request_id id{next_id};
  (void)m.create(id, {}, 1, max_tokens);
  std::uint64_t tokens = 1;
  std::uint64_t requests = 1;
  for (auto _ : state) {
    if (tokens == max_tokens) {
      state.PauseTiming();
      m.finish(id);
      id = request_id{++next_id};
      if (!m.create(id, {}, 1, max_tokens).ok()) state.SkipWithError("create failed");
      tokens = 1;
      ++requests;
      state.ResumeTiming();
    }
    auto s = m.extend(id, 1);
    benchmark::DoNotOptimize(s);
    ++tokens;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.counters["requests"] = static_cast<double>(requests);
  state.counters["tokens_per_page"] = static_cast<double>(m.geometry().tokens_per_chunk());
  m.check_invariants();
}

BENCHMARK_CAPTURE(BM_extend_per_token, kv_split, kv_layout::kv_split)->ArgName("lookahead")->Arg(0)->Arg(4);
BENCHMARK_CAPTURE(BM_extend_per_token, kv_fused, kv_layout::kv_fused)->ArgName("lookahead")->Arg(0)->Arg(4);
BENCHMARK_CAPTURE(BM_extend_per_token, token_major, kv_layout::token_major)->ArgName("lookahead")->Arg(0)->Arg(4);

// A cached 1024-token prefix (64 chunks in every layout: 1 page x 64 tensors for kv_split, 2 x 32
// for kv_fused, 64 x 1 for token_major) named by blocks of range(0) tokens. Each iteration creates
// a new request of prefix + one new block and preempts it; only create is timed (manual time).
// record_on_preempt is off so that the tree and the pool stay in a steady state. The preempt
// time is reported as counter teardown (seconds per iteration).
void BM_create_prefix_hit_64_chunks(benchmark::State& state, kv_layout layout) {
  auto sim = zero_cost_device();
  auto cfg = llama_config(layout);
  cfg.scheduler.record_on_preempt = false;
  manager m(sim, cfg);
  const auto block_tokens = static_cast<std::uint32_t>(state.range(0));
  const std::uint64_t prefix_tokens = 1024;
  const auto prefix = chained_blocks(42, prefix_tokens / block_tokens, block_tokens);
  if (!m.create(request_id{0}, prefix, prefix_tokens).ok()) state.SkipWithError("prefix create failed");
  m.finish(request_id{0});
  auto blocks = prefix;
  blocks.push_back({mix(4242), block_tokens});
  const std::uint64_t prompt = prefix_tokens + block_tokens;
  const std::uint32_t tensors = m.geometry().tensors();

  std::uint64_t next_id = 1;
  double teardown = 0;
  std::uint32_t shared_chunks = 0;
  for (auto _ : state) {
    const request_id id{next_id++};
    const auto t0 = clk::now();
    auto r = m.create(id, blocks, prompt);
    const auto t1 = clk::now();
    benchmark::DoNotOptimize(r);
    shared_chunks = r.shared_pages * tensors;
    if (r.hit_tokens != prefix_tokens || shared_chunks != 64) {
      state.SkipWithError("create did not map the 64 cached chunks");
      break;
    }
    m.preempt(id);
    const auto t2 = clk::now();
    state.SetIterationTime(seconds(t0, t1));
    teardown += seconds(t1, t2);
  }
  state.counters["shared_chunks"] = shared_chunks;
  state.counters["own_chunks"] = static_cast<double>(m.geometry().pages_for_tokens(prompt) * tensors - shared_chunks);
  state.counters["prefix_blocks"] = static_cast<double>(prefix.size());
  state.counters["teardown"] = benchmark::Counter(teardown, benchmark::Counter::kAvgIterations);
  m.check_invariants();
}

BENCHMARK_CAPTURE(BM_create_prefix_hit_64_chunks, kv_split, kv_layout::kv_split)
    ->ArgName("block_tokens")
    ->Arg(512)
    ->UseManualTime();
BENCHMARK_CAPTURE(BM_create_prefix_hit_64_chunks, kv_fused, kv_layout::kv_fused)
    ->ArgName("block_tokens")
    ->Arg(512)
    ->UseManualTime();
BENCHMARK_CAPTURE(BM_create_prefix_hit_64_chunks, token_major, kv_layout::token_major)
    ->ArgName("block_tokens")
    ->Arg(16)
    ->Arg(512)
    ->UseManualTime();

// Each iteration creates (untimed) a request whose 1024-token prompt (64 chunks) is new, then
// finishes it: the prompt is inserted in the rTree, its pages recorded, its mappings and range
// released. Only finish is timed. Every 1024 finishes the manager is shut down (untimed) so the
// tree holds 0..1023 such prompts and memory stays bounded.
void BM_finish_record_64_chunks(benchmark::State& state, kv_layout layout) {
  auto sim = zero_cost_device();
  manager m(sim, llama_config(layout));
  const auto block_tokens = static_cast<std::uint32_t>(state.range(0));
  const std::uint64_t prompt = 1024;
  const std::size_t nblocks = prompt / block_tokens;
  std::vector<token_block> blocks;
  std::uint64_t n = 0;
  for (auto _ : state) {
    if (n % 1024 == 1023) m.shutdown();
    blocks = chained_blocks(1000 + n, nblocks, block_tokens);
    const request_id id{++n};
    auto r = m.create(id, blocks, prompt);
    if (!r.ok() || r.hit_tokens != 0) {
      state.SkipWithError("create of a new prompt failed or hit the cache");
      break;
    }
    const auto t0 = clk::now();
    m.finish(id);
    const auto t1 = clk::now();
    state.SetIterationTime(seconds(t0, t1));
  }
  const auto s = m.stats();
  state.counters["recorded_chunks"] =
      static_cast<double>(m.geometry().pages_for_tokens(prompt) * m.geometry().tensors());
  state.counters["tree_nodes"] = static_cast<double>(s.tree_nodes);
  m.check_invariants();
}

BENCHMARK_CAPTURE(BM_finish_record_64_chunks, kv_split, kv_layout::kv_split)
    ->ArgName("block_tokens")
    ->Arg(512)
    ->UseManualTime();
BENCHMARK_CAPTURE(BM_finish_record_64_chunks, kv_fused, kv_layout::kv_fused)
    ->ArgName("block_tokens")
    ->Arg(512)
    ->UseManualTime();
BENCHMARK_CAPTURE(BM_finish_record_64_chunks, token_major, kv_layout::token_major)
    ->ArgName("block_tokens")
    ->Arg(16)
    ->Arg(512)
    ->UseManualTime();

// Each iteration creates a request of `range(0)` pages of new tokens (no prefix; the pool and the
// range cache are warm, so no create or reserve) and finishes it without recording (untimed).
void BM_create_own_pages(benchmark::State& state, kv_layout layout) {
  auto sim = zero_cost_device();
  auto cfg = llama_config(layout);
  cfg.scheduler.max_context_tokens = 8192;
  manager m(sim, cfg);
  const auto pages = static_cast<std::uint64_t>(state.range(0));
  const std::uint64_t tokens = pages * m.geometry().tokens_per_chunk();
  const std::uint64_t chunks = pages * m.geometry().tensors();
  std::uint64_t n = 0;
  for (auto _ : state) {
    const request_id id{++n};
    const auto t0 = clk::now();
    auto r = m.create(id, {}, tokens, tokens);
    const auto t1 = clk::now();
    benchmark::DoNotOptimize(r);
    if (!r.ok()) {
      state.SkipWithError("create failed");
      break;
    }
    m.finish(id);
    state.SetIterationTime(seconds(t0, t1) / static_cast<double>(chunks));
  }
  state.counters["chunks"] = static_cast<double>(chunks);
  m.check_invariants();
}

BENCHMARK_CAPTURE(BM_create_own_pages, kv_split, kv_layout::kv_split)->ArgName("pages")->Arg(4)->UseManualTime();
BENCHMARK_CAPTURE(BM_create_own_pages, kv_fused, kv_layout::kv_fused)->ArgName("pages")->Arg(4)->UseManualTime();
BENCHMARK_CAPTURE(BM_create_own_pages, token_major, kv_layout::token_major)->ArgName("pages")->Arg(4)->UseManualTime();

}  // namespace
