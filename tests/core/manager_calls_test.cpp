// The exact VMM call sequences of create, extend and finish, on the recording mock backend.

#include <algorithm>

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/manager.hpp"
#include "tests/support/recording_backend.hpp"

using namespace vtensor;
using vtensor::testing::recording_backend;
using calls = std::vector<std::string>;

namespace {

// One layer, one 128-dim KV head, bf16, K/V split: 2 tensors of 256 bytes a token, 8192 tokens a
// page; a 16384-token context makes 2 pages a tensor, 8 MiB a vTensor.
manager_config tiny_config(std::uint32_t lookahead = 0) {
  manager_config c{kv_geometry(model_spec{"tiny", 1, 1, 128, 2}, kv_layout::kv_split), {}, "lru"};
  c.scheduler.max_context_tokens = 16384;
  c.scheduler.lookahead_pages = lookahead;
  return c;
}

}  // namespace

TEST_CASE("vmm calls: create, extend, finish, reuse from the pools, trim") {
  recording_backend rec;
  manager m(rec, tiny_config());

  REQUIRE(m.create(request_id{1}, {}, 100).ok());
  CHECK(rec.take() == calls{"create -> c1", "create -> c2", "reserve 8MiB -> r0", "map r0+0 c1", "set_access r0+0 2MiB",
                            "map r0+4MiB c2", "set_access r0+4MiB 2MiB"});

  REQUIRE(m.extend(request_id{1}, 8000).ok());  // still inside page 0
  CHECK(rec.take().empty());
  REQUIRE(m.extend(request_id{1}, 92).ok());  // exactly fills page 0
  CHECK(rec.take().empty());
  REQUIRE(m.extend(request_id{1}, 1).ok());  // first token of page 1
  CHECK(rec.take() == calls{"create -> c3", "create -> c4", "map r0+2MiB c3", "set_access r0+2MiB 2MiB",
                            "map r0+6MiB c4", "set_access r0+6MiB 2MiB"});

  m.finish(request_id{1});  // no blocks: nothing to cache; one unmap per tensor, no release
  CHECK(rec.take() == calls{"unmap r0+0 4MiB", "unmap r0+4MiB 4MiB"});

  // Lazy deallocation: the next request takes pooled chunks and the cached range: no create, no reserve.
  REQUIRE(m.create(request_id{2}, {}, 100).ok());
  CHECK(rec.take() == calls{"map r0+0 c4", "set_access r0+0 2MiB", "map r0+4MiB c2", "set_access r0+4MiB 2MiB"});
  m.finish(request_id{2});
  CHECK(rec.take() == calls{"unmap r0+0 2MiB", "unmap r0+4MiB 2MiB"});

  CHECK(m.trim() == 4);
  CHECK(rec.take() == calls{"release c2", "release c4", "release c3", "release c1", "free r0"});
  m.check_invariants();
  CHECK(rec.live().chunks == 0);
}

TEST_CASE("vmm calls: a cached prefix is mapped again, never created") {
  recording_backend rec;
  manager m(rec, tiny_config());
  const std::vector<token_block> prefix{{7, 8192}};
  REQUIRE(m.create(request_id{1}, prefix, 8292).ok());
  (void)rec.take();
  m.finish(request_id{1});  // page 0 (whole) cached; page 1 (100 tokens, unnamed by blocks) pooled
  CHECK(rec.take() == calls{"unmap r0+0 4MiB", "unmap r0+4MiB 4MiB"});

  auto r = m.create(request_id{2}, prefix, 8300);
  REQUIRE(r.ok());
  CHECK(r.hit_tokens == 8192);
  CHECK(r.shared_pages == 1);
  // Page 0 of both tensors: request 1's chunks c1, c2, mapped shared; page 1 from the free pool.
  // A set-access follows each map (Note [One set-access per chunk]).
  CHECK(rec.take() == calls{"map r0+0 c1", "set_access r0+0 2MiB", "map r0+2MiB c4", "set_access r0+2MiB 2MiB",
                            "map r0+4MiB c2", "set_access r0+4MiB 2MiB", "map r0+6MiB c3", "set_access r0+6MiB 2MiB"});
  m.check_invariants();
}

TEST_CASE("vmm calls: lookahead maps ahead at create and when a page boundary is crossed") {
  recording_backend rec;
  manager m(rec, tiny_config(1));
  REQUIRE(m.create(request_id{1}, {}, 10).ok());
  CHECK(rec.take() == calls{"create -> c1", "create -> c2", "create -> c3", "create -> c4", "reserve 8MiB -> r0",
                            "map r0+0 c1", "set_access r0+0 2MiB", "map r0+2MiB c3", "set_access r0+2MiB 2MiB",
                            "map r0+4MiB c2", "set_access r0+4MiB 2MiB", "map r0+6MiB c4", "set_access r0+6MiB 2MiB"});
  REQUIRE(m.extend(request_id{1}, 9000).ok());  // into page 1, already mapped
  CHECK(rec.take().empty());
  CHECK(m.view(request_id{1})->mapped_tokens == 16384);
}

TEST_CASE("vmm calls: lookahead in runs tops a request up only once a whole batch is missing") {
  const auto maps = [](std::vector<std::string> cs) {
    return std::count_if(cs.begin(), cs.end(), [](const std::string& c) { return c.rfind("map ", 0) == 0; });
  };
  auto config = tiny_config(4);
  config.scheduler.max_context_tokens = 16 * 8192;  // 16 pages of 8192 tokens, 2 tensors
  config.scheduler.lookahead_batch = 4;
  recording_backend rec;
  manager m(rec, config);
  REQUIRE(m.create(request_id{1}, {}, 1).ok());
  CHECK(maps(rec.take()) == 2 * 5);        // page 0 and 4 ahead
  for (int page = 1; page <= 3; ++page) {  // into pages 1-3: 1, 2, 3 pages missing ahead
    REQUIRE(m.extend(request_id{1}, 8192).ok());
    CHECK(maps(rec.take()) == 0);
  }
  REQUIRE(m.extend(request_id{1}, 8192).ok());  // into page 4: 4 missing, one run each
  const auto topped = rec.take();
  CHECK(maps(topped) == 2 * 4);
  const auto first_map =
      std::find_if(topped.begin(), topped.end(), [](const std::string& c) { return c.rfind("map ", 0) == 0; });
  REQUIRE(first_map != topped.end());
  CHECK(*first_map == "map r0+10MiB c11");                 // tensor 0, pages 5-8 in one run: 10, 12, 14, 16 MiB
  CHECK((first_map + 2)->rfind("map r0+12MiB ", 0) == 0);  // after its set-access: the next page of tensor 0
  CHECK(m.view(request_id{1})->mapped_tokens == 9 * 8192);
  m.check_invariants();

  config.scheduler.lookahead_batch = 5;  // more than the lookahead
  recording_backend other;
  CHECK_THROWS_AS(manager(other, config), std::invalid_argument);
  config.scheduler.lookahead_batch = 0;
  CHECK_THROWS_AS(manager(other, config), std::invalid_argument);
}
