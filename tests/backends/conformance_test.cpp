// One suite over every backend this build has: what the contract in backends/vmm_backend.hpp
// promises, checked the same way on each. A backend added to the registry is covered here
// without editing this file.

#include <algorithm>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "backends/counting_backend.hpp"
#include "backends/fault_injection_backend.hpp"
#include "backends/registry.hpp"
#include "tests/backends/test_helpers.hpp"
#include "tests/support/backend_choice.hpp"

namespace vtensor::backend_testing {
namespace {

constexpr std::uint64_t k_capacity_chunks = 8;

/// Runs `body` on a fresh backend of every registered name: the GPU ones (`cuda`) when `gpu`,
/// the others when not (tests/support/backend_choice.hpp).
template <typename F>
void for_each_backend(bool gpu, F&& body);

/// The same, with the backend owned: for tests that wrap it in adaptors.
template <typename F>
void for_each_owned_backend(bool gpu, F&& body) {
  for (const std::string& name : testing::backends_for(gpu)) {
    INFO("backend: " << name);
    backend_config config;
    config.capacity_bytes = k_capacity_chunks * k_chunk_bytes;
    std::unique_ptr<vmm_backend> backend = testing::make_backend_or_skip(name, config);
    if (!backend) return;
    body(std::move(backend));
  }
}

template <typename F>
void for_each_backend(bool gpu, F&& body) {
  for (const std::string& name : testing::backends_for(gpu)) {
    INFO("backend: " << name);
    backend_config config;
    config.capacity_bytes = k_capacity_chunks * k_chunk_bytes;
    const std::unique_ptr<vmm_backend> backend = testing::make_backend_or_skip(name, config);
    if (!backend) return;
    body(*backend);
  }
}

void check_empty(const vmm_backend& b) {
  const vmm_live live = b.live();
  CHECK(live.ranges == 0);
  CHECK(live.chunks == 0);
  CHECK(live.mappings == 0);
}

TEST_SUITE("backends") {
  void check_geometry_and_capacity(bool gpu) {
    for_each_backend(gpu, [](vmm_backend& b) {
      CHECK(b.granularity_bytes() == 2 * k_mib);
      CHECK(b.chunk_bytes() == k_chunk_bytes);
      CHECK(b.capacity_chunks() == k_capacity_chunks);
      CHECK(b.capacity_bytes() == k_capacity_chunks * k_chunk_bytes);
      check_empty(b);
    });
  }
  TEST_CASE("conformance: geometry and capacity") { check_geometry_and_capacity(false); }
  TEST_CASE("conformance on cuda: geometry and capacity" * doctest::test_suite("gpu")) {
    check_geometry_and_capacity(true);
  }

  void check_reserve_map_set_access_unmap(bool gpu) {
    for_each_backend(gpu, [](vmm_backend& b) {
      const device_addr base = b.reserve(64 * k_mib);
      CHECK(base != 0);
      CHECK(base % b.granularity_bytes() == 0);
      const auto c1 = b.create_chunk();
      const auto c2 = b.create_chunk();
      REQUIRE(c1);
      REQUIRE(c2);
      CHECK(c1->value != 0);
      CHECK(*c1 != *c2);

      b.map(base, *c1);
      b.map(base + k_chunk_bytes, *c2);
      b.set_access(base, 2 * k_chunk_bytes);
      CHECK(b.live().ranges == 1);
      CHECK(b.live().chunks == 2);
      CHECK(b.live().mappings == 2);

      b.unmap(base + k_chunk_bytes, k_chunk_bytes);
      CHECK(b.live().mappings == 1);
      b.map(base + k_chunk_bytes, *c2);
      b.set_access(base + k_chunk_bytes, k_chunk_bytes);
      b.unmap(base, 2 * k_chunk_bytes);
      CHECK(b.live().mappings == 0);

      b.release_chunk(*c1);
      b.release_chunk(*c2);
      b.free_range(base);
      check_empty(b);
    });
  }
  TEST_CASE("conformance: reserve, map, set_access, unmap and free") { check_reserve_map_set_access_unmap(false); }
  TEST_CASE("conformance on cuda: reserve, map, set_access, unmap and free" * doctest::test_suite("gpu")) {
    check_reserve_map_set_access_unmap(true);
  }

  void check_live_ranges_do_not_overlap(bool gpu) {
    for_each_backend(gpu, [](vmm_backend& b) {
      std::vector<std::pair<device_addr, std::uint64_t>> ranges;
      for (const std::uint64_t bytes : {2 * k_mib, 1 * k_gib, 6 * k_mib, 64 * k_gib, 2 * k_mib}) {
        ranges.emplace_back(b.reserve(bytes), bytes);
      }
      std::sort(ranges.begin(), ranges.end());
      for (std::size_t i = 1; i < ranges.size(); ++i) {
        CHECK(ranges[i - 1].first + ranges[i - 1].second <= ranges[i].first);
      }
      for (const auto& [base, bytes] : ranges) {
        b.free_range(base);
      }
      for (int round = 0; round < 100; ++round) {
        b.free_range(b.reserve(16 * k_gib));
      }
      check_empty(b);
    });
  }
  TEST_CASE("conformance: live ranges do not overlap and can be reserved again after free") {
    check_live_ranges_do_not_overlap(false);
  }
  TEST_CASE("conformance on cuda: live ranges do not overlap and can be reserved again after free" *
            doctest::test_suite("gpu")) {
    check_live_ranges_do_not_overlap(true);
  }

  void check_one_chunk_mapped_at_two(bool gpu) {
    for_each_backend(gpu, [](vmm_backend& b) {
      const device_addr a = b.reserve(8 * k_mib);
      const device_addr c = b.reserve(8 * k_mib);
      const auto shared = b.create_chunk();
      REQUIRE(shared);
      b.map(a, *shared);
      b.map(c + 2 * k_chunk_bytes, *shared);
      b.set_access(a, k_chunk_bytes);
      b.set_access(c + 2 * k_chunk_bytes, k_chunk_bytes);
      CHECK(b.live().chunks == 1);
      CHECK(b.live().mappings == 2);

      check_vmm_error(vmm_call::release, [&] { b.release_chunk(*shared); });
      b.unmap(a, k_chunk_bytes);
      check_vmm_error(vmm_call::release, [&] { b.release_chunk(*shared); });
      b.unmap(c + 2 * k_chunk_bytes, k_chunk_bytes);
      b.release_chunk(*shared);
      b.free_range(a);
      b.free_range(c);
      check_empty(b);
    });
  }
  TEST_CASE("conformance: one chunk mapped at two addresses") { check_one_chunk_mapped_at_two(false); }
  TEST_CASE("conformance on cuda: one chunk mapped at two addresses" * doctest::test_suite("gpu")) {
    check_one_chunk_mapped_at_two(true);
  }

  void check_out_of_memory_returns_nullopt(bool gpu) {
    for_each_backend(gpu, [](vmm_backend& b) {
      std::vector<chunk_handle> chunks;
      for (std::uint64_t i = 0; i < b.capacity_chunks(); ++i) {
        const auto h = b.create_chunk();
        REQUIRE(h);
        chunks.push_back(*h);
      }
      CHECK_FALSE(b.create_chunk().has_value());
      CHECK_FALSE(b.create_chunk().has_value());
      CHECK(b.live().chunks == b.capacity_chunks());

      b.release_chunk(chunks.back());
      chunks.pop_back();
      const auto again = b.create_chunk();
      REQUIRE(again);
      chunks.push_back(*again);
      CHECK_FALSE(b.create_chunk().has_value());

      for (const chunk_handle h : chunks) {
        b.release_chunk(h);
      }
      check_empty(b);
    });
  }
  TEST_CASE("conformance: out of memory returns nullopt and release makes room") {
    check_out_of_memory_returns_nullopt(false);
  }
  TEST_CASE("conformance on cuda: out of memory returns nullopt and release makes room" * doctest::test_suite("gpu")) {
    check_out_of_memory_returns_nullopt(true);
  }

  void check_alignment_violations_throw_vmm_error(bool gpu) {
    for_each_backend(gpu, [](vmm_backend& b) {
      const device_addr base = b.reserve(8 * k_mib);
      const auto h = b.create_chunk();
      REQUIRE(h);
      check_vmm_error(vmm_call::reserve, [&] { (void)b.reserve(0); });
      check_vmm_error(vmm_call::reserve, [&] { (void)b.reserve(3 * k_mib); });
      check_vmm_error(vmm_call::free_range, [&] { b.free_range(base + 4096); });
      check_vmm_error(vmm_call::map, [&] { b.map(base + k_mib, *h); });
      b.map(base, *h);
      check_vmm_error(vmm_call::set_access, [&] { b.set_access(base, 0); });
      check_vmm_error(vmm_call::set_access, [&] { b.set_access(base, k_mib); });
      check_vmm_error(vmm_call::set_access, [&] { b.set_access(base + 4096, k_chunk_bytes); });
      check_vmm_error(vmm_call::unmap, [&] { b.unmap(base, 3 * k_mib); });
      check_vmm_error(vmm_call::unmap, [&] { b.unmap(base + 1, k_chunk_bytes); });
      CHECK(b.live().mappings == 1);
      b.unmap(base, k_chunk_bytes);
      b.release_chunk(*h);
      b.free_range(base);
      check_empty(b);
    });
  }
  TEST_CASE("conformance: alignment violations throw vmm_error naming the call") {
    check_alignment_violations_throw_vmm_error(false);
  }
  TEST_CASE("conformance on cuda: alignment violations throw vmm_error naming the call" * doctest::test_suite("gpu")) {
    check_alignment_violations_throw_vmm_error(true);
  }

  /// Fixture of the rule-violation scenarios: one live range, one freed range, two chunks.
  struct violation_setup {
    device_addr base = 0;  ///< a reserved 8 MiB range
    device_addr gone = 0;  ///< a range reserved then freed
    chunk_handle h;        ///< a live chunk
    chunk_handle other;    ///< another live chunk
  };

  using violation_scenario = void (*)(vmm_backend&, const violation_setup&);

  void map_outside_range(vmm_backend & b, const violation_setup& s) {
    check_vmm_error(vmm_call::map, [&] { b.map(s.gone, s.h); });
  }

  void map_onto_mapped_span(vmm_backend & b, const violation_setup& s) {
    b.map(s.base, s.h);
    check_vmm_error(vmm_call::map, [&] { b.map(s.base, s.other); });
    check_vmm_error(vmm_call::map, [&] { b.map(s.base, s.h); });
    b.unmap(s.base, k_chunk_bytes);
  }

  void map_unknown_or_released_handle(vmm_backend & b, const violation_setup& s) {
    check_vmm_error(vmm_call::map, [&] { b.map(s.base, chunk_handle{}); });
    const auto dead = b.create_chunk();
    REQUIRE(dead);
    b.release_chunk(*dead);
    check_vmm_error(vmm_call::map, [&] { b.map(s.base, *dead); });
  }

  void set_access_unmapped(vmm_backend & b, const violation_setup& s) {
    b.map(s.base, s.h);
    check_vmm_error(vmm_call::set_access, [&] { b.set_access(s.base, 2 * k_chunk_bytes); });
    check_vmm_error(vmm_call::set_access, [&] { b.set_access(s.base + k_chunk_bytes, k_chunk_bytes); });
    check_vmm_error(vmm_call::set_access, [&] { b.set_access(s.gone, k_chunk_bytes); });
    b.unmap(s.base, k_chunk_bytes);
  }

  void unmap_unmapped(vmm_backend & b, const violation_setup& s) {
    check_vmm_error(vmm_call::unmap, [&] { b.unmap(s.base, k_chunk_bytes); });
    b.map(s.base + k_chunk_bytes, s.h);
    check_vmm_error(vmm_call::unmap, [&] { b.unmap(s.base, 2 * k_chunk_bytes); });
    CHECK(b.live().mappings == 1);
    b.unmap(s.base + k_chunk_bytes, k_chunk_bytes);
  }

  void free_unknown_or_mapped_range(vmm_backend & b, const violation_setup& s) {
    check_vmm_error(vmm_call::free_range, [&] { b.free_range(s.gone); });
    check_vmm_error(vmm_call::free_range, [&] { b.free_range(s.base + k_chunk_bytes); });
    b.map(s.base, s.h);
    check_vmm_error(vmm_call::free_range, [&] { b.free_range(s.base); });
    CHECK(b.live().ranges == 1);
    b.unmap(s.base, k_chunk_bytes);
  }

  void release_unknown_mapped_or_released(vmm_backend & b, const violation_setup& s) {
    check_vmm_error(vmm_call::release, [&] { b.release_chunk(chunk_handle{}); });
    b.map(s.base, s.h);
    check_vmm_error(vmm_call::release, [&] { b.release_chunk(s.h); });
    b.unmap(s.base, k_chunk_bytes);
    const auto dead = b.create_chunk();
    REQUIRE(dead);
    b.release_chunk(*dead);
    check_vmm_error(vmm_call::release, [&] { b.release_chunk(*dead); });
  }

  void check_mapping_rule_violations_throw_vmm(bool gpu) {
    const std::pair<const char*, violation_scenario> scenarios[] = {
        {"map outside any reserved range", &map_outside_range},
        {"map onto a mapped span", &map_onto_mapped_span},
        {"map an unknown or released handle", &map_unknown_or_released_handle},
        {"set_access over an unmapped span", &set_access_unmapped},
        {"unmap an unmapped span", &unmap_unmapped},
        {"free_range of an unknown base or of a range holding mappings", &free_unknown_or_mapped_range},
        {"release of an unknown, mapped or released handle", &release_unknown_mapped_or_released},
    };
    for (const auto& [what, scenario] : scenarios) {
      INFO("scenario: " << what);
      for_each_backend(gpu, [&](vmm_backend& b) {
        violation_setup s;
        s.base = b.reserve(8 * k_mib);
        s.gone = b.reserve(8 * k_mib);
        b.free_range(s.gone);
        const auto h = b.create_chunk();
        const auto other = b.create_chunk();
        REQUIRE(h);
        REQUIRE(other);
        s.h = *h;
        s.other = *other;

        scenario(b, s);

        CHECK(b.live().mappings == 0);
        b.release_chunk(s.h);
        b.release_chunk(s.other);
        b.free_range(s.base);
        check_empty(b);
      });
    }
  }
  TEST_CASE("conformance: mapping rule violations throw vmm_error naming the call") {
    check_mapping_rule_violations_throw_vmm(false);
  }
  TEST_CASE("conformance on cuda: mapping rule violations throw vmm_error naming the call" *
            doctest::test_suite("gpu")) {
    check_mapping_rule_violations_throw_vmm(true);
  }

  void check_counters_count_every_call_by(bool gpu) {
    for_each_backend(gpu, [](vmm_backend& b) {
      const device_addr base = b.reserve(4 * k_mib);
      const auto h = b.create_chunk();
      REQUIRE(h);
      b.map(base, *h);
      b.map(base + k_chunk_bytes, *h);
      b.set_access(base, 2 * k_chunk_bytes);
      check_vmm_error(vmm_call::map, [&] { b.map(base, *h); });
      b.unmap(base, k_chunk_bytes);
      b.unmap(base + k_chunk_bytes, k_chunk_bytes);
      b.release_chunk(*h);
      b.free_range(base);

      const vmm_counters& c = b.counters();
      CHECK(c.calls_of(vmm_call::reserve) == 1);
      CHECK(c.calls_of(vmm_call::create) == 1);
      CHECK(c.calls_of(vmm_call::map) == 3);
      CHECK(c.calls_of(vmm_call::set_access) == 1);
      CHECK(c.calls_of(vmm_call::unmap) == 2);
      CHECK(c.calls_of(vmm_call::release) == 1);
      CHECK(c.calls_of(vmm_call::free_range) == 1);
      CHECK(c.total_calls() == 10);
      check_empty(b);
    });
  }
  TEST_CASE("conformance: counters count every call by kind, failed ones included") {
    check_counters_count_every_call_by(false);
  }
  TEST_CASE("conformance on cuda: counters count every call by kind, failed ones included" *
            doctest::test_suite("gpu")) {
    check_counters_count_every_call_by(true);
  }

  void check_map_with_access(bool gpu) {
    for_each_backend(gpu, [](vmm_backend& b) {
      const device_addr base = b.reserve(4 * k_mib);
      const device_addr gone = b.reserve(4 * k_mib);
      b.free_range(gone);
      const auto h = b.create_chunk();
      const auto dead = b.create_chunk();
      REQUIRE(h);
      REQUIRE(dead);
      b.release_chunk(*dead);
      const vmm_counters before = b.counters();

      b.map_with_access(base, *h);  // mapped and accessible: it can be mapped again elsewhere, unmapped
      CHECK(b.live().mappings == 1);
      check_vmm_error(vmm_call::map, [&] { b.map_with_access(base, *h); });                     // onto a mapped span
      check_vmm_error(vmm_call::map, [&] { b.map_with_access(gone, *h); });                     // outside any range
      check_vmm_error(vmm_call::map, [&] { b.map_with_access(base + k_chunk_bytes, *dead); });  // released
      check_vmm_error(vmm_call::map, [&] { b.map_with_access(base + k_chunk_bytes, chunk_handle{}); });
      CHECK(b.live().mappings == 1);
      check_vmm_error(vmm_call::release, [&] { b.release_chunk(*h); });  // still mapped
      b.map_with_access(base + k_chunk_bytes, *h);                       // one chunk at two addresses
      b.set_access(base, 2 * k_chunk_bytes);
      b.unmap(base, 2 * k_chunk_bytes);

      const vmm_counters& c = b.counters();
      CHECK(c.calls_of(vmm_call::map) - before.calls_of(vmm_call::map) == 6);
      CHECK(c.calls_of(vmm_call::set_access) - before.calls_of(vmm_call::set_access) ==
            3);  // after the 2 good maps + 1
      CHECK(c.calls_of(vmm_call::unmap) - before.calls_of(vmm_call::unmap) == 1);
      b.release_chunk(*h);
      b.free_range(base);
      check_empty(b);
    });
  }
  TEST_CASE("conformance: map_with_access maps with access, counts both calls, and breaks no rule") {
    check_map_with_access(false);
  }
  TEST_CASE("conformance on cuda: map_with_access maps with access, counts both calls, and breaks no rule" *
            doctest::test_suite("gpu")) {
    check_map_with_access(true);
  }

  // The rules live in one place (address_space, shared by sim and cuda): a broken one is refused by
  // the contract before any driver call, so no message is a driver's ("cuMemMap failed: ...").
  void check_rules_refused_before_the_driver(bool gpu) {
    for_each_backend(gpu, [](vmm_backend& b) {
      const device_addr base = b.reserve(4 * k_mib);
      const auto h = b.create_chunk();
      const auto dead = b.create_chunk();
      REQUIRE(h);
      REQUIRE(dead);
      b.release_chunk(*dead);
      const auto message = [](auto&& fn) -> std::string {
        try {
          fn();
        } catch (const vmm_error& e) {
          return e.what();
        }
        return "no error";
      };
      for (const chunk_handle bad : {*dead, chunk_handle{}, chunk_handle{0x5eed}}) {
        INFO("handle " << bad.value);
        const std::string mapped = message([&] { b.map(base, bad); });
        const std::string with_access = message([&] { b.map_with_access(base, bad); });
        CHECK(mapped.find("unknown or already released") != std::string::npos);
        CHECK(with_access == mapped);  // map_with_access checks the handle as map does
        CHECK(message([&] { b.release_chunk(bad); }).find("unknown or already released") != std::string::npos);
      }
      b.map_with_access(base, *h);
      for (const std::string& m :
           {message([&] { b.map(base, *h); }), message([&] { b.unmap(base + k_chunk_bytes, k_chunk_bytes); }),
            message([&] { b.free_range(base); }), message([&] { b.release_chunk(*h); })}) {
        INFO(m);
        CHECK(m.find("failed:") == std::string::npos);
        CHECK(m != "no error");
      }
      CHECK(b.live().mappings == 1);
      b.unmap(base, k_chunk_bytes);
      b.release_chunk(*h);
      b.free_range(base);
      check_empty(b);
    });
  }
  TEST_CASE(
      "conformance: broken rules are refused by the contract, before the driver, alike for map and map_with_access") {
    check_rules_refused_before_the_driver(false);
  }
  TEST_CASE(
      "conformance on cuda: broken rules are refused by the contract, before the driver, alike for map and "
      "map_with_access" *
      doctest::test_suite("gpu")) {
    check_rules_refused_before_the_driver(true);
  }

  // Counting is the base class's (Note [Counting in the base class]): adaptors stacked on a backend
  // count every call exactly as the backend does, map_with_access and failures included.
  void check_adaptors_count_as_the_backend(bool gpu) {
    for_each_owned_backend(gpu, [](std::unique_ptr<vmm_backend> inner) {
      vmm_backend* device = inner.get();
      counting_backend outer(std::make_unique<fault_injection_backend>(std::move(inner)));
      const device_addr base = outer.reserve(4 * k_mib);
      const auto h = outer.create_chunk();
      REQUIRE(h);
      outer.map_with_access(base, *h);
      check_vmm_error(vmm_call::map, [&] { outer.map_with_access(base, *h); });
      outer.map(base + k_chunk_bytes, *h);
      outer.set_access(base, 2 * k_chunk_bytes);
      outer.unmap(base, 2 * k_chunk_bytes);
      outer.release_chunk(*h);
      outer.free_range(base);
      const vmm_counters& c = outer.counters();
      CHECK(c.calls == outer.inner().counters().calls);
      CHECK(c.calls == device->counters().calls);
      CHECK(c.calls_of(vmm_call::map) == 3);
      CHECK(c.calls_of(vmm_call::set_access) == 2);
      CHECK(c.time_ns == device->counters().time_ns);
      check_empty(outer);
    });
  }
  TEST_CASE("conformance: adaptors count every call as the backend under them") {
    check_adaptors_count_as_the_backend(false);
  }
  TEST_CASE("conformance on cuda: adaptors count every call as the backend under them" * doctest::test_suite("gpu")) {
    check_adaptors_count_as_the_backend(true);
  }

  // A set-access that fails inside map_with_access: the map is undone, and the three calls are
  // counted on every layer.
  void check_failed_access_of_map_with_access(bool gpu) {
    for_each_owned_backend(gpu, [](std::unique_ptr<vmm_backend> inner) {
      vmm_backend* device = inner.get();
      auto faulty = std::make_unique<fault_injection_backend>(std::move(inner));
      fault_injection_backend& faults = *faulty;
      counting_backend outer(std::move(faulty));
      const device_addr base = outer.reserve(4 * k_mib);
      const auto h = outer.create_chunk();
      REQUIRE(h);
      faults.fail_nth(vmm_call::set_access, 1);
      check_vmm_error(vmm_call::set_access, [&] { outer.map_with_access(base, *h); });
      CHECK(outer.live().mappings == 0);
      CHECK(outer.counters().calls_of(vmm_call::map) == 1);
      CHECK(outer.counters().calls_of(vmm_call::set_access) == 1);
      CHECK(outer.counters().calls_of(vmm_call::unmap) == 1);
      CHECK(faults.counters().calls == outer.counters().calls);
      CHECK(device->counters().calls_of(vmm_call::set_access) == 0);  // the fault never reached the device
      outer.map_with_access(base, *h);                                // the rule fired once
      outer.unmap(base, k_chunk_bytes);
      outer.release_chunk(*h);
      outer.free_range(base);
      check_empty(outer);
    });
  }
  TEST_CASE("conformance: a failed set-access in map_with_access is undone and counted on every layer") {
    check_failed_access_of_map_with_access(false);
  }
  TEST_CASE("conformance on cuda: a failed set-access in map_with_access is undone and counted on every layer" *
            doctest::test_suite("gpu")) {
    check_failed_access_of_map_with_access(true);
  }

}  // TEST_SUITE

}  // namespace
}  // namespace vtensor::backend_testing
