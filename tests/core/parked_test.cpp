// Parked vTensors (Note [Parked vTensors] in core/scheduler.cpp): a finished request's range kept
// mapped over its cached pages, taken by the next request with that prefix; what memory counts
// them as; the cap, eviction and expiry unmapping them. Hand-worked sequences on the recording
// backend, the worker inline so that its calls come in order.

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/manager.hpp"
#include "tests/support/recording_backend.hpp"

using namespace vtensor;
using vtensor::testing::recording_backend;
using calls = std::vector<std::string>;

namespace {

constexpr std::uint64_t k_chunk = 2 * 1024 * 1024;

// One layer, one 128-dim KV head, bf16, K/V split: 2 tensors of 256 bytes a token, 8192 tokens a
// page; a 16384-token context makes 2 pages a tensor (4 MiB apart), 8 MiB a vTensor.
manager_config parked_config(std::uint32_t parked, const std::string& eviction = "lru") {
  manager_config c{kv_geometry(model_spec{"tiny", 1, 1, 128, 2}, kv_layout::kv_split), {}, eviction};
  c.scheduler.max_context_tokens = 16384;
  c.scheduler.pipeline = true;
  c.scheduler.inline_worker = true;
  c.scheduler.parked_ranges = parked;
  return c;
}

// The range an address falls in, as the recording backend names it ("r3").
std::string range_of(const recording_backend& b, device_addr a) {
  const std::string s = b.describe_addr(a);
  return s.substr(0, s.find('+'));
}

}  // namespace

TEST_CASE("parked: the next turn takes the previous turn's range, its cached page mapped already") {
  recording_backend b;
  manager m(b, parked_config(4));
  const std::vector<token_block> turn1{{7, 8192}};
  REQUIRE(m.create(request_id{1}, turn1, 8200).ok());  // page 0 named by a block, page 1 partial
  const std::string range = range_of(b, m.view(request_id{1})->base);
  (void)b.take();
  // Finished: page 0 is recorded (its chunks cached), page 1 is not: it alone is unmapped.
  const op_effects f = m.finish(request_id{1});
  CHECK(f.kept_pages == 1);
  CHECK(f.worker_unmaps == 2);
  CHECK(m.parked_count() == 1);
  CHECK(b.take() == calls{"unmap " + range + "+2MiB 2MiB", "unmap " + range + "+6MiB 2MiB"});
  // Its chunks count as cached, not mapped or used.
  memory_stats mem = m.memory();
  CHECK(mem.mapped_bytes == 0);
  CHECK(mem.used_bytes == 0);
  CHECK(mem.cached_bytes == 2 * k_chunk);
  m.check_invariants();
  // The next turn hits page 0: it takes the parked range, and maps only its own second page.
  const std::vector<token_block> turn2{{7, 8192}, {8, 100}};
  const create_result c = m.create(request_id{2}, turn2, 8300);
  REQUIRE(c.ok());
  CHECK(c.hit_tokens == 8192);
  CHECK(c.effects.reused_pages == 1);
  CHECK(c.effects.worker_pages == 1);
  CHECK(range_of(b, m.view(request_id{2})->base) == range);
  CHECK(m.parked_count() == 0);
  const calls made = b.take();
  REQUIRE(made.size() == 4);
  CHECK(made[0].rfind("map " + range + "+2MiB ", 0) == 0);
  CHECK(made[2].rfind("map " + range + "+6MiB ", 0) == 0);
  mem = m.memory();
  CHECK(mem.mapped_bytes == 4 * k_chunk);
  CHECK(mem.cached_bytes == 0);
  const manager_stats s = m.stats();
  CHECK(s.parked == 1);
  CHECK(s.parked_reuses == 1);
  CHECK(s.parked_drops == 0);
  m.check_invariants();
  (void)m.finish(request_id{2});
  CHECK(m.parked_count() == 1);
  m.check_invariants();
  // Shut down with a parked vTensor and a live request that could be parked: nothing is left.
  REQUIRE(m.create(request_id{3}, turn2, 8300).ok());
  m.shutdown();
  CHECK(b.sim().live().chunks == 0);
  CHECK(b.sim().live().ranges == 0);
  CHECK(b.sim().live().mappings == 0);
}

