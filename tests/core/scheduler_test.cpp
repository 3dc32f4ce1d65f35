// The scheduler (VTS) on its own: what each call reports having done (Note [Effects of a call]):
// pages mapped on the step against pages handed to the worker, waits for the worker's jobs,
// prefix hits and copy-on-write, and a call answered needs_preemption changing nothing.

#include <doctest/doctest.h>

#include "backends/sim_backend.hpp"
#include "core/eviction_order.hpp"
#include "core/scheduler.hpp"
#include "tests/core/manager_test_support.hpp"

using namespace vtensor;
using namespace vtensor::core_testing;

namespace {

/// Llama-3-8B token-major: one tensor, 16 tokens a page; `lookahead` pages ahead.
scheduler_config token_major_config(std::uint32_t lookahead, bool async) {
  scheduler_config c;
  c.max_context_tokens = 4096;
  c.lookahead_pages = lookahead;
  c.async_lookahead = async;
  return c;
}

kv_geometry geometry(kv_layout layout) { return kv_geometry(*model_preset("llama-3-8b"), layout); }

scheduler make_scheduler(vmm_backend& b, kv_layout layout, scheduler_config c) {
  return scheduler(b, geometry(layout), c, make_eviction_order({}));
}

}  // namespace

TEST_CASE("scheduler: runs_worker() is asynchronous lookahead or creation ahead") {
  scheduler_config c;
  CHECK_FALSE(c.runs_worker());
  c.async_lookahead = true;
  CHECK(c.runs_worker());
  c.async_lookahead = false;
  c.create_ahead_chunks = 8;
  CHECK(c.runs_worker());
}

TEST_CASE("scheduler effects: without the worker, prompt and lookahead pages are mapped on the step") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  scheduler s = make_scheduler(sim, kv_layout::token_major, token_major_config(2, false));
  const create_result c = s.create(request_id{1}, {}, 40, 0);  // 3 pages + 2 ahead
  REQUIRE(c.ok());
  CHECK(c.effects.step_pages == 5);
  CHECK(c.effects.worker_pages == 0);
  CHECK(c.effects.worker_job == 0);
  CHECK(c.effects.waited_job == 0);
  CHECK(c.effects.chunks_created == 5);  // one tensor: a chunk a page
  CHECK(c.effects.pool_chunks == 0);

  const extend_result within = s.extend(request_id{1}, 8);  // 48 tokens: still 3 pages
  REQUIRE(within.ok());
  CHECK(within.effects == op_effects{});

  const extend_result crossing = s.extend(request_id{1}, 1);  // page 4 is needed: top up to 6
  REQUIRE(crossing.ok());
  CHECK(crossing.effects.step_pages == 1);
  CHECK(crossing.effects.worker_job == 0);
  CHECK(crossing.effects.chunks_created == 1);

  const op_effects done = s.finish(request_id{1});
  CHECK(done.waited_job == 0);
  s.check_invariants();
  // The request's chunks went back to the free pool: the next request takes them from there.
  const create_result again = s.create(request_id{2}, {}, 16, 0);
  REQUIRE(again.ok());
  CHECK(again.effects.pool_chunks == 3);
  CHECK(again.effects.chunks_created == 0);
}

TEST_CASE("scheduler effects: with the worker, lookahead pages are a job - a page needed too soon waits for it") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  scheduler s = make_scheduler(sim, kv_layout::token_major, token_major_config(2, true));
  const create_result c = s.create(request_id{1}, {}, 32, 0);  // 2 pages now, 2 to the worker
  REQUIRE(c.ok());
  CHECK(c.effects.step_pages == 2);
  CHECK(c.effects.worker_pages == 2);
  REQUIRE(c.effects.worker_job != 0);
  CHECK(c.effects.chunks_created == 4);  // lookahead chunks are taken by the calling thread

  // Token 33 needs page 3, which the worker was given: the extend waits for that job, then hands
  // the top-up (page 5) to the worker in a new one.
  const extend_result e = s.extend(request_id{1}, 1);
  REQUIRE(e.ok());
  CHECK(e.effects.step_pages == 0);
  CHECK(e.effects.waited_job == c.effects.worker_job);
  CHECK(e.effects.worker_pages == 1);
  CHECK(e.effects.worker_job > c.effects.worker_job);

  // Within page 3 (ready since the wait): nothing to map, nothing to wait for.
  const extend_result quiet = s.extend(request_id{1}, 15);
  REQUIRE(quiet.ok());
  CHECK(quiet.effects == op_effects{});

  // Releasing waits for the request's last job before unmapping.
  const op_effects f = s.finish(request_id{1});
  CHECK(f.waited_job == e.effects.worker_job);
  s.settle();
  s.check_invariants();
}

