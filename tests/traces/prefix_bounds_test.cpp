#include "traces/prefix_bounds.hpp"

#include "traces/infinite_prefix_cache.hpp"
#include "traces/trace_generator.hpp"

#include <doctest/doctest.h>

#include <vector>

namespace vt = vtensor::traces;

namespace {

std::vector<vt::trace_request> generated(std::uint64_t requests, std::uint64_t seed) {
  vt::generator_params p;
  p.seed = seed;
  p.requests = requests;
  p.block_tokens = 64;
  p.system_prompts = 4;
  p.system_tokens = vt::int_distribution::parse("const:512");
  p.user_tokens = vt::int_distribution::parse("lognormal:200:1");
  p.fanout_probability = 0.1;
  vt::trace_generator g(p);
  std::vector<vt::trace_request> out;
  vt::trace_request r;
  while (g.next(r)) out.push_back(r);
  return out;
}

vt::trace_request request(std::uint32_t tokens, std::vector<std::uint64_t> keys) {
  vt::trace_request r;
  r.input_tokens = tokens;
  r.block_tokens = 4;
  r.block_keys = std::move(keys);
  return r;
}

}  // namespace

TEST_CASE("prefix index: per-request infinite hits sum to the infinite prefix cache's") {
  const auto trace = generated(600, 7);
  const vt::prefix_index index = vt::index_prefixes(trace);
  vt::infinite_prefix_cache cache;
  std::uint64_t expected = 0, got = 0;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const std::uint64_t h = cache.serve(trace[i]);
    CHECK(index.infinite_hit[i] == h);
    expected += h;
    got += index.infinite_hit[i];
  }
  CHECK(got == expected);
  CHECK(expected > 0);
}

TEST_CASE("offline bound: at most the infinite bound, monotone in capacity, equal when nothing is evicted") {
  const auto trace = generated(600, 11);
  const vt::prefix_index index = vt::index_prefixes(trace);
  std::uint64_t infinite = 0;
  for (const std::uint64_t h : index.infinite_hit) infinite += h;
  std::uint64_t previous = 0;
  for (const std::uint64_t blocks : {0, 1, 4, 16, 64, 256, 1024, 4096}) {
    const std::uint64_t offline = vt::offline_hit_tokens(index, trace, blocks);
    CHECK(offline <= infinite);
    CHECK(offline >= previous);
    previous = offline;
  }
  CHECK(vt::offline_hit_tokens(index, trace, 0) == 0);
  CHECK(vt::offline_hit_tokens(index, trace, index.nodes()) == infinite);
  CHECK(vt::offline_hit_tokens(index, trace, index.nodes() / 8) < infinite);
}

TEST_CASE("offline bound: keeps the block used next, not the one used never") {
  // Capacity 2 blocks. A = [a1, a2], B = [b1], then A again: Belady evicts b1 (never used
  // again) or a leaf of A used later; A's second visit must hit both blocks (8 tokens, capped 7).
  const std::vector<vt::trace_request> trace = {request(8, {1, 2}), request(4, {3}), request(8, {1, 2})};
  const vt::prefix_index index = vt::index_prefixes(trace);
  CHECK(index.nodes() == 3);
  CHECK(vt::offline_hit_tokens(index, trace, 2) == 7);
  CHECK(vt::offline_hit_tokens(index, trace, 1) == 4);  // only a1 can stay
  CHECK(index.infinite_hit[2] == 7);
}
