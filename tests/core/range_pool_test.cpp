// The range pool on its own: the range cache's limit, a release deferred into a job, and the
// scratch range reserved once and freed with the cached ranges.

#include <doctest/doctest.h>

#include <vector>

#include "backends/sim_backend.hpp"
#include "core/range_pool.hpp"
#include "core/vmm_gate.hpp"

using namespace vtensor;

TEST_CASE("range_pool: a range the cache does not keep is freed by the job that unmaps it, not at once") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  vmm_gate gate(sim);
  range_pool ranges(gate, 4 * k_chunk_bytes, k_chunk_bytes, 1);
  const device_addr a = ranges.alloc();
  const device_addr b = ranges.alloc();
  mapping_job job;
  ranges.free_deferred(a, job);  // kept: the cache has room
  ranges.free_deferred(b, job);  // over the limit: the job frees it
  CHECK(ranges.cached() == 1);
  CHECK(job.free_ranges == std::vector<device_addr>{b});
  CHECK(sim.live().ranges == 2);
  gate.vmm([&](vmm_backend& be) { be.free_range(b); });
  CHECK(ranges.alloc() == a);
  ranges.free(a);
  gate.locked([&](vmm_backend& be) { ranges.release(be); });
  CHECK(sim.live().ranges == 0);
}

TEST_CASE("range_pool: the scratch range is reserved on first use only and freed by release") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  vmm_gate gate(sim);
  range_pool ranges(gate, 4 * k_chunk_bytes, k_chunk_bytes, 0);
  CHECK_FALSE(ranges.has_scratch());
  const device_addr s = gate.locked([&](vmm_backend& b) { return ranges.scratch(b); });
  CHECK(gate.locked([&](vmm_backend& b) { return ranges.scratch(b); }) == s);
  CHECK(ranges.has_scratch());
  CHECK(sim.counters().calls_of(vmm_call::reserve) == 1);
  gate.locked([&](vmm_backend& b) { ranges.release(b); });
  CHECK_FALSE(ranges.has_scratch());
  CHECK(sim.live().ranges == 0);
}
