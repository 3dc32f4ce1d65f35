// The serving replica: step timing from the roofline, prefix hits, chunked prefill, admission
// by memory, preemption by recompute, the context policy, and VMM time on the critical path.

#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "sim/policy_registry.hpp"
#include "sim/replay.hpp"
#include "sim/replica.hpp"
#include "sim/vtensor_policy.hpp"
#include "tests/sim/sim_test_support.hpp"
#include "traces/trace_reader.hpp"

using namespace vtensor;
using namespace vtensor::sim;
using namespace vtensor::sim_testing;

namespace {

time_us step_us(const model_compute& m, const gpu_preset& g, std::uint64_t context, std::uint64_t tokens) {
  step_work w;
  w.add_sequence(context, tokens, tokens == 1 && context > 0);
  return static_cast<time_us>(std::ceil(roofline(m, g, w, k_default_step_overhead_s).total_s() * 1e6));
}

struct recorder final : replica_observer {
  std::vector<step_record> steps;
  std::vector<request_record> requests;
  std::vector<replica_state> samples;
  std::string order;  // 's' step, 'r' request, 'g' grid sample: the order an observer saw them in
  void on_step(const step_record& s) override {
    steps.push_back(s);
    order += 's';
  }
  void on_request(const request_record& r) override {
    requests.push_back(r);
    order += 'r';
  }
  void on_sample(const replica_state& s) override {
    samples.push_back(s);
    order += 'g';
  }
};

}  // namespace

TEST_CASE("kv_policy: the vtensor policy admits, grows, releases and reports through the interface") {
  auto p = make_kv_policy("vtensor", llama_policy(k_unlimited));
  CHECK(p->name() == "vtensor");
  CHECK(p->describe()["layout"] == "kv-fused");
  const std::vector<token_block> blocks{{1, 512}, {2, 488}};
  const auto a = p->admit({request_id{1}, blocks, 1000, 1010});
  REQUIRE(a.admitted);
  CHECK(a.hit_tokens == 0);
  CHECK(p->grow(request_id{1}, 10));
  p->release(request_id{1}, release_reason::finished);
  const auto b = p->admit({request_id{2}, blocks, 1000, 1010});
  REQUIRE(b.admitted);
  CHECK(b.hit_tokens == 999);  // one token is always computed
  const kv_stats s = p->stats();
  CHECK(s.prompt_tokens == 2000);
  CHECK(s.prefix_hit_tokens == 999);
  CHECK(s.memory.mapped_bytes > 0);
  p->release(request_id{2}, release_reason::preempted);
  p->check_invariants();
  CHECK_THROWS_AS((void)make_kv_policy("nope", llama_policy(k_unlimited)), std::invalid_argument);
}

TEST_CASE("replica: one request's steps follow the roofline - TTFT, TPOT, end-to-end") {
  const auto path =
      write_trace("one.jsonl", {R"({"timestamp": 0, "input_length": 1000, "output_length": 3, "hash_ids": [1, 2]})"});
  auto cfg = llama_replay();
  recorder rec;
  auto s = replay_file(path, llama_policy(k_unlimited), cfg, {&rec});
  const time_us d1 = step_us(cfg.model, cfg.gpu, 0, 1000);
  const time_us d2 = step_us(cfg.model, cfg.gpu, 1000, 1);
  const time_us d3 = step_us(cfg.model, cfg.gpu, 1001, 1);
  CHECK(s.counters.completed == 1);
  CHECK(s.counters.steps == 3);
  CHECK(s.counters.output_tokens == 3);
  CHECK(s.counters.prefill_tokens == 1000);
  REQUIRE(rec.steps.size() == 3);
  CHECK(rec.steps[0].duration_us == d1);
  CHECK(rec.steps[0].prefill_tokens == 1000);
  CHECK(rec.steps[1].decode_seqs == 1);
  CHECK(rec.steps[2].start == d1 + d2);
  REQUIRE(rec.requests.size() == 1);
  CHECK(rec.requests[0].first_token == d1);
  CHECK(rec.requests[0].finish == d1 + d2 + d3);
  CHECK(s.ttft.p50 == doctest::Approx(static_cast<double>(d1) / 1000));
  CHECK(s.tpot.p50 == doctest::Approx(static_cast<double>((d2 + d3) / 2) / 1000));
  CHECK(s.e2e.p99 == doctest::Approx(static_cast<double>(d1 + d2 + d3) / 1000));
  CHECK(s.simulated_seconds == doctest::Approx(static_cast<double>(d1 + d2 + d3) / 1e6));
}

