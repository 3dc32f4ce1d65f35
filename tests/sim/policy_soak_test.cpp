// Every policy under faults (a soak): random admissions, growth, finishes and preemptions with
// faults injected into the policy's own VMM backend (failed creates, i.e. out of memory at
// random; failed maps and set-access calls), the breakdown and the invariants checked after each
// operation, and nothing held by the device once the policy is gone. VTENSOR_SOAK_OPS sets the
// operations per policy (CI: the default below; the long run in the README: 100000).

#include <doctest/doctest.h>

#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "backends/fault_injection_backend.hpp"
#include "sim/policy_registry.hpp"
#include "tests/sim/sim_test_support.hpp"
#include "tests/support/live_probe_backend.hpp"

using namespace vtensor;
using namespace vtensor::sim;

namespace {

/// The most requests a soak holds at once: a large serving batch.
constexpr std::size_t k_max_live = 256;

std::uint64_t soak_ops() {
  const char* text = std::getenv("VTENSOR_SOAK_OPS");
  return text != nullptr ? std::strtoull(text, nullptr, 10) : 5000;
}

struct soak_figures {
  std::uint64_t admitted = 0, refused = 0, grown = 0, grow_refused = 0, faults = 0, released = 0;
  nlohmann::ordered_json model;  // the policy's extra figures (vmm_model) at the end
};

/// Foresight that knows nothing of the soak's future (its requests are drawn as it goes): a fixed
/// pseudo-random next use per key, enough for the offline order to make choices the soak checks.
class hashed_oracle final : public next_use_oracle {
 public:
  std::uint64_t next_use(std::uint64_t key, std::uint64_t from) const override {
    return key == 0 ? never : from + (key * 0x9E3779B97F4A7C15ull >> 54);
  }
};

soak_figures soak(const policy_choice& choice, std::uint64_t memory, std::uint64_t seed,
                  std::uint64_t ops = soak_ops()) {
  const std::string name = choice.name();
  const auto left = std::make_shared<vmm_live>(vmm_live{99, 99, 99});
  fault_injection_backend* faults = nullptr;
  kv_policy_options o = sim_testing::llama_policy(memory, /*zero_latency=*/false);
  o.max_context_tokens = 8192;
  eviction_clock clock;
  const hashed_oracle oracle;
  o.clock = &clock;
  o.oracle = [&oracle] { return &oracle; };
  o.wrap_backend = [&](std::unique_ptr<vmm_backend> inner) -> std::unique_ptr<vmm_backend> {
    auto f = std::make_unique<fault_injection_backend>(std::move(inner), seed);
    faults = f.get();
    return std::make_unique<testing::live_probe_backend>(std::move(f), left);
  };
  soak_figures fig;
  {
    auto p = make_kv_policy(choice, o);
    REQUIRE(faults != nullptr);
    // Faults from here on: a policy that cannot start is a different test.
    faults->fail_with_probability(vmm_call::create, 0.002);
    faults->fail_with_probability(vmm_call::map, 0.0005);
    faults->fail_with_probability(vmm_call::set_access, 0.0005);
    std::mt19937_64 rng(seed);
    std::map<std::uint64_t, std::uint64_t> live;  // id -> tokens it may still grow
    std::uint64_t next = 1;
    std::uint64_t now_us = 0;
    const bool unlimited = memory == std::numeric_limits<std::uint64_t>::max();
    for (std::uint64_t op = 0; op < ops; ++op) {
      now_us += 1 + rng() % 2000;
      clock.seconds = static_cast<double>(now_us) / 1e6;
      clock.next_request = next;
      p->advance_to(sim_us{now_us});
      auto kind = rng() % 8;
      // A replica holds a bounded batch: at the cap an admission becomes a finish. Without it,
      // admissions (3 in 8) outrun releases (2 in 8) where memory is unlimited, the live set grows
      // with the operation count and the walk of the invariants after each operation makes the
      // soak quadratic (20,000 operations took 24 times as long as 5,000).
      if (kind < 3 && live.size() >= k_max_live) kind = 6;
      try {
        if (kind < 3 || live.empty()) {  // admit: one of four conversations, or a fresh prompt
          const std::uint64_t conversation = rng() % 5;
          std::vector<token_block> blocks;
          const std::uint64_t n = 1 + rng() % 6;
          // Fresh prompts get unique keys under a budget (eviction has work); without one they
          // are unkeyed, else an unlimited cache grows with every operation and the walk of
          // the invariants after each one makes the soak quadratic.
          for (std::uint64_t b = 0; b < n; ++b) {
            if (conversation == 4 && unlimited) break;
            blocks.push_back({conversation == 4 ? (next << 8) + b : conversation * 1000 + b + 1, 512});
          }
          if (blocks.empty()) blocks.push_back({0, 512});  // placeholder, dropped below
          const auto cut = static_cast<std::uint32_t>(rng() % 511);
          blocks.back().tokens -= cut;
          const std::uint64_t prompt = n * 512 - cut;
          const std::uint64_t out = 1 + rng() % 600;
          if (conversation == 4 && unlimited) blocks.clear();
          const kv_admit_result a = p->admit({request_id{next}, blocks, prompt, prompt + out});
          CHECK(a.hit_tokens < prompt);
          if (a.admitted) {
            live[next] = out;
            ++fig.admitted;
            // Its prefill's progress, as a replica reports it after each step (kv_policy::computed).
            const std::uint64_t chunk = 1 + rng() % prompt;
            p->computed(request_id{next}, chunk);
            if (chunk < prompt) p->computed(request_id{next}, prompt);
          } else {
            ++fig.refused;
          }
          ++next;
        } else if (kind < 6) {  // grow
          auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
          const std::uint64_t tokens = std::min<std::uint64_t>(it->second, 1 + rng() % 64);
          if (tokens > 0) {
            if (p->grow(request_id{it->first}, tokens)) {
              it->second -= tokens;
              ++fig.grown;
            } else {  // no memory: the replica would preempt the newest; here, this one
              ++fig.grow_refused;
              p->release(request_id{it->first}, release_reason::preempted);
              live.erase(it);
              ++fig.released;
            }
          }
        } else {  // finish or preempt
          auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
          p->release(request_id{it->first}, kind == 6 ? release_reason::finished : release_reason::preempted);
          live.erase(it);
          ++fig.released;
        }
      } catch (const vmm_error&) {  // an injected driver failure: the operation changed nothing
        ++fig.faults;
      }
      const kv_stats s = p->stats();
      REQUIRE(s.breakdown.total() == s.memory.physical_bytes);
      REQUIRE(s.breakdown.used == s.memory.used_bytes);
      p->check_invariants();
    }
    faults->clear_faults();
    p->extra_figures(fig.model);
    for (const auto& [id, _] : live) p->release(request_id{id}, release_reason::finished);
    p->settle();
    p->check_invariants();
    CHECK(p->stats().memory.logical_bytes == 0);
  }
  CHECK(left->chunks == 0);
  CHECK(left->mappings == 0);
  CHECK(left->ranges == 0);
  return fig;
}

void soak_policy(const std::string& name) {
  for (const std::uint64_t memory : {std::uint64_t{3} * k_gib, std::numeric_limits<std::uint64_t>::max()}) {
    INFO("policy " << name << ", memory " << memory);
    const soak_figures f = soak(choose_policy(name, {}), memory, 1234);
    MESSAGE(name << " memory " << memory << ": " << f.admitted << " admitted, " << f.refused << " refused, " << f.grown
                 << " grown, " << f.grow_refused << " growths refused, " << f.released << " released, " << f.faults
                 << " operations hit an injected fault");
    CHECK(f.admitted > 0);
    CHECK(f.released > 0);
    if (memory != std::numeric_limits<std::uint64_t>::max()) CHECK(f.refused + f.grow_refused > 0);  // pressure
  }
}

// Every eviction order on a policy with a prefix cache, under a budget (so that it evicts), for
// an eighth of the soak's operations each (at least 625, which reach the budget): the invariants (the order's
// candidates are exactly the cache's evictable items) after every operation, and nothing left held at the end.
void soak_orders(const std::string& name) {
  for (const std::string& order : eviction_order_names()) {
    option_texts texts{{"eviction", order}};
    if (order == "ttl") texts["eviction-ttl"] = "0.5";
    if (order == "priority") texts["eviction-pin-tokens"] = "1024";
    INFO("policy " << name << ", eviction " << order);
    const soak_figures f =
        soak(choose_policy(name, texts), 3 * k_gib, 99, std::max<std::uint64_t>(soak_ops() / 8, 625));
    CHECK(f.admitted > 0);
    CHECK(f.refused + f.grow_refused > 0);
  }
}

}  // namespace

