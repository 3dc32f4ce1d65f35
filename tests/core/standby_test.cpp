// The standby vTensor (Note [Standby vTensor] in core/scheduler.cpp): which create takes it, when
// a new one is mapped, what happens to its pages beyond a reservation, and that it is the first
// memory given back. Hand-worked sequences on the recording backend, the worker inline so that
// its calls come in order.

#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/fault_injection_backend.hpp"
#include "core/manager.hpp"
#include "tests/support/recording_backend.hpp"

using namespace vtensor;
using vtensor::testing::recording_backend;
using calls = std::vector<std::string>;

namespace {

// One layer, one 128-dim KV head, bf16, K/V split: 2 tensors of 256 bytes a token, 8192 tokens a
// page; a 16384-token context makes 2 pages a tensor (4 MiB apart), 8 MiB a vTensor.
manager_config standby_config(std::uint32_t standby_pages) {
  manager_config c{kv_geometry(model_spec{"tiny", 1, 1, 128, 2}, kv_layout::kv_split), {}, "lru"};
  c.scheduler.max_context_tokens = 16384;
  c.scheduler.pipeline = true;
  c.scheduler.inline_worker = true;
  c.scheduler.standby_pages = standby_pages;
  return c;
}

// `n` one-page requests (ids from `first`) created and finished: 2n chunks in the free pool.
void fill_pool(manager& m, std::uint64_t first, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) REQUIRE(m.create(request_id{first + i}, {}, 100).ok());
  for (std::uint64_t i = 0; i < n; ++i) (void)m.finish(request_id{first + i});
}

}  // namespace

TEST_CASE("standby: a create that misses the cache takes its mapped pages - misses map the next from the pool") {
  recording_backend b;
  manager m(b, standby_config(1));
  // The pool is empty: the first creates map their own pages, and no standby is built.
  fill_pool(m, 1, 3);
  CHECK(m.standby_pages() == 0);
  (void)b.take();
  // A miss takes 2 of the pool's 6 chunks; the 4 left are twice a standby's 2: one is mapped,
  // after the request's own job, in a range of the cache.
  const create_result c4 = m.create(request_id{4}, {}, 100);
  REQUIRE(c4.ok());
  CHECK(c4.effects.adopted_pages == 0);
  CHECK(c4.effects.worker_pages == 1);
  CHECK(c4.effects.standby_pages == 1);
  CHECK(c4.effects.standby_job > c4.effects.worker_job);
  CHECK(m.standby_pages() == 1);
  // (The pool hands out the chunk freed last first: request 3's, then request 2's.)
  CHECK(b.take() == calls{"map r2+0 c6", "set_access r2+0 2MiB", "map r2+4MiB c5", "set_access r2+4MiB 2MiB",
                          "map r1+0 c4", "set_access r1+0 2MiB", "map r1+4MiB c3", "set_access r1+4MiB 2MiB"});
  m.check_invariants();
  // The next miss takes the standby: its range and its mapped page, no call at all. The pool's
  // 2 chunks are not twice a standby's: none is mapped.
  const create_result c5 = m.create(request_id{5}, {}, 100);
  REQUIRE(c5.ok());
  CHECK(c5.effects.adopted_pages == 1);
  CHECK(c5.effects.adopted_job == c4.effects.standby_job);
  CHECK(c5.effects.worker_pages == 0);
  CHECK(c5.effects.first_pages == 0);
  CHECK(c5.effects.standby_job == 0);
  CHECK(b.take().empty());
  CHECK(m.standby_pages() == 0);
  REQUIRE(m.view(request_id{5}).has_value());
  CHECK(b.describe_addr(m.view(request_id{5})->base) == "r1+0");
  CHECK(m.view(request_id{5})->mapped_tokens == 8192);
  m.check_invariants();
  // It grows into its second page as any request: mapped from the pool after its job.
  REQUIRE(m.extend(request_id{5}, 9000).ok());
  CHECK(b.take() == calls{"map r1+2MiB c2", "set_access r1+2MiB 2MiB", "map r1+6MiB c1", "set_access r1+6MiB 2MiB"});
  const manager_stats s = m.stats();
  CHECK(s.standby_builds == 1);
  CHECK(s.standby_adoptions == 1);
  CHECK(s.standby_drops == 0);
  (void)m.finish(request_id{4});
  (void)m.finish(request_id{5});
  m.check_invariants();
}