TEST_CASE("replica: a second turn hits the first turn's prefix and computes only the rest") {
  const auto path =
      write_trace("turns.jsonl",
                  {R"({"timestamp": 0, "input_length": 1500, "output_length": 2, "hash_ids": [1, 2, 3]})",
                   R"({"timestamp": 10000, "input_length": 2100, "output_length": 2, "hash_ids": [1, 2, 4, 5, 6]})"});
  recorder rec;
  auto s = replay_file(path, llama_policy(k_unlimited), llama_replay(), {&rec});
  CHECK(s.counters.completed == 2);
  CHECK(s.counters.prompt_tokens == 3600);
  CHECK(s.counters.hit_tokens == 1024);  // blocks 1 and 2: two whole 512-token pages
  CHECK(s.counters.prefill_tokens == 1500 + 2100 - 1024);
  REQUIRE(rec.requests.size() == 2);
  CHECK(rec.requests[1].hit_tokens == 1024);
  CHECK(rec.requests[1].arrival == 10'000'000);  // 10 s in microseconds
}

TEST_CASE("replica: chunked prefill splits a long prompt by the token budget - unchunked runs it whole") {
  const auto path = write_trace("long.jsonl", {mooncake_line(0, 5000, 1, 1000)});
  auto cfg = llama_replay();
  cfg.replica.token_budget = 2048;
  recorder chunked;
  auto s = replay_file(path, llama_policy(k_unlimited), cfg, {&chunked});
  CHECK(s.counters.steps == 3);  // 2048 + 2048 + 904, then the first token ends it
  CHECK(chunked.steps[2].prefill_tokens == 904);
  cfg.replica.chunked_prefill = false;
  recorder whole;
  s = replay_file(path, llama_policy(k_unlimited), cfg, {&whole});
  CHECK(s.counters.steps == 1);
  CHECK(whole.steps[0].prefill_tokens == 5000);
}

TEST_CASE("replica: requests arriving together share steps - max running caps the batch") {
  std::vector<std::string> lines;
  for (int i = 0; i < 6; ++i) {
    lines.push_back(R"({"timestamp": 0, "input_length": 100, "output_length": 4, "hash_ids": [)" +
                    std::to_string(100 + i) + "]}");
  }
  const auto path = write_trace("burst.jsonl", lines);
  auto cfg = llama_replay();
  cfg.replica.max_running = 4;
  recorder rec;
  auto s = replay_file(path, llama_policy(k_unlimited), cfg, {&rec});
  CHECK(s.counters.completed == 6);
  CHECK(rec.steps[0].prefill_seqs == 4);
  CHECK(rec.steps[0].waiting == 2);
  CHECK(s.peak.running == 4);
}

TEST_CASE("replica: out of memory preempts the newest request by recompute - everything completes") {
  // 8 requests of 1,000 prompt tokens growing by 1,500: each needs 5 pages of 16 MiB at the end
  // (kv-fused Llama-3-8B: 512 tokens, 32 chunks a page); 20 pages do not hold them all.
  std::vector<std::string> lines;
  for (int i = 0; i < 8; ++i) {
    lines.push_back(R"({"timestamp": 0, "input_length": 1000, "output_length": 1500, "hash_ids": [)" +
                    std::to_string(10 * i) + ", " + std::to_string(10 * i + 1) + "]}");
  }
  const auto path = write_trace("pressure.jsonl", lines);
  recorder rec;
  auto s = replay_file(path, llama_policy(20ull * 32 * 2 * 1024 * 1024), llama_replay(), {&rec});
  CHECK(s.counters.completed == 8);
  CHECK(s.counters.preemptions > 0);
  CHECK(s.counters.recomputed_tokens > 0);
  CHECK(s.counters.output_tokens == 8 * 1500);
  CHECK(s.peak.memory.physical_bytes <= 20ull * 32 * 2 * 1024 * 1024);
  // The hit rate counts first admissions only: nothing was shared between these prompts.
  CHECK(s.counters.hit_tokens == 0);
  std::uint32_t preempted = 0;
  for (const auto& r : rec.requests) preempted += r.preemptions;
  CHECK(preempted == s.counters.preemptions);
}

TEST_CASE("replica: a request larger than the whole memory is rejected, the others run") {
  const auto path = write_trace("huge.jsonl", {mooncake_line(0, 9000, 2, 1000), mooncake_line(1, 500, 2, 2000)});
  auto s = replay_file(path, llama_policy(4ull * 32 * 2 * 1024 * 1024), llama_replay());
  CHECK(s.counters.rejected_memory == 1);
  CHECK(s.counters.completed == 1);
}

