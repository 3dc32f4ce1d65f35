// The kv_policy contract (sim/kv_policy.hpp), checked the same way over every registered policy:
// admit or change nothing, grow or change nothing, release, stats that add up, invariants after
// every operation, misuse refused. On `sim` here; the "gpu" suite runs the policies that make VMM
// calls over `cuda` too.

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>

#include "sim/policy_registry.hpp"
#include "tests/sim/sim_test_support.hpp"
#include "tests/support/backend_choice.hpp"
#if VTENSOR_HAVE_CUDA
#include "backends/cuda_backend.hpp"
#endif

using namespace vtensor;
using namespace vtensor::sim;

namespace {

// Policies that keep and share prefixes (with their default options).
bool caches_prefixes(const std::string& name) { return name == "vtensor" || name == "paged" || name == "radix"; }

// The figures of a stats() that must not move when an operation changes nothing. Cached and free
// bytes may move: a failed admission or growth may evict cache entries (allowed by the contract).
struct live_figures {
  std::uint64_t used, logical, prompt_tokens, hit_tokens;
  friend bool operator==(const live_figures&, const live_figures&) = default;
};
live_figures live_of(const kv_stats& s) {
  return {s.memory.used_bytes, s.memory.logical_bytes, s.prompt_tokens, s.prefix_hit_tokens};
}

// Every stats() of every policy: the breakdown adds up to the physical bytes, and agrees with the
// memory snapshot where both speak of the same bytes.
void check_stats(const kv_policy& p) {
  const kv_stats s = p.stats();
  INFO("policy " << p.name());
  CHECK(s.breakdown.total() == s.memory.physical_bytes);
  CHECK(s.breakdown.used == s.memory.used_bytes);
  CHECK(s.memory.used_bytes <= s.memory.physical_bytes);
  CHECK(s.memory.used_bytes <= s.memory.logical_bytes);
  CHECK(s.prefix_hit_tokens <= s.prompt_tokens);
  CHECK(s.breakdown.cached_pinning <= s.breakdown.cached);
  p.check_invariants();
}

kv_policy_options options_on(const std::string& backend, std::uint64_t memory) {
  kv_policy_options o = sim_testing::llama_policy(memory);
  o.backend = backend;
  o.max_context_tokens = 4096;  // static reserves the maximum context: four fit in 2 GiB
  return o;
}

// The same blocks for every request: 4 keyed blocks of 512 tokens.
const std::vector<token_block> k_shared{{11, 512}, {12, 512}, {13, 512}, {14, 512}};

// The contract on one backend, for one policy.
void conformance(const std::string& name, const std::string& backend) {
  CAPTURE(name);
  CAPTURE(backend);
  // 2 GiB of KV for Llama-3-8B: 16,384 tokens at 128 KiB a token.
  auto p = make_kv_policy(name, options_on(backend, 2 * k_gib));
  REQUIRE(p->name() == name);
  check_stats(*p);

  SUBCASE("a first request is admitted whole, and an equal one after it hits the cache where the policy has one") {
    const kv_admit_result a = p->admit({request_id{1}, k_shared, 2048, 2100});
    REQUIRE(a.admitted);
    CHECK(a.hit_tokens == 0);
    check_stats(*p);
    CHECK(p->stats().memory.logical_bytes == 2048 * options_on(backend, k_gib).kv.kv_bytes_per_token());
    CHECK(p->grow(request_id{1}, 3));
    p->release(request_id{1}, release_reason::finished);
    check_stats(*p);
    CHECK(p->stats().memory.logical_bytes == 0);
    CHECK(p->stats().memory.used_bytes == 0);
    const kv_admit_result b = p->admit({request_id{2}, k_shared, 2048, 2100});
    REQUIRE(b.admitted);
    if (caches_prefixes(name)) {
      CHECK(b.hit_tokens >= 1024);  // at least the first two 512-token blocks, at any granularity
      CHECK(b.hit_tokens <= 2047);  // the last prompt token is always computed
    } else {
      CHECK(b.hit_tokens == 0);
    }
    check_stats(*p);
    p->release(request_id{2}, release_reason::preempted);
    check_stats(*p);
    CHECK(p->stats().prompt_tokens == 4096);
    CHECK(p->stats().prefix_hit_tokens == b.hit_tokens);
  }

  SUBCASE("admission fails changing nothing live, and growth fails changing nothing live") {
    std::uint64_t id = 100;
    std::vector<std::uint64_t> admitted;
    for (;; ++id) {
      const std::vector<token_block> own{{id * 1000, 512}};
      const live_figures before = live_of(p->stats());
      const kv_admit_result a = p->admit({request_id{id}, own, 1500, 1600});
      check_stats(*p);
      if (!a.admitted) {
        CHECK(live_of(p->stats()) == before);
        break;
      }
      admitted.push_back(id);
      REQUIRE(admitted.size() < 200);  // 2 GiB cannot hold 200 x 1,500 tokens
    }
    CHECK(admitted.size() >= 2);
    // Grow the first until memory runs out (static reservations never do: they hold max_tokens).
    bool failed = false;
    for (int i = 0; i < 100 && !failed; ++i) {
      const live_figures before = live_of(p->stats());
      if (!p->grow(request_id{admitted.front()}, 1)) {
        failed = true;
        CHECK(live_of(p->stats()) == before);
      }
      check_stats(*p);
    }
    for (const std::uint64_t a : admitted) p->release(request_id{a}, release_reason::finished);
    check_stats(*p);
    CHECK(p->stats().memory.logical_bytes == 0);
    // Once everything is released the memory admits again.
    REQUIRE(p->admit({request_id{id}, {}, 1500, 1600}).admitted);
    p->release(request_id{id}, release_reason::finished);
  }

  SUBCASE("decode() is the loop of grow()s: the same count, memory, calls and modelled times") {
    // `p` takes decode(), `q` the loop, over the same admissions, until memory runs out.
    auto q = make_kv_policy(name, options_on(backend, 2 * k_gib));
    std::vector<request_id> ids;
    for (std::uint64_t id = 1; id < 200; ++id) {
      const std::vector<token_block> own{{id * 1000, 512}};
      const kv_admit_result a = p->admit({request_id{id}, own, 1000 + id * 37, 1000 + id * 37 + 700});
      const kv_admit_result b = q->admit({request_id{id}, own, 1000 + id * 37, 1000 + id * 37 + 700});
      REQUIRE(a.admitted == b.admitted);
      if (!a.admitted) break;
      ids.push_back(request_id{id});
    }
    REQUIRE(ids.size() >= 2);
    std::uint64_t short_rounds = 0;
    for (std::uint64_t round = 1; round <= 600 && !ids.empty(); ++round) {
      CAPTURE(round);
      p->advance_to(sim_us{round * 1000});
      q->advance_to(sim_us{round * 1000});
      const std::size_t grown = p->decode(ids).grown();
      std::size_t looped = 0;
      while (looped < ids.size() && q->grow(ids[looped], 1)) ++looped;
      REQUIRE(grown == looped);
      const kv_stats a = p->stats();
      const kv_stats b = q->stats();
      CHECK(a.memory == b.memory);
      CHECK(a.breakdown == b.breakdown);
      CHECK(a.vmm.calls == b.vmm.calls);
      CHECK(a.chunks_created == b.chunks_created);
      CHECK(p->vmm_time() == q->vmm_time());
      CHECK(p->critical_vmm_time() == q->critical_vmm_time());
      if (grown < ids.size()) {  // what the replica does: preempt the newest, retry later
        ++short_rounds;
        p->release(ids.back(), release_reason::preempted);
        q->release(ids.back(), release_reason::preempted);
        ids.pop_back();
      }
    }
    // Growth runs out where it takes pages or blocks from the shared pool; static reservations
    // hold max_tokens, and vattention's admissions run out of whole rows (and map one ahead) first.
    if (caches_prefixes(name)) CHECK(short_rounds > 0);
    const std::vector<request_id> unknown{request_id{99999}};
    CHECK_THROWS_AS((void)p->decode(unknown), std::invalid_argument);
    for (const request_id id : ids) {
      p->release(id, release_reason::finished);
      q->release(id, release_reason::finished);
    }
    check_stats(*p);
    CHECK(p->stats().memory == q->stats().memory);
  }

  SUBCASE("misuse is refused: unknown ids, growth past max_tokens, a second admission of a live id") {
    CHECK_THROWS_AS((void)p->grow(request_id{9}, 1), std::invalid_argument);
    CHECK_THROWS_AS(p->release(request_id{9}, release_reason::finished), std::invalid_argument);
    REQUIRE(p->admit({request_id{9}, {}, 100, 110}).admitted);
    CHECK_THROWS_AS((void)p->grow(request_id{9}, 11), std::invalid_argument);
    CHECK(p->grow(request_id{9}, 10));
    CHECK_THROWS_AS((void)p->admit({request_id{9}, {}, 100, 110}), std::invalid_argument);
    p->release(request_id{9}, release_reason::finished);
    check_stats(*p);
  }

  SUBCASE("a round's advance() returns stats()' memory, and memory_view() agrees after the calls that follow") {
    // vtensor's advance() answers from the manager's own reading of the round (Note [The memory
    // after a growth round]); memory_view() must show every call after it.
    std::vector<request_id> ids;
    for (std::uint64_t id = 1; id <= 3; ++id) {  // static holds four at most
      REQUIRE(p->admit({request_id{id}, {}, 100 + id * 50, 4000}).admitted);
      ids.push_back(request_id{id});
    }
    const auto agree = [&] {
      const kv_stats s = p->stats();
      const kv_memory_view v = p->memory_view();
      CHECK(v.memory == s.memory);
      CHECK(v.breakdown == s.breakdown);
    };
    decode_round round = p->decode(ids);
    REQUIRE(round.grown() == ids.size());
    const std::uint64_t rounds = round.rounds_in_place();
    if (name == "vtensor") CHECK(rounds >= 30);
    if (name == "paged") CHECK(rounds >= 1);  // 16-token blocks
    for (std::uint64_t r = 0; r < std::min<std::uint64_t>(rounds, 30); ++r) {
      p->advance_to(sim_us{(r + 1) * 1000});
      const kv_memory_view v = round.advance();
      CHECK(v.memory == p->stats().memory);
      CHECK(v.breakdown == p->stats().breakdown);
      agree();
    }
    REQUIRE(p->grow(ids[0], 1500));  // past its page: takes memory
    agree();
    p->release(ids.back(), release_reason::finished);
    agree();
    ids.pop_back();
    REQUIRE(p->admit({request_id{7}, {}, 900, 4000}).admitted);
    agree();
    ids.push_back(request_id{7});
    decode_round again = p->decode(ids);
    REQUIRE(again.grown() == ids.size());
    if (again.rounds_in_place() > 0) (void)again.advance();
    agree();
    REQUIRE(p->decode(ids).grown() == ids.size());
    agree();
    p->settle();
    agree();
    for (const request_id id : ids) p->release(id, release_reason::preempted);
    agree();
    check_stats(*p);
  }

  SUBCASE("a decode round's lease ends at the next mutating call, and at its last round") {
    std::vector<request_id> ids;
    for (std::uint64_t id = 1; id <= 2; ++id) {
      REQUIRE(p->admit({request_id{id}, {}, 100 + id * 50, 4000}).admitted);
      ids.push_back(request_id{id});
    }
    decode_round round = p->decode(ids);
    REQUIRE(round.grown() == ids.size());
    const std::uint64_t rounds = round.rounds_in_place();
    if (name == "vtensor" || name == "paged") REQUIRE(rounds >= 2);
    if (rounds > 0) {
      (void)round.advance();
      CHECK(round.rounds_in_place() == rounds - 1);
    }
    REQUIRE(p->admit({request_id{3}, {}, 100, 4000}).admitted);  // the lease ends here
    CHECK(round.rounds_in_place() == 0);
    CHECK_THROWS_AS((void)round.advance(), std::logic_error);
    // A fresh round, taken to its end: one more is refused.
    decode_round last = p->decode(ids);
    const std::uint64_t left = last.rounds_in_place();
    for (std::uint64_t r = 0; r < left; ++r) (void)last.advance();
    CHECK_THROWS_AS((void)last.advance(), std::logic_error);
    // A round that did not grow every id leases nothing.
    const std::vector<request_id> with_unknown{ids[0], request_id{424242}};
    CHECK_THROWS_AS((void)p->decode(with_unknown), std::invalid_argument);
    CHECK_THROWS_AS((void)decode_round{}.advance(), std::logic_error);
    for (const request_id id : {request_id{1}, request_id{2}, request_id{3}}) p->release(id, release_reason::finished);
    check_stats(*p);
  }

  SUBCASE("random operations keep the invariants, and two runs of the same operations agree") {
    const auto run = [&](kv_policy& q) {
      std::mt19937_64 rng(7);
      std::map<std::uint64_t, std::uint64_t> live;  // id -> tokens it may still grow
      std::uint64_t next = 1000;
      std::vector<kv_stats> trail;
      for (int step = 0; step < 400; ++step) {
        const int op = static_cast<int>(rng() % 4);
        if (op == 0 || live.empty()) {
          const std::uint64_t prefix = rng() % 3;  // three conversations share prefixes
          std::vector<token_block> blocks;
          const std::uint64_t n = 1 + rng() % 3;
          for (std::uint64_t b = 0; b < n; ++b) blocks.push_back({prefix * 100 + b + 1, 512});
          const auto cut = static_cast<std::uint32_t>(rng() % 200);
          blocks.back().tokens -= cut;
          const std::uint64_t prompt = n * 512 - cut;
          if (q.admit({request_id{next}, blocks, prompt, prompt + 300}).admitted) live[next] = 300;
          ++next;
        } else if (op == 1 || op == 2) {
          auto it = live.begin();
          std::advance(it, static_cast<long>(rng() % live.size()));
          const std::uint64_t tokens = std::min<std::uint64_t>(it->second, 1 + rng() % 40);
          if (tokens > 0 && q.grow(request_id{it->first}, tokens)) it->second -= tokens;
        } else {
          auto it = live.begin();
          std::advance(it, static_cast<long>(rng() % live.size()));
          q.release(request_id{it->first}, rng() % 4 == 0 ? release_reason::preempted : release_reason::finished);
          live.erase(it);
        }
        check_stats(q);
        trail.push_back(q.stats());
      }
      for (const auto& [id, left] : live) q.release(request_id{id}, release_reason::finished);
      check_stats(q);
      CHECK(q.stats().memory.logical_bytes == 0);
      return trail;
    };
    const auto first = run(*p);
    auto again = make_kv_policy(name, options_on(backend, 2 * k_gib));
    const auto second = run(*again);
    REQUIRE(first.size() == second.size());
    for (std::size_t i = 0; i < first.size(); ++i) {
      CHECK(first[i].memory == second[i].memory);
      CHECK(first[i].breakdown == second[i].breakdown);
    }
  }
}

}  // namespace

