// The preallocated device region of the baseline policies (sim/device_pool.hpp).
#include <doctest/doctest.h>

#include <limits>

#include "backends/fault_injection_backend.hpp"
#include "backends/sim_backend.hpp"
#include "sim/device_pool.hpp"

using namespace vtensor;
using namespace vtensor::sim;

TEST_SUITE("device_pool") {
  TEST_CASE("a finite budget is mapped whole at start and given back at the end") {
    backend_config cfg;
    cfg.capacity_bytes = 10 * k_chunk_bytes;
    device_pool pool("sim", cfg, 5 * k_chunk_bytes + 123);
    CHECK(pool.preallocated());
    CHECK(pool.physical_bytes() == 5 * k_chunk_bytes);
    CHECK(pool.capacity_bytes() == 5 * k_chunk_bytes);
    CHECK(pool.backend().inner().live().chunks == 5);
    CHECK(pool.backend().inner().live().mappings == 5);
    CHECK(pool.startup_vmm_ns() > 0);
    CHECK(pool.grow_to(5 * k_chunk_bytes));
    CHECK_FALSE(pool.grow_to(6 * k_chunk_bytes));
  }

  TEST_CASE("an unlimited budget grows by whole chunks on demand") {
    backend_config cfg;
    cfg.capacity_bytes = std::numeric_limits<std::uint64_t>::max();
    device_pool pool("sim", cfg, std::numeric_limits<std::uint64_t>::max());
    CHECK_FALSE(pool.preallocated());
    CHECK(pool.physical_bytes() == 0);
    // Start-up is the reserve alone: everything charged so far.
    const std::uint64_t startup = pool.backend().step_side().total_model_ns();
    CHECK(startup > 0);
    CHECK(pool.startup_vmm_ns() == startup);
    CHECK(pool.grow_to(3 * k_chunk_bytes + 1));
    CHECK(pool.physical_bytes() == 4 * k_chunk_bytes);
    CHECK(pool.startup_vmm_ns() == startup);  // growth is not start-up work
    CHECK(pool.backend().step_side().total_model_ns() > startup);
  }

  TEST_CASE("a device smaller than the budget fails naming both sizes") {
    backend_config cfg;
    cfg.capacity_bytes = 2 * k_chunk_bytes;
    CHECK_THROWS_WITH_AS(device_pool("sim", cfg, 4 * k_chunk_bytes), doctest::Contains("could back only"),
                         std::runtime_error);
  }

  TEST_CASE("a budget below one chunk is refused") {
    backend_config cfg;
    CHECK_THROWS_AS(device_pool("sim", cfg, k_chunk_bytes - 1), std::invalid_argument);
  }

  TEST_CASE("a failed map while preallocating throws the driver's error") {
    backend_config cfg;
    cfg.capacity_bytes = 8 * k_chunk_bytes;
    auto faulty = std::make_unique<fault_injection_backend>(make_backend("sim", cfg), 1);
    faulty->fail_nth(vmm_call::map, 3);
    CHECK_THROWS_AS(device_pool(std::move(faulty), latency_model::zero(), 6 * k_chunk_bytes), vmm_error);
  }
}
