// Clusters and routers (sim/cluster.hpp, sim/router.hpp): one replica is the replay, the totals
// add up, each router places what its note says over a view built by hand, a policy's cached
// tokens are what its next admission hits, the bounds are ordered, and `vtensor replay
// --replicas` with its bad inputs.

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/cluster.hpp"
#include "sim/router.hpp"
#include "tests/sim/sim_test_support.hpp"
#include "tests/support/cli_run.hpp"
#include "traces/infinite_prefix_cache.hpp"

using namespace vtensor;
using namespace vtensor::sim_testing;

namespace {

// A cluster view set by hand.
class fake_view final : public sim::cluster_view {
 public:
  explicit fake_view(std::size_t n) : loads(n), cached(n, 0) {}
  [[nodiscard]] std::size_t replicas() const override { return loads.size(); }
  [[nodiscard]] sim::replica_load load(std::size_t i) const override { return loads[i]; }
  [[nodiscard]] std::uint64_t cached_tokens(std::size_t i) const override { return cached[i]; }
  std::vector<sim::replica_load> loads;
  std::vector<std::uint64_t> cached;
};

traces::trace_request request(std::uint64_t session, std::uint32_t input, std::vector<std::uint64_t> keys) {
  traces::trace_request r;
  r.session = session;
  r.input_tokens = input;
  r.output_tokens = 8;
  r.block_tokens = 512;
  r.block_keys = std::move(keys);
  return r;
}

std::vector<token_block> blocks_of(const traces::trace_request& r) {
  std::vector<token_block> b;
  for (std::size_t i = 0; i < r.block_keys.size(); ++i) b.push_back({r.block_keys[i], r.tokens_in_block(i)});
  return b;
}

sim::route_choice route(sim::router& router, const traces::trace_request& r, const sim::cluster_view& v) {
  const auto b = blocks_of(r);
  return router.route(sim::routed_request{r, b}, v);
}

// A trace of `sessions` conversations of `turns` turns each, every turn extending its session's
// prompt (Mooncake keys: a session's blocks are shared by its later turns), arrivals 200 ms apart.
std::string conversation_trace(const std::string& name, int sessions, int turns) {
  std::vector<std::string> lines;
  std::uint64_t t = 0;
  for (int turn = 0; turn < turns; ++turn) {
    for (int s = 0; s < sessions; ++s) {
      const auto input = static_cast<std::uint32_t>(1024 * (turn + 1) + 100);
      lines.push_back(mooncake_line(t, input, 32, static_cast<std::uint64_t>(s) * 1000 + 1));
      t += 200;
    }
  }
  return write_trace(name, lines);
}

struct cluster_run {
  sim::cluster_summary summary;
  std::vector<std::unique_ptr<sim::kv_policy>> policies;
};

cluster_run run_cluster_of(const std::string& path, const std::string& policy, std::size_t replicas,
                           const std::string& router, std::uint64_t memory, sim::router_options options = {}) {
  cluster_run run;
  std::vector<sim::kv_policy*> raw;
  for (std::size_t i = 0; i < replicas; ++i) {
    run.policies.push_back(sim::make_kv_policy(policy, llama_policy(memory)));
    raw.push_back(run.policies.back().get());
  }
  auto reader = traces::open_trace(path, std::nullopt);
  auto r = replicas > 1 ? sim::make_router(router, options) : nullptr;
  run.summary = sim::run_cluster(*reader, raw, llama_replay(), r.get());
  return run;
}

}  // namespace

TEST_CASE("cluster: one replica without a router is run_replay, figure for figure") {
  const std::string path = conversation_trace("cluster_one.jsonl", 6, 3);
  const auto one = run_cluster_of(path, "vtensor", 1, "", 8ULL << 30);
  const auto direct = replay_file(path, llama_policy(8ULL << 30), llama_replay());
  CHECK(sim::summary_json(one.summary.total, {}, 0, false) == sim::summary_json(direct, {}, 0, false));
  CHECK(one.summary.router.empty());
  CHECK(one.summary.decisions.empty());
  REQUIRE(one.summary.replicas.size() == 1);
}