TEST_CASE("replica: requests beyond the context are rejected or truncated keeping the prefix") {
  const auto path =
      write_trace("context.jsonl",
                  {R"({"timestamp": 0, "input_length": 3000, "output_length": 100, "hash_ids": [1, 2, 3, 4, 5, 6]})",
                   R"({"timestamp": 0, "input_length": 100, "output_length": 5000, "hash_ids": [7]})",
                   R"({"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]})"});
  auto cfg = llama_replay();
  cfg.replica.max_context_tokens = 2048;
  auto policy = llama_policy(k_unlimited);
  policy.max_context_tokens = 2048;
  auto s = replay_file(path, policy, cfg);
  CHECK(s.counters.rejected_context == 2);
  CHECK(s.counters.completed == 1);
  cfg.replica.over_context = over_context_policy::truncate;
  recorder rec;
  s = replay_file(path, policy, cfg, {&rec});
  CHECK(s.counters.rejected_context == 1);  // the output alone exceeds the context
  CHECK(s.counters.truncated == 1);
  CHECK(s.counters.completed == 2);
  CHECK(s.counters.prompt_tokens == 3000 + 100 + 1000);
  CHECK(s.counters.admitted_prompt_tokens == 1948 + 1000);
}

TEST_CASE("replica: synchronous mapping puts VMM time in the step - async lookahead takes growth off it") {
  const auto path =
      write_trace("vmm.jsonl", {R"({"timestamp": 0, "input_length": 600, "output_length": 2000, "hash_ids": [1, 2]})"});
  auto sync_policy = llama_policy(k_unlimited, false);
  auto s_sync = replay_file(path, sync_policy, llama_replay());
  CHECK(s_sync.counters.vmm_critical.count() > 0);
  // Everything but the unmaps of the last release, which no step waits for.
  const vmm_counters& vmm = s_sync.final_memory.vmm;
  CHECK(s_sync.counters.vmm_critical.count() == vmm.total_time_ns() - vmm.time_ns_of(vmm_call::unmap));
  const vtensor_settings ahead{.lookahead_pages = 2};  // mapped by the worker (async_lookahead defaults to true)
  auto s_ahead = replay_file(path, sync_policy, ahead, llama_replay());
  CHECK(s_ahead.counters.vmm_critical.count() < s_ahead.final_memory.vmm.total_time_ns());
  CHECK(s_ahead.counters.vmm_critical.count() < s_sync.counters.vmm_critical.count());
  CHECK(s_ahead.simulated_seconds < s_sync.simulated_seconds);
  // Synchronous lookahead maps the same pages on the step: no cheaper than no lookahead.
  const vtensor_settings sync_ahead{.lookahead_pages = 2, .async_lookahead = false};
  auto s_sync_ahead = replay_file(path, sync_policy, sync_ahead, llama_replay());
  CHECK(s_sync_ahead.counters.vmm_critical.count() > s_ahead.counters.vmm_critical.count());
  CHECK(s_sync_ahead.counters.vmm_critical.count() >= s_sync.counters.vmm_critical.count());
  // Zero latency: no VMM time at all.
  auto s_zero = replay_file(path, llama_policy(k_unlimited), llama_replay());
  CHECK(s_zero.counters.vmm_critical.count() == 0);
}

TEST_CASE("replica: the state tracker integrates over time and samples on its grid") {
  state_tracker t(10, {});
  replica_state a;
  a.at = 0;
  a.memory.mapped_bytes = 100;
  a.memory.used_bytes = 50;
  a.running = 2;
  t.observe(a);
  replica_state b;
  b.at = 30;  // nothing mapped from 30 to 40
  t.observe(b);
  t.close(40);
  CHECK(t.mean_internal_fragmentation() == doctest::Approx(0.5));  // only while mapped
  CHECK(t.mean_running() == doctest::Approx(2.0 * 30 / 40));
  CHECK(t.peak().memory.mapped_bytes == 100);
  CHECK(t.peak().internal_fragmentation == doctest::Approx(0.5));
  std::vector<time_us> grid;
  state_tracker g(10, [&](const replica_state& s) { grid.push_back(s.at); });
  g.observe(a);
  g.observe(b);
  g.close(40);
  CHECK(grid == std::vector<time_us>{0, 10, 20, 30, 40});
  std::vector<std::uint64_t> v{5000, 1000, 3000, 2000, 4000};
  const auto l = summarize_latencies(v);
  CHECK(l.p50 == doctest::Approx(3.0));
  CHECK(l.p99 == doctest::Approx(5.0));
  CHECK(l.mean == doctest::Approx(3.0));
}

