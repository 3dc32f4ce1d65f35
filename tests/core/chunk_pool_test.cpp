// The chunk pool on its own, over a gate and no prefix cache: runs all or none at the device's
// capacity, the worker's chunks created ahead adopted into the free pool, release to the driver.

#include <doctest/doctest.h>

#include <vector>

#include "backends/sim_backend.hpp"
#include "core/chunk_pool.hpp"
#include "core/vmm_gate.hpp"

using namespace vtensor;

TEST_CASE("chunk_pool: without a cache to evict from, a run the device cannot hold fails and asks the driver nothing") {
  sim_backend sim(3 * k_chunk_bytes, latency_model::zero());
  vmm_gate gate(sim);
  chunk_pool pool(gate, sim.capacity_chunks());
  std::vector<chunk_id> held;
  REQUIRE(pool.alloc_run(3, nullptr, held));
  CHECK(pool.chunks_created() == 3);
  for (chunk_id c : held) pool.unuse(c);
  CHECK(pool.records().free_count() == 3);
  const std::uint64_t calls = sim.counters().total_calls();
  std::vector<chunk_id> out;
  CHECK_FALSE(pool.alloc_run(4, nullptr, out));
  CHECK(out.empty());
  CHECK(sim.counters().total_calls() == calls);
  CHECK(pool.pool_hits() == 3);  // taken and given back, as single takes would
  CHECK(gate.locked([&](vmm_backend& b) { return pool.release_free(b); }) == 3);
  CHECK(sim.live().chunks == 0);
  CHECK(pool.records().live() == 0);
}

TEST_CASE("chunk_pool: chunks the worker creates ahead are adopted into the free pool at the next allocation") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  vmm_gate gate(sim);
  gate.enable_async(true);  // inline: the job runs as it is submitted
  chunk_pool pool(gate, sim.capacity_chunks());
  pool.create_ahead(4);
  CHECK(sim.counters().calls_of(vmm_call::create) == 4);
  CHECK(pool.records().live() == 0);  // created, not adopted yet
  const auto c = pool.alloc();
  REQUIRE(c);
  CHECK(pool.chunks_created() == 4);
  CHECK(pool.created_ahead() == 4);
  CHECK(pool.pool_hits() == 1);
  CHECK(pool.records().free_count() == 3);
  pool.create_ahead(4);  // tops the pool up by what was taken
  CHECK(sim.counters().calls_of(vmm_call::create) == 5);
  pool.unuse(*c);
  gate.drain();
  pool.adopt_created();
  CHECK(gate.locked([&](vmm_backend& b) { return pool.release_free(b); }) == 5);
  CHECK(sim.live().chunks == 0);
}
