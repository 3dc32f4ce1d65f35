// The step log: per-step records of the batch and the policy's memory, chunk creation after
// warm-up, and the step-by-step comparison of two logs.

#include <doctest/doctest.h>

#include "sim/step_log.hpp"
#include "tests/sim/sim_test_support.hpp"

using namespace vtensor;
using namespace vtensor::sim;
using namespace vtensor::sim_testing;

namespace {

// A step built now over `p`, as a replica records it.
step_record step(const kv_policy& p, std::uint64_t index, std::uint32_t decode = 1) {
  step_record s;
  s.chunks_created = p.chunks_created();
  s.index = index;
  s.start = 1000 * index;
  s.duration_us = 900;
  s.decode_seqs = decode;
  s.running = decode;
  s.vmm_critical = sim_ns{1500 * index};
  return s;
}

}  // namespace

TEST_CASE("step log: each kept step holds the batch and the policy's memory right after it was built") {
  auto p = make_kv_policy("vtensor", llama_policy(k_unlimited));
  step_log log(*p, true);
  REQUIRE(p->admit({request_id{1}, {}, 1000, 2000}).admitted);
  log.on_step(step(*p, 0));
  REQUIRE(p->grow(request_id{1}, 100));
  log.on_step(step(*p, 1, 2));
  REQUIRE(log.steps().size() == 2);
  const step_entry& e = log.steps()[1];
  CHECK(e.index == 1);
  CHECK(e.start == 1000);
  CHECK(e.duration_us == 900);
  CHECK(e.decode_seqs == 2);
  CHECK(e.running == 2);
  CHECK(e.vmm_critical == sim_ns{1500});
  const kv_stats now = p->stats();
  CHECK(e.memory == now.memory);
  CHECK(e.memory.logical_bytes ==
        1100 * kv_geometry(*model_preset("llama-3-8b"), kv_layout::kv_fused).bytes_per_token());
  CHECK(e.chunks_created == now.chunks_created);
  CHECK(log.steps()[0].memory.logical_bytes < e.memory.logical_bytes);
  p->release(request_id{1}, release_reason::finished);
}

TEST_CASE("step log: creation after warm-up counts the chunks created after the warm-up's steps") {
  auto p = make_kv_policy("vtensor", llama_policy(k_unlimited));
  step_log log(*p, false);                                        // creation is tracked even when steps are not kept
  REQUIRE(p->admit({request_id{1}, {}, 1000, 100000}).admitted);  // 2 pages of 32 chunks (kv-fused)
  log.on_step(step(*p, 0));
  for (std::uint64_t i = 1; i < 8; ++i) log.on_step(step(*p, i));  // nothing new
  REQUIRE(p->grow(request_id{1}, 500));                            // 1500 tokens: page 3, 32 chunks more
  log.on_step(step(*p, 8));
  log.on_step(step(*p, 9));
  CHECK(log.steps().empty());

  const creation_after_warmup half = log.creation(0.5);
  CHECK(half.steps == 10);
  CHECK(half.warmup_steps == 5);
  CHECK(half.creates_total == 96);
  CHECK(half.creates_after == 32);
  CHECK(half.last_create_step == 8);
  const creation_after_warmup all = log.creation(1.0);
  CHECK(all.warmup_steps == 10);
  CHECK(all.creates_after == 0);
  p->release(request_id{1}, release_reason::finished);
}

TEST_CASE("step log: two logs compare step by step - the free pool is left out on request") {
  step_entry a;
  a.index = 3;
  a.start = 3000;
  a.memory.physical_bytes = 10 * k_chunk_bytes;
  a.memory.mapped_bytes = 6 * k_chunk_bytes;
  a.memory.free_pool_bytes = 2 * k_chunk_bytes;
  a.memory.used_bytes = 5 * k_chunk_bytes;
  a.chunks_created = 10;
  const std::vector<step_entry> x{a};
  CHECK_FALSE(compare_step_logs(x, x, true));

  step_entry b = a;
  b.memory.mapped_bytes = 7 * k_chunk_bytes;
  const auto d = compare_step_logs(x, {b}, true);
  REQUIRE(d);
  CHECK(*d == "step 3 (simulated 3000 us): mapped_chunks 6 vs 7");

  // More chunks created into the free pool (the worker, at wall-clock times): the same step net
  // of the pool, unless the pool is compared.
  step_entry c = a;
  c.memory.physical_bytes += 4 * k_chunk_bytes;
  c.memory.free_pool_bytes += 4 * k_chunk_bytes;
  c.chunks_created += 4;
  CHECK_FALSE(compare_step_logs(x, {c}, false));
  const auto with_pool = compare_step_logs(x, {c}, true);
  REQUIRE(with_pool);
  CHECK(with_pool->find("physical_chunks 10 vs 14") != std::string::npos);

  step_entry later = a;
  later.vmm_critical = sim_ns{5};
  const auto t = compare_step_logs(x, {later}, true);
  REQUIRE(t);
  CHECK(t->find("vmm_critical_ns 0 vs 5") != std::string::npos);
  CHECK(*compare_step_logs(x, {a, a}, true) == "step counts differ: 1 vs 2");
}