TEST_CASE("replica: measure_wall off reads no clock and changes nothing else") {
  std::vector<std::string> lines;
  for (int i = 0; i < 5; ++i) {
    lines.push_back(R"({"timestamp": )" + std::to_string(i * 100) +
                    R"(, "input_length": 600, "output_length": 40, "hash_ids": [1, )" + std::to_string(200 + i) + "]}");
  }
  const auto path = write_trace("wall.jsonl", lines);
  auto cfg = llama_replay();
  recorder on, off;
  const auto measured = replay_file(path, llama_policy(k_unlimited), cfg, {&on});
  cfg.replica.measure_wall = false;
  const auto unmeasured = replay_file(path, llama_policy(k_unlimited), cfg, {&off});
  CHECK(measured.counters.step_wall_ns > 0);
  CHECK(unmeasured.counters.step_wall_ns == 0);
  CHECK(unmeasured.counters.completed == 5);
  CHECK(unmeasured.counters.completed == measured.counters.completed);
  CHECK(unmeasured.simulated_seconds == measured.simulated_seconds);
  REQUIRE(off.steps.size() == on.steps.size());
  for (std::size_t i = 0; i < on.steps.size(); ++i) {
    CHECK(off.steps[i].start == on.steps[i].start);
    CHECK(off.steps[i].duration_us == on.steps[i].duration_us);
    CHECK(off.steps[i].running == on.steps[i].running);
  }
}

namespace {

/// Forwards every call to `inner` but answers no in-place rounds, so that the replica runs every
/// step through the event queue (Note [One decode protocol]).
class without_stretches final : public kv_policy {
 public:
  explicit without_stretches(std::unique_ptr<kv_policy> inner) : inner_(std::move(inner)) {}

 private:
  kv_admit_result do_admit(const kv_request& r) override { return inner_->admit(r); }
  bool do_grow(request_id id, std::uint64_t tokens) override { return inner_->grow(id, tokens); }
  std::size_t do_decode(std::span<const request_id> ids) override { return inner_->decode(ids).grown(); }
  void do_release(request_id id, release_reason why) override { inner_->release(id, why); }
  void do_computed(request_id id, std::uint64_t tokens) override { inner_->computed(id, tokens); }
  [[nodiscard]] kv_stats do_stats() const override { return inner_->stats(); }
  [[nodiscard]] kv_memory_view do_memory_view() const override { return inner_->memory_view(); }
  [[nodiscard]] std::array<std::uint64_t, k_vmm_call_kinds> do_vmm_calls() const override {
    return inner_->vmm_calls();
  }
  [[nodiscard]] std::uint64_t do_chunks_created() const override { return inner_->chunks_created(); }
  [[nodiscard]] sim_ns do_vmm_time() const override { return inner_->vmm_time(); }
  [[nodiscard]] sim_ns do_critical_vmm_time() const override { return inner_->critical_vmm_time(); }
  void do_advance_to(sim_us now) override { inner_->advance_to(now); }
  void do_settle() override { inner_->settle(); }
  [[nodiscard]] kv_access do_access() const override { return inner_->access(); }
  [[nodiscard]] std::optional<vmm_split_report> do_vmm_report() const override { return inner_->vmm_report(); }
  [[nodiscard]] std::string do_name() const override { return inner_->name(); }
  [[nodiscard]] nlohmann::ordered_json do_describe() const override { return inner_->describe(); }
  void do_check_invariants() const override { inner_->check_invariants(); }
  [[nodiscard]] bool do_pipelined() const override { return inner_->pipelined(); }
  [[nodiscard]] bool do_admits_late(const kv_request& r, sim_us arrival) const override {
    return inner_->admits_late(r, arrival);
  }

  std::unique_ptr<kv_policy> inner_;
};

std::unique_ptr<kv_policy> vtensor_with(kv_policy_options o, const vtensor_settings& settings,
                                        const replay_config& cfg) {
  o.prefill_chunk_tokens = cfg.replica.chunked_prefill ? cfg.replica.token_budget : 0;
  return make_kv_policy(policy_choice(settings), o);
}

}  // namespace

