#include "tests/support/recording_backend.hpp"

#include <doctest/doctest.h>

#include "tests/backends/test_helpers.hpp"

namespace vtensor::backend_testing {
namespace {

using log_lines = std::vector<std::string>;
using testing::format_bytes;
using testing::recording_backend;

TEST_SUITE("backends") {
  TEST_CASE("recording_backend: logs calls relative to their range and chunk numbers") {
    recording_backend b(2 * k_chunk_bytes);
    CHECK(b.name() == "recording(sim)");
    const device_addr r0 = b.reserve(64 * k_mib);
    const device_addr r1 = b.reserve(1 * k_gib);
    const auto c1 = b.create_chunk();
    const auto c2 = b.create_chunk();
    REQUIRE(c1);
    REQUIRE(c2);
    CHECK_FALSE(b.create_chunk().has_value());
    b.map(r0, *c1);
    b.map(r0 + 2 * k_mib, *c2);
    b.map(r1 + 6 * k_mib, *c1);
    b.set_access(r0, 4 * k_mib);
    CHECK(b.sim().accessible(r0));
    CHECK_THROWS_AS(b.map(r0, *c2), vmm_error);
    b.unmap(r0 + 2 * k_mib, 2 * k_mib);
    b.unmap(r0, 2 * k_mib);
    b.unmap(r1 + 6 * k_mib, 2 * k_mib);
    b.release_chunk(*c1);
    b.release_chunk(*c2);
    b.free_range(r0);
    b.free_range(r1);

    CHECK(b.take() == log_lines{
                          "reserve 64MiB -> r0",
                          "reserve 1GiB -> r1",
                          "create -> c1",
                          "create -> c2",
                          "create -> oom",
                          "map r0+0 c1",
                          "map r0+2MiB c2",
                          "map r1+6MiB c1",
                          "set_access r0+0 4MiB",
                          "map r0+0 c2 -> error",
                          "unmap r0+2MiB 2MiB",
                          "unmap r0+0 2MiB",
                          "unmap r1+6MiB 2MiB",
                          "release c1",
                          "release c2",
                          "free r0",
                          "free r1",
                      });
    CHECK(b.take().empty());
    CHECK(b.live().ranges == 0);

    const device_addr r2 = b.reserve(64 * k_mib);
    CHECK(r2 == r0);
    CHECK(b.create_chunk().has_value());
    CHECK(b.take() == log_lines{"reserve 64MiB -> r2", "create -> c3"});
    CHECK(format_bytes(3 * 1024) == "3KiB");
    CHECK(format_bytes(5) == "5B");
  }

}  // TEST_SUITE

}  // namespace
}  // namespace vtensor::backend_testing
