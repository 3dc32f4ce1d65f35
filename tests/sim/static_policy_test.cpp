// The `static` policy (sim/static_policy.hpp): reservations by --reserve, the first-fit and
// buddy arenas, the memory breakdown they produce, and random operations with faults.

#include <doctest/doctest.h>

#include <limits>
#include <map>
#include <random>

#include "backends/fault_injection_backend.hpp"
#include "backends/sim_backend.hpp"
#include "sim/static_policy.hpp"
#include "tests/sim/sim_test_support.hpp"
#include "tests/support/live_probe_backend.hpp"

using namespace vtensor;
using namespace vtensor::sim;

namespace {

constexpr std::uint64_t k_token = 128 * 1024;  // llama-3-8b: KV bytes of one token

kv_policy_options static_options(std::uint64_t memory) {
  kv_policy_options o = sim_testing::llama_policy(memory);
  o.max_context_tokens = 4096;
  return o;
}

kv_admit_result admit(kv_policy& p, std::uint64_t id, std::uint64_t prompt, std::uint64_t max_tokens) {
  return p.admit({request_id{id}, {}, prompt, max_tokens});
}

}  // namespace

TEST_SUITE("static_policy") {
  TEST_CASE("static pow2 reserves 32 for 25 and the breakdown splits them") {
    static_policy p(static_options(k_gib), static_settings{static_reserve::pow2, arena_fit::first_fit});
    CHECK(p.reservation_for(25) == 32);
    CHECK(p.reservation_for(32) == 32);
    CHECK(p.reservation_for(33) == 64);
    REQUIRE(admit(p, 1, 20, 25).admitted);
    const kv_stats s = p.stats();
    CHECK(s.memory.used_bytes == 20 * k_token);
    CHECK(s.memory.mapped_bytes == 32 * k_token);
    CHECK(s.breakdown.used == 20 * k_token);
    CHECK(s.breakdown.reserved_idle == 5 * k_token);  // written later: prompt + output not reached yet
    CHECK(s.breakdown.internal == 7 * k_token);       // never written: 32 - 25
    CHECK(s.breakdown.external == 0);                 // one free extent: everything after the region
    CHECK(s.breakdown.free == k_gib - 32 * k_token);
    CHECK(s.breakdown.total() == s.memory.physical_bytes);
    CHECK(p.grow(request_id{1}, 5));
    CHECK(p.stats().breakdown.reserved_idle == 0);
    CHECK_THROWS_AS((void)p.grow(request_id{1}, 1), std::invalid_argument);  // past prompt + output
    CHECK(p.stats().prefix_hit_tokens == 0);
  }

  TEST_CASE("static max reserves the maximum context and exact reserves prompt plus output") {
    static_policy max(static_options(k_gib), static_settings{static_reserve::max, arena_fit::first_fit});
    CHECK(max.reservation_for(25) == 4096);
    static_policy exact(static_options(k_gib), static_settings{static_reserve::exact, arena_fit::first_fit});
    CHECK(exact.reservation_for(25) == 25);
    // 1 GiB is 8192 token slots: two maximum-context regions, then nothing.
    REQUIRE(admit(max, 1, 10, 20).admitted);
    REQUIRE(admit(max, 2, 10, 20).admitted);
    const kv_stats before = max.stats();
    CHECK_FALSE(admit(max, 3, 10, 20).admitted);
    CHECK(max.stats().memory == before.memory);
    CHECK(before.breakdown.internal == 2 * (4096 - 20) * k_token);
    // A request longer than the maximum context cannot be reserved for: misuse.
    CHECK_THROWS_AS((void)admit(max, 4, 10, 5000), std::invalid_argument);
  }

  TEST_CASE("first fit takes the lowest hole that fits and leaves the expected hole") {
    static_policy p(static_options(k_gib), static_settings{static_reserve::exact, arena_fit::first_fit});
    REQUIRE(admit(p, 1, 100, 100).admitted);  // [0, 100)
    REQUIRE(admit(p, 2, 200, 200).admitted);  // [100, 300)
    REQUIRE(admit(p, 3, 100, 100).admitted);  // [300, 400)
    p.release(request_id{2}, release_reason::finished);
    REQUIRE(admit(p, 4, 50, 50).admitted);  // the hole at 100 is the lowest that fits
    CHECK(p.offset_of(request_id{4}) == 100);
    const auto* ff = dynamic_cast<const first_fit_arena*>(&p.arena());
    REQUIRE(ff != nullptr);
    const std::map<std::uint64_t, std::uint64_t> expected{{150, 150}, {400, 8192 - 400}};
    CHECK(ff->extents() == expected);
    // The 150-slot hole is external fragmentation: free, but not the largest extent.
    const kv_stats s = p.stats();
    CHECK(s.breakdown.external == 150 * k_token);
    CHECK(s.breakdown.free == (8192 - 400) * k_token);
    // A request of 160 slots does not fit the hole and goes after region 3.
    REQUIRE(admit(p, 5, 160, 160).admitted);
    CHECK(p.offset_of(request_id{5}) == 400);
    // Freeing 1 and 4 joins [0, 100) + [100, 150) + [150, 300) into one extent.
    p.release(request_id{1}, release_reason::finished);
    p.release(request_id{4}, release_reason::preempted);
    CHECK(ff->extents().begin()->first == 0);
    CHECK(ff->extents().begin()->second == 300);
    p.check_invariants();
  }

  TEST_CASE("the buddy arena splits, rounds to powers of two and merges buddies") {
    buddy_arena a;
    a.extend(1000);  // 512 + 256 + 128 + 64 + 32 + 8
    CHECK(a.largest_free() == 512);
    std::uint64_t granted = 0;
    const auto x = a.allocate(100, granted);  // rounded to 128: the free 128 block at 768 fits exactly
    REQUIRE(x.has_value());
    CHECK(granted == 128);
    CHECK(*x == 768);
    CHECK(a.largest_free() == 512);
    const auto y = a.allocate(128, granted);  // no 128 left: the 256 block at 512 is split
    REQUIRE(y.has_value());
    CHECK(*y == 512);
    CHECK(a.free_slots() == 1000 - 256);
    a.check(256);
    CHECK_FALSE(a.allocate(600, granted).has_value());
    a.free(*x, 128);
    a.free(*y, 128);
    a.check(0);
    CHECK(a.largest_free() == 512);
    CHECK(a.allocate(256, granted) == std::optional<std::uint64_t>{512});  // 512 and 640 merged back
    a.free(512, 256);
    // Growing by chunks still offers large blocks: the new blocks merge with free buddies.
    buddy_arena g;
    for (int i = 0; i < 64; ++i) g.extend(16);
    CHECK(g.largest_free() == 1024);
    g.check(0);
  }

  TEST_CASE("static over buddy reports the rounding as internal fragmentation") {
    static_policy p(static_options(k_gib), static_settings{static_reserve::exact, arena_fit::buddy});
    REQUIRE(admit(p, 1, 90, 100).admitted);  // 128 slots granted
    const kv_stats s = p.stats();
    CHECK(s.memory.mapped_bytes == 128 * k_token);
    CHECK(s.breakdown.internal == 28 * k_token);
    CHECK(s.breakdown.reserved_idle == 10 * k_token);
    CHECK(s.breakdown.total() == s.memory.physical_bytes);
  }

  TEST_CASE("static with an unlimited budget grows its arena by chunks on demand") {
    kv_policy_options o = static_options(std::numeric_limits<std::uint64_t>::max());
    o.zero_latency = false;
    static_policy p(o, static_settings{static_reserve::max, arena_fit::buddy});
    CHECK(p.stats().memory.physical_bytes == 0);
    for (std::uint64_t id = 1; id <= 5; ++id) REQUIRE(admit(p, id, 1000, 1100).admitted);
    const kv_stats s = p.stats();
    CHECK(s.memory.mapped_bytes == 5 * 4096 * k_token);
    CHECK(s.memory.physical_bytes >= s.memory.mapped_bytes);
    CHECK(p.vmm_time() > sim_ns{0});  // growth is on the step's clock
    p.check_invariants();
  }

  TEST_CASE("static survives random operations with faults and holds nothing after shutdown") {
    for (const arena_fit fit : {arena_fit::first_fit, arena_fit::buddy}) {
      for (const static_reserve reserve : {static_reserve::max, static_reserve::pow2, static_reserve::exact}) {
        INFO("arena " << k_arena_fit_names.name(fit) << ", reserve " << k_static_reserve_names.name(reserve));
        const auto left = std::make_shared<vmm_live>(vmm_live{99, 99, 99});
        {
          const kv_policy_options o = static_options(512 * k_mib);
          auto inner = std::make_unique<sim_backend>(sim_backend::k_unlimited, latency_model::zero());
          auto probe = std::make_unique<testing::live_probe_backend>(std::move(inner), left);
          auto pool = std::make_unique<device_pool>(std::move(probe), latency_model::zero(), o.memory_bytes);
          static_policy p(o, std::move(pool), static_settings{reserve, fit});
          std::mt19937_64 rng(11);
          std::map<std::uint64_t, std::uint64_t> live;  // id -> tokens it may still grow
          std::uint64_t next = 1;
          std::uint64_t refused = 0;
          for (int step = 0; step < 3000; ++step) {
            const auto op = rng() % 3;
            if (op == 0 || live.empty()) {
              const std::uint64_t prompt = 1 + rng() % 1500;
              const std::uint64_t out = rng() % 400;
              const kv_stats before = p.stats();
              if (admit(p, next, prompt, prompt + out).admitted) {
                live[next] = out;
              } else {
                ++refused;
                CHECK(p.stats().memory == before.memory);
              }
              ++next;
            } else if (op == 1) {
              auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
              if (it->second > 0) {
                CHECK(p.grow(request_id{it->first}, 1));
                --it->second;
              }
            } else {
              auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
              p.release(request_id{it->first}, rng() % 2 == 0 ? release_reason::finished : release_reason::preempted);
              live.erase(it);
            }
            const kv_stats s = p.stats();
            CHECK(s.breakdown.total() == s.memory.physical_bytes);
            p.check_invariants();
          }
          CHECK(refused > 0);  // the arena did fill up
        }
        CHECK(left->chunks == 0);
        CHECK(left->ranges == 0);
        CHECK(left->mappings == 0);
      }
    }
  }

  TEST_CASE("static refuses to start when the device cannot map its arena, holding nothing") {
    const auto left = std::make_shared<vmm_live>(vmm_live{99, 99, 99});
    const kv_policy_options o = static_options(64 * k_mib);
    auto faulty = std::make_unique<fault_injection_backend>(
        std::make_unique<sim_backend>(sim_backend::k_unlimited, latency_model::zero()), 1);
    faulty->fail_nth(vmm_call::map, 7);
    auto probe = std::make_unique<testing::live_probe_backend>(std::move(faulty), left);
    CHECK_THROWS_AS(
        static_policy(o, std::make_unique<device_pool>(std::move(probe), latency_model::zero(), o.memory_bytes),
                      static_settings{static_reserve::exact, arena_fit::first_fit}),
        vmm_error);
    CHECK(left->chunks == 0);
    CHECK(left->ranges == 0);
  }
}
