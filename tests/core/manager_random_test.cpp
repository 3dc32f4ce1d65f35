// Seeded randomized test: thousands of create / extend / fork / finish / preempt steps on a small
// device with faults injected into the driver, every invariant checked after every step, and
// nothing held by the device after shutdown.

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "backends/fault_injection_backend.hpp"
#include "backends/sim_backend.hpp"
#include "core/manager.hpp"

using namespace vtensor;

namespace {

struct random_run {
  kv_layout layout;
  partial_page_policy partial;
  std::uint32_t lookahead;
  std::uint32_t block_tokens;
  std::uint64_t seed;
  bool pipeline = false;
};

void run(const random_run& cfg, int steps) {
  MESSAGE("seed " << cfg.seed << ", layout " << to_string(cfg.layout) << ", partial " << to_string(cfg.partial));
  // 64 KV heads of 1024 dims in one layer: 128 KiB a token a tensor: 16 tokens a page split, 8 fused.
  manager_config config{kv_geometry(model_spec{"random", 1, 64, 1024, 2}, cfg.layout), {}, "lru"};
  config.scheduler.max_context_tokens = 256;
  config.scheduler.lookahead_pages = cfg.lookahead;
  config.scheduler.partial = cfg.partial;
  config.scheduler.range_cache = 4;
  config.scheduler.pipeline = cfg.pipeline;
  config.scheduler.pipeline_chunk_tokens = cfg.pipeline ? 24 : 0;

  auto faulty = std::make_unique<fault_injection_backend>(
      std::make_unique<sim_backend>(96 * k_chunk_bytes, latency_model::zero()), cfg.seed);
  // With the pipeline the worker's maps draw from the fault generator in an order that depends on
  // wall time; creates (step thread only) then fail by count, so that some surely do.
  if (cfg.pipeline) {
    faulty->fail_every(vmm_call::create, 29);
  } else {
    faulty->fail_with_probability(vmm_call::create, 0.03);
  }
  faulty->fail_with_probability(vmm_call::map, 0.005);
  faulty->fail_with_probability(vmm_call::set_access, 0.005);
  faulty->fail_with_probability(vmm_call::reserve, 0.01);
  const auto& sim = dynamic_cast<const sim_backend&>(faulty->inner());

  std::mt19937_64 rng(cfg.seed);
  auto pick = [&](std::uint64_t n) { return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng); };
  std::uint64_t next_key = 1;
  std::uint64_t next_id = 1;
  std::vector<std::vector<token_block>> conversations;  // key lists of finished requests
  std::vector<request_id> live;
  std::map<std::uint64_t, std::vector<token_block>> blocks_of;  // live request -> its blocks
  std::uint64_t ok_steps = 0, preemptions = 0, driver_errors = 0;
  {
    manager m(*faulty, config);
    auto drop = [&](request_id id) { live.erase(std::find(live.begin(), live.end(), id)); };
    auto preempt_one = [&] {
      if (live.empty()) return;
      const request_id victim = live[pick(live.size())];
      m.preempt(victim);
      drop(victim);
      ++preemptions;
    };
    for (int step = 0; step < steps; ++step) {
      CAPTURE(step);
      const auto op = pick(100);
      try {
        if (op < 35 || live.empty()) {  // create: a new conversation or a later turn of one
          std::vector<token_block> blocks;
          if (!conversations.empty() && pick(3) != 0) blocks = conversations[pick(conversations.size())];
          const auto fresh = 1 + pick(4);
          for (std::uint64_t i = 0; i < fresh; ++i) blocks.push_back({next_key++, cfg.block_tokens});
          while (blocks.size() * cfg.block_tokens > 200) blocks.erase(blocks.end() - 1);
          const std::uint64_t prompt = blocks.size() * cfg.block_tokens + pick(cfg.block_tokens);
          const request_id id{next_id++};
          auto r = m.create(id, blocks, std::max<std::uint64_t>(prompt, 1));
          if (r.ok()) {
            live.push_back(id);
            blocks_of[id.value] = blocks;
          } else {
            preempt_one();
          }
        } else if (op < 65) {  // extend
          const request_id id = live[pick(live.size())];
          const vtensor_view v = *m.view(id);
          const std::uint64_t room = v.max_tokens - v.tokens;
          if (room > 0 && !m.extend(id, 1 + pick(std::min<std::uint64_t>(room, 40))).ok()) {
            preempt_one();
          }
        } else if (op < 80) {  // finish, sometimes naming the answer's tokens too
          const request_id id = live[pick(live.size())];
          std::vector<token_block> extra;
          if (pick(2) == 0) extra.push_back({next_key++, cfg.block_tokens});
          m.finish(id, extra);
          auto turn = blocks_of[id.value];
          turn.insert(turn.end(), extra.begin(), extra.end());
          if (conversations.size() < 256) conversations.push_back(turn);
          drop(id);
        } else if (op < 90) {  // fork
          const request_id child{next_id++};
          const request_id parent = live[pick(live.size())];
          auto r = m.fork(parent, child);
          if (r.ok()) {
            live.push_back(child);
            blocks_of[child.value] = blocks_of[parent.value];
          } else {
            preempt_one();
          }
        } else {
          preempt_one();
        }
        // With the pipeline the worker maps and unmaps between steps; at times let it finish (a
        // map that failed on it is retried here) so that the device can be checked below.
        if (cfg.pipeline && pick(4) == 0) m.settle();
        ++ok_steps;
      } catch (const vmm_error& e) {
        ++driver_errors;  // an injected driver failure: the manager must stay consistent
        CHECK(std::string(e.what()).find("injected") != std::string::npos);
      }
      m.check_invariants();
      if (!cfg.pipeline) sim.check_invariants();  // the worker may be calling it
    }
    const auto s = m.stats();
    MESSAGE("steps " << ok_steps << ", preemptions " << preemptions << ", injected driver errors " << driver_errors
                     << ", hit tokens " << s.prefix_hit_tokens << ", evicted nodes " << s.evicted_nodes);
    CHECK(s.prefix_hit_tokens > 0);
    CHECK(driver_errors > 0);
    CHECK(faulty->faults_injected(vmm_call::create) > 0);
    if (cfg.pipeline) CHECK(m.stats().vmm.calls_of(vmm_call::map) > 0);
    m.shutdown();
    const vmm_live after = faulty->live();
    CHECK(after.chunks == 0);
    CHECK(after.ranges == 0);
    CHECK(after.mappings == 0);
  }
}

}  // namespace

TEST_CASE("random steps with fault injection: kv-split, copy-on-write, lookahead 1") {
  run({kv_layout::kv_split, partial_page_policy::cow, 1, 8, 20261202}, 4000);
}

TEST_CASE("random steps with fault injection: kv-fused, recompute, no lookahead") {
  run({kv_layout::kv_fused, partial_page_policy::recompute, 0, 8, 7}, 4000);
}

TEST_CASE("random steps with fault injection: token-major, copy-on-write, 12-token blocks") {
  run({kv_layout::token_major, partial_page_policy::cow, 2, 12, 42}, 4000);
}

TEST_CASE("random steps with fault injection: kv-split, copy-on-write, lookahead 1, pipeline") {
  run({kv_layout::kv_split, partial_page_policy::cow, 1, 8, 20261203, true}, 4000);
}

TEST_CASE("random steps with fault injection: token-major, copy-on-write, no lookahead, pipeline") {
  run({kv_layout::token_major, partial_page_policy::cow, 0, 12, 11, true}, 4000);
}
