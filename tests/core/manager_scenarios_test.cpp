// Scenarios of docs/architecture.md on the simulated device: conversation turns reusing a prefix,
// a prefix forked into concurrent requests, long extension with a fixed pointer, and running out
// of memory with and without cached prefixes.

#include <doctest/doctest.h>

#include <set>
#include <thread>

#include "backends/sim_backend.hpp"
#include "core/manager.hpp"
#include "tests/core/manager_test_support.hpp"

using namespace vtensor;
using namespace vtensor::core_testing;

namespace {

std::set<std::uint64_t> chunks_of(const sim_backend& sim, const vtensor_view& v, std::uint32_t pages) {
  std::set<std::uint64_t> out;
  for (std::uint32_t t = 0; t < v.tensors; ++t) {
    for (std::uint32_t p = 0; p < pages; ++p) {
      auto h = sim.mapped_chunk(v.tensor(t) + p * k_chunk_bytes);
      REQUIRE(h.has_value());
      out.insert(h->value);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("scenario: three-turn conversation reuses turn 1's whole chunks without new memory") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  manager m(sim, llama_config(kv_layout::kv_fused));  // 512 tokens a page, 32 tensors
  const std::uint64_t page_bytes = 32 * k_chunk_bytes;

  // Turn 1: 4 whole blocks + a 100-token partial block; 300 tokens of answer.
  auto turn1 = run_of_blocks(0, 4) + std::vector<token_block>{{100, 100}};
  auto r1 = m.create(request_id{1}, turn1, 2148);
  REQUIRE(r1.ok());
  CHECK(r1.hit_tokens == 0);
  REQUIRE(m.extend(request_id{1}, 300).ok());
  const auto v1 = *m.view(request_id{1});
  const auto turn1_chunks = chunks_of(sim, v1, 4);
  m.finish(request_id{1});
  m.check_invariants();
  const auto after1 = m.stats();
  CHECK(after1.memory.physical_bytes == 5 * page_bytes);
  CHECK(after1.memory.cached_bytes == 5 * page_bytes);  // 4 whole pages + the partial one, all cached
  CHECK(after1.memory.mapped_bytes == 0);

  // Turn 2: turn 1's 4 whole blocks, then new blocks (the answer changed block 4's content).
  auto turn2 = run_of_blocks(0, 4) + run_of_blocks(200, 1) + std::vector<token_block>{{201, 88}};
  auto r2 = m.create(request_id{2}, turn2, 2648);
  REQUIRE(r2.ok());
  CHECK(r2.hit_tokens == 2048);
  CHECK(r2.shared_pages == 4);
  CHECK(r2.cow_bytes == 0);
  const auto v2 = *m.view(request_id{2});
  CHECK(chunks_of(sim, v2, 4) == turn1_chunks);  // the very same chunks, mapped again
  // Only its own pages 4 and 5 take new memory; turn 1's five pages stay cached.
  CHECK(m.stats().memory.physical_bytes == (5 + 2) * page_bytes);
  REQUIRE(m.extend(request_id{2}, 200).ok());
  m.finish(request_id{2});
  m.check_invariants();

  // Turn 3 reuses turn 2's five whole blocks (including the new block 200).
  auto turn3 =
      run_of_blocks(0, 4) + run_of_blocks(200, 1) + run_of_blocks(300, 1) + std::vector<token_block>{{301, 40}};
  const auto before3 = m.stats();
  auto r3 = m.create(request_id{3}, turn3, 3112);
  REQUIRE(r3.ok());
  CHECK(r3.hit_tokens == 2560);
  CHECK(r3.shared_pages == 5);
  const auto v3 = *m.view(request_id{3});
  CHECK(chunks_of(sim, v3, 4) == turn1_chunks);
  // Turn 3 needs 7 pages, 5 shared: 2 new pages, taken from turn 2's free pool (turn 2's page 5
  // was recorded partial and cached; the lookahead-free pool holds nothing else) or created.
  CHECK(m.stats().memory.physical_bytes - before3.memory.physical_bytes <= 2 * page_bytes);
  CHECK(m.stats().prefix_hit_tokens == 2048 + 2560);
  m.finish(request_id{3});
  m.check_invariants();
  m.shutdown();
  CHECK(sim.live().chunks == 0);
  CHECK(sim.live().ranges == 0);
  CHECK(sim.live().mappings == 0);
}

TEST_CASE("scenario: one cached prefix forked into 8 concurrent requests") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  manager m(sim, llama_config(kv_layout::kv_fused));
  const std::uint64_t page_bytes = 32 * k_chunk_bytes;
  const auto system_prompt = run_of_blocks(1, 8);  // 4096 tokens: 8 pages
  REQUIRE(m.create(request_id{100}, system_prompt, 4096).ok());
  m.finish(request_id{100});
  for (std::uint64_t i = 0; i < 8; ++i) {
    auto blocks = system_prompt + std::vector<token_block>{{1000 + i, 300}};
    auto r = m.create(request_id{i}, blocks, 4396);
    REQUIRE(r.ok());
    CHECK(r.hit_tokens == 4096);
    CHECK(r.shared_pages == 8);
  }
  m.check_invariants();
  auto s = m.stats();
  CHECK(s.live_requests == 8);
  CHECK(s.memory.physical_bytes == (8 + 8) * page_bytes);  // the prefix once, one own page each
  CHECK(s.memory.mapped_bytes == (8 + 8) * page_bytes);
  CHECK(s.memory.used_bytes == 8 * page_bytes + 8 * 300 * 128 * 1024);
  CHECK(s.memory.logical_bytes == 8 * 4396ull * 128 * 1024);
  CHECK(s.memory.sharing_saving() > 0.8);
  for (std::uint64_t i = 0; i < 8; ++i) m.finish(request_id{i});
  m.check_invariants();
}

TEST_CASE("scenario: a live request forked into 8 children shares whole pages, copies the partial one") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  manager m(sim, llama_config(kv_layout::token_major));                // 16 tokens a page, 1 tensor
  REQUIRE(m.create(request_id{1}, run_of_blocks(1, 2, 16), 40).ok());  // 2.5 pages
  for (std::uint64_t c = 0; c < 8; ++c) {
    auto r = m.fork(request_id{1}, request_id{10 + c});
    REQUIRE(r.ok());
    CHECK(r.hit_tokens == 40);
    CHECK(r.shared_pages == 2);
    CHECK(r.cow_bytes == 8 * 128 * 1024);  // 8 tokens of the partial third page
  }
  m.check_invariants();
  const auto s = m.stats();
  CHECK(s.memory.physical_bytes == (2 + 9) * k_chunk_bytes);  // 2 shared pages + 9 private tails
  CHECK(s.cow_bytes == 8 * 8 * 128 * 1024);
  // Children write their own tails; the parent goes on too.
  for (std::uint64_t c = 0; c < 8; ++c) REQUIRE(m.extend(request_id{10 + c}, 30).ok());
  REQUIRE(m.extend(request_id{1}, 5).ok());
  m.check_invariants();
  m.finish(request_id{1});
  for (std::uint64_t c = 0; c < 8; ++c) m.finish(request_id{10 + c});
  m.check_invariants();
  CHECK_THROWS_AS((void)m.fork(request_id{1}, request_id{99}), std::invalid_argument);
}

TEST_CASE("scenario: extend across many chunks, the pointer never moves") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  manager m(sim, llama_config(kv_layout::kv_split, 2));  // 1024 tokens a page, lookahead 2 pages
  REQUIRE(m.create(request_id{7}, {}, 10).ok());
  const auto v0 = *m.view(request_id{7});
  CHECK(v0.mapped_tokens == 3 * 1024);  // one page + two ahead
  const auto k5 = m.layer(request_id{7}, 5);
  for (int i = 0; i < 40000; ++i) REQUIRE(m.extend(request_id{7}, 1).ok());
  const auto v = *m.view(request_id{7});
  CHECK(v.base == v0.base);
  CHECK(m.layer(request_id{7}, 5).k_offset_bytes == k5.k_offset_bytes);
  CHECK(v.tokens == 40010);
  CHECK(v.mapped_tokens >= v.tokens + 2 * 1024);
  // Every page up to the tokens is mapped and accessible in every tensor.
  for (std::uint32_t t = 0; t < v.tensors; ++t) {
    for (std::uint64_t p = 0; p * 1024 < v.tokens; ++p) {
      REQUIRE(sim.accessible(v.tensor(t) + p * k_chunk_bytes));
    }
  }
  m.check_invariants();
  const auto s = m.stats();
  CHECK(s.memory.used_bytes == 40010ull * 128 * 1024);
  CHECK(s.memory.internal_fragmentation() < 0.1);
  CHECK_THROWS_AS((void)m.extend(request_id{7}, 131072), std::invalid_argument);
  CHECK_THROWS_AS((void)m.extend(request_id{8}, 1), std::invalid_argument);
}

