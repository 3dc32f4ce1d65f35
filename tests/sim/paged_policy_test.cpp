// The paged policy (sim/paged_policy.hpp), after vLLM v1: exact small scenarios of its block
// pool, prefix cache and free queue, then random operations with injected faults.
//
// Llama-3-8B holds 128 KiB of KV a token, so a 16-token block is 2 MiB: one chunk, and a budget of
// N chunks is a pool of N blocks, numbered 0.. N - 1 in the order the free queue hands them out.

#include <doctest/doctest.h>

#include <limits>
#include <map>
#include <random>

#include "backends/fault_injection_backend.hpp"
#include "backends/sim_backend.hpp"
#include "sim/paged_policy.hpp"
#include "tests/sim/sim_test_support.hpp"

using namespace vtensor;
using namespace vtensor::sim;
using namespace vtensor::sim_testing;

namespace {

using blocks = std::vector<std::uint32_t>;
constexpr std::uint64_t k_token_bytes = 128 * 1024;  // Llama-3-8B, one GPU
constexpr std::uint64_t k_block_bytes = 16 * k_token_bytes;

kv_policy_options paged_options(std::uint64_t memory, bool zero_latency = true) {
  return llama_policy(memory, zero_latency);
}

paged_settings blocks_of(std::uint32_t block_tokens, bool prefix_caching = true) {
  return {block_tokens, prefix_caching};
}

// A pool of `n` 16-token blocks.
std::unique_ptr<paged_policy> pool_of(std::uint64_t n) {
  return std::make_unique<paged_policy>(paged_options(n * k_chunk_bytes));
}

kv_admit_result admit(paged_policy& p, std::uint64_t id, const std::vector<token_block>& keys, std::uint64_t prompt,
                      std::uint64_t max_tokens = 0) {
  return p.admit({request_id{id}, keys, prompt, max_tokens == 0 ? prompt + 64 : max_tokens});
}

void finish(paged_policy& p, std::uint64_t id) { p.release(request_id{id}, release_reason::finished); }

void check(const paged_policy& p) {
  const kv_stats s = p.stats();
  CHECK(s.breakdown.total() == s.memory.physical_bytes);
  CHECK(s.breakdown.used == s.memory.used_bytes);
  p.check_invariants();
}

// A backend that forwards to one the test keeps (the policy owns only this wrapper), so the test
// can look at what is still held after the policy is gone.
class borrowed_backend final : public vmm_backend {
 public:
  explicit borrowed_backend(vmm_backend& b) : b_(b) {}

 private:
  [[nodiscard]] std::string do_name() const override { return "borrowed(" + b_.name() + ")"; }
  [[nodiscard]] std::uint64_t do_capacity_bytes() const override { return b_.capacity_bytes(); }
  [[nodiscard]] device_addr do_reserve(std::uint64_t bytes) override { return b_.reserve(bytes); }
  void do_free_range(device_addr base) override { b_.free_range(base); }
  [[nodiscard]] std::optional<chunk_handle> do_create_chunk() override { return b_.create_chunk(); }
  void do_release_chunk(chunk_handle h) override { b_.release_chunk(h); }
  void do_map(device_addr va, chunk_handle h) override { b_.map(va, h); }
  void do_set_access(device_addr va, std::uint64_t bytes) override { b_.set_access(va, bytes); }
  void do_unmap(device_addr va, std::uint64_t bytes) override { b_.unmap(va, bytes); }
  [[nodiscard]] vmm_live do_live() const override { return b_.live(); }
  vmm_backend& b_;
};

bool nothing_held(const vmm_backend& b) {
  const vmm_live l = b.live();
  return l.ranges == 0 && l.chunks == 0 && l.mappings == 0;
}

const std::vector<token_block> k_key1{{1, 512}};
const std::vector<token_block> k_key2{{2, 512}};

}  // namespace