TEST_SUITE("kv_policy_conformance") {
  TEST_CASE("every registered policy keeps the kv_policy contract on the sim backend") {
    for (const std::string& name : kv_policy_names()) conformance(name, "sim");
  }

  TEST_CASE("the registry lists vtensor first and refuses an unknown policy naming the known ones") {
    const auto names = kv_policy_names();
    REQUIRE_FALSE(names.empty());
    CHECK(names.front() == "vtensor");
    CHECK_THROWS_WITH_AS((void)make_kv_policy("nope", options_on("sim", k_gib)), doctest::Contains("vtensor"),
                         std::invalid_argument);
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("conformance on cuda: every policy with device memory keeps the kv_policy contract") {
    for (const std::string& backend : testing::backends_for(true)) {
      if (!testing::gpu_present()) {
        MESSAGE("GPU_SKIP: no GPU here");
        return;
      }
      for (const std::string& name : kv_policy_names()) conformance(name, backend);
    }
  }

#if VTENSOR_HAVE_CUDA
  TEST_CASE("driver memory on cuda: the device memory each policy holds is its physical bytes") {
    if (!testing::gpu_present()) {
      MESSAGE("GPU_SKIP: no GPU here");
      return;
    }
    const cuda_backend probe(0, k_chunk_bytes);  // keeps the context open: only the policies' memory moves
    const auto used = [&] {
      const cuda_mem_info m = probe.mem_info();
      return m.total_bytes - m.free_bytes;
    };
    // The driver may round its own bookkeeping (page tables) into what it reports as used.
    constexpr std::uint64_t k_slack = 64 * k_mib;
    for (const std::string& name : kv_policy_names()) {
      CAPTURE(name);
      const std::uint64_t before = used();
      {
        // 4 GiB: static reserves the maximum context (4096 tokens, 512 MiB) for each of the six
        auto p = make_kv_policy(name, options_on("cuda", 4 * k_gib));
        for (std::uint64_t id = 1; id <= 6; ++id) {
          const std::vector<token_block> own{{id * 77, 512}};
          REQUIRE(p->admit({request_id{id}, own, 1000, 1100}).admitted);
          for (int i = 0; i < 40; ++i) REQUIRE(p->grow(request_id{id}, 1));
        }
        p->release(request_id{2}, release_reason::finished);
        p->settle();
        const std::uint64_t physical = p->stats().memory.physical_bytes;
        const std::uint64_t delta = used() - before;
        INFO("driver used delta " << delta << ", policy physical " << physical);
        CHECK(delta + k_slack >= physical);
        CHECK(delta <= physical + k_slack);
      }
      const std::uint64_t after = used();
      CHECK(after <= before + k_slack);  // everything given back
    }
  }
#endif
}
