// The vtensor policy's clock: step-thread and worker calls split and priced by the latency model
// (Note [VMM time on the critical path], Note [Mapping worker model]).

#include <doctest/doctest.h>

#include "sim/contention_model.hpp"
#include "sim/policy_registry.hpp"
#include "sim/vtensor_policy.hpp"
#include "tests/sim/sim_test_support.hpp"

using namespace vtensor;
using namespace vtensor::sim;
using namespace vtensor::sim_testing;

namespace {

// Llama-3-8B kv-fused (32 tensors, 512 tokens a page), built-in H200 costs.
std::unique_ptr<kv_policy> h200_policy(std::uint32_t lookahead, bool async, std::uint32_t create_ahead = 0) {
  const vtensor_settings s{.lookahead_pages = lookahead, .async_lookahead = async, .create_ahead_chunks = create_ahead};
  return make_kv_policy(policy_choice(s), llama_policy(k_unlimited, false));
}

std::uint64_t page_job_ns() {
  const latency_model h = latency_model::h200();
  return 32 * (h.cost_ns(vmm_call::map) + h.cost_ns(vmm_call::set_access));
}

}  // namespace

TEST_CASE("vtensor policy: synchronous mapping puts every call on the clock, priced as the sim charges") {
  auto p = h200_policy(0, false);
  const std::vector<token_block> blocks{{1, 512}};
  REQUIRE(p->admit({request_id{1}, blocks, 600, 2000}).admitted);
  for (int i = 0; i < 600; ++i) REQUIRE(p->grow(request_id{1}, 1));
  p->release(request_id{1}, release_reason::finished);
  CHECK(p->critical_vmm_time().count() == p->vmm_time().count());
  CHECK(p->critical_vmm_time().count() == p->stats().vmm.total_time_ns());  // the model is the sim backend's table
  const auto& v = dynamic_cast<const vtensor_policy&>(*p);
  CHECK(v.report().worker.total_model_ns() == 0);
}