TEST_CASE("scenario: out of memory evicts cached prefixes first") {
  // 10 pages of kv-fused Llama-3-8B (32 chunks a page).
  sim_backend sim(10 * 32 * k_chunk_bytes, latency_model::zero());
  manager m(sim, llama_config(kv_layout::kv_fused));
  REQUIRE(m.create(request_id{1}, run_of_blocks(0, 4), 2048).ok());
  m.finish(request_id{1});
  REQUIRE(m.create(request_id{2}, run_of_blocks(50, 4), 2048).ok());
  m.finish(request_id{2});
  CHECK(m.stats().memory.cached_bytes == 8 * 32 * k_chunk_bytes);
  // Needs 6 pages: 2 are left on the device, 4 come from evicting the least recently used prefix.
  auto r = m.create(request_id{3}, run_of_blocks(90, 5), 3000);
  REQUIRE(r.ok());
  const auto s = m.stats();
  CHECK(s.evicted_nodes == 1);
  CHECK(s.memory.physical_bytes == 10 * 32 * k_chunk_bytes);
  m.check_invariants();
  // Request 1's prefix went (LRU); request 2's is still there.
  auto again = m.create(request_id{4}, run_of_blocks(50, 4) + std::vector<token_block>{{60, 52}}, 2100);
  // Its prefix is cached (and now pinned by it), but its own page finds no memory: preempt.
  CHECK(again.status == alloc_status::needs_preemption);
  CHECK(m.stats().evicted_nodes == 1);
  m.check_invariants();
}