TEST_CASE("scheduler effects: after settle() every mapped page is ready and extend does not wait") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  scheduler s = make_scheduler(sim, kv_layout::token_major, token_major_config(2, true));
  REQUIRE(s.create(request_id{1}, {}, 32, 0).ok());
  s.settle();
  const extend_result e = s.extend(request_id{1}, 1);
  REQUIRE(e.ok());
  CHECK(e.effects.waited_job == 0);
  CHECK(e.effects.worker_pages == 1);
}

TEST_CASE("scheduler: a prefix hit shares whole pages and copies the partial one (cow), or recomputes it") {
  const std::uint64_t bpt = geometry(kv_layout::kv_fused).bytes_per_token_per_tensor();
  for (const partial_page_policy policy : {partial_page_policy::cow, partial_page_policy::recompute}) {
    CAPTURE(to_string(policy));
    sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
    scheduler_config cfg;
    cfg.max_context_tokens = 8192;
    cfg.partial = policy;
    scheduler s = make_scheduler(sim, kv_layout::kv_fused, cfg);  // 32 tensors, 512 tokens a page
    const auto blocks = run_of_blocks(1, 2, 500);                 // 1000 tokens named
    REQUIRE(s.create(request_id{1}, blocks, 1000, 0).ok());
    s.finish(request_id{1});  // both pages cached: page 0 whole, page 1 valid up to token 1000
    const create_result hit = s.create(request_id{2}, blocks, 1000, 0);
    REQUIRE(hit.ok());
    CHECK(hit.shared_pages == 1);
    CHECK(hit.effects.step_pages == 2);  // the shared page and an own one
    CHECK(hit.effects.chunks_created == 32);
    if (policy == partial_page_policy::cow) {
      CHECK(hit.hit_tokens == 999);  // one token is always computed
      CHECK(hit.cow_bytes == (999 - 512) * bpt * 32);
    } else {
      CHECK(hit.hit_tokens == 512);
      CHECK(hit.cow_bytes == 0);
    }
    CHECK(s.counters().hit_tokens == hit.hit_tokens);
    s.check_invariants();
  }
}

TEST_CASE("scheduler: a copy-on-write reads from a request that maps the page, else through the scratch mapping") {
  // Note [Mappings counted, not listed]: with a device copy installed, the source of a partial
  // page is found through the vSet when a live request maps the cached page.
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  scheduler_config cfg;
  cfg.max_context_tokens = 8192;
  cfg.partial = partial_page_policy::cow;
  scheduler s = make_scheduler(sim, kv_layout::kv_fused, cfg);  // 32 tensors, 512 tokens a page
  const kv_geometry g = geometry(kv_layout::kv_fused);
  struct copy_call {
    device_addr dst, src;
    std::uint64_t bytes;
  };
  std::vector<copy_call> copies;
  s.set_device_copy([&](device_addr dst, device_addr src, std::uint64_t bytes) {
    copies.push_back({dst, src, bytes});
  });
  const auto blocks = run_of_blocks(1, 3, 500);  // 1500 tokens: pages 0 and 1 whole, page 2 partial
  REQUIRE(s.create(request_id{1}, blocks, 1500, 0).ok());
  s.finish(request_id{1});

  // Request 2 shares pages 0 and 1 and copies page 2, which no live request maps: the scratch.
  REQUIRE(s.create(request_id{2}, blocks, 1500, 0).ok());
  const vtensor_record& two = *s.find(request_id{2});
  REQUIRE(copies.size() == g.tensors());
  for (std::uint32_t t = 0; t < g.tensors(); ++t) {
    CAPTURE(t);
    CHECK(copies[t].dst == two.page_addr(t, 2, g.chunk_bytes()));
    CHECK(s.ops().maps().records().range_containing(copies[t].src) == nullptr);  // in no request's range
  }
  copies.clear();

  // Request 3 takes the first 1000 tokens: page 1 is partial for it and request 2 maps it shared.
  const auto first_two = std::vector<token_block>(blocks.begin(), blocks.begin() + 2);
  const create_result three = s.create(request_id{3}, first_two, 1000, 0);
  REQUIRE(three.ok());
  CHECK(three.shared_pages == 1);
  REQUIRE(copies.size() == g.tensors());
  const vtensor_record& r3 = *s.find(request_id{3});
  for (std::uint32_t t = 0; t < g.tensors(); ++t) {
    CAPTURE(t);
    CHECK(copies[t].dst == r3.page_addr(t, 1, g.chunk_bytes()));
    CHECK(copies[t].src == two.page_addr(t, 1, g.chunk_bytes()));
    CHECK(copies[t].bytes == (999 - 512) * g.bytes_per_token_per_tensor());
  }
  s.check_invariants();
}

