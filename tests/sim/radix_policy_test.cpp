// The radix policy (sim/radix_policy.hpp): SGLang's radix cache over a preallocated token pool.
// Exact small scenarios on Llama-3-8B (128 KiB of KV a token, so a 2 MiB chunk holds 16 one-token
// pages), random operations with injected driver faults, and a replay that reaches the
// infinite-cache bound.

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>

#include "backends/fault_injection_backend.hpp"
#include "backends/sim_backend.hpp"
#include "sim/radix_policy.hpp"
#include "tests/sim/sim_test_support.hpp"
#include "traces/infinite_prefix_cache.hpp"

using namespace vtensor;
using namespace vtensor::sim;
using namespace vtensor::sim_testing;

namespace {

constexpr std::uint64_t k_token = 128 * 1024;  // Llama-3-8B KV bytes a token

kv_policy_options radix_options(std::uint64_t memory) { return llama_policy(memory); }

radix_settings pages_of(std::uint32_t page_tokens, bool caching = true) { return {page_tokens, caching}; }

// A backend over a device the test owns, so the test can look at the device after the policy
// (and everything stacked on it) is gone.
class borrowed_backend final : public vmm_backend {
 public:
  explicit borrowed_backend(vmm_backend& device) : device_(device) {}

 private:
  [[nodiscard]] std::string do_name() const override { return "borrowed(" + device_.name() + ")"; }
  [[nodiscard]] std::uint64_t do_capacity_bytes() const override { return device_.capacity_bytes(); }
  [[nodiscard]] device_addr do_reserve(std::uint64_t bytes) override { return device_.reserve(bytes); }
  void do_free_range(device_addr base) override { device_.free_range(base); }
  [[nodiscard]] std::optional<chunk_handle> do_create_chunk() override { return device_.create_chunk(); }
  void do_release_chunk(chunk_handle h) override { device_.release_chunk(h); }
  void do_map(device_addr va, chunk_handle h) override { device_.map(va, h); }
  void do_set_access(device_addr va, std::uint64_t bytes) override { device_.set_access(va, bytes); }
  void do_unmap(device_addr va, std::uint64_t bytes) override { device_.unmap(va, bytes); }
  [[nodiscard]] vmm_live do_live() const override { return device_.live(); }

  vmm_backend& device_;
};

// The breakdown adds up, the invariants hold, and the pool's pages are all accounted for.
void check(const radix_policy& p) {
  p.check_invariants();
  const kv_stats s = p.stats();
  CHECK(s.breakdown.total() == s.memory.physical_bytes);
  CHECK(s.breakdown.used == s.memory.used_bytes);
  CHECK(s.breakdown.cached == p.cached_pages() * p.page_bytes());
  CHECK(s.breakdown.free == p.free_pages() * p.page_bytes());
  CHECK(s.breakdown.external == 0);
  CHECK(s.breakdown.cached_pinning == 0);
  CHECK(s.breakdown.reclaimable == 0);
}

kv_request req(std::uint64_t id, const std::vector<token_block>& blocks, std::uint64_t prompt, std::uint64_t max = 0) {
  return {request_id{id}, blocks, prompt, std::max(max, prompt)};
}

}  // namespace

