// A step's decode growth (Note [A step's decode growth in one call] in sim/kv_policy.hpp): n
// running requests each grow by one token, through the vtensor policy over the simulated device
// (every VMM call free, 256 GiB). Time is per request grown (items/s = growths/s):
//   BM_decode_growth/loop        kv_policy::grow(id, 1) for each request (before issue 13's change)
//   BM_decode_growth/grow_each   kv_policy::grow_each(ids): one call for the step
//   BM_decode_growth/rounds      a replica's decode stretch (Note [Decode stretches]): one
//                                in_place_rounds(ids), then grow_round(ids) per step while rounds
//                                are left, grow_each(ids) for the step that crosses a page
// Most growths land inside a mapped page; one in 1,024 (kv-split) crosses into the next page and
// maps it, as in a replay. After 4,096 tokens each the requests are released and admitted again,
// outside the timing. n (the argument) is the batch: 64 and 256 running requests.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "sim/policy_registry.hpp"
#include "sim/presets.hpp"

using namespace vtensor;
using namespace vtensor::sim;

namespace {

constexpr std::uint64_t k_prompt = 1000;
constexpr std::uint64_t k_growth = 4096;

std::unique_ptr<kv_policy> decode_policy() {
  kv_policy_options o;
  o.kv = model_compute_preset("llama-3-8b").kv;
  o.memory_bytes = std::uint64_t{256} << 30;  // 256 requests of 5,096 tokens: 170 GB
  o.zero_latency = true;
  return make_kv_policy("vtensor", o);
}

void admit_all(kv_policy& p, const std::vector<request_id>& ids) {
  for (const request_id id : ids) {
    if (!p.admit({id, {}, k_prompt, k_prompt + k_growth}).admitted) throw std::runtime_error("bench: admission failed");
  }
}

enum class growth_mode { loop, grow_each, rounds };

void BM_decode_growth(benchmark::State& state, growth_mode mode) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto p = decode_policy();
  std::vector<request_id> ids;
  for (std::size_t i = 0; i < n; ++i) ids.push_back(request_id{i + 1});
  admit_all(*p, ids);
  std::uint64_t grown = 0;
  std::uint64_t rounds = 0;  // left from the last in_place_rounds()
  for (auto _ : state) {
    if (grown == k_growth) {
      state.PauseTiming();
      for (const request_id id : ids) p->release(id, release_reason::finished);
      admit_all(*p, ids);
      grown = 0;
      rounds = 0;
      state.ResumeTiming();
    }
    if (mode == growth_mode::rounds) {
      if (rounds == 0) rounds = p->in_place_rounds(ids);
      if (rounds > 0) {
        p->grow_round(ids);
        --rounds;
      } else if (p->grow_each(ids) != n) {
        state.SkipWithError("grow_each fell short");
        break;
      }
    } else if (mode == growth_mode::grow_each) {
      if (p->grow_each(ids) != n) {
        state.SkipWithError("grow_each fell short");
        break;
      }
    } else {
      bool ok = true;
      for (const request_id id : ids) ok = p->grow(id, 1) && ok;
      if (!ok) {
        state.SkipWithError("grow failed");
        break;
      }
    }
    ++grown;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}
BENCHMARK_CAPTURE(BM_decode_growth, loop, growth_mode::loop)->ArgName("n")->Arg(64)->Arg(256);
BENCHMARK_CAPTURE(BM_decode_growth, grow_each, growth_mode::grow_each)->ArgName("n")->Arg(64)->Arg(256);
BENCHMARK_CAPTURE(BM_decode_growth, rounds, growth_mode::rounds)->ArgName("n")->Arg(64)->Arg(256);

}  // namespace
