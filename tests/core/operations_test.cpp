// The operations (VTO) on their own: physical allocation from the free pool first, all-or-none
// batches, eviction of cached prefixes to make room, the range cache, and unmapping a run of
// adjacent mappings in one driver call.

#include <doctest/doctest.h>

#include <vector>

#include "backends/sim_backend.hpp"
#include "core/eviction_order.hpp"
#include "core/operations.hpp"

using namespace vtensor;

namespace {

/// Llama-3-8B token-major: one tensor, so a page is one chunk.
const kv_geometry k_geometry(*model_preset("llama-3-8b"), kv_layout::token_major);
constexpr std::uint64_t k_range_bytes = 4 * k_chunk_bytes;

operations make_ops(vmm_backend& b, std::size_t range_cache = 2) {
  return operations(b, k_geometry, k_range_bytes, make_eviction_order({}), range_cache);
}

std::uint64_t calls(const operations& ops, vmm_call c) { return ops.gate().vmm_stats().calls_of(c); }

/// Hangs chunk `c` on the tree as page 0 of a one-block prefix with key `key`.
void cache(operations& ops, chunk_id c, std::uint64_t key) {
  const std::vector<token_block> k{{key, 16}};
  radix_path path = ops.cache().tree().insert(k);
  page_version v;
  v.page = 0;
  v.valid_bytes = k_chunk_bytes;
  v.last_token = 15;
  v.chunks = {c};
  ops.cache().record_page(*path.deepest(), std::move(v));
}

}  // namespace

TEST_CASE("operations: a chunk given back goes to the free pool and is taken from there first") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  operations ops = make_ops(sim);
  const auto a = ops.pool().alloc();
  REQUIRE(a);
  CHECK(ops.counters().chunks_created == 1);
  CHECK(ops.counters().pool_hits == 0);
  ops.pool().unuse(*a);
  CHECK(ops.pool().records().free_count() == 1);
  const auto b = ops.pool().alloc();
  REQUIRE(b);
  CHECK(*b == *a);
  CHECK(ops.counters().pool_hits == 1);
  CHECK(calls(ops, vmm_call::create) == 1);  // the driver was asked once
  ops.pool().unuse(*b);
  ops.check_invariants();
  CHECK(ops.trim() == 1);
  CHECK(sim.live().chunks == 0);
}

TEST_CASE("operations: alloc_chunks is all or none - what it took on a failure is kept in the pool") {
  sim_backend sim(3 * k_chunk_bytes, latency_model::zero());
  operations ops = make_ops(sim);
  std::vector<chunk_id> held;
  REQUIRE(ops.pool().alloc_run(2, nullptr, held));
  CHECK(held.size() == 2);
  CHECK_FALSE(ops.pool().alloc_run(2, nullptr, held));
  CHECK(held.size() == 2);  // nothing appended
  CHECK(ops.pool().records().live() == 3);
  CHECK(ops.pool().records().free_count() == 1);
  // At capacity no create reaches the driver: the failed attempt charged nothing.
  CHECK(calls(ops, vmm_call::create) == 3);
  for (chunk_id c : held) ops.pool().unuse(c);
  ops.check_invariants();
}

TEST_CASE("operations: eviction frees cached chunks when the device is full") {
  sim_backend sim(1 * k_chunk_bytes, latency_model::zero());
  operations ops = make_ops(sim);
  const auto c = ops.pool().alloc();
  REQUIRE(c);
  cache(ops, *c, 7);
  CHECK(ops.pool().records().free_count() == 0);
  CHECK_FALSE(ops.pool().alloc());  // full, and alloc_chunk does not evict
  const auto again = ops.pool().alloc_evicting(ops.cache());
  REQUIRE(again);
  CHECK(*again == *c);
  CHECK(ops.counters().evicted_nodes == 1);
  CHECK(ops.cache().tree().page_count() == 0);
  CHECK_FALSE(ops.cache().evict_one());  // nothing left to evict
  ops.pool().unuse(*again);
  ops.check_invariants();
}

TEST_CASE("operations: freed ranges are cached up to the limit and reused without a reserve") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  operations ops = make_ops(sim, 1);
  const device_addr a = ops.ranges().alloc();
  const device_addr b = ops.ranges().alloc();
  CHECK(a != b);
  CHECK(calls(ops, vmm_call::reserve) == 2);
  ops.ranges().free(a);  // cached
  ops.ranges().free(b);  // over the limit: freed
  CHECK(ops.ranges().cached() == 1);
  CHECK(sim.live().ranges == 1);
  CHECK(calls(ops, vmm_call::free_range) == 1);
  CHECK(ops.ranges().alloc() == a);
  CHECK(calls(ops, vmm_call::reserve) == 2);
  CHECK(ops.ranges().cached() == 0);
  ops.ranges().free(a);
  ops.trim();
  CHECK(sim.live().ranges == 0);
}

TEST_CASE("operations: a run of adjacent mappings is unmapped in one call - its chunks return to the pool") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  operations ops = make_ops(sim);
  const device_addr base = ops.ranges().alloc();
  std::vector<chunk_id> chunks;
  REQUIRE(ops.pool().alloc_run(3, nullptr, chunks));
  mapping_job job;
  std::vector<mapping*> run;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    run.push_back(&ops.maps().map_deferred(base + i * k_chunk_bytes, chunks[i], request_id{1}, false, job));
  }
  CHECK(job.chunks() == 3);
  CHECK(sim.live().mappings == 0);  // recorded, not yet run
  ops.gate().run_now(job);
  CHECK(sim.live().mappings == 3);
  CHECK(ops.maps().mapped_chunks() == 3);
  CHECK(ops.maps().records().size() == 3);
  mapped_range r;  // the vSet finds mappings through the range holding them
  r.base = base;
  r.tensor_span_bytes = k_range_bytes;
  r.tensors = 1;
  r.mapped_pages = 3;
  r.maps = run;
  ops.maps().track(r);
  ops.check_invariants();

  ops.maps().unmap_run(run);
  r.maps.clear();
  r.mapped_pages = 0;
  CHECK(calls(ops, vmm_call::unmap) == 1);
  CHECK(sim.live().mappings == 0);
  CHECK(ops.maps().mapped_chunks() == 0);
  CHECK(ops.pool().records().free_count() == 3);
  ops.check_invariants();
  ops.maps().untrack(r);
  ops.ranges().free(base);
}