TEST_CASE("cluster: round-robin splits the arrivals evenly and the cluster's totals are the replicas' sums") {
  const std::string path = conversation_trace("cluster_rr.jsonl", 6, 3);
  const auto run = run_cluster_of(path, "vtensor", 3, "round-robin", 8ULL << 30);
  const sim::cluster_summary& c = run.summary;
  REQUIRE(c.replicas.size() == 3);
  std::uint64_t submitted = 0, hits = 0, prompt = 0, busy = 0, steps = 0;
  for (const auto& f : c.replicas) {
    CHECK(f.summary.counters.submitted == 6);
    submitted += f.summary.counters.submitted;
    hits += f.summary.counters.hit_tokens;
    prompt += f.summary.counters.prompt_tokens;
    busy += f.summary.counters.busy_us;
    steps += f.summary.counters.steps;
  }
  CHECK(c.total.counters.submitted == submitted);
  CHECK(c.total.counters.completed == 18);
  CHECK(c.total.counters.hit_tokens == hits);
  CHECK(c.total.counters.prompt_tokens == prompt);
  CHECK(c.total.counters.busy_us == busy);
  CHECK(c.total.counters.steps == steps);
  CHECK(c.total.ttft.count == 18);
  CHECK(c.total.replicas == 3);
  CHECK(c.router == "round-robin");
  REQUIRE(c.decisions.size() == 1);
  CHECK(c.decisions[0].second == 18);
  // Round-robin over 3 replicas with 6 sessions: a session's turns land on the same replica
  // (18 arrivals in session order, 6 per turn, 6 = 2 x 3), so the split bound equals the global.
  CHECK(c.split_bound_hit_tokens() == c.global_bound_hit_tokens);
  CHECK(c.total.counters.hit_tokens <= c.split_bound_hit_tokens());
  CHECK(c.total.counters.hit_tokens > 0);
}

TEST_CASE("cluster: under round-robin a replica is the replay of its share of the trace alone") {
  // Round-robin reads nothing of the replicas, and replicas share nothing but the queue: replica
  // 0 of 3 must do exactly what one replica does with requests 0, 3, 6, ... of the trace (their
  // times unshifted: the share starts with the trace's first request).
  std::vector<std::string> all, share;
  for (int i = 0; i < 30; ++i) {
    const auto line = mooncake_line(static_cast<std::uint64_t>(i / 2) * 300, 700 + 97 * (i % 7), 24 + i % 5,
                                    static_cast<std::uint64_t>(i % 4) * 100 + 1);
    all.push_back(line);
    if (i % 3 == 0) share.push_back(line);
  }
  const std::string whole = write_trace("cluster_rr_all.jsonl", all);
  const std::string part = write_trace("cluster_rr_share.jsonl", share);
  for (const std::string policy : {"vtensor", "paged", "radix"}) {
    CAPTURE(policy);
    const auto run = run_cluster_of(whole, policy, 3, "round-robin", 2ULL << 30);
    const auto alone = run_cluster_of(part, policy, 1, "", 2ULL << 30);
    const sim::replay_summary& a = run.summary.replicas[0].summary;
    const sim::replay_summary& b = alone.summary.total;
    CHECK(a.counters.submitted == 10);
    CHECK(a.counters.hit_tokens == b.counters.hit_tokens);
    CHECK(a.counters.steps == b.counters.steps);
    CHECK(a.counters.busy_us == b.counters.busy_us);
    CHECK(a.counters.preemptions == b.counters.preemptions);
    CHECK(a.counters.prefill_tokens == b.counters.prefill_tokens);
    CHECK(a.ttft.p50 == b.ttft.p50);
    CHECK(a.ttft.p99 == b.ttft.p99);
    CHECK(a.tpot.p90 == b.tpot.p90);
    CHECK(a.peak.memory == b.peak.memory);
    CHECK(a.final_memory.memory == b.final_memory.memory);
    CHECK(a.final_memory.evictions == b.final_memory.evictions);
  }
}

TEST_CASE("cluster: a replica's stretches of decode steps run past the other replicas' steps") {
  // Note [Replicas between arrivals]: every request arrives at 0, so after the arrivals nothing
  // but finishes ends a stretch: round-robin replica 0 of 2 runs the stretches its share runs
  // alone, although replica 1's steps end in between (they stopped them before).
  std::vector<std::string> all, share;
  for (int i = 0; i < 8; ++i) {
    const auto line = mooncake_line(0, 600 + 131 * i, 40 + 9 * i, static_cast<std::uint64_t>(i) * 100 + 1);
    all.push_back(line);
    if (i % 2 == 0) share.push_back(line);
  }
  const std::string whole = write_trace("cluster_stretch_all.jsonl", all);
  const std::string part = write_trace("cluster_stretch_share.jsonl", share);
  const auto run = run_cluster_of(whole, "paged", 2, "round-robin", 2ULL << 30);
  const auto alone = run_cluster_of(part, "paged", 1, "", 2ULL << 30);
  const sim::replica_counters& a = run.summary.replicas[0].summary.counters;
  const sim::replica_counters& b = alone.summary.total.counters;
  CHECK(b.stretch_steps > b.steps / 2);
  CHECK(a.stretch_steps == b.stretch_steps);
  CHECK(a.steps == b.steps);
  CHECK(a.busy_us == b.busy_us);
}

