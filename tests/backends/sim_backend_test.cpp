#include "backends/sim_backend.hpp"

#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "tests/backends/test_helpers.hpp"

namespace vtensor::backend_testing {
namespace {

TEST_SUITE("backends") {
  TEST_CASE("sim_backend: addresses look like the driver's and are reused after free") {
    sim_backend b(sim_backend::k_unlimited, latency_model::zero());
    const device_addr first = b.reserve(1 * k_gib);
    CHECK(first >= 0x7f00'0000'0000);
    CHECK(first + k_gib <= 0x8000'0000'0000);
    CHECK(first % (2 * k_mib) == 0);
    const device_addr second = b.reserve(64 * k_gib);
    CHECK(second + 64 * k_gib <= first);
    b.free_range(first);
    CHECK(b.reserve(1 * k_gib) == first);
    b.check_invariants();
  }

  TEST_CASE("sim_backend: freed neighbours coalesce into one block") {
    sim_backend b(sim_backend::k_unlimited, latency_model::zero());
    const std::uint64_t window_bytes = b.free_va_bytes();
    const device_addr a = b.reserve(4 * k_mib);
    const device_addr c = b.reserve(8 * k_mib);
    const device_addr d = b.reserve(2 * k_mib);
    CHECK(c + 8 * k_mib == a);
    CHECK(d + 2 * k_mib == c);
    b.free_range(c);
    CHECK(b.free_va_blocks() == 2);
    b.check_invariants();

    CHECK(b.reserve(8 * k_mib) == c);
    CHECK(b.free_va_blocks() == 1);
    b.free_range(c);

    b.free_range(a);
    CHECK(b.free_va_blocks() == 2);
    b.free_range(d);
    CHECK(b.free_va_blocks() == 1);
    CHECK(b.free_va_bytes() == window_bytes);
    CHECK(b.reserve(14 * k_mib) == d);
    b.free_range(d);
    CHECK(b.free_va_blocks() == 1);
    b.check_invariants();
  }

  TEST_CASE("sim_backend: a long replay of reserves and frees keeps reusing the window") {
    const std::uint64_t seed = 20261202;
    INFO("seed: " << seed);
    std::mt19937_64 rng(seed);
    sim_backend b(sim_backend::k_unlimited, latency_model::zero(),
                  va_window{.base = 0x7f00'0000'0000, .bytes = 1024 * k_gib});
    std::vector<device_addr> live;
    for (int i = 0; i < 20'000; ++i) {
      if (live.size() < 40 && (live.empty() || rng() % 2 == 0)) {
        live.push_back(b.reserve((1 + rng() % 16) * k_gib));
      } else {
        const std::size_t victim = rng() % live.size();
        b.free_range(live[victim]);
        live[victim] = live.back();
        live.pop_back();
      }
    }
    b.check_invariants();
    for (const device_addr base : live) {
      b.free_range(base);
    }
    CHECK(b.free_va_blocks() == 1);
    CHECK(b.live().ranges == 0);
    b.check_invariants();
  }

  TEST_CASE("sim_backend: an exhausted window throws vmm_error naming reserve") {
    sim_backend b(sim_backend::k_unlimited, latency_model::zero(),
                  va_window{.base = 0x7f00'0000'0000, .bytes = 8 * k_mib});
    const device_addr a = b.reserve(4 * k_mib);
    const device_addr c = b.reserve(4 * k_mib);
    check_vmm_error(vmm_call::reserve, [&] { (void)b.reserve(2 * k_mib); });
    b.free_range(a);
    check_vmm_error(vmm_call::reserve, [&] { (void)b.reserve(8 * k_mib); });
    CHECK(b.reserve(2 * k_mib) != 0);
    CHECK(b.live().ranges == 2);
    (void)c;
    CHECK_THROWS_AS(sim_backend(0, latency_model::zero(), va_window{.base = 4096, .bytes = 8 * k_mib}),
                    std::invalid_argument);
  }

  TEST_CASE("sim_backend: error messages name the call, the address and the reason") {
    sim_backend b(sim_backend::k_unlimited, latency_model::zero(),
                  va_window{.base = 0x7f00'0000'0000, .bytes = 64 * k_mib});
    const auto h = b.create_chunk();
    REQUIRE(h);
    CHECK_THROWS_WITH_AS(b.map(0x7f00'0020'0000, *h), "map at 0x7f0000200000: range not reserved", vmm_error);
    const device_addr base = b.reserve(4 * k_mib);
    b.map(base, *h);
    try {
      b.unmap(base, 4 * k_mib);
      FAIL("expected vmm_error");
    } catch (const vmm_error& e) {
      CHECK(e.addr() == base + k_chunk_bytes);
      CHECK(std::string(e.what()).find("span not mapped") != std::string::npos);
    }
    b.unmap(base, k_chunk_bytes);
  }

  TEST_CASE("sim_backend: accessible and mapped_chunk follow map, set_access and unmap") {
    sim_backend b(sim_backend::k_unlimited, latency_model::zero());
    const device_addr base = b.reserve(8 * k_mib);
    const auto h = b.create_chunk();
    REQUIRE(h);
    CHECK_FALSE(b.mapped_chunk(base).has_value());
    b.map(base + k_chunk_bytes, *h);
    CHECK(b.mapped_chunk(base + k_chunk_bytes + 12345) == *h);
    CHECK_FALSE(b.accessible(base + k_chunk_bytes));
    b.set_access(base + k_chunk_bytes, k_chunk_bytes);
    CHECK(b.accessible(base + k_chunk_bytes));
    CHECK(b.accessible(base + 2 * k_chunk_bytes - 1));
    CHECK_FALSE(b.accessible(base));
    b.map(base, *h);
    CHECK(b.mapping_count(*h) == 2);
    b.unmap(base + k_chunk_bytes, k_chunk_bytes);
    b.map(base + k_chunk_bytes, *h);
    CHECK_FALSE(b.accessible(base + k_chunk_bytes));
    CHECK(b.range_of(base + 3 * k_mib)->first == base);
    CHECK(b.range_of(base + 3 * k_mib)->second == 8 * k_mib);
    b.check_invariants();
  }

  TEST_CASE("sim_backend: released handles are never handed out again") {
    sim_backend b(sim_backend::k_unlimited, latency_model::zero());
    const auto first = b.create_chunk();
    REQUIRE(first);
    b.release_chunk(*first);
    const auto second = b.create_chunk();
    REQUIRE(second);
    CHECK(*second != *first);
    CHECK(b.mapping_count(*first) == 0);
    try {
      b.release_chunk(*first);
      FAIL("expected vmm_error");
    } catch (const vmm_error& e) {
      CHECK(std::string(e.what()).find("already released") != std::string::npos);
    }
    b.release_chunk(*second);
    b.check_invariants();
  }

  TEST_CASE("sim_backend: capacity rounds down to whole chunks - unlimited never runs out") {
    CHECK(sim_backend(5 * k_mib, latency_model::zero()).capacity_chunks() == 2);
    CHECK(sim_backend(5 * k_mib, latency_model::zero()).capacity_bytes() == 4 * k_mib);
    sim_backend none(k_mib, latency_model::zero());
    CHECK_FALSE(none.create_chunk().has_value());

    sim_backend b(sim_backend::k_unlimited, latency_model::zero());
    CHECK(b.unlimited());
    CHECK(b.capacity_bytes() == sim_backend::k_unlimited);
    std::vector<chunk_handle> chunks;
    for (int i = 0; i < 10'000; ++i) {
      const auto h = b.create_chunk();
      REQUIRE(h);
      chunks.push_back(*h);
    }
    CHECK(b.live().chunks == 10'000);
    for (const chunk_handle h : chunks) {
      b.release_chunk(h);
    }
    CHECK(b.live().chunks == 0);
  }

  TEST_CASE("sim_backend: charges the model's cost per call, set_access and unmap per mapping") {
    const latency_model model = latency_model::h200();
    sim_backend b(sim_backend::k_unlimited, model);
    const device_addr base = b.reserve(16 * k_mib);
    std::vector<chunk_handle> chunks;
    for (int i = 0; i < 4; ++i) {
      chunks.push_back(b.create_chunk().value());
      b.map(base + static_cast<std::uint64_t>(i) * k_chunk_bytes, chunks.back());
    }
    b.set_access(base, 4 * k_chunk_bytes);
    b.unmap(base, 3 * k_chunk_bytes);
    b.unmap(base + 3 * k_chunk_bytes, k_chunk_bytes);
    for (const chunk_handle h : chunks) {
      b.release_chunk(h);
    }
    b.free_range(base);

    const vmm_counters& c = b.counters();
    CHECK(c.time_ns_of(vmm_call::reserve) == model.cost_ns(vmm_call::reserve));
    CHECK(c.time_ns_of(vmm_call::create) == 4 * model.cost_ns(vmm_call::create));
    CHECK(c.time_ns_of(vmm_call::map) == 4 * model.cost_ns(vmm_call::map));
    CHECK(c.time_ns_of(vmm_call::set_access) == 4 * model.cost_ns(vmm_call::set_access));
    CHECK(c.time_ns_of(vmm_call::unmap) == 4 * model.cost_ns(vmm_call::unmap));
    CHECK(c.time_ns_of(vmm_call::release) == 4 * model.cost_ns(vmm_call::release));
    CHECK(c.time_ns_of(vmm_call::free_range) == model.cost_ns(vmm_call::free_range));
    CHECK(c.time_ns_of(vmm_call::set_access) == 176'280);
  }

  TEST_CASE("sim_backend: zero latency charges nothing") {
    sim_backend b(sim_backend::k_unlimited, latency_model::zero());
    const device_addr base = b.reserve(2 * k_mib);
    const auto h = b.create_chunk();
    REQUIRE(h);
    b.map(base, *h);
    b.set_access(base, k_chunk_bytes);
    b.unmap(base, k_chunk_bytes);
    b.release_chunk(*h);
    b.free_range(base);
    CHECK(b.counters().total_calls() == 7);
    CHECK(b.counters().total_time_ns() == 0);
  }

}  // TEST_SUITE

}  // namespace
}  // namespace vtensor::backend_testing