TEST_SUITE("policy_soak") {
  TEST_CASE("soak under faults: every eviction order on vtensor") { soak_orders("vtensor"); }
  TEST_CASE("soak under faults: vtensor with eager publication") {
    for (const std::uint64_t memory : {std::uint64_t{3} * k_gib, std::numeric_limits<std::uint64_t>::max()}) {
      INFO("memory " << memory);
      const soak_figures f = soak(choose_policy("vtensor", {{"publish", "eager"}}), memory, 4321);
      CHECK(f.admitted > 0);
      CHECK(f.released > 0);
    }
  }
  TEST_CASE("soak under faults: vtensor's standby is taken, rebuilt and given back (Note [Standby vTensor])") {
    for (const std::uint64_t memory : {std::uint64_t{3} * k_gib, std::numeric_limits<std::uint64_t>::max()}) {
      INFO("memory " << memory);
      const soak_figures f = soak(choose_policy("vtensor", {{"standby-tokens", "1024"}, {"parked", "0"}}), memory, 99);
      MESSAGE("memory " << memory << ": " << f.model.dump());
      CHECK(f.admitted > 0);
      CHECK(f.model["standby_adoptions"].get<std::uint64_t>() > 0);
      CHECK(f.model["standby_builds"].get<std::uint64_t>() >= f.model["standby_adoptions"].get<std::uint64_t>());
      if (memory != std::numeric_limits<std::uint64_t>::max()) CHECK(f.model["standby_drops"].get<std::uint64_t>() > 0);
    }
  }
  TEST_CASE("soak under faults: vtensor's parked vTensors are taken and unmapped (Note [Parked vTensors])") {
    for (const std::uint64_t memory : {std::uint64_t{3} * k_gib, std::numeric_limits<std::uint64_t>::max()}) {
      INFO("memory " << memory);
      const soak_figures f = soak(choose_policy("vtensor", {{"parked", "8"}}), memory, 77);
      MESSAGE("memory " << memory << ": " << f.model.dump());
      CHECK(f.admitted > 0);
      CHECK(f.model["parked_reuses"].get<std::uint64_t>() > 0);
      CHECK(f.model["parked_drops"].get<std::uint64_t>() > 0);
      CHECK(f.model["parked"].get<std::uint64_t>() >= f.model["parked_reuses"].get<std::uint64_t>());
    }
  }
  TEST_CASE("soak under faults: every eviction order on paged") { soak_orders("paged"); }
  TEST_CASE("soak under faults: every eviction order on radix") { soak_orders("radix"); }
  TEST_CASE("soak under faults: vtensor") { soak_policy("vtensor"); }
  TEST_CASE("soak under faults: paged") { soak_policy("paged"); }
  TEST_CASE("soak under faults: radix") { soak_policy("radix"); }
  TEST_CASE("soak under faults: static") { soak_policy("static"); }
  TEST_CASE("soak under faults: vattention") { soak_policy("vattention"); }
  TEST_CASE("soak: every registered policy has a soak case") {
    CHECK(kv_policy_names() == std::vector<std::string>{"vtensor", "paged", "radix", "static", "vattention"});
  }
}