TEST_SUITE("paged_policy") {
  TEST_CASE("paged: a finite budget is one pool of whole blocks mapped at start, the rest reserved idle") {
    // 10 chunks of 2 MiB hold 6 blocks of 24 tokens (3 MiB); 2 MiB are left below one block.
    paged_policy p(paged_options(10 * k_chunk_bytes, false), blocks_of(24));
    CHECK(p.num_blocks() == 6);
    CHECK(p.block_bytes() == 24 * k_token_bytes);
    CHECK(p.free_queue() == blocks{0, 1, 2, 3, 4, 5});
    const kv_stats s = p.stats();
    CHECK(s.memory.physical_bytes == 10 * k_chunk_bytes);
    CHECK(s.breakdown.free == 6 * 24 * k_token_bytes);
    CHECK(s.breakdown.reserved_idle == 2 * k_mib);
    CHECK(s.chunks_created == 10);
    CHECK(p.pool().startup_vmm_ns() > 0);
    CHECK(p.vmm_time().count() == 0);  // the preallocation is on no step
    REQUIRE(admit(p, 1, k_key1, 100).admitted);
    CHECK(p.vmm_time().count() == 0);
    CHECK(p.access() == kv_access{true, 24});
    const auto d = p.describe();
    CHECK(d["block_tokens"] == 24);
    CHECK(d["prefix_caching"] == true);
    CHECK(d["num_blocks"] == 6);
    check(p);
  }

  TEST_CASE("paged: hits full blocks only and recomputes the last token") {
    auto p = pool_of(16);
    // A 40-token prompt: blocks 0 and 1 full (cached at admission), block 2 holds 8 tokens.
    REQUIRE(admit(*p, 1, k_key1, 40).admitted);
    CHECK(p->block_table(request_id{1}) == blocks{0, 1, 2});
    CHECK(p->cached(0));
    CHECK(p->cached(1));
    CHECK_FALSE(p->cached(2));  // a partial block is never shared
    finish(*p, 1);
    CHECK_FALSE(p->cached(2));
    // The same 32 tokens: the lookup covers 31 tokens, so one whole block hits.
    const kv_admit_result b = admit(*p, 2, k_key1, 32);
    REQUIRE(b.admitted);
    CHECK(b.hit_tokens == 16);
    CHECK(p->block_table(request_id{2}) == blocks{0, 3});  // block 1 is computed again in a new block
    CHECK(p->cached(3));                                   // a duplicate of block 1's hash (vLLM keeps both)
    finish(*p, 2);
    // 33 tokens: the lookup covers 32, two whole blocks hit; the 33rd token is computed.
    const kv_admit_result c = admit(*p, 3, k_key1, 33);
    REQUIRE(c.admitted);
    CHECK(c.hit_tokens == 32);
    CHECK(p->block_table(request_id{3}) == blocks{0, 1, 4});  // the first block of a hash answers
    // 48 tokens hit 32 (request 1's third block was partial, so never cached).
    const kv_admit_result d = admit(*p, 4, k_key1, 48);
    CHECK(d.hit_tokens == 32);
    // Another key hits nothing.
    CHECK(admit(*p, 5, k_key2, 48).hit_tokens == 0);
    // A prompt of 1 token hits nothing.
    CHECK(admit(*p, 6, k_key1, 1).hit_tokens == 0);
    const kv_stats s = p->stats();
    CHECK(s.prompt_tokens == 40 + 32 + 33 + 48 + 48 + 1);
    CHECK(s.prefix_hit_tokens == 16 + 32 + 32);
    check(*p);
  }

  TEST_CASE("paged: the free queue evicts a finished request's last block first") {
    auto p = pool_of(4);
    REQUIRE(admit(*p, 1, k_key1, 48).admitted);  // blocks 0, 1, 2, all full and cached
    CHECK(p->free_queue() == blocks{3});
    finish(*p, 1);
    CHECK(p->free_queue() == blocks{3, 2, 1, 0});  // tail first
    // A request of another key takes the never-used block 3, then request 1's last block.
    REQUIRE(admit(*p, 2, k_key2, 32).admitted);
    CHECK(p->block_table(request_id{2}) == blocks{3, 2});
    CHECK(p->stats().evictions == 1);
    CHECK(p->free_queue() == blocks{1, 0});
    finish(*p, 2);
    CHECK(p->free_queue() == blocks{1, 0, 2, 3});
    // Request 1's prefix hits its two first blocks still; its third block is computed in the
    // queue's head after the revived ones left it: request 2's last block.
    const kv_admit_result c = admit(*p, 3, k_key1, 48);
    REQUIRE(c.admitted);
    CHECK(c.hit_tokens == 32);
    CHECK(p->block_table(request_id{3}) == blocks{0, 1, 2});
    CHECK(p->stats().evictions == 2);
    CHECK(p->free_queue() == blocks{3});
    check(*p);
  }

  TEST_CASE("paged: a hit revives a free cached block, and cached bytes become used") {
    auto p = pool_of(4);
    REQUIRE(admit(*p, 1, k_key1, 32).admitted);
    finish(*p, 1);
    CHECK(p->free_queue() == blocks{2, 3, 1, 0});
    kv_stats s = p->stats();
    CHECK(s.breakdown.cached == 2 * k_block_bytes);
    CHECK(s.breakdown.free == 2 * k_block_bytes);
    CHECK(p->ref_count(0) == 0);
    const kv_admit_result b = admit(*p, 2, k_key1, 40);
    REQUIRE(b.admitted);
    CHECK(b.hit_tokens == 32);
    CHECK(p->ref_count(0) == 1);
    CHECK(p->ref_count(1) == 1);
    CHECK(p->free_queue() == blocks{3});  // 0 and 1 left the queue from its middle; 2 was popped
    s = p->stats();
    CHECK(s.breakdown.cached == 0);
    CHECK(s.breakdown.used == 40 * k_token_bytes);
    CHECK(s.breakdown.internal == 8 * k_token_bytes);
    CHECK(s.breakdown.free == k_block_bytes);
    CHECK(s.evictions == 0);
    check(*p);
  }

  TEST_CASE("paged: hit blocks in the free queue count against it, and a refused admission changes nothing") {
    auto p = pool_of(4);
    REQUIRE(admit(*p, 1, k_key1, 48).admitted);
    finish(*p, 1);                               // queue 3, 2, 1, 0: blocks 0, 1, 2 cached
    REQUIRE(admit(*p, 9, k_key2, 10).admitted);  // holds block 3
    // 49 tokens: 3 hits to revive + 1 new block = 4 blocks out of a queue of 3.
    const kv_stats before = p->stats();
    const kv_admit_result r = admit(*p, 2, k_key1, 49);
    CHECK_FALSE(r.admitted);
    CHECK(p->free_queue() == blocks{2, 1, 0});
    CHECK(p->stats().memory == before.memory);
    CHECK(p->stats().evictions == 0);
    // 48 tokens: 2 hits (the last token is computed) + 1 new = 3: admitted, the new one evicts block 2.
    const kv_admit_result ok = admit(*p, 3, k_key1, 48);
    REQUIRE(ok.admitted);
    CHECK(ok.hit_tokens == 32);
    CHECK(p->block_table(request_id{3}) == blocks{0, 1, 2});
    CHECK(p->stats().evictions == 1);
    // Full: growth fails and changes nothing.
    CHECK_FALSE(p->grow(request_id{3}, 1));
    CHECK(p->grow(request_id{9}, 6));  // block 3 has room for 6 more
    CHECK_FALSE(p->grow(request_id{9}, 1));
    check(*p);
  }

  TEST_CASE("paged: refcounts with two live sharers count shared blocks once") {
    auto p = pool_of(8);
    REQUIRE(admit(*p, 1, k_key1, 40).admitted);
    const kv_admit_result b = admit(*p, 2, k_key1, 40);  // while 1 is live: its blocks are cached already
    REQUIRE(b.admitted);
    CHECK(b.hit_tokens == 32);
    CHECK(p->block_table(request_id{1}) == blocks{0, 1, 2});
    CHECK(p->block_table(request_id{2}) == blocks{0, 1, 3});
    CHECK(p->ref_count(0) == 2);
    CHECK(p->ref_count(1) == 2);
    kv_stats s = p->stats();
    CHECK(s.memory.used_bytes == (32 + 8 + 8) * k_token_bytes);
    CHECK(s.memory.logical_bytes == 80 * k_token_bytes);
    CHECK(s.memory.mapped_bytes == 4 * k_block_bytes);
    CHECK(s.breakdown.internal == 16 * k_token_bytes);
    REQUIRE(p->grow(request_id{2}, 10));  // fills block 3 (8 more), then 2 in block 4
    CHECK(p->block_table(request_id{2}) == blocks{0, 1, 3, 4});
    finish(*p, 1);
    CHECK(p->ref_count(0) == 1);
    CHECK(p->free_queue() == blocks{5, 6, 7, 2});  // only its own partial block is freed
    s = p->stats();
    CHECK(s.memory.used_bytes == 50 * k_token_bytes);
    CHECK(s.breakdown.cached == 0);
    p->release(request_id{2}, release_reason::preempted);  // freed like a finished request
    CHECK(p->free_queue() == blocks{5, 6, 7, 2, 4, 3, 1, 0});
    CHECK(p->stats().breakdown.cached == 2 * k_block_bytes);
    CHECK(admit(*p, 3, k_key1, 33).hit_tokens == 32);  // a preempted request's cached blocks still hit
    check(*p);
  }

  TEST_CASE("paged: block sizes that do not divide 512 hash the keys a block straddles, and short last keys") {
    // 24-token blocks (3 MiB): 64 chunks hold 42 blocks. Block 21 covers tokens 504..527, in both keys.
    paged_policy p(paged_options(64 * k_chunk_bytes), blocks_of(24));
    CHECK(p.num_blocks() == 42);
    const std::vector<token_block> a{{1, 512}, {2, 512}};
    const std::vector<token_block> b{{1, 512}, {3, 512}};
    const std::vector<token_block> a_short{{1, 512}, {2, 100}};
    REQUIRE(admit(p, 1, a, 600).admitted);  // 25 blocks, all full
    finish(p, 1);
    // Another second key: blocks 0..20 lie in key 1 alone and hit; block 21 straddles into key 3.
    const kv_admit_result rb = admit(p, 2, b, 600);
    REQUIRE(rb.admitted);
    CHECK(rb.hit_tokens == 21 * 24);
    finish(p, 2);
    // The same keys: 599 tokens looked up, 24 whole blocks.
    CHECK(admit(p, 3, a, 600).hit_tokens == 24 * 24);
    finish(p, 3);
    // A short last key names the first tokens of the same key: blocks 22..24 lie in key 2 at
    // offsets 16..88, as in request 1, so all 25 blocks (600 tokens) hit for a 612-token prompt.
    const kv_admit_result rs = admit(p, 4, a_short, 612);
    REQUIRE(rs.admitted);
    CHECK(rs.hit_tokens == 25 * 24);
    finish(p, 4);
    // Tokens beyond the keys are unique: a 700-token prompt keyed for 612 hashes 25 blocks only.
    REQUIRE(admit(p, 5, a_short, 700).hit_tokens == 25 * 24);
    finish(p, 5);
    CHECK(admit(p, 6, a_short, 700).hit_tokens == 25 * 24);
    check(p);
  }

  TEST_CASE("paged: an unlimited budget grows the pool by chunks and never evicts") {
    paged_policy p(paged_options(k_unlimited, false));
    CHECK(p.num_blocks() == 0);
    CHECK(p.stats().memory.physical_bytes == 0);
    REQUIRE(admit(p, 1, k_key1, 40).admitted);
    CHECK(p.num_blocks() == 3);
    CHECK(p.stats().memory.physical_bytes == 3 * k_chunk_bytes);
    const auto grown = p.vmm_time().count();
    CHECK(grown > 0);                           // growth is on the step that asked
    finish(p, 1);                               // blocks 0, 1 cached; block 2 free
    REQUIRE(admit(p, 2, k_key2, 16).admitted);  // takes the free block: no growth
    CHECK(p.block_table(request_id{2}) == blocks{2});
    CHECK(p.num_blocks() == 3);
    CHECK(p.vmm_time().count() == grown);
    REQUIRE(admit(p, 3, {}, 32).admitted);  // no free block without a hash: grows rather than evict
    CHECK(p.block_table(request_id{3}) == blocks{3, 4});
    CHECK(p.stats().evictions == 0);
    CHECK(p.stats().breakdown.cached == 2 * k_block_bytes);
    CHECK(admit(p, 4, k_key1, 33).hit_tokens == 32);
    check(p);
    // 24-token blocks: the chunks mapped hold whole blocks and a remainder, reserved idle.
    paged_policy q(paged_options(k_unlimited), blocks_of(24));
    REQUIRE(admit(q, 1, {}, 30).admitted);  // 2 blocks = 6 MiB = 3 chunks exactly
    CHECK(q.stats().memory.physical_bytes == 3 * k_chunk_bytes);
    REQUIRE(admit(q, 2, {}, 10).admitted);  // a third block: 9 MiB in 5 chunks, 1 MiB idle
    CHECK(q.stats().memory.physical_bytes == 5 * k_chunk_bytes);
    CHECK(q.stats().breakdown.reserved_idle == k_mib);
    check(q);
  }

  TEST_CASE("paged: with prefix caching off nothing hits and nothing is cached") {
    paged_policy p(paged_options(8 * k_chunk_bytes), blocks_of(16, false));
    REQUIRE(admit(p, 1, k_key1, 48).admitted);
    finish(p, 1);
    CHECK(p.stats().breakdown.cached == 0);
    CHECK(p.stats().breakdown.free == 8 * k_block_bytes);
    CHECK(admit(p, 2, k_key1, 48).hit_tokens == 0);
    CHECK(p.describe()["prefix_caching"] == false);
    check(p);
  }

  TEST_CASE("paged: bad options and misuse are refused") {
    CHECK_THROWS_WITH_AS(paged_policy(paged_options(8 * k_chunk_bytes), blocks_of(0)),
                         doctest::Contains("block_tokens"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(paged_policy(paged_options(3 * k_mib), blocks_of(32)), doctest::Contains("memory_bytes"),
                         std::invalid_argument);
    auto p = pool_of(4);
    CHECK_THROWS_AS((void)p->grow(request_id{1}, 1), std::invalid_argument);
    CHECK_THROWS_AS(finish(*p, 1), std::invalid_argument);
    CHECK_THROWS_AS((void)admit(*p, 1, {}, 0), std::invalid_argument);
    REQUIRE(admit(*p, 1, {}, 10, 12).admitted);
    CHECK_THROWS_AS((void)admit(*p, 1, {}, 10), std::invalid_argument);
    CHECK_THROWS_AS((void)p->grow(request_id{1}, 3), std::invalid_argument);
    CHECK(p->grow(request_id{1}, 2));
    check(*p);
  }

  TEST_CASE("paged: a constructor failing on the device throws and leaves nothing held") {
    for (const vmm_call call : {vmm_call::create, vmm_call::map, vmm_call::set_access}) {
      CAPTURE(call);
      fault_injection_backend faulty(std::make_unique<sim_backend>(sim_backend::k_unlimited, latency_model::zero()));
      faulty.fail_nth(call, 3);
      CHECK_THROWS((void)paged_policy(std::make_unique<borrowed_backend>(faulty), latency_model::zero(),
                                      paged_options(8 * k_chunk_bytes)));
      CHECK(faulty.faults_injected() == 1);
      CHECK(nothing_held(faulty));
    }
  }

  TEST_CASE("paged: random operations with injected faults keep the invariants and leave nothing held") {
    for (const bool unlimited : {false, true}) {
      CAPTURE(unlimited);
      fault_injection_backend faulty(std::make_unique<sim_backend>(sim_backend::k_unlimited, latency_model::zero()),
                                     11);
      std::uint64_t admitted = 0, refused = 0, faults_seen = 0, hits = 0;
      {
        for (const std::uint32_t bt : {16u, 24u}) {
          CAPTURE(bt);
          paged_policy p(std::make_unique<borrowed_backend>(faulty), latency_model::zero(),
                         paged_options(unlimited ? k_unlimited : 40 * k_chunk_bytes), blocks_of(bt));
          faulty.fail_with_probability(vmm_call::create, 0.05);
          faulty.fail_with_probability(vmm_call::map, 0.01);
          std::mt19937_64 rng(bt);
          std::map<std::uint64_t, std::uint64_t> live;  // id -> tokens it may still grow
          std::uint64_t next = 1;
          for (int step = 0; step < 1500; ++step) {
            const int op = static_cast<int>(rng() % 5);
            try {
              if (op <= 1 || live.empty()) {
                const std::uint64_t conversation = rng() % 4;
                std::vector<token_block> keys;
                const std::uint64_t n = 1 + rng() % 2;
                for (std::uint64_t k = 0; k < n; ++k) keys.push_back({conversation * 10 + k + 1, 512});
                keys.back().tokens = static_cast<std::uint32_t>(1 + rng() % 512);
                const std::uint64_t prompt = (n - 1) * 512 + keys.back().tokens + rng() % 40;
                const kv_admit_result a = p.admit({request_id{next}, keys, prompt, prompt + 100});
                if (a.admitted) {
                  CHECK(a.hit_tokens % bt == 0);
                  CHECK(a.hit_tokens < prompt);
                  hits += a.hit_tokens;
                  live[next] = 100;
                  ++admitted;
                } else {
                  ++refused;
                }
                ++next;
              } else if (op <= 3) {
                auto it = live.begin();
                std::advance(it, static_cast<long>(rng() % live.size()));
                const std::uint64_t t = std::min<std::uint64_t>(it->second, 1 + rng() % 30);
                if (p.grow(request_id{it->first}, t)) it->second -= t;
              } else {
                auto it = live.begin();
                std::advance(it, static_cast<long>(rng() % live.size()));
                p.release(request_id{it->first}, rng() % 3 == 0 ? release_reason::preempted : release_reason::finished);
                live.erase(it);
              }
            } catch (const vmm_error&) {
              ++faults_seen;  // an injected map failure: nothing was admitted or grown
              ++next;
            }
            check(p);
          }
          faulty.clear_faults();
          for (const auto& [id, left] : live) p.release(request_id{id}, release_reason::finished);
          check(p);
          CHECK(p.stats().memory.used_bytes == 0);
          CHECK(p.stats().breakdown.internal == 0);
        }
      }
      CHECK(admitted > 100);
      CHECK(refused > 0);
      CHECK(hits > 0);
      if (unlimited) CHECK(faults_seen > 0);
      CHECK(nothing_held(faulty));
    }
  }

  TEST_CASE("paged: a replay through the registry runs and reports a hit rate under the bound") {
    const std::string path = write_trace(
        "paged_replay.jsonl",
        {mooncake_line(0, 1500, 20, 100), mooncake_line(10, 1500, 20, 100), mooncake_line(5000, 1700, 20, 100)});
    auto reader = traces::open_trace(path, std::nullopt);
    auto p = make_kv_policy("paged", paged_options(4 * k_gib));
    const replay_summary s = run_replay(*reader, *p, llama_replay(), {});
    CHECK(s.counters.completed == 3);
    // Request 1 cached its 93 full blocks at admission (its keys cover 1,500 tokens); request 2,
    // arriving while 1 runs, and request 3 hit all of them (3's block 93 lies past 1's keys).
    CHECK(s.counters.hit_tokens == 1488 + 1488);
  }

  // Note [Paged eviction orders]: request A is cached, then B, then A is hit again (C); a fresh
  // request D then needs four blocks of a pool of eight. Worked by hand:
  // - lru (vLLM's queue, release order): the queue is B's blocks, then C's (A's): D takes B's
  //   four (three cached), and A's prefix is still there for E (48 tokens);
  // - fifo: the uncached free blocks (B's and C's last ones) go first, then the two blocks
  //   registered first, A's 0 and 1: E hits nothing;
  // - lfu: A's blocks were hit once, B's never: B's go, E hits 48.
  TEST_CASE("paged: eviction orders other than lru take uncached free blocks, then the order's choice") {
    const std::vector<token_block> a{{1, 16}, {2, 16}, {3, 16}, {4, 1}};
    const std::vector<token_block> b{{11, 16}, {12, 16}, {13, 16}, {14, 1}};
    const std::vector<token_block> d{{21, 16}, {22, 16}, {23, 16}, {24, 1}};
    const std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> expect{
        {"lru", {3, 48}}, {"fifo", {2, 0}}, {"lfu", {2, 48}}};  // evictions by D, E's hit
    for (const auto& [order, want] : expect) {
      CAPTURE(order);
      paged_settings settings;
      settings.eviction.name = order;
      paged_policy p(paged_options(8 * k_chunk_bytes), settings);
      REQUIRE(admit(p, 1, a, 49).admitted);
      finish(p, 1);
      REQUIRE(admit(p, 2, b, 49).admitted);
      finish(p, 2);
      const kv_admit_result c = admit(p, 3, a, 49);
      REQUIRE(c.admitted);
      CHECK(c.hit_tokens == 48);
      finish(p, 3);
      check(p);
      REQUIRE(admit(p, 4, d, 49).admitted);
      CHECK(p.stats().evictions == want.first);
      finish(p, 4);
      const kv_admit_result e = admit(p, 5, a, 49);
      REQUIRE(e.admitted);
      CHECK(e.hit_tokens == want.second);
      check(p);
    }
  }
}
