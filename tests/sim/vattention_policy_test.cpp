// The vAttention policy (sim/vattention_policy.hpp): slots of per-layer K and V buffers, prefill
// mapped on the step thread, lookahead by the modelled worker, deferred reclamation.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <random>

#include "backends/fault_injection_backend.hpp"
#include "backends/sim_backend.hpp"
#include "sim/policy_registry.hpp"
#include "sim/vattention_policy.hpp"
#include "tests/sim/sim_test_support.hpp"

using namespace vtensor;
using namespace vtensor::sim;

namespace {

// Forwards every call to a backend the test keeps, so that what it holds can be read after the
// policy (which owns its backend) is gone.
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

// Llama-3-8B: 32 layers x 8 KV heads x 128 x 2 bytes: 2 KiB a token in each of 64 buffers, 1,024
// tokens a page (32 tokens a page in each of 2 buffers with megacache).
vattention_policy_options llama(std::uint32_t lookahead, bool megacache = false) {
  kv_policy_options o = sim_testing::llama_policy(sim_testing::k_unlimited);
  o.max_context_tokens = 16384;
  return vattention_options(o, {.lookahead_pages = lookahead, .megacache = megacache});
}

std::unique_ptr<vattention_policy> on_device(const vattention_policy_options& o, std::uint64_t chunks,
                                             latency_model model = latency_model::zero()) {
  const std::uint64_t capacity = chunks == sim_backend::k_unlimited ? chunks : chunks * k_chunk_bytes;
  return std::make_unique<vattention_policy>(o, std::make_unique<sim_backend>(capacity, model), model);
}

std::uint64_t calls(const vattention_policy& p, vmm_call c) { return p.backend().counters().calls_of(c); }
std::uint64_t step_calls(const vattention_policy& p, vmm_call c) {
  return p.report().step.calls[static_cast<std::size_t>(c)];
}
std::uint64_t worker_calls(const vattention_policy& p, vmm_call c) {
  return p.report().worker.calls[static_cast<std::size_t>(c)];
}

constexpr std::uint64_t k_row = 64 * k_chunk_bytes;  // one page in each of Llama's 64 buffers
constexpr std::uint64_t k_token = 128 * k_kib;       // Llama's KV bytes a token

void check_stats(const kv_policy& p) {
  const kv_stats s = p.stats();
  CHECK(s.breakdown.total() == s.memory.physical_bytes);
  CHECK(s.breakdown.used == s.memory.used_bytes);
  CHECK(s.breakdown.reclaimable == s.breakdown.cached);
  CHECK(s.breakdown.cached_pinning == 0);
  CHECK(s.breakdown.external == 0);
  CHECK(s.breakdown.free == s.memory.free_pool_bytes);
  CHECK(s.prefix_hit_tokens == 0);
  p.check_invariants();
}

}  // namespace