TEST_CASE(
    "cluster: the split bound is each replica's infinite cache of what it was sent, the global one the whole trace's") {
  const std::string path = conversation_trace("cluster_bounds.jsonl", 5, 4);
  const auto run = run_cluster_of(path, "paged", 3, "round-robin", 2ULL << 30);
  std::vector<traces::infinite_prefix_cache> caches(3);
  traces::infinite_prefix_cache global;
  std::vector<std::uint64_t> hits(3, 0);
  std::uint64_t global_hits = 0;
  auto reader = traces::open_trace(path, std::nullopt);
  traces::trace_request r;
  for (std::size_t i = 0; reader->next(r); ++i) {
    hits[i % 3] += caches[i % 3].serve(r);
    global_hits += global.serve(r);
  }
  CHECK(global_hits > 0);
  CHECK(run.summary.global_bound_hit_tokens == global_hits);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(run.summary.replicas[i].bound_hit_tokens == hits[i]);
  }
  CHECK(run.summary.split_bound_hit_tokens() < global_hits);  // sessions move between replicas
}

TEST_CASE("cluster: splitting sessions across replicas costs reuse, and the bounds say how much") {
  // 4 sessions over 3 replicas round-robin: a session's turns move from replica to replica.
  const std::string path = conversation_trace("cluster_split.jsonl", 4, 3);
  const auto rr = run_cluster_of(path, "paged", 3, "round-robin", k_unlimited);
  const auto precise = run_cluster_of(path, "paged", 3, "prefix-precise", k_unlimited);
  const sim::cluster_summary& a = rr.summary;
  const sim::cluster_summary& b = precise.summary;
  CHECK(a.global_bound_hit_tokens == b.global_bound_hit_tokens);
  CHECK(a.split_bound_hit_tokens() < a.global_bound_hit_tokens);
  CHECK(a.total.counters.hit_tokens <= a.split_bound_hit_tokens());
  CHECK(b.total.counters.hit_tokens <= b.split_bound_hit_tokens());
  CHECK(b.total.counters.hit_tokens > a.total.counters.hit_tokens);  // the precise router follows the cache
  const auto count = [&](std::string_view reason) {
    const auto d =
        std::find_if(b.decisions.begin(), b.decisions.end(), [&](const auto& x) { return x.first == reason; });
    REQUIRE(d != b.decisions.end());
    return d->second;
  };
  CHECK(count("longest-prefix") == 8);  // every later turn (4 sessions x 2) went to its session's replica
  CHECK(count("no-hit") == 4);          // first turns
}

TEST_CASE("cluster: the same trace and seed give the same cluster, a sampling router included") {
  const std::string path = conversation_trace("cluster_seed.jsonl", 5, 3);
  sim::router_options o;
  o.temperature = 0.5;
  o.seed = 11;
  const auto a = run_cluster_of(path, "radix", 4, "prefix-precise", 4ULL << 30, o);
  const auto b = run_cluster_of(path, "radix", 4, "prefix-precise", 4ULL << 30, o);
  CHECK(sim::cluster_json(a.summary) == sim::cluster_json(b.summary));
  CHECK(sim::summary_json(a.summary.total, {}, 0, false) == sim::summary_json(b.summary.total, {}, 0, false));
}

TEST_CASE("cluster: bad arguments throw") {
  const std::string path = conversation_trace("cluster_bad.jsonl", 2, 1);
  auto reader = traces::open_trace(path, std::nullopt);
  std::vector<sim::kv_policy*> none;
  CHECK_THROWS_AS((void)sim::run_cluster(*reader, none, llama_replay(), nullptr), std::invalid_argument);
  auto p1 = sim::make_kv_policy("paged", llama_policy(1ULL << 30));
  auto p2 = sim::make_kv_policy("paged", llama_policy(1ULL << 30));
  std::vector<sim::kv_policy*> two{p1.get(), p2.get()};
  CHECK_THROWS_AS((void)sim::run_cluster(*reader, two, llama_replay(), nullptr), std::invalid_argument);
}