TEST_SUITE("radix_policy") {
  TEST_CASE("radix: two requests sharing a prefix lock it once, and unlocking makes it cache") {
    radix_policy p(radix_options(256 * k_mib));  // 2,048 one-token pages
    REQUIRE(p.pool_pages() == 2048);
    const std::vector<token_block> a{{1, 512}, {2, 512}};
    const std::vector<token_block> b{{1, 512}, {3, 512}};
    const kv_admit_result ra = p.admit(req(1, a, 1100, 1200));
    REQUIRE(ra.admitted);
    CHECK(ra.hit_tokens == 0);
    CHECK(p.tree_nodes() == 1);  // [0, 1024): the keyed tokens; the other 76 are the request's own
    CHECK(p.locked_pages() == 1024);
    CHECK(p.free_pages() == 2048 - 1100);
    const kv_admit_result rb = p.admit(req(2, b, 1030));
    REQUIRE(rb.admitted);
    CHECK(rb.hit_tokens == 512);  // the first key only
    CHECK(p.tree_nodes() == 3);   // [0, 512) shared, then one [512, 1024) each
    CHECK(p.locked_pages() == 1536);
    CHECK(p.free_pages() == 2048 - 1100 - 518);
    kv_stats s = p.stats();
    CHECK(s.memory.used_bytes == (1536 + 76 + 6) * k_token);  // the shared 512 tokens once
    CHECK(s.memory.logical_bytes == (1100 + 1030) * k_token);
    CHECK(s.breakdown.internal == 0);
    CHECK(s.breakdown.cached == 0);
    check(p);

    p.release(request_id{1}, release_reason::finished);
    CHECK(p.locked_pages() == 1024);
    CHECK(p.cached_pages() == 512);                   // its own [512, 1024) stays as cache
    CHECK(p.free_pages() == 2048 - 1100 - 518 + 76);  // its unkeyed tokens go back
    check(p);
    p.release(request_id{2}, release_reason::preempted);  // a retracted request's prompt stays too
    CHECK(p.locked_pages() == 0);
    CHECK(p.cached_pages() == 1536);
    CHECK(p.free_pages() == 512);
    s = p.stats();
    CHECK(s.memory.used_bytes == 0);
    CHECK(s.breakdown.cached == 1536 * k_token);
    CHECK(s.prompt_tokens == 2130);
    CHECK(s.prefix_hit_tokens == 512);
    check(p);
  }

  TEST_CASE("radix: a finished request's tokens are evicted LRU leaf first, as many as the allocation asks") {
    radix_policy p(radix_options(256 * k_mib));
    for (std::uint64_t k = 1; k <= 3; ++k) {  // three conversations, each 512 keyed tokens + 88 own
      REQUIRE(p.admit(req(k, {{k, 512}}, 600)).admitted);
      p.release(request_id{k}, release_reason::finished);
    }
    REQUIRE(p.cached_pages() == 1536);
    REQUIRE(p.free_pages() == 512);
    // 600 pages with 512 free: SGLang's evict_from_tree_cache asks the tree for all 600, so the two
    // oldest leaves go (512 + 512 >= 600); the newest stays.
    REQUIRE(p.admit(req(10, {}, 600)).admitted);
    CHECK(p.stats().evictions == 2);
    CHECK(p.cached_pages() == 512);
    CHECK(p.free_pages() == 512 + 1024 - 600);
    check(p);
    CHECK(p.admit(req(11, {{3, 512}}, 600)).hit_tokens == 512);
    CHECK(p.admit(req(12, {{1, 512}}, 600)).hit_tokens == 0);
    check(p);
  }

  TEST_CASE("radix: a hit refreshes a leaf, so eviction takes the least recently used others") {
    radix_policy p(radix_options(256 * k_mib));
    for (std::uint64_t k = 1; k <= 3; ++k) {
      REQUIRE(p.admit(req(k, {{k, 512}}, 600)).admitted);
      p.release(request_id{k}, release_reason::finished);
    }
    const kv_admit_result again = p.admit(req(4, {{1, 512}}, 600));  // the oldest is used again
    REQUIRE(again.admitted);
    CHECK(again.hit_tokens == 512);
    p.release(request_id{4}, release_reason::finished);
    REQUIRE(p.admit(req(10, {}, 600)).admitted);
    CHECK(p.stats().evictions == 2);  // keys 2 and 3
    std::uint64_t id = 11;
    for (const auto& [key, hit] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{{1, 512}, {2, 0}, {3, 0}}) {
      const kv_admit_result r = p.admit(req(id, {{key, 512}}, 600));
      REQUIRE(r.admitted);
      CHECK(r.hit_tokens == hit);
      p.release(request_id{id++}, release_reason::finished);
    }
    check(p);
  }

  TEST_CASE("radix: eviction frees a leaf, then its parent once that becomes an unlocked leaf") {
    radix_policy p(radix_options(256 * k_mib));
    REQUIRE(p.admit(req(1, {{1, 512}, {2, 512}}, 1024)).admitted);
    REQUIRE(p.admit(req(2, {{1, 512}, {3, 512}}, 1024)).admitted);  // splits at 512
    p.release(request_id{1}, release_reason::finished);
    p.release(request_id{2}, release_reason::finished);
    REQUIRE(p.tree_nodes() == 3);
    REQUIRE(p.cached_pages() == 1536);
    REQUIRE(p.free_pages() == 512);
    // 2,000 pages: every leaf, then the shared parent.
    REQUIRE(p.admit(req(3, {}, 2000)).admitted);
    CHECK(p.stats().evictions == 3);
    CHECK(p.tree_nodes() == 0);
    CHECK(p.free_pages() == 48);
    check(p);
  }

  TEST_CASE("radix: a match ending inside an edge splits it, and shares a short block's tokens") {
    radix_policy p(radix_options(256 * k_mib));
    REQUIRE(p.admit(req(1, {{1, 512}, {2, 300}}, 812)).admitted);
    p.release(request_id{1}, release_reason::finished);
    REQUIRE(p.tree_nodes() == 1);
    // Another second block: the match ends at 512, inside the edge [0, 812).
    const kv_admit_result b = p.admit(req(2, {{1, 512}, {3, 512}}, 1100));
    REQUIRE(b.admitted);
    CHECK(b.hit_tokens == 512);
    CHECK(p.tree_nodes() == 3);       // [0, 512) -> [512, 812) and [512, 1024)
    CHECK(p.locked_pages() == 1024);  // [0, 512) and its own [512, 1024)
    CHECK(p.cached_pages() == 300);
    check(p);
    // The same second key with more tokens: its first 300 tokens are the cached ones.
    const kv_admit_result c = p.admit(req(3, {{1, 512}, {2, 512}}, 1100));
    REQUIRE(c.admitted);
    CHECK(c.hit_tokens == 812);
    CHECK(p.tree_nodes() == 4);  // [812, 1024) hangs under [512, 812)
    CHECK(p.cached_pages() == 0);
    check(p);
  }

  TEST_CASE("radix: the last prompt token is always computed, and the page the tree already holds is freed") {
    radix_policy p(radix_options(256 * k_mib));
    REQUIRE(p.admit(req(1, {{1, 512}}, 512)).admitted);
    p.release(request_id{1}, release_reason::finished);
    const std::uint64_t free_before = p.free_pages();
    const kv_admit_result b = p.admit(req(2, {{1, 512}}, 512, 600));
    REQUIRE(b.admitted);
    CHECK(b.hit_tokens == 511);
    // The match stopped at 511 and split the edge; the insert found [511, 512) already there and
    // freed the page the request computed it in (cache_unfinished_req's duplicates).
    CHECK(p.tree_nodes() == 2);
    CHECK(p.locked_pages() == 512);
    CHECK(p.cached_pages() == 0);
    CHECK(p.free_pages() == free_before);
    CHECK(p.stats().memory.used_bytes == 512 * k_token);
    check(p);
    // A one-token prompt hits nothing.
    CHECK(p.admit(req(3, {{1, 1}}, 1)).hit_tokens == 0);
    // Growth takes the request's own pages.
    REQUIRE(p.grow(request_id{2}, 10));
    CHECK(p.free_pages() == free_before - 10);  // request 3's page was a duplicate too (of [0, 1))
    check(p);
  }

  TEST_CASE("radix: page_tokens 16 matches and inserts whole pages only") {
    radix_policy p(radix_options(256 * k_mib), pages_of(16));  // 128 pages of 16 tokens (2 MiB each)
    REQUIRE(p.page_bytes() == 16 * k_token);
    REQUIRE(p.pool_pages() == 128);
    REQUIRE(p.admit(req(1, {{1, 512}, {2, 100}}, 612)).admitted);
    CHECK(p.locked_pages() == 38);  // 608 of the 612 keyed tokens: 4 sit in the request's own page
    kv_stats s = p.stats();
    CHECK(s.breakdown.internal == 12 * k_token);  // 16 - 4 slots of that page
    CHECK(s.memory.used_bytes == 612 * k_token);
    check(p);
    p.release(request_id{1}, release_reason::finished);
    CHECK(p.cached_pages() == 38);
    CHECK(p.stats().breakdown.internal == 0);
    // 611 tokens may hit; whole pages of them: 608.
    CHECK(p.admit(req(2, {{1, 512}, {2, 100}}, 612)).hit_tokens == 608);
    // A shorter second block (88 tokens): 599 may hit, 592 in whole pages; the edge splits at 592.
    const kv_admit_result c = p.admit(req(3, {{1, 512}, {2, 88}}, 600));
    CHECK(c.hit_tokens == 592);
    CHECK(p.tree_nodes() == 2);
    // Another second key: the first block's 32 pages.
    CHECK(p.admit(req(4, {{1, 512}, {9, 512}}, 1100)).hit_tokens == 512);
    check(p);
  }

  TEST_CASE("radix: a failed admission or growth changes nothing live and evicts nothing it cannot use") {
    radix_policy p(radix_options(256 * k_mib));
    REQUIRE(p.admit(req(1, {{1, 512}}, 600)).admitted);
    p.release(request_id{1}, release_reason::finished);  // 512 cached
    REQUIRE(p.admit(req(2, {{5, 512}}, 1500, 2200)).admitted);
    REQUIRE(p.free_pages() == 2048 - 512 - 1500);
    const kv_stats before = p.stats();
    const std::uint64_t nodes = p.tree_nodes();
    // 600 pages: 36 free + 512 cached is not enough, so nothing is evicted.
    CHECK_FALSE(p.admit(req(3, {{8, 512}}, 600)).admitted);
    CHECK(p.stats().memory == before.memory);
    CHECK(p.stats().breakdown == before.breakdown);
    CHECK(p.stats().evictions == 0);
    CHECK(p.tree_nodes() == nodes);
    check(p);
    // A request that hits the cached prefix locks it first: 36 free pages cannot hold its other 88.
    CHECK_FALSE(p.admit(req(4, {{1, 512}}, 600)).admitted);
    CHECK(p.stats().memory == before.memory);
    CHECK(p.stats().evictions == 0);
    CHECK(p.cached_pages() == 512);  // unlocked again
    // Growth by 600 fails the same way; by 100 it evicts the cached leaf.
    CHECK_FALSE(p.grow(request_id{2}, 600));
    CHECK(p.stats().memory == before.memory);
    REQUIRE(p.grow(request_id{2}, 100));
    CHECK(p.stats().evictions == 1);
    CHECK(p.cached_pages() == 0);
    CHECK(p.free_pages() == 36 + 512 - 100);
    check(p);
  }

  TEST_CASE("radix: without prefix caching nothing is shared and everything goes back to the free list") {
    radix_policy p(radix_options(256 * k_mib), pages_of(1, false));
    REQUIRE(p.admit(req(1, {{1, 512}}, 600)).admitted);
    p.release(request_id{1}, release_reason::finished);
    const kv_admit_result b = p.admit(req(2, {{1, 512}}, 600));
    REQUIRE(b.admitted);
    CHECK(b.hit_tokens == 0);
    CHECK(p.tree_nodes() == 0);
    CHECK(p.free_pages() == 2048 - 600);
    p.release(request_id{2}, release_reason::finished);
    CHECK(p.free_pages() == 2048);
    CHECK(p.stats().breakdown.cached == 0);
    check(p);
    CHECK(p.describe()["prefix_caching"] == false);
  }

  TEST_CASE("radix: an unlimited pool grows by chunks, and a page that does not divide a chunk leaves idle bytes") {
    kv_policy_options o = radix_options(k_unlimited);
    o.zero_latency = false;
    radix_policy p(o, pages_of(3));  // 384 KiB pages: five to a 2 MiB chunk
    CHECK(p.pool_pages() == 0);
    CHECK(p.stats().memory.physical_bytes == 0);
    REQUIRE(p.admit(req(1, {}, 10)).admitted);  // 4 pages
    const kv_stats s = p.stats();
    CHECK(s.memory.physical_bytes == k_chunk_bytes);
    CHECK(p.pool_pages() == 5);
    CHECK(s.breakdown.reserved_idle == k_chunk_bytes - 5 * 3 * k_token);
    CHECK(s.breakdown.internal == 2 * k_token);
    CHECK(s.breakdown.free == 3 * k_token * 1);
    CHECK(s.chunks_created == 1);
    CHECK(p.vmm_time().count() > 0);  // growth is on the step that asked
    CHECK(p.critical_vmm_time() == p.vmm_time());
    CHECK(p.access() == kv_access{true, 3});
    check(p);
    CHECK(p.describe()["pool_pages"] == "grows on demand");
  }

  TEST_CASE("radix: a preallocated pool maps at start, off the replay's clock") {
    kv_policy_options o = radix_options(64 * k_mib);
    o.zero_latency = false;
    radix_policy p(o);
    CHECK(p.pool_pages() == 512);
    CHECK(p.pool().startup_vmm_ns() > 0);
    REQUIRE(p.admit(req(1, {{1, 512}}, 500)).admitted);
    CHECK(p.vmm_time().count() == 0);
    const nlohmann::ordered_json d = p.describe();
    CHECK(d["page_tokens"] == 1);
    CHECK(d["pool_pages"] == 512);
    CHECK(d["prefix_caching"] == true);
    REQUIRE(p.vmm_report().has_value());
    CHECK(p.vmm_report()->critical_model_ns == 0);
  }

  TEST_CASE("radix: bad options are refused naming the option") {
    CHECK_THROWS_WITH_AS(radix_policy(radix_options(64 * k_mib), pages_of(0)), doctest::Contains("page_tokens"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(radix_policy(radix_options(2 * k_mib), pages_of(32)), doctest::Contains("holds no page"),
                         std::invalid_argument);
    radix_policy p(radix_options(64 * k_mib));
    CHECK_THROWS_AS((void)p.admit(req(1, {}, 0)), std::invalid_argument);
  }

  TEST_CASE("radix: random operations with driver faults keep every invariant and hold nothing afterwards") {
    for (const std::uint32_t page : {1u, 3u, 16u}) {
      for (const bool unlimited : {true, false}) {
        CAPTURE(page);
        CAPTURE(unlimited);
        sim_backend device(unlimited ? sim_backend::k_unlimited : 64 * k_mib, latency_model::zero());
        std::uint64_t faults = 0;
        {
          auto faulty = std::make_unique<fault_injection_backend>(std::make_unique<borrowed_backend>(device), page);
          fault_injection_backend& f = *faulty;
          if (unlimited) {  // growth fails now and then: a create out of memory, a map that throws
            f.fail_with_probability(vmm_call::create, 0.15);
            f.fail_with_probability(vmm_call::map, 0.1);
          }
          radix_policy p(radix_options(unlimited ? k_unlimited : 48 * k_mib), std::move(faulty), latency_model::zero(),
                         pages_of(page));
          check(p);
          std::mt19937_64 rng(page * 2 + (unlimited ? 1 : 0));
          std::map<std::uint64_t, std::uint64_t> live;  // id -> tokens it may still grow
          std::uint64_t next = 1;
          for (int step = 0; step < 1500; ++step) {
            const int op = static_cast<int>(rng() % 5);
            try {
              if (op <= 1 || live.empty()) {
                // Four conversations; prompts of 1-3 keyed blocks of 64 tokens, the last often
                // short, then a few tokens of their own.
                const std::uint64_t conv = rng() % 4;
                std::vector<token_block> blocks;
                const std::uint64_t n = 1 + rng() % 3;
                for (std::uint64_t b = 0; b < n; ++b) blocks.push_back({conv * 100 + b + 1 + (rng() % 4 == 0), 64});
                blocks.back().tokens -= static_cast<std::uint32_t>(rng() % 40);
                std::uint64_t prompt = 0;
                for (const token_block& b : blocks) prompt += b.tokens;
                prompt += rng() % 20;
                if (rng() % 8 == 0) blocks.clear();
                const kv_admit_result a = p.admit(req(next, blocks, prompt, prompt + 60));
                if (a.admitted) {
                  CHECK(a.hit_tokens < prompt);
                  CHECK(a.hit_tokens % page == 0);
                  live[next] = 60;
                }
                ++next;
              } else if (op <= 3) {
                auto it = live.begin();
                std::advance(it, static_cast<long>(rng() % live.size()));
                const std::uint64_t tokens = std::min<std::uint64_t>(it->second, 1 + rng() % 12);
                if (tokens > 0 && p.grow(request_id{it->first}, tokens)) it->second -= tokens;
              } else {
                auto it = live.begin();
                std::advance(it, static_cast<long>(rng() % live.size()));
                p.release(request_id{it->first}, rng() % 3 == 0 ? release_reason::preempted : release_reason::finished);
                live.erase(it);
              }
            } catch (const vmm_error&) {
              ++faults;  // an injected map failure: the operation changed nothing live
            }
            check(p);
          }
          if (unlimited) CHECK(f.faults_injected() > 0);
          if (!unlimited) CHECK(p.stats().evictions > 0);
          for (const auto& [id, left] : live) p.release(request_id{id}, release_reason::finished);
          check(p);
          CHECK(p.locked_pages() == 0);
          CHECK(p.stats().memory.used_bytes == 0);
          CHECK(p.free_pages() + p.cached_pages() == p.pool_pages());
        }
        const vmm_live held = device.live();
        CHECK(held.ranges == 0);
        CHECK(held.chunks == 0);
        CHECK(held.mappings == 0);
        if (unlimited) CHECK(faults > 0);
      }
    }
  }

  TEST_CASE("radix: with unlimited memory the bundled excerpt hits exactly the infinite-cache bound") {
    const std::string path = std::string(VTENSOR_SOURCE_DIR) + "/traces/data/mooncake_conversation_excerpt.jsonl";
    traces::infinite_prefix_cache bound;
    std::uint64_t bound_hits = 0;
    {
      auto reader = traces::open_trace(path, std::nullopt);
      while (auto r = reader->next()) bound_hits += bound.serve(*r);
    }
    auto reader = traces::open_trace(path, std::nullopt);
    auto p = make_kv_policy("radix", llama_policy(k_unlimited));
    replay_config c = llama_replay();
    c.time_scale = 4;
    c.replica.check_every_step = false;  // the walk of a tree of the whole excerpt at every step is slow
    const replay_summary s = run_replay(*reader, *p, c);
    CHECK(s.counters.rejected_memory == 0);
    CHECK(s.counters.hit_tokens == bound_hits);
    p->check_invariants();
  }

  TEST_CASE("radix: a replay at a small memory checked after every step keeps the invariants") {
    const std::string path = std::string(VTENSOR_SOURCE_DIR) + "/traces/data/mooncake_conversation_excerpt.jsonl";
    auto reader = traces::open_trace(path, std::nullopt);
    const kv_policy_options o = llama_policy(2 * k_gib);  // 16,384 tokens: eviction and preemption
    auto p = make_kv_policy(policy_choice(pages_of(16)), o);
    replay_config c = llama_replay();  // invariants after every step
    c.max_requests = 200;
    const replay_summary s = run_replay(*reader, *p, c);
    CHECK(s.counters.completed + s.counters.rejected_memory + s.counters.rejected_context == 200);
    CHECK(s.final_memory.evictions > 0);
    CHECK(s.counters.hit_tokens > 0);
  }
}
