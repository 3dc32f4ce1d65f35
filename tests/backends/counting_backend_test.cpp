#include "backends/counting_backend.hpp"

#include <vector>

#include <doctest/doctest.h>

#include "backends/fault_injection_backend.hpp"
#include "backends/sim_backend.hpp"
#include "tests/backends/test_helpers.hpp"

namespace vtensor::backend_testing {
namespace {

std::unique_ptr<vmm_backend> h200_sim(std::uint64_t capacity_chunks) {
  return std::make_unique<sim_backend>(capacity_chunks * k_chunk_bytes, latency_model::h200());
}

TEST_SUITE("backends") {
  TEST_CASE("counting_backend: forwards every call and mirrors the inner counters and time") {
    counting_backend b(h200_sim(4));
    CHECK(b.name() == "counting(sim)");
    CHECK(b.capacity_chunks() == 4);
    CHECK(b.granularity_bytes() == 2 * k_mib);

    const device_addr base = b.reserve(8 * k_mib);
    const auto h = b.create_chunk();
    REQUIRE(h);
    b.map(base, *h);
    b.map(base + k_chunk_bytes, *h);
    b.set_access(base, 2 * k_chunk_bytes);
    CHECK(b.live().mappings == 2);
    CHECK(dynamic_cast<const sim_backend&>(b.inner()).accessible(base));
    check_vmm_error(vmm_call::map, [&] { b.map(base, *h); });
    b.unmap(base, 2 * k_chunk_bytes);
    b.release_chunk(*h);
    b.free_range(base);

    CHECK(b.counters().calls == b.inner().counters().calls);
    CHECK(b.counters().time_ns == b.inner().counters().time_ns);
    CHECK(b.counters().time_ns_of(vmm_call::set_access) == 2 * 44'070);
    CHECK(b.live().ranges == 0);
    CHECK(b.trace().empty());
  }

  TEST_CASE("counting_backend: traces each call with its result and charged time") {
    counting_backend b(h200_sim(1));
    b.enable_trace();
    const device_addr base = b.reserve(4 * k_mib);
    const auto h = b.create_chunk();
    REQUIRE(h);
    CHECK_FALSE(b.create_chunk().has_value());
    b.map(base, *h);
    CHECK_THROWS_AS(b.unmap(base, 4 * k_mib), vmm_error);
    b.set_access(base, k_chunk_bytes);

    const std::vector<trace_record> trace = b.take_trace();
    REQUIRE(trace.size() == 6);
    CHECK(trace[0].call == vmm_call::reserve);
    CHECK(trace[0].va == base);
    CHECK(trace[0].bytes == 4 * k_mib);
    CHECK(trace[0].charged_ns == 4'360);
    CHECK(trace[1].call == vmm_call::create);
    CHECK(trace[1].handle == *h);
    CHECK(trace[1].result == call_result::ok);
    CHECK(trace[2].result == call_result::out_of_memory);
    CHECK(trace[2].handle == chunk_handle{});
    CHECK(trace[3].call == vmm_call::map);
    CHECK(trace[3].handle == *h);
    CHECK(trace[3].charged_ns == 2'340);
    CHECK(trace[4].call == vmm_call::unmap);
    CHECK(trace[4].result == call_result::error);
    CHECK(trace[4].charged_ns == 0);
    CHECK(trace[5].call == vmm_call::set_access);
    CHECK(trace[5].charged_ns == 44'070);
    CHECK(b.trace().empty());
    CHECK(to_string(call_result::out_of_memory) == "out_of_memory");
  }

  TEST_CASE("counting_backend: a bounded trace drops and counts the overflow - a sink sees all") {
    counting_backend b(h200_sim(8));
    b.enable_trace(2);
    std::vector<vmm_call> seen;
    b.set_sink([&](const trace_record& r) { seen.push_back(r.call); });
    for (int i = 0; i < 5; ++i) {
      b.release_chunk(b.create_chunk().value());
    }
    CHECK(b.trace().size() == 2);
    CHECK(b.dropped_records() == 8);
    CHECK(seen.size() == 10);
    CHECK(seen[1] == vmm_call::release);
    b.disable_trace();
    b.set_sink({});
    b.release_chunk(b.create_chunk().value());
    CHECK(b.trace().size() == 2);
    CHECK(seen.size() == 10);
  }

  TEST_CASE("counting_backend: stacked adaptors report the innermost backend's time") {
    auto faulty = std::make_unique<fault_injection_backend>(h200_sim(8), 1);
    faulty->fail_nth(vmm_call::map, 1);
    counting_backend b(std::move(faulty));
    CHECK(b.name() == "counting(fault_injection(sim))");
    const device_addr base = b.reserve(2 * k_mib);
    const auto h = b.create_chunk();
    REQUIRE(h);
    CHECK_THROWS_AS(b.map(base, *h), vmm_error);
    b.map(base, *h);
    b.set_access(base, k_chunk_bytes);
    const vmm_backend& sim = dynamic_cast<const backend_adaptor&>(b.inner()).inner();
    CHECK(b.counters().time_ns == sim.counters().time_ns);
    CHECK(b.counters().calls_of(vmm_call::map) == 2);
    CHECK(sim.counters().calls_of(vmm_call::map) == 1);
    CHECK_THROWS_AS(counting_backend(nullptr), std::invalid_argument);
  }

}  // TEST_SUITE

}  // namespace
}  // namespace vtensor::backend_testing