TEST_CASE("replica: decode stretches change no step, request, sample or figure (vtensor, paged)") {
  // Arrivals spread over time, shared prefixes, outputs long enough to cross 512-token pages.
  std::vector<std::string> lines;
  for (int i = 0; i < 24; ++i) {
    const int input = 600 + 61 * (i % 7);  // two 512-token keys cover it
    const int output = i % 5 == 0 ? 700 : 40 + 53 * (i % 9);
    lines.push_back(R"({"timestamp": )" + std::to_string(i * 180 + (i % 3) * 7) + R"(, "input_length": )" +
                    std::to_string(input) + R"(, "output_length": )" + std::to_string(output) +
                    R"(, "hash_ids": [1, )" + std::to_string(100 + i % 4) + "]}");
  }
  const auto path = write_trace("stretches.jsonl", lines);
  struct setting {
    const char* name;
    std::uint64_t memory;
    bool pipeline;
    std::uint32_t lookahead;
    bool measured = false;  // the bundled H200 compute calibration prices the steps, not the roofline
    const char* policy = "vtensor";
  };
  for (const setting& st :
       {setting{"pipeline, lookahead 1", k_unlimited, true, 1},
        setting{"no pipeline, no lookahead", k_unlimited, false, 0},
        setting{"pipeline, 1 GiB: preemptions", std::uint64_t{1} << 30, true, 1},
        setting{"no pipeline, 1 GiB, lookahead 2", std::uint64_t{1} << 30, false, 2},
        setting{"pipeline, measured step cost", k_unlimited, true, 1, true},
        setting{"paged", k_unlimited, false, 0, false, "paged"},
        setting{"paged, 256 MiB: preemptions and evictions", std::uint64_t{1} << 28, false, 0, false, "paged"},
        setting{"paged, measured step cost", k_unlimited, false, 0, true, "paged"}}) {
    const std::string name = st.name;
    CAPTURE(name);
    auto cfg = llama_replay();
    cfg.replica.measure_wall = false;
    cfg.replica.sample_interval_us = 20'000;
    if (st.measured) {
      cfg.replica.compute = std::make_shared<const compute_calibration>(
          load_compute_calibration(VTENSOR_SOURCE_DIR "/backends/calibration/h200-compute.json"));
    }
    const auto o = llama_policy(st.memory, false);
    const vtensor_settings settings{.lookahead_pages = st.lookahead, .pipeline = st.pipeline};
    recorder with, without;
    auto run = [&](kv_policy& p, recorder& rec) {
      auto reader = traces::open_trace(path, std::nullopt);
      const std::vector<replica_observer*> observers{&rec};
      return run_replay(*reader, p, cfg, observers);
    };
    const std::string policy = st.policy;
    auto make = [&] { return policy == "vtensor" ? vtensor_with(o, settings, cfg) : make_kv_policy(policy, o); };
    auto stretching = make();
    without_stretches plain(make());
    const replay_summary a = run(*stretching, with);
    const replay_summary b = run(plain, without);
    CHECK(a.counters.stretch_steps > a.counters.steps / 8);  // stretches did run
    CHECK(b.counters.stretch_steps == 0);
    if (st.memory != k_unlimited) CHECK(a.counters.preemptions > 0);
    CHECK(summary_json(a, {}, 0, false).dump() == summary_json(b, {}, 0, false).dump());
    CHECK(with.order == without.order);  // a Chrome trace interleaves them as it sees them
    REQUIRE(with.steps.size() == without.steps.size());
    for (std::size_t i = 0; i < with.steps.size(); ++i) {
      const step_record& x = with.steps[i];
      const step_record& y = without.steps[i];
      CAPTURE(i);
      CHECK(x.index == y.index);
      CHECK(x.start == y.start);
      CHECK(x.duration_us == y.duration_us);
      CHECK(x.decode_seqs == y.decode_seqs);
      CHECK(x.prefill_seqs == y.prefill_seqs);
      CHECK(x.prefill_tokens == y.prefill_tokens);
      CHECK(x.admitted == y.admitted);
      CHECK(x.preempted == y.preempted);
      CHECK(x.compute_us == y.compute_us);
      CHECK(x.memory_us == y.memory_us);
      CHECK(x.vmm_critical == y.vmm_critical);
      CHECK(x.vmm_total == y.vmm_total);
      CHECK(x.vmm_calls == y.vmm_calls);
      CHECK(x.running == y.running);
      CHECK(x.waiting == y.waiting);
    }
    REQUIRE(with.requests.size() == without.requests.size());
    for (std::size_t i = 0; i < with.requests.size(); ++i) {
      CHECK(with.requests[i].id == without.requests[i].id);
      CHECK(with.requests[i].first_token == without.requests[i].first_token);
      CHECK(with.requests[i].finish == without.requests[i].finish);
      CHECK(with.requests[i].output_tokens == without.requests[i].output_tokens);
    }
    REQUIRE(with.samples.size() == without.samples.size());
    CHECK(with.samples.size() > 10);
    for (std::size_t i = 0; i < with.samples.size(); ++i) {
      CHECK(with.samples[i].at == without.samples[i].at);
      CHECK(with.samples[i].memory == without.samples[i].memory);
      CHECK(with.samples[i].running == without.samples[i].running);
    }
  }
}