TEST_CASE("parked: a miss leaves it, a request sharing only some pages takes those, the cap unmaps the oldest") {
  recording_backend b;
  manager m(b, parked_config(1));
  const std::vector<token_block> two_pages{{7, 8192}, {9, 8192}};
  REQUIRE(m.create(request_id{1}, two_pages, 16384).ok());
  (void)m.finish(request_id{1});  // both pages recorded and kept
  REQUIRE(m.parked_count() == 1);
  const create_result miss = m.create(request_id{2}, {}, 100);
  REQUIRE(miss.ok());
  CHECK(miss.effects.reused_pages == 0);
  CHECK(m.parked_count() == 1);
  (void)b.take();
  // Shares page 0 only: takes it, and the parked second page is unmapped on the worker.
  const std::vector<token_block> other{{7, 8192}, {10, 8000}};
  const create_result part = m.create(request_id{3}, other, 16192);
  REQUIRE(part.ok());
  CHECK(part.hit_tokens == 8192);
  CHECK(part.effects.reused_pages == 1);
  CHECK(part.effects.worker_unmaps == 2);
  const std::string range = range_of(b, m.view(request_id{3})->base);
  const calls made = b.take();
  REQUIRE(made.size() >= 2);
  CHECK(made[0] == "unmap " + range + "+2MiB 2MiB");
  CHECK(made[1] == "unmap " + range + "+6MiB 2MiB");
  m.check_invariants();
  // With room for one, a second parked vTensor unmaps the first.
  (void)m.finish(request_id{3});
  CHECK(m.parked_count() == 1);
  (void)m.finish(request_id{2});  // a miss without blocks: nothing cached, nothing parked
  CHECK(m.parked_count() == 1);
  const std::vector<token_block> fourth{{11, 8192}};
  REQUIRE(m.create(request_id{4}, fourth, 8300).ok());
  (void)m.finish(request_id{4});
  CHECK(m.parked_count() == 1);
  CHECK(m.stats().parked_drops == 1);
  m.check_invariants();
}

TEST_CASE("parked: evicting a parked page unmaps its vTensor, so eviction frees and chooses as without them") {
  // The same requests with and without parking: the same hits and evictions.
  std::vector<std::uint64_t> hits[2], evicted[2];
  for (const std::uint32_t parked : {0U, 4U}) {
    CAPTURE(parked);
    recording_backend b(8 * k_chunk);
    manager m(b, parked_config(parked));
    // Two-page prompts whose first page is named by a block: a miss takes 4 chunks and leaves 2
    // cached; a hit shares the cached page and takes 2. The 4th key finds the device full.
    const std::uint64_t keys[] = {1, 2, 1, 3, 1, 4, 2};
    for (std::uint64_t k = 1; k <= 7; ++k) {
      const std::vector<token_block> blocks{{keys[k - 1], 8192}};
      const create_result c = m.create(request_id{k}, blocks, 8300);
      REQUIRE(c.ok());
      hits[parked > 0 ? 1 : 0].push_back(c.hit_tokens);
      evicted[parked > 0 ? 1 : 0].push_back(c.effects.evicted_nodes);
      (void)m.finish(request_id{k});
      m.check_invariants();
    }
    if (parked > 0) {
      CHECK(m.stats().parked_drops > 0);
      CHECK(m.stats().parked_reuses > 0);
    }
  }
  CHECK(hits[0] == hits[1]);
  CHECK(evicted[0] == evicted[1]);
  CHECK(evicted[0] != std::vector<std::uint64_t>(7, 0));  // the budget made it evict
  CHECK(hits[0] == std::vector<std::uint64_t>{0, 0, 8192, 0, 8192, 0, 0});
}

TEST_CASE("parked: it needs the pipeline, and its owner id is no caller's") {
  recording_backend b;
  manager_config c = parked_config(1);
  c.scheduler.pipeline = false;
  CHECK_THROWS_AS(manager(b, c), std::invalid_argument);
  manager m(b, parked_config(1));
  CHECK_THROWS_AS((void)m.create(request_id{~std::uint64_t{0} - 1}, {}, 100), std::invalid_argument);
}

TEST_CASE("parked: a create that takes one and then finds no memory gives it back parked") {
  recording_backend b(8 * k_chunk);
  manager m(b, parked_config(4));
  const std::vector<token_block> first{{7, 8192}};
  REQUIRE(m.create(request_id{1}, first, 8300).ok());
  (void)m.finish(request_id{1});                     // page 0 parked (2 chunks), page 1 to the pool
  REQUIRE(m.create(request_id{2}, {}, 16000).ok());  // 4 chunks: the pool's 2 and 2 created
  REQUIRE(m.create(request_id{3}, {}, 100).ok());    // 2 more: the device is full
  REQUIRE(m.parked_count() == 1);
  m.check_invariants();
  (void)b.take();
  // Request 4 hits page 0 and needs one page of its own: none free, nothing evictable (its own
  // match is pinned). It took the parked page, gives it back, and no call was made.
  const std::vector<token_block> next{{7, 8192}, {8, 8000}};
  const create_result failed = m.create(request_id{4}, next, 16300);
  CHECK_FALSE(failed.ok());
  CHECK(m.parked_count() == 1);
  CHECK(m.stats().parked_reuses == 0);
  CHECK(b.take().empty());
  m.check_invariants();
  // Once memory frees, the retry takes it.
  (void)m.finish(request_id{3});
  const create_result retried = m.create(request_id{4}, next, 16300);
  REQUIRE(retried.ok());
  CHECK(retried.effects.reused_pages == 1);
  CHECK(m.parked_count() == 0);
  m.check_invariants();
}