TEST_CASE("scheduler: needs_preemption leaves requests and memory as they were") {
  sim_backend sim(4 * k_chunk_bytes, latency_model::zero());  // 4 pages of token-major
  scheduler s = make_scheduler(sim, kv_layout::token_major, token_major_config(0, false));
  REQUIRE(s.create(request_id{1}, {}, 64, 0).ok());  // all 4 pages
  const memory_stats before = s.memory();
  const std::uint64_t signals = s.counters().preemption_signals;

  const create_result c = s.create(request_id{2}, {}, 16, 0);
  CHECK(c.status == alloc_status::needs_preemption);
  CHECK_FALSE(c.ok());
  CHECK(c.effects.step_pages == 0);
  CHECK(c.effects.worker_job == 0);
  CHECK(s.find(request_id{2}) == nullptr);
  CHECK(s.live_requests() == 1);

  const extend_result e = s.extend(request_id{1}, 1);  // page 5 does not exist
  CHECK(e.status == alloc_status::needs_preemption);
  CHECK(e.effects.step_pages == 0);
  CHECK(s.view(*s.find(request_id{1})).tokens == 64);
  CHECK(s.memory() == before);
  CHECK(s.counters().preemption_signals == signals + 2);
  s.check_invariants();

  // Preempting the first makes room: the retry succeeds from the free pool.
  s.preempt(request_id{1});
  const create_result retry = s.create(request_id{2}, {}, 16, 0);
  REQUIRE(retry.ok());
  CHECK(retry.effects.pool_chunks == 1);
  s.check_invariants();
}

TEST_CASE("scheduler: in_place_rounds() counts the one-token growths in place, grow_round() takes them") {
  for (const kv_layout layout : {kv_layout::token_major, kv_layout::kv_fused, kv_layout::kv_split}) {
    CAPTURE(to_string(layout));
    for (const std::uint32_t lookahead : {0u, 2u}) {
      CAPTURE(lookahead);
      sim_backend a(sim_backend::k_unlimited, latency_model::zero());
      sim_backend b(sim_backend::k_unlimited, latency_model::zero());
      scheduler counted = make_scheduler(a, layout, token_major_config(lookahead, false));
      scheduler stepped = make_scheduler(b, layout, token_major_config(lookahead, false));
      const std::vector<request_id> ids{request_id{1}, request_id{2}, request_id{3}};
      const std::uint64_t prompts[] = {40, 17, 33};
      for (std::size_t i = 0; i < ids.size(); ++i) {
        REQUIRE(counted.create(ids[i], {}, prompts[i], 4000).ok());
        REQUIRE(stepped.create(ids[i], {}, prompts[i], 4000).ok());
      }
      for (int stretch = 0; stretch < 6; ++stretch) {
        const std::uint64_t rounds = counted.in_place_rounds(ids);
        // The reference: grow_in_place(id, 1) for every id while all of them succeed.
        std::uint64_t reference = 0;
        for (;;) {
          bool all = true;
          for (const request_id id : ids) all = all && stepped.grow_in_place(id, 1);
          REQUIRE(all == (reference < rounds));  // a failed one changed nothing but the ids before it
          if (!all) break;
          ++reference;
        }
        CHECK(reference == rounds);
        for (std::uint64_t r = 0; r < rounds; ++r) counted.grow_round();
        CHECK_THROWS_AS(counted.grow_round(), std::logic_error);  // past the rounds it answered
        // Undo the partial round of the reference, then cross the page boundary in both.
        for (const request_id id : ids) {
          const auto* rec_a = counted.find(id);
          const auto* rec_b = stepped.find(id);
          REQUIRE(rec_a != nullptr);
          REQUIRE(rec_b != nullptr);
          if (rec_b->tokens > rec_a->tokens) {
            REQUIRE(rec_b->tokens == rec_a->tokens + 1);
            REQUIRE(counted.extend(id, 1).ok());
          } else {
            REQUIRE(counted.extend(id, 1).ok());
            REQUIRE(stepped.extend(id, 1).ok());
          }
        }
        CHECK(counted.memory() == stepped.memory());
        counted.check_invariants();
      }
      CHECK(counted.in_place_rounds(std::vector<request_id>{request_id{1}, request_id{9}}) == 0);
      // A round forgets its requests when one of them ends.
      REQUIRE(counted.in_place_rounds(ids) > 0);
      (void)counted.finish(ids[0]);
      CHECK_THROWS_AS(counted.grow_round(), std::logic_error);
    }
  }
}
