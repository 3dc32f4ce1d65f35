#include "backends/fault_injection_backend.hpp"

#include <algorithm>
#include <vector>

#include <doctest/doctest.h>

#include "backends/sim_backend.hpp"
#include "tests/backends/test_helpers.hpp"

namespace vtensor::backend_testing {
namespace {

std::unique_ptr<fault_injection_backend> faulty_sim(std::uint64_t seed) {
  return std::make_unique<fault_injection_backend>(
      std::make_unique<sim_backend>(sim_backend::k_unlimited, latency_model::h200()), seed);
}

/// Which of `n` creates fail on a fresh backend with `seed` and probability `p`.
std::vector<bool> create_failures(std::uint64_t seed, double p, int n) {
  const auto b = faulty_sim(seed);
  b->fail_with_probability(vmm_call::create, p);
  std::vector<bool> failed;
  for (int i = 0; i < n; ++i) {
    failed.push_back(!b->create_chunk().has_value());
  }
  return failed;
}

TEST_SUITE("backends") {
  TEST_CASE("map_with_access: a failed set-access undoes the map, counted as an unmap") {
    const auto b = faulty_sim(0);
    b->fail_nth(vmm_call::set_access, 1);
    const device_addr base = b->reserve(4 * k_mib);
    const auto h = b->create_chunk();
    REQUIRE(h);
    check_vmm_error(vmm_call::set_access, [&] { b->map_with_access(base, *h); });
    CHECK(b->live().mappings == 0);
    CHECK(b->inner().live().mappings == 0);
    CHECK(b->counters().calls_of(vmm_call::map) == 1);
    CHECK(b->counters().calls_of(vmm_call::set_access) == 1);
    CHECK(b->counters().calls_of(vmm_call::unmap) == 1);
    b->map_with_access(base, *h);  // the rule fired once: now it maps, with access
    CHECK(dynamic_cast<const sim_backend&>(b->inner()).accessible(base));
    b->fail_nth(vmm_call::map, 3);  // the next map
    check_vmm_error(vmm_call::map, [&] { b->map_with_access(base + k_chunk_bytes, *h); });
    CHECK(b->counters().calls_of(vmm_call::set_access) == 2);  // no set-access after a failed map
    b->unmap(base, k_chunk_bytes);
    b->release_chunk(*h);
    b->free_range(base);
    CHECK(b->live().chunks == 0);
  }

  TEST_CASE("fault_injection_backend: the n-th call fails once, without reaching the inner backend") {
    const auto b = faulty_sim(0);
    CHECK(b->name() == "fault_injection(sim)");
    b->fail_nth(vmm_call::map, 2);
    const device_addr base = b->reserve(8 * k_mib);
    const auto h = b->create_chunk();
    REQUIRE(h);
    b->map(base, *h);

    const vmm_live live_before = b->inner().live();
    const vmm_counters inner_before = b->inner().counters();
    try {
      b->map(base + k_chunk_bytes, *h);
      FAIL("expected an injected fault");
    } catch (const vmm_error& e) {
      CHECK(e.call() == vmm_call::map);
      CHECK(e.addr() == base + k_chunk_bytes);
      CHECK(std::string(e.what()).find("injected fault") != std::string::npos);
    }
    CHECK(b->inner().live().mappings == live_before.mappings);
    CHECK(b->inner().counters().calls == inner_before.calls);
    CHECK(b->inner().counters().time_ns == inner_before.time_ns);
    CHECK_FALSE(dynamic_cast<const sim_backend&>(b->inner()).mapped_chunk(base + k_chunk_bytes));

    b->map(base + k_chunk_bytes, *h);
    b->map(base + 2 * k_chunk_bytes, *h);
    CHECK(b->faults_injected() == 1);
    CHECK(b->faults_injected(vmm_call::map) == 1);
    CHECK(b->counters().calls_of(vmm_call::map) == 4);
    CHECK(b->inner().counters().calls_of(vmm_call::map) == 3);
    CHECK(b->counters().time_ns == b->inner().counters().time_ns);
  }

  TEST_CASE("fault_injection_backend: every n-th create returns out of memory") {
    const auto b = faulty_sim(0);
    b->fail_every(vmm_call::create, 3);
    std::vector<bool> ok;
    for (int i = 0; i < 7; ++i) {
      ok.push_back(b->create_chunk().has_value());
    }
    CHECK(ok == std::vector<bool>{true, true, false, true, true, false, true});
    CHECK(b->inner().live().chunks == 5);
    CHECK(b->faults_injected(vmm_call::create) == 2);
    b->clear_faults();
    CHECK(b->create_chunk().has_value());
    CHECK(b->faults_injected() == 2);
  }

  TEST_CASE("fault_injection_backend: seeded probabilistic faults are deterministic") {
    const std::uint64_t seed = 42;
    INFO("seed: " << seed);
    const std::vector<bool> first = create_failures(seed, 0.3, 200);
    CHECK(first == create_failures(seed, 0.3, 200));
    const auto failures = std::count(first.begin(), first.end(), true);
    CHECK(failures > 30);
    CHECK(failures < 90);
    const std::vector<bool> never = create_failures(seed, 0.0, 50);
    CHECK(std::count(never.begin(), never.end(), true) == 0);
    const std::vector<bool> always = create_failures(seed, 1.0, 50);
    CHECK(std::count(always.begin(), always.end(), true) == 50);

    const auto b = faulty_sim(seed);
    CHECK(b->seed() == seed);
    CHECK_THROWS_AS(b->fail_with_probability(vmm_call::map, 1.5), std::invalid_argument);
  }

  TEST_CASE("fault_injection_backend: injected failures of every kind leave the inner state alone") {
    const auto b = faulty_sim(7);
    const device_addr base = b->reserve(8 * k_mib);
    const auto h = b->create_chunk();
    REQUIRE(h);
    b->map(base, *h);
    for (std::size_t i = 0; i < k_vmm_call_kinds; ++i) {
      b->fail_every(static_cast<vmm_call>(i), 1);
    }
    const vmm_counters inner_before = b->inner().counters();
    check_vmm_error(vmm_call::reserve, [&] { (void)b->reserve(2 * k_mib); });
    check_vmm_error(vmm_call::free_range, [&] { b->free_range(base); });
    CHECK_FALSE(b->create_chunk().has_value());
    check_vmm_error(vmm_call::release, [&] { b->release_chunk(*h); });
    check_vmm_error(vmm_call::map, [&] { b->map(base + k_chunk_bytes, *h); });
    check_vmm_error(vmm_call::set_access, [&] { b->set_access(base, k_chunk_bytes); });
    check_vmm_error(vmm_call::unmap, [&] { b->unmap(base, k_chunk_bytes); });
    CHECK(b->inner().counters().calls == inner_before.calls);
    CHECK(b->inner().live().ranges == 1);
    CHECK(b->inner().live().chunks == 1);
    CHECK(b->inner().live().mappings == 1);
    CHECK(b->faults_injected() == 7);
    b->clear_faults();
    b->unmap(base, k_chunk_bytes);
    b->release_chunk(*h);
    b->free_range(base);
    CHECK(b->live().ranges == 0);
  }

}  // TEST_SUITE

}  // namespace
}  // namespace vtensor::backend_testing
