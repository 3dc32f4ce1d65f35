#include "backends/vmm_backend.hpp"

#include <doctest/doctest.h>

#include "backends/sim_backend.hpp"
#include "tests/backends/test_helpers.hpp"

namespace vtensor::backend_testing {
namespace {

TEST_SUITE("backends") {
  TEST_CASE("vmm_backend: call names round-trip") {
    for (std::size_t i = 0; i < k_vmm_call_kinds; ++i) {
      const auto call = static_cast<vmm_call>(i);
      CHECK(vmm_call_from_string(to_string(call)) == call);
    }
    CHECK(to_string(vmm_call::set_access) == "set_access");
    CHECK(to_string(vmm_call::free_range) == "free_range");
    CHECK_FALSE(vmm_call_from_string("mmap").has_value());
    CHECK_FALSE(vmm_call_from_string("").has_value());
  }

  TEST_CASE("vmm_backend: vmm_error names the call and the address in hex") {
    const vmm_error e(vmm_call::map, 0x7f00'0020'0000, "range not reserved");
    CHECK(std::string(e.what()) == "map at 0x7f0000200000: range not reserved");
    CHECK(e.call() == vmm_call::map);
    CHECK(e.addr() == 0x7f00'0020'0000);
    CHECK(std::string(vmm_error(vmm_call::create, 0, "boom").what()) == "create: boom");
  }

  TEST_CASE("vmm_backend: counter totals add every kind") {
    vmm_counters c;
    c.calls = {1, 2, 3, 4, 5, 6, 7};
    c.time_ns = {10, 0, 0, 0, 0, 0, 5};
    CHECK(c.total_calls() == 28);
    CHECK(c.total_time_ns() == 15);
    CHECK(c.calls_of(vmm_call::unmap) == 7);
  }

  TEST_CASE("vmm_backend: misaligned calls are counted, rejected before the hook, and name why") {
    sim_backend b(sim_backend::k_unlimited, latency_model::h200());
    const device_addr base = b.reserve(4 * k_mib);
    CHECK_THROWS_WITH_AS(b.map(base + 4096, chunk_handle{1}),
                         doctest::Contains("not a multiple of the 2097152 byte granularity"), vmm_error);
    CHECK_THROWS_WITH_AS(b.set_access(base, 0), doctest::Contains("size is zero"), vmm_error);
    CHECK_THROWS_WITH_AS(b.unmap(0xffff'ffff'ffe0'0000, 4 * k_mib), doctest::Contains("wraps around"), vmm_error);
    CHECK(b.counters().calls_of(vmm_call::map) == 1);
    CHECK(b.counters().calls_of(vmm_call::set_access) == 1);
    CHECK(b.counters().calls_of(vmm_call::unmap) == 1);
    CHECK(b.counters().time_ns_of(vmm_call::map) == 0);
  }

}  // TEST_SUITE

}  // namespace
}  // namespace vtensor::backend_testing