TEST_SUITE("vattention_policy") {
  TEST_CASE("vattention policy: prefill maps ceil(prompt / tokens per page) pages in every buffer on the step thread") {
    auto p = on_device(llama(0), sim_backend::k_unlimited);
    CHECK(p->buffers() == 64);
    CHECK(p->tokens_per_page() == 1024);
    CHECK(p->pages_per_buffer() == 16);
    const kv_admit_result a = p->admit({request_id{1}, {}, 2500, 4000});
    REQUIRE(a.admitted);
    CHECK(a.hit_tokens == 0);
    CHECK(p->rows_of(request_id{1}) == 3);
    CHECK(calls(*p, vmm_call::reserve) == 1);  // one range for the slot's 64 buffers
    CHECK(calls(*p, vmm_call::create) == 3 * 64);
    CHECK(step_calls(*p, vmm_call::map) == 3 * 64);
    CHECK(step_calls(*p, vmm_call::set_access) == 3 * 64);
    CHECK(worker_calls(*p, vmm_call::map) == 0);
    const kv_stats s = p->stats();
    CHECK(s.memory.physical_bytes == 3 * k_row);
    CHECK(s.memory.mapped_bytes == 3 * k_row);
    CHECK(s.breakdown.used == 2500 * k_token);
    CHECK(s.breakdown.internal == 3 * k_row - 2500 * k_token);  // 548 tokens of the third page, x 64
    CHECK(s.breakdown.reserved_idle == 0);
    CHECK(s.breakdown.cached == 0);
    check_stats(*p);
    // Growth within the third page maps nothing; the 3,073rd token needs a fourth row.
    CHECK(p->grow(request_id{1}, 572));
    CHECK(calls(*p, vmm_call::map) == 3 * 64);
    CHECK(p->grow(request_id{1}, 1));
    CHECK(p->rows_of(request_id{1}) == 4);
    CHECK(step_calls(*p, vmm_call::map) == 4 * 64);
    check_stats(*p);
  }

  TEST_CASE("vattention policy: with lookahead 1 the worker keeps a page ahead and decode maps nothing on the step") {
    auto p = on_device(llama(1), sim_backend::k_unlimited, latency_model::h200());
    p->advance_to(sim_us{1000});
    REQUIRE(p->admit({request_id{1}, {}, 1000, 4000}).admitted);
    CHECK(p->rows_of(request_id{1}) == 1);  // the prompt's row; the lookahead job is queued
    CHECK(step_calls(*p, vmm_call::map) == 64);
    CHECK(p->report().jobs == 0);
    // The step is over: at the next step's first call the job maps one row ahead, from the end of
    // the admission's own calls. Growth within the first page makes no call of its own.
    p->advance_to(sim_us{1001});
    CHECK(p->grow(request_id{1}, 24));
    CHECK(p->rows_of(request_id{1}) == 2);
    CHECK(step_calls(*p, vmm_call::map) == 64);
    CHECK(worker_calls(*p, vmm_call::map) == 64);
    CHECK(worker_calls(*p, vmm_call::create) == 64);
    kv_stats s = p->stats();
    CHECK(s.breakdown.reserved_idle == k_row);
    CHECK(s.breakdown.internal == k_row - 1024 * k_token);
    check_stats(*p);
    const vmm_split_report r0 = p->report();
    CHECK(r0.jobs == 1);
    CHECK(r0.job_model_ns == r0.worker.total_model_ns());
    CHECK(r0.job_model_ns == 64 * (15'740 + 2'340 + 44'070));  // create, map, set-access per chunk
    CHECK(r0.critical_model_ns == r0.step.total_model_ns());
    CHECK(p->vmm_time().count() == r0.step.total_model_ns() + r0.job_model_ns);

    // Into the lookahead row 1 us after the step: no step-thread map, but the job that maps it
    // (started after the admission's ~4 ms of calls, ~4 ms long) has not ended: the step waits.
    CHECK(p->grow(request_id{1}, 1));
    CHECK(step_calls(*p, vmm_call::map) == 64);
    const vmm_split_report r1 = p->report();
    CHECK(r1.modelled_waits == 1);
    CHECK(r1.modelled_wait_ns == r0.step.total_model_ns() + r0.job_model_ns - 1'000);
    CHECK(p->critical_vmm_time().count() == r1.step.total_model_ns() + r1.modelled_wait_ns);
    p->advance_to(sim_us{1'000'000});
    p->settle();  // the next job: the third row
    CHECK(worker_calls(*p, vmm_call::map) == 128);
    CHECK(p->rows_of(request_id{1}) == 3);
    // Much later: crossing into the third row waits for nothing.
    p->advance_to(sim_us{2'000'000});
    CHECK(p->grow(request_id{1}, 1024));
    CHECK(step_calls(*p, vmm_call::map) == 64);
    CHECK(p->report().modelled_waits == 1);
    p->settle();  // runs the queued job
    CHECK(p->rows_of(request_id{1}) == 4);
    check_stats(*p);
  }

  TEST_CASE("vattention policy: synchronous lookahead maps the page ahead on the step thread") {
    vattention_policy_options o = llama(1);
    o.async_lookahead = false;
    auto p = on_device(o, sim_backend::k_unlimited, latency_model::h200());
    REQUIRE(p->admit({request_id{1}, {}, 1000, 4000}).admitted);
    CHECK(p->rows_of(request_id{1}) == 2);
    CHECK(step_calls(*p, vmm_call::map) == 128);
    CHECK(worker_calls(*p, vmm_call::map) == 0);
    CHECK(p->report().jobs == 0);
    CHECK(p->critical_vmm_time() == p->vmm_time());
  }

  TEST_CASE("vattention policy: a finished slot is reused by a new request without new maps, by best fit") {
    auto p = on_device(llama(0), sim_backend::k_unlimited);
    REQUIRE(p->admit({request_id{1}, {}, 3000, 3100}).admitted);  // 3 rows
    p->release(request_id{1}, release_reason::finished);
    kv_stats s = p->stats();
    CHECK(s.memory.physical_bytes == 3 * k_row);
    CHECK(s.memory.mapped_bytes == 0);
    CHECK(s.breakdown.cached == 3 * k_row);
    CHECK(s.breakdown.reclaimable == 3 * k_row);
    check_stats(*p);
    const vmm_counters before = p->backend().counters();
    REQUIRE(p->admit({request_id{2}, {}, 2000, 2100}).admitted);
    CHECK(p->backend().counters().calls == before.calls);  // no reserve, create, map: the slot's rows serve
    CHECK(p->slots() == 1);
    CHECK(p->rows_of(request_id{2}) == 3);
    s = p->stats();
    CHECK(s.breakdown.cached == 0);
    CHECK(s.breakdown.reserved_idle == k_row);  // the third row is beyond the tokens
    CHECK(s.breakdown.internal == 2 * k_row - 2000 * k_token);
    check_stats(*p);

    // Idle slots of 1, 3 and 5 rows: 2 rows go to the 3-row slot, 7 rows to the 5-row one.
    p->release(request_id{2}, release_reason::preempted);
    REQUIRE(p->admit({request_id{3}, {}, 500, 600}).admitted);    // takes the 3-row slot (the only one)
    REQUIRE(p->admit({request_id{4}, {}, 1000, 1100}).admitted);  // new slot, 1 row
    REQUIRE(p->admit({request_id{5}, {}, 5000, 5100}).admitted);  // new slot, 5 rows
    CHECK(p->slots() == 3);
    CHECK(p->rows_of(request_id{3}) == 3);
    p->release(request_id{3}, release_reason::finished);
    p->release(request_id{4}, release_reason::finished);
    p->release(request_id{5}, release_reason::finished);
    const std::uint64_t maps = calls(*p, vmm_call::map);
    REQUIRE(p->admit({request_id{6}, {}, 1500, 1600}).admitted);
    CHECK(p->rows_of(request_id{6}) == 3);
    CHECK(calls(*p, vmm_call::map) == maps);
    REQUIRE(p->admit({request_id{7}, {}, 7000, 7100}).admitted);
    CHECK(p->rows_of(request_id{7}) == 7);
    CHECK(calls(*p, vmm_call::map) == maps + 2 * 64);  // two rows added to the 5-row slot
    CHECK(p->slots() == 3);
    CHECK(p->idle_slots() == 1);
    CHECK(calls(*p, vmm_call::unmap) == 0);  // no pressure, nothing reclaimed
    check_stats(*p);
  }

  TEST_CASE("vattention policy: idle slots are reclaimed only when a chunk cannot be created") {
    auto p = on_device(llama(0), 4 * 64);                         // a budget of four rows
    REQUIRE(p->admit({request_id{1}, {}, 2000, 2100}).admitted);  // slot 0: 2 rows
    REQUIRE(p->admit({request_id{2}, {}, 1000, 4000}).admitted);  // slot 1: 1 row
    p->release(request_id{1}, release_reason::finished);
    REQUIRE(p->admit({request_id{3}, {}, 100, 200}).admitted);  // reuses slot 0 as it is
    p->release(request_id{3}, release_reason::finished);
    CHECK(calls(*p, vmm_call::unmap) == 0);
    CHECK(p->stats().breakdown.cached == 2 * k_row);
    // Request 2 grows to 3 rows: the fourth row of the budget is free, the fifth is not.
    CHECK(p->grow(request_id{2}, 1024));
    CHECK(calls(*p, vmm_call::unmap) == 0);
    CHECK(p->reclaimed_slots() == 0);
    CHECK(p->grow(request_id{2}, 1024));
    CHECK(p->reclaimed_slots() == 1);
    CHECK(calls(*p, vmm_call::unmap) == 64);       // one unmap of two rows per buffer
    CHECK(calls(*p, vmm_call::release) == 0);      // the chunks go to the pool, as vAttention's pages do
    CHECK(calls(*p, vmm_call::create) == 4 * 64);  // at the budget no create is tried
    CHECK(p->stats().chunks_created == 4 * 64);
    CHECK(p->rows_of(request_id{2}) == 3);
    kv_stats s = p->stats();
    CHECK(s.memory.physical_bytes == 4 * k_row);
    CHECK(s.breakdown.free == k_row);
    CHECK(s.breakdown.cached == 0);
    CHECK(s.evictions == 1);
    check_stats(*p);
    // Nothing idle holds pages and nothing live maps beyond its tokens: a request needing two
    // rows is refused, changing nothing.
    const kv_stats before = p->stats();
    CHECK_FALSE(p->admit({request_id{4}, {}, 1500, 1600}).admitted);
    CHECK(p->stats().memory == before.memory);
    CHECK(p->slots() == 2);
    check_stats(*p);
    // With the budget full, growth into a new row fails, changing nothing.
    REQUIRE(p->admit({request_id{4}, {}, 1000, 1100}).admitted);  // the pool's row, in slot 0
    const kv_stats full = p->stats();
    CHECK(full.memory.physical_bytes == 4 * k_row);
    CHECK(full.breakdown.free == 0);
    CHECK_FALSE(p->grow(request_id{2}, 900));
    CHECK(p->stats().memory == full.memory);
    check_stats(*p);
  }

  TEST_CASE("vattention policy: a row from the free list whose map fails ends as chunk by chunk, the list as it was") {
    for (const vmm_call failing : {vmm_call::map, vmm_call::set_access}) {
      CAPTURE(static_cast<int>(failing));
      sim_backend device(4 * 64 * k_chunk_bytes, latency_model::h200());  // a budget of four rows
      auto faulty = std::make_unique<fault_injection_backend>(std::make_unique<borrowed_backend>(device), 1);
      fault_injection_backend& f = *faulty;
      vattention_policy p(llama(0), std::move(faulty), latency_model::h200());
      // As in the reclamation test: slot 0 idle with 2 rows, request 2 in slot 1 grown to 3 rows
      // by reclaiming them, which leaves one row of chunks in the free list.
      REQUIRE(p.admit({request_id{1}, {}, 2000, 2100}).admitted);
      REQUIRE(p.admit({request_id{2}, {}, 1000, 4000}).admitted);
      p.release(request_id{1}, release_reason::finished);
      REQUIRE(p.grow(request_id{2}, 1024));
      REQUIRE(p.grow(request_id{2}, 1024));
      REQUIRE(p.stats().breakdown.free == k_row);
      const vmm_counters before = f.counters();
      const vmm_live held = device.live();
      f.fail_nth(failing, before.calls_of(failing) + 10);  // the row's tenth chunk
      CHECK_THROWS_AS((void)p.admit({request_id{3}, {}, 1000, 1100}), vmm_error);
      const vmm_counters after = f.counters();
      // Chunk by chunk: ten maps (the tenth failed, or mapped and had its access fail and be
      // undone), nine set-accesses (ten when the tenth's failed), and the nine mapped undone.
      const bool access = failing == vmm_call::set_access;
      CHECK(after.calls_of(vmm_call::map) - before.calls_of(vmm_call::map) == 10);
      CHECK(after.calls_of(vmm_call::set_access) - before.calls_of(vmm_call::set_access) == (access ? 10 : 9));
      CHECK(after.calls_of(vmm_call::unmap) - before.calls_of(vmm_call::unmap) == (access ? 10 : 9));
      CHECK(after.calls_of(vmm_call::create) == before.calls_of(vmm_call::create));
      CHECK(device.live().mappings == held.mappings);
      CHECK(p.stats().breakdown.free == k_row);  // every chunk of the row is back in the free list
      check_stats(p);
      // The row maps on a second try, from the same list.
      REQUIRE(p.admit({request_id{3}, {}, 1000, 1100}).admitted);
      CHECK(p.stats().breakdown.free == 0);
      CHECK(device.live().mappings == held.mappings + 64);
      check_stats(p);
      device.check_invariants();
    }
  }

  TEST_CASE("vattention policy: with no idle pages left, live slots are trimmed to their tokens") {
    auto p = on_device(llama(0), 4 * 64);
    REQUIRE(p->admit({request_id{1}, {}, 3000, 3100}).admitted);  // slot 0: 3 rows
    p->release(request_id{1}, release_reason::finished);
    REQUIRE(p->admit({request_id{2}, {}, 100, 200}).admitted);  // slot 0 again: 2 rows beyond its tokens
    CHECK(p->stats().breakdown.reserved_idle == 2 * k_row);
    REQUIRE(p->admit({request_id{3}, {}, 1000, 3000}).admitted);  // slot 1: the fourth row
    CHECK(p->grow(request_id{3}, 1000));                          // a second row: taken from request 2's slot
    CHECK(p->trimmed_slots() == 1);
    CHECK(p->reclaimed_slots() == 0);
    CHECK(p->rows_of(request_id{2}) == 1);
    CHECK(p->rows_of(request_id{3}) == 2);
    const kv_stats s = p->stats();
    CHECK(s.breakdown.reserved_idle == 0);
    CHECK(s.breakdown.free == k_row);
    CHECK(s.memory.physical_bytes == 4 * k_row);
    check_stats(*p);
  }

  TEST_CASE("vattention policy: megacache holds two buffers of 32 tokens a page") {
    auto p = on_device(llama(0, true), sim_backend::k_unlimited);
    CHECK(p->buffers() == 2);
    CHECK(p->tokens_per_page() == 32);
    CHECK(p->pages_per_buffer() == 512);
    REQUIRE(p->admit({request_id{1}, {}, 100, 200}).admitted);
    CHECK(p->rows_of(request_id{1}) == 4);
    CHECK(calls(*p, vmm_call::create) == 8);
    const kv_stats s = p->stats();
    CHECK(s.memory.physical_bytes == 8 * k_chunk_bytes);
    CHECK(s.breakdown.used == 100 * k_token);
    check_stats(*p);
    const auto d = p->describe();
    CHECK(d["megacache"] == true);
    CHECK(d["buffers_per_slot"] == 2);
    CHECK(d["tokens_per_page"] == 32);
    CHECK(d["lookahead_pages"] == 0);
    CHECK(on_device(llama(1), 1)->describe()["buffers_per_slot"] == 64);
  }

  TEST_CASE("vattention policy: bad options and misuse are refused") {
    vattention_policy_options o = llama(1);
    o.max_context_tokens = 0;
    CHECK_THROWS_WITH_AS(vattention_policy{o}, doctest::Contains("max_context_tokens"), std::invalid_argument);
    o = llama(1);
    o.kv.layers = 0;
    CHECK_THROWS_AS(vattention_policy{o}, std::invalid_argument);
    o = llama(1, true);
    o.kv.layers = 2000;  // 2000 x 2 KiB a token in one buffer: more than a page
    CHECK_THROWS_WITH_AS(vattention_policy{o}, doctest::Contains("page"), std::invalid_argument);
    auto p = on_device(llama(1), sim_backend::k_unlimited);
    CHECK_THROWS_AS((void)p->admit({request_id{1}, {}, 100, 20000}), std::invalid_argument);  // past the context
    REQUIRE(p->admit({request_id{1}, {}, 100, 200}).admitted);
    CHECK_THROWS_AS((void)p->admit({request_id{1}, {}, 100, 200}), std::invalid_argument);
    CHECK_THROWS_AS((void)p->grow(request_id{1}, 101), std::invalid_argument);
    CHECK_THROWS_AS((void)p->grow(request_id{2}, 1), std::invalid_argument);
    CHECK_THROWS_AS(p->release(request_id{2}, release_reason::finished), std::invalid_argument);
  }

  TEST_CASE("vattention policy: random operations with injected faults keep the invariants and leave nothing held") {
    for (const bool megacache : {false, true}) {
      for (const std::uint32_t lookahead : {0U, 1U, 2U}) {
        for (const bool async : {true, false}) {
          CAPTURE(megacache);
          CAPTURE(lookahead);
          CAPTURE(async);
          // A small model: 2 layers (4 buffers of 1,024 tokens a page, or 2 of 512 with megacache).
          vattention_policy_options o;
          o.kv = {"tiny", 2, 8, 128, 2};
          o.max_context_tokens = 8192;
          o.lookahead_pages = lookahead;
          o.async_lookahead = async;
          o.megacache = megacache;
          sim_backend device(64 * k_chunk_bytes, latency_model::h200());
          std::uint64_t faults = 0, errors = 0, refused = 0;
          {
            auto faulty =
                std::make_unique<fault_injection_backend>(std::make_unique<borrowed_backend>(device), 11 + lookahead);
            faulty->fail_with_probability(vmm_call::create, 0.1);
            faulty->fail_with_probability(vmm_call::map, 0.02);
            fault_injection_backend* f = faulty.get();
            vattention_policy p(o, std::move(faulty), latency_model::h200());
            std::mt19937_64 rng(5 + lookahead);
            std::map<std::uint64_t, std::uint64_t> live;  // id -> tokens it may still grow
            std::uint64_t next = 1;
            for (int step = 0; step < 1500; ++step) {
              p.advance_to(sim_us{static_cast<std::uint64_t>(step) * 50});
              const int op = static_cast<int>(rng() % 5);
              try {
                if (op == 0 || live.empty()) {
                  const std::uint64_t prompt = 1 + rng() % 3000;
                  const std::uint64_t out = 1 + rng() % 2000;
                  const kv_stats before = p.stats();
                  if (p.admit({request_id{next}, {}, prompt, prompt + out}).admitted) {
                    live[next] = out;
                  } else {
                    ++refused;
                    CHECK(p.stats().memory.used_bytes == before.memory.used_bytes);
                  }
                  ++next;
                } else if (op <= 2) {
                  auto it = live.begin();
                  std::advance(it, static_cast<long>(rng() % live.size()));
                  const std::uint64_t tokens = std::min<std::uint64_t>(it->second, 1 + rng() % 600);
                  if (tokens > 0 && p.grow(request_id{it->first}, tokens)) it->second -= tokens;
                } else {
                  auto it = live.begin();
                  std::advance(it, static_cast<long>(rng() % live.size()));
                  p.release(request_id{it->first},
                            rng() % 3 == 0 ? release_reason::preempted : release_reason::finished);
                  live.erase(it);
                }
              } catch (const vmm_error& e) {
                ++errors;  // an injected driver failure: the policy must stay consistent
                CHECK(std::string(e.what()).find("injected") != std::string::npos);
              }
              check_stats(p);
              device.check_invariants();
              CHECK(p.stats().memory.physical_bytes <= 64 * k_chunk_bytes);
            }
            faults = f->faults_injected();
            CHECK(p.reclaimed_slots() > 0);
            MESSAGE("faults " << faults << ", driver errors " << errors << ", refused " << refused << ", slots "
                              << p.slots() << ", reclaimed " << p.reclaimed_slots() << ", trimmed " << p.trimmed_slots()
                              << ", lookahead failures " << p.lookahead_failures());
          }
          CHECK(faults > 0);
          const vmm_live held = device.live();
          CHECK(held.chunks == 0);
          CHECK(held.ranges == 0);
          CHECK(held.mappings == 0);
        }
      }
    }
  }

  TEST_CASE("vattention policy: the registry builds it with hit tokens always 0") {
    kv_policy_options o = sim_testing::llama_policy(2 * k_gib);
    o.max_context_tokens = 16384;
    auto p = make_kv_policy(policy_choice(vattention_settings{.lookahead_pages = 1}), o);
    CHECK(p->name() == "vattention");
    CHECK(p->access() == kv_access{});
    const std::vector<token_block> blocks{{1, 512}, {2, 512}};
    REQUIRE(p->admit({request_id{1}, blocks, 1024, 1100}).admitted);
    p->release(request_id{1}, release_reason::finished);
    const kv_admit_result b = p->admit({request_id{2}, blocks, 1024, 1100});
    REQUIRE(b.admitted);
    CHECK(b.hit_tokens == 0);
    CHECK(p->stats().prefix_hit_tokens == 0);
    p->release(request_id{2}, release_reason::finished);
    check_stats(*p);
  }
}