TEST_CASE("scenario: out of memory with nothing cached asks the caller to preempt") {
  sim_backend sim(10 * 32 * k_chunk_bytes, latency_model::zero());
  manager m(sim, llama_config(kv_layout::kv_fused));
  REQUIRE(m.create(request_id{1}, {}, 8 * 512).ok());
  const auto before = m.stats();
  auto r = m.create(request_id{2}, {}, 3 * 512);
  CHECK(r.status == alloc_status::needs_preemption);
  const auto after = m.stats();
  CHECK(after.memory.physical_bytes == before.memory.physical_bytes + 2 * 32 * k_chunk_bytes);
  CHECK(after.memory.mapped_bytes == before.memory.mapped_bytes);
  CHECK(after.live_requests == 1);
  CHECK(after.memory.free_pool_bytes == 2 * 32 * k_chunk_bytes);  // created, kept for reuse, not leaked
  CHECK(after.preemption_signals == 1);
  m.check_invariants();
  CHECK(m.extend(request_id{1}, 3 * 512).status == alloc_status::needs_preemption);
  CHECK(m.view(request_id{1})->tokens == 8 * 512);
  m.check_invariants();
  m.preempt(request_id{1});
  REQUIRE(m.create(request_id{2}, {}, 3 * 512).ok());
  m.check_invariants();
  m.shutdown();
  CHECK(sim.live().chunks == 0);
}

TEST_CASE("scenario: partial prefix page, copy-on-write versus recompute") {
  for (auto policy : {partial_page_policy::cow, partial_page_policy::recompute}) {
    CAPTURE(to_string(policy));
    sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
    manager m(sim, llama_config(kv_layout::kv_split, 0, policy));  // 1024-token pages, 512-token blocks
    REQUIRE(m.create(request_id{1}, run_of_blocks(0, 3), 1536).ok());
    m.finish(request_id{1});
    auto r = m.create(request_id{2}, run_of_blocks(0, 3) + run_of_blocks(9, 1), 2048);
    REQUIRE(r.ok());
    CHECK(r.shared_pages == 1);
    if (policy == partial_page_policy::cow) {
      CHECK(r.hit_tokens == 1536);
      CHECK(r.cow_bytes == 64ull * 512 * 2048);
      // The unmapped cached source was mapped at a scratch address for the copy.
      CHECK(m.stats().vmm.calls_of(vmm_call::map) == 128 + 128 + 64);
    } else {
      CHECK(r.hit_tokens == 1024);
      CHECK(r.cow_bytes == 0);
      CHECK(m.stats().recomputed_tokens == 512);
    }
    m.check_invariants();
  }
}