TEST_CASE("vtensor policy: asynchronous lookahead takes growth off the clock - a page needed too soon waits") {
  const std::vector<token_block> blocks{{1, 512}};
  // Prompt of exactly one page: the lookahead page goes to the worker at admission.
  auto p = h200_policy(1, true);
  p->advance_to(sim_us{1000});
  REQUIRE(p->admit({request_id{1}, blocks, 512, 4000}).admitted);
  const std::uint64_t after_admit = p->critical_vmm_time().count();
  // The very next token needs that page at once: the step thread waits for the whole job.
  REQUIRE(p->grow(request_id{1}, 1));
  const auto& v = dynamic_cast<const vtensor_policy&>(*p);
  auto r = v.report();
  CHECK(r.jobs == 2);  // the admission's lookahead, then the top-up past page 2
  CHECK(r.modelled_waits == 1);
  CHECK(r.modelled_wait_ns == page_job_ns());
  // ...then the top-up past page 2 creates its chunks on the step thread.
  CHECK(p->critical_vmm_time().count() ==
        after_admit + page_job_ns() + 32 * latency_model::h200().cost_ns(vmm_call::create));

  // The same with time to spare: no wait; growth costs the step only the creation of the
  // lookahead pages' chunks (allocated by the step thread, mapped by the worker).
  auto q = h200_policy(1, true);
  q->advance_to(sim_us{1000});
  REQUIRE(q->admit({request_id{1}, blocks, 512, 4000}).admitted);
  const std::uint64_t admitted = q->critical_vmm_time().count();
  q->advance_to(sim_us{1000 + 1000 * 1000});  // a second later
  for (int i = 0; i < 1500; ++i) {
    REQUIRE(q->grow(request_id{1}, 1));
    q->advance_to(sim_us{1000 + 1000 * 1000 + 20'000 * std::uint64_t(i + 1)});  // 20 ms steps
  }
  const auto& w = dynamic_cast<const vtensor_policy&>(*q);
  r = w.report();
  CHECK(r.modelled_waits == 0);
  CHECK(q->critical_vmm_time().count() == admitted + 3 * 32 * latency_model::h200().cost_ns(vmm_call::create));
  CHECK(r.jobs == 4);  // admission + a top-up at each of 3 page crossings
  CHECK(r.job_model_ns == 4 * page_job_ns());
  q->settle();  // the real worker's calls are all in
  q->check_invariants();
  CHECK(w.report().worker.calls[static_cast<std::size_t>(vmm_call::map)] == 4 * 32);
  // Worker and step thread together are every call the sim charged.
  CHECK(w.report().worker.total_model_ns() + w.report().step.total_model_ns() == q->stats().vmm.total_time_ns());
}

TEST_CASE("vtensor policy: an overloaded worker makes steps wait - synchronous lookahead keeps it all on the clock") {
  // Four lookahead pages per one-page prompt: the worker gets four times the step thread's
  // mapping work, and the growth right after the admissions finds later requests' pages not mapped.
  auto p = h200_policy(4, true);
  auto s = h200_policy(4, false);
  std::vector<token_block> none;
  for (kv_policy* k : {p.get(), s.get()}) {
    k->advance_to(sim_us{1});
    for (std::uint64_t id = 1; id <= 20; ++id) REQUIRE(k->admit({request_id{id}, none, 512, 8000}).admitted);
    for (std::uint64_t id = 1; id <= 20; ++id) REQUIRE(k->grow(request_id{id}, 1));
  }
  const auto& pv = dynamic_cast<const vtensor_policy&>(*p);
  const auto r = pv.report();
  // All of it is one step build: the admissions' jobs start only when the first growth waits and
  // lets the driver go (Note [Jobs start when the build ends]), then run in order beside the
  // step thread, whose later growths meet them (contention) and wait for their request's job:
  // the waits add up to about the worker's 80 pages, less the step thread's own calls between.
  CHECK(r.modelled_waits == 20);
  CHECK(r.jobs == 40);  // the admissions' lookahead and a top-up per growth
  CHECK(pv.pipeline_figures().contended_calls > 0);
  CHECK(r.modelled_wait_ns > 70 * page_job_ns());
  CHECK(r.modelled_wait_ns < 81 * page_job_ns());
  CHECK(p->critical_vmm_time().count() < s->critical_vmm_time().count());  // still cheaper than mapping on the step
  const auto rs = dynamic_cast<const vtensor_policy&>(*s).report();
  CHECK(rs.jobs == 0);
  CHECK(rs.modelled_waits == 0);
  CHECK(s->critical_vmm_time().count() == s->vmm_time().count());
}

TEST_CASE("vtensor policy: a step-thread call meets the worker busy with an earlier build's jobs once per operation") {
  // Build 1 hands out 20 jobs of 4 pages; they start when it ends. Build 2, 1 us later, admits
  // 5 more requests: each admission's prompt maps find the worker busy, wait the rest of a map +
  // set-access once (Note [Rest of a call in flight]), and push the worker's clock back by their
  // own price (Note [Driver contention]).
  auto p = h200_policy(4, true);
  std::vector<token_block> none;
  p->advance_to(sim_us{1});
  for (std::uint64_t id = 1; id <= 20; ++id) REQUIRE(p->admit({request_id{id}, none, 512, 8000}).admitted);
  const auto& v = dynamic_cast<const vtensor_policy&>(*p);
  CHECK(v.pipeline_figures().contended_calls == 0);  // within its own build, nothing contends
  const std::uint64_t before = p->critical_vmm_time().count();
  p->advance_to(sim_us{2});
  for (std::uint64_t id = 21; id <= 25; ++id) REQUIRE(p->admit({request_id{id}, none, 512, 8000}).admitted);
  const latency_model h = latency_model::h200();
  const auto rest = static_cast<std::uint64_t>(
      k_rest_of_map_call * static_cast<double>(h.cost_ns(vmm_call::map) + h.cost_ns(vmm_call::set_access)));
  CHECK(v.pipeline_figures().contended_calls == 5);
  CHECK(v.pipeline_figures().contention_ns == 5 * rest);
  CHECK(p->critical_vmm_time().count() - before == v.report().step.total_model_ns() - before + 5 * rest);
  // The worker's jobs are later by the admissions' price: the first growth of request 1 waits for
  // its job, which ended after build 1's 4 pages and build 2's step-thread calls.
  p->advance_to(sim_us{3});
  REQUIRE(p->grow(request_id{1}, 1));
  CHECK(v.report().modelled_waits == 1);
  p->check_invariants();
}

TEST_CASE("vtensor policy: with chunks created ahead, creation leaves the clock") {
  auto p = h200_policy(1, true, 64);
  p->advance_to(sim_us{1});
  std::vector<token_block> none;
  REQUIRE(p->admit({request_id{1}, none, 512, 4000}).admitted);
  const auto& v = dynamic_cast<const vtensor_policy&>(*p);
  const auto r = v.report();
  CHECK(p->critical_vmm_time().count() ==
        r.step.total_model_ns() - r.step.model_ns[static_cast<std::size_t>(vmm_call::create)]);
  p->check_invariants();  // with the worker's job in flight or not
}

TEST_CASE("vtensor policy: checking invariants after every step changes no decision of an asynchronous replay") {
  std::vector<std::string> lines;
  for (std::uint64_t i = 0; i < 24; ++i)
    lines.push_back(mooncake_line(i * 40, 700 + 97 * (i % 5), 30 + i, 100 * (i % 3)));
  const auto path = write_trace("async_checks.jsonl", lines);
  const auto o = llama_policy(k_unlimited, false);  // built-in H200 costs: the worker model matters
  const vtensor_settings ahead{.lookahead_pages = 2, .async_lookahead = true};
  auto checked = llama_replay();
  checked.replica.check_every_step = true;
  auto unchecked = llama_replay();
  unchecked.replica.check_every_step = false;
  const auto a = summary_json(replay_file(path, o, ahead, checked), {}, 0, false);
  const auto b = summary_json(replay_file(path, o, ahead, unchecked), {}, 0, false);
  CHECK(a.dump() == b.dump());
  CHECK(a["vmm_critical_time_us"].get<double>() > 0);
}

namespace {

// The vtensor policy with the pipeline (Note [Mapping worker model]): Llama-3-8B kv-fused,
// built-in H200 costs, 8192-token prefill chunks.
vtensor_policy pipelined_policy(bool late_admission = false) {
  auto o = vtensor_options(llama_policy(k_unlimited, false));
  o.manager.scheduler.pipeline = true;
  o.manager.scheduler.pipeline_chunk_tokens = 8192;
  o.late_admission = late_admission;
  return vtensor_policy(o);
}

}  // namespace

TEST_CASE("vtensor policy: pipelined admissions map beside the step before, releases unmap off the clock") {
  vtensor_policy p = pipelined_policy();
  const latency_model h = latency_model::h200();
  const std::uint64_t create = h.cost_ns(vmm_call::create), reserve = h.cost_ns(vmm_call::reserve);
  const std::vector<token_block> none;
  // After an idle spell nothing ran beside the admission: its calls and its one-page job are on the clock.
  p.advance_to(sim_us{1000});
  REQUIRE(p.admit({request_id{1}, none, 512, 4000}).admitted);
  CHECK(p.critical_vmm_time().count() == 32 * create + reserve + page_job_ns());
  CHECK(p.pipeline_figures().admission_waits == 1);
  const sim_ns c1 = p.critical_vmm_time();
  // A step of a second ends: the next admission was decided while it ran, its job done long before.
  p.advance_to(sim_us{1000 + 1'000'000});
  REQUIRE(p.admit({request_id{2}, none, 512, 4000}).admitted);
  CHECK(p.critical_vmm_time() == c1);
  CHECK(p.pipeline_figures().hidden_ns == 32 * create + reserve);
  CHECK(p.pipeline_figures().admission_waits == 1);
  // A release: its unmaps go to the worker, nothing on the clock.
  p.release(request_id{1}, release_reason::finished);
  CHECK(p.critical_vmm_time() == c1);
  CHECK(p.pipeline_figures().release_ns == 32 * h.cost_ns(vmm_call::unmap));
  // A 100 us step, then a 20-page prompt: the step waits for the first chunk's 16 pages only.
  // Its calls (19 pages of chunks created, one from the pool) run from the short step's start;
  // the worker first does the release's unmaps.
  p.advance_to(sim_us{1000 + 1'000'000 + 100});
  REQUIRE(p.admit({request_id{3}, none, 20 * 512, 12000}).admitted);
  const std::uint64_t start = std::max(32 * h.cost_ns(vmm_call::unmap), 19 * 32 * create);
  CHECK(p.pipeline_figures().admission_wait_ns == page_job_ns() + start + 16 * page_job_ns() - 100'000);
  CHECK(p.critical_vmm_time().count() == c1.count() + start + 16 * page_job_ns() - 100'000);
  p.release(request_id{2}, release_reason::preempted);
  p.release(request_id{3}, release_reason::finished);
  p.settle();
  p.check_invariants();
  // Every call handed to the worker was made, and the counts reported along the way were those.
  CHECK(p.stats().vmm.calls == p.kv_manager().stats().vmm.calls);
}

TEST_CASE("vtensor policy: with the pipeline a request arriving during a step is admitted one step later") {
  const auto path =
      write_trace("pipeline_arrival.jsonl", {mooncake_line(0, 4000, 3, 1), mooncake_line(1, 600, 3, 100)});
  struct admissions : sim::replica_observer {
    std::vector<std::uint32_t> per_step;
    void on_step(const step_record& s) override { per_step.push_back(s.admitted); }
  };
  std::vector<std::vector<std::uint32_t>> seen;
  for (int arm = 0; arm < 3; ++arm) {
    const bool pipeline = arm > 0;
    auto o = vtensor_options(llama_policy(k_unlimited, false));
    o.manager.scheduler.pipeline = pipeline;
    o.late_admission = arm == 2;
    vtensor_policy p(o);
    auto config = llama_replay();
    config.replica.pipeline = pipeline;
    admissions a;
    auto reader = traces::open_trace(path, std::nullopt);
    std::vector<sim::replica_observer*> observers{&a};
    const auto s = run_replay(*reader, p, config, observers);
    CHECK(s.counters.completed == 2);
    seen.push_back(a.per_step);
  }
  // The first request's 4000-token prefill runs from 0 ms past 1 ms: the second arrives during it.
  CHECK(seen[0][0] == 1);
  CHECK(seen[0][1] == 1);  // admitted at once when that step ends
  CHECK(seen[1][0] == 1);
  CHECK(seen[1][1] == 0);  // decided while it ran: not yet arrived when it began
  CHECK(seen[1][2] == 1);
  // Late admission (Note [Late admission]): it arrived 1 ms into a step of tens of ms, and its
  // two pages map in a few: admitted when that step ends, as without the pipeline.
  CHECK(seen[2][0] == 1);
  CHECK(seen[2][1] == 1);
}

TEST_CASE("vtensor policy: a later arrival is admitted late only when its first chunk's maps end by the boundary") {
  const latency_model h = latency_model::h200();
  const std::uint64_t create = h.cost_ns(vmm_call::create), reserve = h.cost_ns(vmm_call::reserve);
  const std::vector<token_block> none;
  for (const bool on : {false, true}) {
    CAPTURE(on);
    vtensor_policy p = pipelined_policy(on);
    p.advance_to(sim_us{1000});
    REQUIRE(p.admit({request_id{1}, none, 512, 4000}).admitted);
    REQUIRE(p.admit({request_id{2}, none, 512, 4000}).admitted);
    p.release(request_id{1}, release_reason::finished);  // its 32 chunks go back to the free pool
    // A 100 ms step ran from 1 ms; the worker is idle by its end (the release's unmaps included).
    p.advance_to(sim_us{101'000});
    const sim_ns critical = p.critical_vmm_time();
    // A one-page prompt: 32 chunks from the pool, a reserve on the step thread, 32 maps on the worker.
    const kv_request one{request_id{3}, none, 512, 4000};
    const std::uint64_t job = (reserve + page_job_ns() + 999) / 1000;  // in whole us, rounded up
    CHECK(p.admits_late(one, sim_us{50'000}) == on);
    CHECK(p.admits_late(one, sim_us{101'000 - job}) == on);  // ends just by the boundary
    CHECK_FALSE(p.admits_late(one, sim_us{101'000 - job + 1}));
    // Two pages: the pool holds 32 chunks, so 32 more would be created on the step thread first.
    const kv_request two{request_id{3}, none, 1024, 4000};
    const std::uint64_t job2 = (reserve + 32 * create + 2 * page_job_ns() + 999) / 1000;
    CHECK(p.admits_late(two, sim_us{101'000 - job2}) == on);
    CHECK_FALSE(p.admits_late(two, sim_us{101'000 - job2 + 1}));
    if (!on) continue;
    // Admitted as decided on its arrival at 60 ms: its maps ended beside the step, no wait.
    kv_request late = one;
    late.late_arrival = sim_us{60'000};
    REQUIRE(p.admit(late).admitted);
    CHECK(p.critical_vmm_time() == critical);
    CHECK(p.pipeline_figures().late_admissions == 1);
    // The window's clocks moved on: a request arriving 0.1 ms before the boundary no longer fits.
    CHECK_FALSE(p.admits_late({request_id{4}, none, 512, 4000}, sim_us{100'900}));
    // After an idle spell there is no window: nothing is admitted late.
    p.release(request_id{2}, release_reason::finished);
    p.release(request_id{3}, release_reason::finished);
    p.advance_to(sim_us{500'000});
    p.advance_to(sim_us{600'000});
    CHECK_FALSE(p.admits_late({request_id{4}, none, 512, 4000}, sim_us{500'001}));
  }
}

TEST_CASE("vtensor policy: after an idle spell an admission that takes the standby waits for no map") {
  // Note [Standby vTensor] in core/scheduler.cpp: one kv-fused page (512 tokens, 32 chunks) kept mapped.
  const std::vector<token_block> none;
  std::vector<sim_ns> idle_admission;
  for (const std::uint32_t standby : {0U, 1U}) {
    CAPTURE(standby);
    auto o = vtensor_options(llama_policy(k_unlimited, false));
    o.manager.scheduler.pipeline = true;
    o.manager.scheduler.pipeline_chunk_tokens = 8192;
    o.manager.scheduler.standby_pages = standby;
    vtensor_policy p(o);
    p.advance_to(sim_us{1000});
    for (std::uint64_t id = 1; id <= 3; ++id) REQUIRE(p.admit({request_id{id}, none, 512, 4000}).admitted);
    for (std::uint64_t id = 1; id <= 3; ++id) p.release(request_id{id}, release_reason::finished);  // 96 chunks pooled
    p.advance_to(sim_us{2000});
    // A miss takes 32 chunks; the 64 left are twice a standby's: one is mapped after its job.
    REQUIRE(p.admit({request_id{4}, none, 512, 4000}).admitted);
    CHECK(p.kv_manager().standby_pages() == standby);
    p.release(request_id{4}, release_reason::finished);
    p.advance_to(sim_us{1'000'000});  // an idle spell: nothing live, the worker long done
    p.advance_to(sim_us{2'000'000});
    const sim_ns before = p.critical_vmm_time();
    const auto waits = p.pipeline_figures().admission_waits;
    REQUIRE(p.admit({request_id{5}, none, 512, 4000}).admitted);
    idle_admission.push_back(p.critical_vmm_time() - before);
    // Without a standby the step waits for the one page's job; with it, for nothing.
    CHECK(p.pipeline_figures().admission_waits == waits + (standby == 0 ? 1 : 0));
    CHECK(p.kv_manager().stats().standby_adoptions == standby);
    p.release(request_id{5}, release_reason::finished);
    p.settle();
    p.check_invariants();
    CHECK(p.stats().vmm.calls == p.kv_manager().stats().vmm.calls);
  }
  CHECK(idle_admission[0].count() == static_cast<std::int64_t>(page_job_ns()));
  CHECK(idle_admission[1].count() == 0);
}

TEST_CASE("vtensor policy: after an idle spell the next turn takes the parked range and maps only its new pages") {
  // Note [Parked vTensors] in core/scheduler.cpp: kv-fused pages of 512 tokens, 32 chunks each.
  const std::vector<token_block> turn1{{1, 512}, {2, 512}};
  const std::vector<token_block> turn2{{1, 512}, {2, 512}, {3, 512}};
  std::vector<sim_ns> waited;
  for (const std::uint32_t parked : {0U, 4U}) {
    CAPTURE(parked);
    auto o = vtensor_options(llama_policy(k_unlimited, false));
    o.manager.scheduler.pipeline = true;
    o.manager.scheduler.pipeline_chunk_tokens = 8192;
    o.manager.scheduler.parked_ranges = parked;
    o.publish = publish_moment::eager;
    vtensor_policy p(o);
    p.advance_to(sim_us{1000});
    REQUIRE(p.admit({request_id{1}, turn1, 1100, 2000}).admitted);  // 3 pages, 2 named by blocks
    p.computed(request_id{1}, 1100);
    p.release(request_id{1}, release_reason::finished);
    CHECK(p.kv_manager().parked_count() == parked / 4);
    p.advance_to(sim_us{1'000'000});  // an idle spell
    p.advance_to(sim_us{2'000'000});
    const sim_ns before = p.critical_vmm_time();
    const kv_admit_result a = p.admit({request_id{2}, turn2, 1600, 2000});  // 4 pages: 2 cached, 2 its own
    REQUIRE(a.admitted);
    CHECK(a.hit_tokens == 1024);
    waited.push_back(p.critical_vmm_time() - before);
    CHECK(p.kv_manager().stats().parked_reuses == parked / 4);
    p.release(request_id{2}, release_reason::finished);
    p.settle();
    p.check_invariants();
    CHECK(p.stats().vmm.calls == p.kv_manager().stats().vmm.calls);
  }
  // The same calls on the step thread (creates of the chunks the pool lacks) in both; without the
  // parked range the step also waits for the maps of the two cached pages.
  CHECK((waited[0] - waited[1]).count() == static_cast<std::int64_t>(2 * page_job_ns()));
}

TEST_CASE("vtensor policy: the rest of a long prompt is due when its second chunk's step begins") {
  for (const std::uint64_t step_us : {1000, 1'000'000}) {
    CAPTURE(step_us);
    vtensor_policy p = pipelined_policy();
    const std::vector<token_block> none;
    p.advance_to(sim_us{1000});
    REQUIRE(p.admit({request_id{1}, none, 100, 4000}).admitted);
    p.advance_to(sim_us{2000});  // a 1 ms step; then a 40-page prompt decided while it ran
    REQUIRE(p.admit({request_id{2}, none, 40 * 512, 30000}).admitted);
    p.advance_to(sim_us{2000 + step_us});         // its first chunk's step ends
    CHECK(p.pipeline_figures().rest_waits == 0);  // booked at the next step's first call
    const sim_ns before = p.critical_vmm_time();
    REQUIRE(p.grow(request_id{1}, 1));  // within its page: no VMM call
    const auto f = p.pipeline_figures();
    if (step_us == 1000) {  // 24 more pages (about 35 ms of maps) are not done 1 ms later
      CHECK(f.rest_waits == 1);
      CHECK(f.rest_wait_ns > 30'000'000);
      CHECK((p.critical_vmm_time() - before).count() == static_cast<std::int64_t>(f.rest_wait_ns));
    } else {
      CHECK(f.rest_waits == 0);
      CHECK(p.critical_vmm_time() == before);
    }
    p.release(request_id{1}, release_reason::finished);
    p.release(request_id{2}, release_reason::finished);
    p.settle();
    p.check_invariants();
  }
}

TEST_CASE("vtensor policy: a step-thread call during a release's unmaps waits for the rest of a run's unmap") {
  // The worker unmaps a released request's pages a run per backend call (core/async_mapper.cpp),
  // so a step-thread operation arriving then waits for the rest of a run, not of one map.
  vtensor_policy p = pipelined_policy();
  const latency_model h = latency_model::h200();
  const std::vector<token_block> none;
  p.advance_to(sim_us{1000});
  REQUIRE(p.admit({request_id{1}, none, 512, 4000}).admitted);
  REQUIRE(p.admit({request_id{2}, none, 8 * 512, 9000}).admitted);
  p.advance_to(sim_us{1000 + 1'000'000});
  p.release(request_id{2}, release_reason::finished);  // 8 pages of 32 chunks to unmap on the worker
  const std::uint64_t unmaps = p.pipeline_figures().release_ns;
  CHECK(unmaps == 8 * 32 * h.cost_ns(vmm_call::unmap));
  p.advance_to(sim_us{1000 + 1'000'000 + 1});  // the unmaps join the worker clock: 7.6 ms of them
  CHECK(p.pipeline_figures().contended_calls == 0);
  REQUIRE(p.grow(request_id{1}, 1));  // token 513: its page is mapped by the step thread, now
  CHECK(p.pipeline_figures().contended_calls == 1);
  const std::uint64_t map_call = h.cost_ns(vmm_call::map) + h.cost_ns(vmm_call::set_access);
  CHECK(p.pipeline_figures().contention_ns > map_call);  // a run is longer than a map
  // At most the model's rest of all of them (one run: Note [Rest of a call in flight]).
  CHECK(p.pipeline_figures().contention_ns <= static_cast<std::uint64_t>(k_rest_of_unmap_call * double(unmaps)));
  p.release(request_id{1}, release_reason::finished);
  p.settle();
  p.check_invariants();
}

// Note [Eager publication]: request 2 arrives while request 1, with the same two-block prefix,
// still runs (its prompt computed). Published at release, the prefix is not in the tree yet and
// request 2 computes it again; published eagerly, request 2 maps request 1's two pages (1,024
// tokens). Request 3 comes while request 1 has computed only its first chunk (512 tokens): it
// hits that one page and computes the rest itself. Pins move with what is published, and the
// tree keeps the pages after everything is released.
TEST_CASE("vtensor policy: eager publication shares a prompt's computed pages while it still runs") {
  const std::vector<token_block> two{{1, 512}, {2, 512}};
  const std::vector<token_block> three{{1, 512}, {2, 512}, {3, 512}};
  for (const publish_moment publish : {publish_moment::release, publish_moment::eager}) {
    CAPTURE(k_publish_moment_names.name(publish));
    const bool eager = publish == publish_moment::eager;
    vtensor_settings s;
    s.publish = publish;
    auto p = make_kv_policy(policy_choice(s), llama_policy(k_unlimited));
    REQUIRE(p->admit({request_id{1}, three, 1536, 2000}).admitted);
    p->computed(request_id{1}, 512);  // the first prefill chunk
    p->check_invariants();
    const kv_admit_result third = p->admit({request_id{3}, two, 1024, 2000});
    REQUIRE(third.admitted);
    CHECK(third.hit_tokens == (eager ? 512 : 0));
    p->computed(request_id{1}, 1536);  // the rest of the prompt
    p->computed(request_id{3}, 1024);
    p->check_invariants();
    const kv_admit_result second = p->admit({request_id{2}, three, 1536, 2000});
    REQUIRE(second.admitted);
    CHECK(second.hit_tokens == (eager ? 1535 : 0));  // one token is always computed
    for (const std::uint64_t id : {1, 2, 3}) p->release(request_id{id}, release_reason::finished);
    p->check_invariants();
    const kv_admit_result later = p->admit({request_id{4}, three, 1536, 2000});
    CHECK(later.hit_tokens == 1535);
    p->release(request_id{4}, release_reason::finished);
    CHECK(p->describe().at("publish") == (eager ? "eager" : "release"));
  }
}
