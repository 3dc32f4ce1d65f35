// A step's decode growth (Note [One decode protocol] in sim/kv_policy.hpp): n running requests
// each grow by one token, through the vtensor policy over the simulated device (every VMM call
// free, 256 GiB). Time is per request grown (items/s = growths/s):
//   BM_decode_growth/loop        kv_policy::grow(id, 1) for each request (before issue 13's change)
//   BM_decode_growth/decode      kv_policy::decode(ids): one decode round for the step
//   BM_decode_growth/rounds      a replica's decode stretch: the round's lease advanced while it
//                                has rounds in place, decode(ids) for the step that crosses a page
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

enum class growth_mode { loop, decode, rounds };

void BM_decode_growth(benchmark::State& state, growth_mode mode) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto p = decode_policy();
  std::vector<request_id> ids;
  for (std::size_t i = 0; i < n; ++i) ids.push_back(request_id{i + 1});
  admit_all(*p, ids);
  std::uint64_t grown = 0;
  decode_round lease;  // the last decode round: its lease serves the rounds in place after it
  for (auto _ : state) {
    if (grown == k_growth) {
      state.PauseTiming();
      for (const request_id id : ids) p->release(id, release_reason::finished);
      admit_all(*p, ids);
      grown = 0;
      lease = decode_round{};
      state.ResumeTiming();
    }
    if (mode == growth_mode::rounds && lease.rounds_in_place() > 0) {
      (void)lease.advance();
    } else if (mode != growth_mode::loop) {
      lease = p->decode(ids);
      if (lease.grown() != n) {
        state.SkipWithError("a decode round fell short");
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
BENCHMARK_CAPTURE(BM_decode_growth, decode, growth_mode::decode)->ArgName("n")->Arg(64)->Arg(256);
BENCHMARK_CAPTURE(BM_decode_growth, rounds, growth_mode::rounds)->ArgName("n")->Arg(64)->Arg(256);

}  // namespace
