// rTree longest-prefix match of a 256-block key in a tree of ~100,000 cached blocks.
// Target (docs/architecture.md, "Speed targets"): <= 5 us a match.
//
// The tree mimics a serving cache: 8 system prompts (16 blocks each); under each, 16
// conversations sharing 48 more blocks (few-shot examples, documents); under each conversation,
// sequences with 192 blocks of their own. Sequences are added until the tree holds 100,000
// blocks (about 490 sequences of 256 blocks).

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "bench/bench_support.hpp"
#include "core/eviction_order.hpp"
#include "core/radix_tree.hpp"

using namespace vtensor;
using namespace vtensor::bench;

namespace {

constexpr std::size_t k_system_blocks = 16;
constexpr std::size_t k_conversation_blocks = 48;
constexpr std::size_t k_key_blocks = 256;
constexpr std::uint64_t k_tree_blocks = 100'000;
constexpr std::uint32_t k_block_tokens = 512;

struct cached_tree {
  radix_tree tree{make_eviction_order({})};
  std::vector<std::vector<token_block>> sequences;  // every inserted 256-block key

  cached_tree() {
    for (std::uint64_t s = 0; tree.block_count() < k_tree_blocks; ++s) {
      const std::uint64_t system = s % 8, conversation = (s / 8) % 16;
      auto key = chained_blocks(system, k_system_blocks, k_block_tokens);
      auto conv = chained_blocks(1000 + system * 16 + conversation, k_conversation_blocks, k_block_tokens);
      auto own = chained_blocks(1'000'000 + s, k_key_blocks - k_system_blocks - k_conversation_blocks, k_block_tokens);
      key.insert(key.end(), conv.begin(), conv.end());
      key.insert(key.end(), own.begin(), own.end());
      (void)tree.insert(key);
      sequences.push_back(std::move(key));
    }
  }
};

cached_tree& shared_tree() {
  static cached_tree t;
  return t;
}

// Matches keys of the cached sequences in turn (so the walk is not always over the same, hot,
// nodes). range(0) = 256: a full hit; range(0) = 128: the key diverges after 128 blocks.
void BM_rtree_match_256_blocks(benchmark::State& state) {
  auto& t = shared_tree();
  const auto hit_blocks = static_cast<std::size_t>(state.range(0));
  std::vector<std::vector<token_block>> keys;
  for (std::size_t i = 0; i < t.sequences.size(); ++i) {
    auto k = t.sequences[i];
    auto fresh = chained_blocks(9'000'000 + i, k_key_blocks - hit_blocks, k_block_tokens);
    std::copy(fresh.begin(), fresh.end(), k.begin() + static_cast<std::ptrdiff_t>(hit_blocks));
    keys.push_back(std::move(k));
  }
  std::size_t i = 0;
  std::uint32_t matched = 0;
  for (auto _ : state) {
    auto path = t.tree.match(keys[i]);
    matched = path.blocks;
    benchmark::DoNotOptimize(path);
    if (++i == keys.size()) i = 0;
  }
  if (matched != hit_blocks) state.SkipWithError("match length differs from the expected hit");
  state.counters["matched_blocks"] = matched;
  state.counters["tree_blocks"] = static_cast<double>(t.tree.block_count());
  state.counters["tree_nodes"] = static_cast<double>(t.tree.node_count());
  state.counters["sequences"] = static_cast<double>(t.sequences.size());
}

BENCHMARK(BM_rtree_match_256_blocks)->Name("BM_rtree_match_256_blocks/full_hit")->Arg(256)->ArgName("hit_blocks");
BENCHMARK(BM_rtree_match_256_blocks)->Name("BM_rtree_match_256_blocks/diverge_half")->Arg(128)->ArgName("hit_blocks");

}  // namespace