TEST_CASE("standby: pages beyond a reservation are unmapped on the worker - a create that hits leaves it") {
  recording_backend b;
  manager m(b, standby_config(2));
  // Request 1's first page is named by a block: recorded when it finishes.
  const std::vector<token_block> blocks{{7, 8192}};
  REQUIRE(m.create(request_id{1}, blocks, 8200).ok());
  (void)m.finish(request_id{1});
  fill_pool(m, 2, 5);  // the pool: request 1's second page and 4 more pages, 10 chunks
  (void)b.take();
  REQUIRE(m.create(request_id{6}, {}, 100).ok());  // a miss: 2 chunks, then a 2-page standby from the 8 left
  CHECK(m.standby_pages() == 2);
  (void)b.take();
  // A hit needs its cached page at the start of its range: it maps its own, the standby stays.
  const create_result hit = m.create(request_id{7}, blocks, 8300);
  REQUIRE(hit.ok());
  CHECK(hit.hit_tokens == 8192);
  CHECK(hit.effects.adopted_pages == 0);
  CHECK(hit.effects.standby_job == 0);
  CHECK(m.standby_pages() == 2);
  m.check_invariants();
  (void)b.take();
  // A miss of one page at most (200 tokens reserved) takes the first page; the second, beyond its
  // reservation, is unmapped on the worker: one run of one chunk a tensor.
  const create_result small = m.create(request_id{8}, {}, 100, 200);
  REQUIRE(small.ok());
  CHECK(small.effects.adopted_pages == 1);
  CHECK(small.effects.worker_unmaps == 2);
  CHECK(small.effects.unmap_runs == 2);
  CHECK(small.effects.worker_pages == 0);
  const std::string range = b.describe_addr(m.view(request_id{8})->base);
  CHECK(b.take() == calls{"unmap " + range.substr(0, range.find('+')) + "+2MiB 2MiB",
                          "unmap " + range.substr(0, range.find('+')) + "+6MiB 2MiB"});
  CHECK(m.view(request_id{8})->mapped_tokens == 200);
  m.check_invariants();
}

TEST_CASE("standby: an allocation that would evict gives the standby back first") {
  recording_backend b(8 * 2 * 1024 * 1024);  // 8 chunks
  manager m(b, standby_config(1));
  const std::vector<token_block> blocks{{7, 8192}};
  REQUIRE(m.create(request_id{1}, blocks, 8200).ok());  // 4 chunks
  REQUIRE(m.create(request_id{2}, {}, 100).ok());
  REQUIRE(m.create(request_id{3}, {}, 100).ok());  // the device is full
  (void)m.finish(request_id{2});
  (void)m.finish(request_id{3});
  (void)m.finish(request_id{1});  // its first page cached (2 chunks), the pool 6 chunks
  REQUIRE(m.create(request_id{4}, {}, 100).ok());
  CHECK(m.standby_pages() == 1);  // from the pool's 4: 2 left
  const create_result hit = m.create(request_id{5}, blocks, 8300);
  REQUIRE(hit.ok());  // its second page takes the pool's last 2 chunks
  CHECK(m.standby_pages() == 1);
  m.check_invariants();
  (void)b.take();
  // Request 4's second page finds the pool empty and the device full: the standby's chunks come
  // back (unmapped on the worker) before any cached page would be evicted.
  const extend_result e = m.extend(request_id{4}, 8900);
  REQUIRE(e.ok());
  CHECK(e.effects.dropped_standby == 1);
  CHECK(e.effects.worker_unmaps == 2);
  CHECK(e.effects.evicted_nodes == 0);
  CHECK(m.standby_pages() == 0);
  CHECK(m.stats().standby_drops == 1);
  m.check_invariants();
  // The cached page is still there: a new hit on it.
  (void)m.finish(request_id{5});
  const create_result again = m.create(request_id{6}, blocks, 8300);
  REQUIRE(again.ok());
  CHECK(again.hit_tokens == 8192);
  m.check_invariants();
}

TEST_CASE("standby: it needs the pipeline, fits the context, and its owner id is no caller's") {
  recording_backend b;
  manager_config c = standby_config(1);
  c.scheduler.pipeline = false;
  CHECK_THROWS_AS(manager(b, c), std::invalid_argument);
  CHECK_THROWS_AS(manager(b, standby_config(3)), std::invalid_argument);  // a 2-page context
  manager m(b, standby_config(1));
  CHECK_THROWS_AS((void)m.create(request_id{~std::uint64_t{0}}, {}, 100), std::invalid_argument);
  // Shut down with a standby: everything goes back to the driver.
  fill_pool(m, 1, 3);
  REQUIRE(m.create(request_id{4}, {}, 100).ok());
  REQUIRE(m.standby_pages() == 1);
  m.shutdown();
  CHECK(m.standby_pages() == 0);
  CHECK(b.sim().live().chunks == 0);
  CHECK(b.sim().live().ranges == 0);
}

TEST_CASE("standby: a range the driver refuses leaves no standby - the create it follows stands") {
  fault_injection_backend b(std::make_unique<recording_backend>(), 1);
  manager_config c = standby_config(1);
  c.scheduler.range_cache = 0;  // every range is reserved anew
  manager m(b, c);
  fill_pool(m, 1, 3);                // reserves 1 to 3
  b.fail_nth(vmm_call::reserve, 5);  // the 4th is request 4's, the 5th the standby's
  const create_result r = m.create(request_id{4}, {}, 100);
  REQUIRE(r.ok());
  CHECK(r.effects.standby_job == 0);
  CHECK(m.standby_pages() == 0);
  CHECK(m.stats().standby_failures == 1);
  CHECK(m.view(request_id{4}).has_value());
  m.check_invariants();
  // Its chunks went back to the pool: request 5 takes 2 of the 4, request 6 the other 2.
  REQUIRE(m.create(request_id{5}, {}, 100).ok());
  REQUIRE(m.create(request_id{6}, {}, 100).ok());
  CHECK(m.stats().chunks_created == 6);
  m.check_invariants();
}