TEST_CASE("router: round-robin takes replicas in turn, least-loaded the fewest tokens") {
  fake_view v(3);
  const auto r = request(1, 600, {1, 2});
  auto rr = sim::make_router("round-robin", {});
  CHECK(route(*rr, r, v).replica == 0);
  CHECK(route(*rr, r, v).replica == 1);
  CHECK(route(*rr, r, v).replica == 2);
  CHECK(route(*rr, r, v).replica == 0);
  auto ll = sim::make_router("least-loaded", {});
  v.loads[0].queued_tokens = 500;
  v.loads[1].running_tokens = 300;
  v.loads[2].queued_tokens = 200;
  v.loads[2].running_tokens = 200;
  CHECK(route(*ll, r, v).replica == 1);
  CHECK(route(*ll, r, v).reason == "least-loaded");
  v.loads[1].running_tokens = 400;  // a tie with replica 2: the lower index
  CHECK(route(*ll, r, v).replica == 1);
}

TEST_CASE("router: session sends a session's later turns where its first went") {
  fake_view v(2);
  auto s = sim::make_router("session", {});
  v.loads[0].queued_tokens = 10;
  const auto first = route(*s, request(7, 100, {}), v);
  CHECK(first.replica == 1);
  CHECK(first.reason == "new-session");
  v.loads[1].queued_tokens = 1000;  // now much busier: the session stays
  const auto later = route(*s, request(7, 200, {}), v);
  CHECK(later.replica == 1);
  CHECK(later.reason == "sticky");
  CHECK(route(*s, request(8, 100, {}), v).replica == 0);
}

TEST_CASE("router: prefix-approx follows what it sent, and balances past both thresholds") {
  sim::router_options o;
  o.balance_abs = 4;
  o.balance_rel = 2.0;
  fake_view v(3);
  auto a = sim::make_router("prefix-approx", o);
  const auto r1 = request(1, 1500, {10, 11, 12});
  v.loads[0].running = 1;  // replica 0 busier: the first (no match) goes to the smallest tree, fewest in flight
  const auto first = route(*a, r1, v);
  CHECK(first.reason == "smallest-tree");
  CHECK(first.replica == 1);
  const auto again = route(*a, request(2, 2000, {10, 11, 12, 13}), v);  // 1536 of 2000 tokens matched
  CHECK(again.reason == "prefix-match");
  CHECK(again.replica == 1);
  const auto other = route(*a, request(3, 1500, {20, 21, 22}), v);  // no match: a tree that is empty
  CHECK(other.reason == "smallest-tree");
  CHECK(other.replica == 2);
  // Imbalanced: 10 requests on replica 1 against 0 and 1 elsewhere (10 - 0 > 4, 10 > 2 x 0).
  v.loads[1].waiting = 10;
  v.loads[0].running = 0;
  const auto balanced = route(*a, r1, v);
  CHECK(balanced.reason == "balance");
  CHECK(balanced.replica == 0);
  // A match below the threshold (512 of 5000 tokens) goes to the smallest tree.
  v.loads[1].waiting = 0;
  const auto weak = route(*a, request(4, 5000, {20, 99}), v);
  CHECK(weak.reason == "smallest-tree");
}

TEST_CASE("router: prefix-approx's bounded tree forgets the least recently sent prefix") {
  sim::router_options o;
  o.tree_tokens = 1024;  // two blocks per replica
  o.cache_threshold = 0.4;
  fake_view v(1);
  auto a = sim::make_router("prefix-approx", o);
  (void)route(*a, request(1, 1024, {1, 2}), v);
  CHECK(route(*a, request(2, 1024, {1, 2}), v).reason == "prefix-match");
  (void)route(*a, request(3, 1024, {5, 6}), v);  // evicts 1, 2
  CHECK(route(*a, request(4, 1024, {1, 2}), v).reason == "smallest-tree");
}

