// The miss causes of `vtensor compare` on hand-made records: each cause where docs/compare.md
// puts it, and the causes adding up to the misses.

#include "tools/compare_analysis.hpp"

#include <doctest/doctest.h>

#include <vector>

namespace vtt = vtensor::tools;
namespace vt = vtensor::traces;

namespace {

// Two requests with the same two 4-token blocks (8 tokens): the second's infinite hit is 7.
vt::loaded_trace two_requests() {
  vt::loaded_trace t;
  t.block_tokens = 4;
  for (int i = 0; i < 2; ++i) {
    vt::trace_request r;
    r.arrival_us = 0;
    r.input_tokens = 8;
    r.output_tokens = 4;
    r.block_tokens = 4;
    r.block_keys = {10, 11};
    t.requests.push_back(r);
  }
  return t;
}

// The first request: admitted at 0, prefill done at 100, finished at 500; the second admitted at
// `second_at` with `hit` tokens.
std::vector<vtt::request_times> times(vtensor::sim::time_us second_at, std::uint64_t hit) {
  std::vector<vtt::request_times> t(2);
  t[0] = {0, 0, 100, 500, 0, 4, false};
  t[1] = {0, second_at, second_at + 100, second_at + 500, hit, 4, false};
  return t;
}

vtensor::sim::replica_counters counters(std::uint64_t hit) {
  vtensor::sim::replica_counters c;
  c.prompt_tokens = 16;
  c.hit_tokens = hit;
  return c;
}

vtt::miss_causes classify(vtensor::sim::time_us second_at, std::uint64_t hit, vtt::sharing_model s) {
  const vt::loaded_trace trace = two_requests();
  const vt::prefix_index index = vt::index_prefixes(trace.requests);
  const vtt::point_analysis a = vtt::analyse_point(trace, index, times(second_at, hit), s, counters(hit));
  CHECK(a.over_bound_requests == 0);
  CHECK(a.misses.sum() == a.misses.total);
  CHECK(a.misses.cold == 9);  // 8 first-time tokens and the second's last token
  return a.misses;
}

using moment = vtt::sharing_model::moment;

}  // namespace

TEST_CASE("miss causes: in flight, unpublished and evicted by the first holder's times") {
  const vtt::sharing_model release{moment::release, 1};
  CHECK(classify(50, 0, release).in_flight == 7);     // the first's prefill not done at 50
  CHECK(classify(200, 0, release).unpublished == 7);  // computed at 100, shared only at 500
  CHECK(classify(600, 0, release).evicted == 7);      // shared at 500, gone by 600
  CHECK(classify(600, 7, release).total == 9);        // a full hit: only the cold tokens miss
  const vtt::sharing_model admission{moment::admission, 1};
  CHECK(classify(50, 0, admission).evicted == 7);  // shared at admission: available, yet missed
  const vtt::sharing_model never{moment::never, 1};
  CHECK(classify(600, 0, never).no_cache == 7);  // a policy without a prefix cache
  CHECK(classify(50, 0, never).no_cache == 7);   // whatever the timing
  CHECK(classify(50, 0, never).sum() == classify(50, 0, never).total);
}

TEST_CASE("miss causes: tokens below the sharing unit are granularity") {
  const vtt::sharing_model paged{moment::admission, 4};
  const vtt::miss_causes m = classify(600, 4, paged);
  CHECK(m.granularity == 3);  // the hit of 7 rounds down to 4
  CHECK(m.evicted == 0);
  const vtt::miss_causes none = classify(600, 0, paged);
  CHECK(none.granularity == 3);
  CHECK(none.evicted == 4);
}

TEST_CASE("miss causes: a hit above the infinite bound is flagged") {
  const vt::loaded_trace trace = two_requests();
  const vt::prefix_index index = vt::index_prefixes(trace.requests);
  auto t = times(600, 7);
  t[0].hit_tokens = 4;  // the first request cannot hit anything
  const vtt::point_analysis a = vtt::analyse_point(trace, index, t, {moment::admission, 1}, counters(11));
  CHECK(a.over_bound_requests == 1);
}

TEST_CASE("reuse distance and lifetime histograms, latency quantiles") {
  const vt::loaded_trace trace = two_requests();
  const vt::prefix_index index = vt::index_prefixes(trace.requests);
  const vtt::point_analysis a =
      vtt::analyse_point(trace, index, times(2'000'000, 7), {moment::admission, 1}, counters(7));
  std::uint64_t reuse = 0;
  for (std::size_t b = 0; b < a.reuse_distance.counts.size(); ++b) {
    reuse += a.reuse_distance.counts[b];
    if (a.reuse_distance.counts[b] != 0) {  // 2 s since the first request used the blocks
      CHECK(a.reuse_distance.edges[b] <= 2.0);
      CHECK(a.reuse_distance.edges[b + 1] > 2.0);
    }
  }
  CHECK(reuse == 7);
  std::uint64_t blocks = 0;
  for (const auto n : a.cached_lifetime.counts) blocks += n;
  CHECK(blocks == 2);
  REQUIRE(a.ttft_ms.size() == 101);
  CHECK(a.ttft_ms.front() == doctest::Approx(0.1));  // the first request: first token 100 us after arrival
  std::vector<std::uint64_t> v = {5000, 1000, 3000};
  const auto q = vtt::quantiles_ms(v);
  CHECK(q[0] == doctest::Approx(1.0));
  CHECK(q[50] == doctest::Approx(3.0));
  CHECK(q[100] == doctest::Approx(5.0));
}