TEST_CASE("manager: bad arguments are rejected and change nothing") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  manager m(sim, llama_config(kv_layout::kv_fused));
  CHECK_THROWS_AS((void)m.create(request_id{1}, {}, 0), std::invalid_argument);
  CHECK_THROWS_AS((void)m.create(request_id{1}, {}, 10, 200000), std::invalid_argument);
  CHECK_THROWS_AS((void)m.create(request_id{1}, run_of_blocks(0, 2), 600), std::invalid_argument);
  CHECK_THROWS_AS((void)m.create(request_id{1}, {}, 100, 50), std::invalid_argument);
  REQUIRE(m.create(request_id{1}, {}, 100).ok());
  CHECK_THROWS_AS((void)m.create(request_id{1}, {}, 100), std::invalid_argument);
  CHECK_THROWS_AS(m.finish(request_id{2}), std::invalid_argument);
  CHECK_THROWS_AS(m.preempt(request_id{2}), std::invalid_argument);
  CHECK_THROWS_AS((void)m.layer(request_id{2}, 0), std::invalid_argument);
  CHECK(m.stats().live_requests == 1);
  m.check_invariants();
  manager_config bad = llama_config(kv_layout::kv_fused);
  bad.eviction.name = "mru";
  CHECK_THROWS_AS(manager(sim, bad), std::invalid_argument);
}

TEST_CASE("manager: concurrent callers on distinct requests") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  manager m(sim, llama_config(kv_layout::token_major, 1));
  std::vector<std::thread> threads;
  for (std::uint64_t t = 0; t < 4; ++t) {
    threads.emplace_back([&m, t] {
      for (std::uint64_t i = 0; i < 200; ++i) {
        const request_id id{t * 1000 + i};
        auto blocks = run_of_blocks(t, 2, 16);
        if (!m.create(id, blocks, 40).ok()) continue;
        for (int k = 0; k < 20; ++k) (void)m.extend(id, 3);
        m.finish(id);
      }
    });
  }
  for (auto& th : threads) th.join();
  m.check_invariants();
  CHECK(m.stats().live_requests == 0);
  CHECK(m.stats().prefix_hit_tokens > 0);
  m.shutdown();
  CHECK(sim.live().chunks == 0);
}

TEST_CASE("manager: a lease on decode rounds ends at the next operation and at its last round") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  manager_config config;
  config.geometry = kv_geometry(*model_preset("llama-3-8b"), kv_layout::kv_fused);
  manager m(sim, config);
  const std::vector<request_id> ids{request_id{1}, request_id{2}};
  REQUIRE(m.create(ids[0], {}, 100, 4000).ok());
  REQUIRE(m.create(ids[1], {}, 300, 4000).ok());
  round_lease lease = m.lease_rounds(ids);
  REQUIRE(lease.rounds() == 512 - 300);  // kv-fused: 512 tokens a page; request 2 has the least room
  const memory_stats after = m.grow_round(lease);
  CHECK(after == m.memory());
  CHECK(lease.rounds() == 512 - 300 - 1);
  REQUIRE(m.extend(ids[0], 1).ok());  // another operation: the lease is stale
  CHECK_THROWS_AS((void)m.grow_round(lease), std::logic_error);
  round_lease fresh = m.lease_rounds(ids);
  REQUIRE(fresh.rounds() == 512 - 301);
  while (fresh.rounds() > 0) (void)m.grow_round(fresh);
  CHECK_THROWS_AS((void)m.grow_round(fresh), std::logic_error);  // no round left
  CHECK(m.view(ids[1])->tokens == 512);
  m.check_invariants();
}