TEST_CASE("router: prefix-precise weighs uncached prefill against decode load, and samples with a temperature") {
  fake_view v(3);
  auto p = sim::make_router("prefix-precise", {});
  const auto r = request(1, 4000, {1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(route(*p, r, v).reason == "no-hit");
  v.cached[2] = 3584;
  CHECK(route(*p, r, v).replica == 2);
  CHECK(route(*p, r, v).reason == "longest-prefix");
  v.loads[2].running_tokens = 5000;  // 416 + 5000 > 4000 + 0
  CHECK(route(*p, r, v).replica == 0);
  CHECK(route(*p, r, v).reason == "load");
  sim::router_options light;
  light.decode_weight = 0.1;  // 416 + 500 < 4000
  auto q = sim::make_router("prefix-precise", light);
  CHECK(route(*q, r, v).replica == 2);

  sim::router_options warm;
  warm.temperature = 1.0;
  warm.seed = 3;
  auto s1 = sim::make_router("prefix-precise", warm);
  auto s2 = sim::make_router("prefix-precise", warm);
  std::map<std::uint32_t, int> picks;
  for (int i = 0; i < 200; ++i) {
    const auto a = route(*s1, r, v);
    const auto b = route(*s2, r, v);
    CHECK(a.replica == b.replica);  // the same seed draws the same
    ++picks[a.replica];
  }
  CHECK(picks.size() == 3);  // every replica is drawn at a temperature of 1
}

TEST_CASE("router: an unknown name or a bad option throws, naming it") {
  CHECK_THROWS_WITH_AS((void)sim::make_router("random", {}), doctest::Contains("unknown router 'random'"),
                       std::invalid_argument);
  sim::router_options o;
  o.cache_threshold = 1.5;
  CHECK_THROWS_WITH_AS((void)sim::make_router("prefix-approx", o), doctest::Contains("cache threshold"),
                       std::invalid_argument);
  o = {};
  o.balance_rel = 0.5;
  CHECK_THROWS_AS((void)sim::make_router("prefix-approx", o), std::invalid_argument);
  o = {};
  o.temperature = -1;
  CHECK_THROWS_AS((void)sim::make_router("prefix-precise", o), std::invalid_argument);
  CHECK(sim::router_names().size() == 5);
}

TEST_CASE("kv_policy: cached_tokens is what the next admission hits, and reading it changes nothing") {
  for (const std::string name : {"vtensor", "paged", "radix", "vattention"}) {
    CAPTURE(name);
    auto p = sim::make_kv_policy(name, llama_policy(8ULL << 30));
    const auto first = request(1, 3000, {1, 2, 3, 4, 5, 6});
    const auto fb = blocks_of(first);
    const sim::kv_request a{request_id{1}, fb, 3000, 3100, std::nullopt};
    CHECK(p->cached_tokens(a) == 0);
    REQUIRE(p->admit(a).admitted);
    p->computed(request_id{1}, 3000);
    p->release(request_id{1}, sim::release_reason::finished);
    const auto second = request(2, 4000, {1, 2, 3, 4, 5, 6, 7, 8});
    const auto sb = blocks_of(second);
    const sim::kv_request b{request_id{2}, sb, 4000, 4100, std::nullopt};
    const std::uint64_t before = p->cached_tokens(b);
    CHECK(p->cached_tokens(b) == before);  // a read: asking again gives the same
    const auto admitted = p->admit(b);
    REQUIRE(admitted.admitted);
    CHECK(admitted.hit_tokens == before);
    if (name == "vattention") {
      CHECK(before == 0);
    } else {
      CHECK(before > 0);
    }
    p->release(request_id{2}, sim::release_reason::finished);
    p->check_invariants();
  }
}

TEST_CASE("replay --replicas: the cluster's block in the JSON and the text, and its bad inputs") {
  const auto json = temp_file("cluster_cli.json");
  // 40 requests: the replay runs in the ASan stage too, where 200 over 4 replicas took 203 s.
  auto r = vtensor::testing::run_cli({"replay", "--max-requests", "40", "--replicas", "4", "--router", "prefix-precise",
                                      "--no-wall", "--json", json.string()});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find("cluster: 4 replicas") != std::string::npos);
  CHECK(r.out.find("routing decisions: longest-prefix") != std::string::npos);
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  CHECK(j["requests"] == 40);
  CHECK(j["cluster"]["replicas"] == 4);
  CHECK(j["cluster"]["router"] == "prefix-precise");
  CHECK(j["cluster"]["per_replica"].size() == 4);
  std::uint64_t routed = 0;
  for (const auto& x : j["cluster"]["per_replica"]) routed += x["requests"].get<std::uint64_t>();
  CHECK(routed == 40);
  CHECK(j["cluster"]["bounds"]["split_infinite_hit_rate"].get<double>() <=
        j["cluster"]["bounds"]["global_infinite_hit_rate"].get<double>());
  CHECK_FALSE(j.contains("vmm_model"));  // one replica's split is not the cluster's

  struct bad {
    std::vector<std::string> args;
    std::string says;
  };
  for (const bad& b : std::vector<bad>{
           {{"replay", "--replicas", "0"}, "--replicas must be at least 1"},
           {{"replay", "--replicas", "2", "--router", "random"}, "unknown router 'random'"},
           {{"replay", "--replicas", "2", "--router-cache-threshold", "2"}, "cache threshold"},
           {{"replay", "--replicas", "2", "--router-tree-tokens", "many"}, "--router-tree-tokens"},
           {{"replay", "--replicas", "2", "--timeseries", temp_file("cluster_ts.csv").string()}, "one replica"},
       }) {
    CAPTURE(b.args);
    const auto res = vtensor::testing::run_cli(b.args);
    CHECK(res.code == 2);
    CHECK(res.err.find(b.says) != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(temp_file("cluster_ts.csv")));
}
