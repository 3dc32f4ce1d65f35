// A cluster of replicas on one event queue (sim/cluster.hpp); run_replay() is its one-replica case.

#include "sim/cluster.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>

#include "traces/infinite_prefix_cache.hpp"

namespace vtensor::sim {

namespace {

// The figures of a finished replica (`events` counts the steps run in a stretch too: Note [Steps
// run in a stretch] in replica.cpp).
replay_summary summarize(replica& rep, const kv_policy& policy, time_us first_arrival, time_us last_arrival,
                         time_us end, std::uint64_t events, std::chrono::steady_clock::time_point wall_start) {
  replay_summary s;
  s.counters = rep.counters();
  s.final_memory = policy.stats();
  const state_tracker& t = rep.tracker();
  s.peak = t.peak();
  s.mean_internal_fragmentation = t.mean_internal_fragmentation();
  s.mean_sharing_saving = t.mean_sharing_saving();
  s.mean_physical_bytes = t.mean_physical_bytes();
  s.mean_mapped_bytes = t.mean_mapped_bytes();
  s.mean_used_bytes = t.mean_used_bytes();
  s.mean_running = t.mean_running();
  s.mean_waiting = t.mean_waiting();
  s.mean_breakdown = t.mean_breakdown();
  s.ttft = summarize_latencies(rep.ttft_us());
  s.tpot = summarize_latencies(rep.tpot_us());
  s.e2e = summarize_latencies(rep.e2e_us());
  s.queue = summarize_latencies(rep.queue_us());
  s.first_arrival_seconds = static_cast<double>(first_arrival) / 1e6;
  s.last_arrival_seconds = static_cast<double>(last_arrival) / 1e6;
  s.simulated_seconds = static_cast<double>(end) / 1e6;
  s.events = events;
  s.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return s;
}

// Every field of replica_counters, summed.
void add(replica_counters& a, const replica_counters& b) {
  a.submitted += b.submitted;
  a.completed += b.completed;
  a.rejected_context += b.rejected_context;
  a.rejected_memory += b.rejected_memory;
  a.truncated += b.truncated;
  a.preemptions += b.preemptions;
  a.prompt_tokens += b.prompt_tokens;
  a.admitted_prompt_tokens += b.admitted_prompt_tokens;
  a.hit_tokens += b.hit_tokens;
  a.prefill_tokens += b.prefill_tokens;
  a.recomputed_tokens += b.recomputed_tokens;
  a.output_tokens += b.output_tokens;
  a.cow_bytes += b.cow_bytes;
  a.steps += b.steps;
  a.busy_us += b.busy_us;
  a.vmm_critical += b.vmm_critical;
  a.compute_bound_steps += b.compute_bound_steps;
  a.step_wall_ns += b.step_wall_ns;
  a.stretch_steps += b.stretch_steps;
}

void add(memory_stats& a, const memory_stats& b) {
  a.physical_bytes += b.physical_bytes;
  a.mapped_bytes += b.mapped_bytes;
  a.used_bytes += b.used_bytes;
  a.cached_bytes += b.cached_bytes;
  a.free_pool_bytes += b.free_pool_bytes;
  a.logical_bytes += b.logical_bytes;
}

template <class B>
void add_breakdown(B& a, const B& b) {
  a.used += b.used;
  a.internal += b.internal;
  a.reserved_idle += b.reserved_idle;
  a.external += b.external;
  a.cached += b.cached;
  a.free += b.free;
  a.cached_pinning += b.cached_pinning;
  a.reclaimable += b.reclaimable;
}

void add(kv_stats& a, const kv_stats& b) {
  add(a.memory, b.memory);
  add_breakdown(a.breakdown, b.breakdown);
  a.prompt_tokens += b.prompt_tokens;
  a.prefix_hit_tokens += b.prefix_hit_tokens;
  a.cow_bytes += b.cow_bytes;
  a.evictions += b.evictions;
  a.chunks_created += b.chunks_created;
  for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
    a.vmm.calls[k] += b.vmm.calls[k];
    a.vmm.time_ns[k] += b.vmm.time_ns[k];
  }
}

// The cluster as one (Note [Cluster figures]); the latencies from every replica's samples.
replay_summary merge(const std::vector<replica_figures>& parts, std::vector<std::unique_ptr<replica>>& reps) {
  replay_summary t;
  double mapped = 0, fragmentation = 0;
  for (const replica_figures& f : parts) {
    const replay_summary& s = f.summary;
    add(t.counters, s.counters);
    add(t.final_memory, s.final_memory);
    add(t.peak.memory, s.peak.memory);
    t.peak.internal_fragmentation = std::max(t.peak.internal_fragmentation, s.peak.internal_fragmentation);
    t.peak.sharing_saving = std::max(t.peak.sharing_saving, s.peak.sharing_saving);
    t.peak.running += s.peak.running;
    t.peak.waiting += s.peak.waiting;
    t.peak.at = std::max(t.peak.at, s.peak.at);
    fragmentation += s.mean_internal_fragmentation * s.mean_mapped_bytes;
    mapped += s.mean_mapped_bytes;
    t.mean_sharing_saving += s.mean_sharing_saving / static_cast<double>(parts.size());
    t.mean_physical_bytes += s.mean_physical_bytes;
    t.mean_mapped_bytes += s.mean_mapped_bytes;
    t.mean_used_bytes += s.mean_used_bytes;
    t.mean_running += s.mean_running;
    t.mean_waiting += s.mean_waiting;
    add_breakdown(t.mean_breakdown, s.mean_breakdown);
  }
  t.mean_internal_fragmentation = ratio_or_zero(fragmentation, mapped);  // weighted by mapped bytes
  t.replicas = static_cast<std::uint32_t>(parts.size());
  std::vector<std::uint64_t> ttft, tpot, e2e, queue;
  for (auto& r : reps) {
    ttft.insert(ttft.end(), r->ttft_us().begin(), r->ttft_us().end());
    tpot.insert(tpot.end(), r->tpot_us().begin(), r->tpot_us().end());
    e2e.insert(e2e.end(), r->e2e_us().begin(), r->e2e_us().end());
    queue.insert(queue.end(), r->queue_us().begin(), r->queue_us().end());
  }
  t.ttft = summarize_latencies(ttft);
  t.tpot = summarize_latencies(tpot);
  t.e2e = summarize_latencies(e2e);
  t.queue = summarize_latencies(queue);
  return t;
}

// The prefix bounds of a cluster (Note [Cluster figures]): one infinite cache for the whole
// cluster, and one per replica fed what the router sent it. A replica's cache holds a subset of
// the global one's prefixes, so it is kept as a bit per global prefix node (the node ids serve()
// hands back) rather than as a trie of its own: one hash walk a request instead of two, and the
// same figures (a prefix is in a replica's cache exactly when a request sent there held it).
class cluster_bounds {
 public:
  explicit cluster_bounds(std::size_t replicas) : seen_(replicas), hits_(replicas, 0) {}
  // Serves `r`, sent to `replica`, from both bounds.
  void serve(const traces::trace_request& r, std::size_t replica) {
    global_hits_ += global_.serve(r, nodes_);
    std::vector<std::uint64_t>& seen = seen_[replica];
    if (seen.size() * 64 <= global_.cached_blocks()) seen.resize(global_.cached_blocks() / 64 + 1 + seen.size() / 2);
    std::uint64_t matched = 0;
    bool missed = false;
    for (const std::uint32_t node : nodes_) {
      std::uint64_t& word = seen[node / 64];
      const std::uint64_t bit = std::uint64_t{1} << (node % 64);
      missed = missed || (word & bit) == 0;
      if (!missed) ++matched;
      word |= bit;
    }
    if (r.input_tokens > 0) hits_[replica] += std::min<std::uint64_t>(matched * r.block_tokens, r.input_tokens - 1u);
  }
  [[nodiscard]] std::uint64_t global_hits() const { return global_hits_; }
  [[nodiscard]] std::uint64_t replica_hits(std::size_t i) const { return hits_[i]; }

 private:
  traces::infinite_prefix_cache global_;
  std::vector<std::vector<std::uint64_t>> seen_;  // per replica, a bit per global node
  std::vector<std::uint64_t> hits_;
  std::uint64_t global_hits_ = 0;
  std::vector<std::uint32_t> nodes_;  // the request being served's
};

// What the router reads: the replicas' loads, and their caches for the request being placed.
class replicas_view final : public cluster_view {
 public:
  replicas_view(const std::vector<std::unique_ptr<replica>>& reps, std::span<kv_policy* const> policies)
      : reps_(reps), policies_(policies) {}
  [[nodiscard]] std::size_t replicas() const override { return reps_.size(); }
  [[nodiscard]] replica_load load(std::size_t i) const override { return reps_[i]->load(); }
  [[nodiscard]] std::uint64_t cached_tokens(std::size_t i) const override {
    return policies_[i]->cached_tokens(request_);
  }
  kv_request request_;

 private:
  const std::vector<std::unique_ptr<replica>>& reps_;
  std::span<kv_policy* const> policies_;
};

double max_over_mean(const std::vector<double>& v) {
  if (v.empty()) return 1.0;
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return mean > 0 ? *std::max_element(v.begin(), v.end()) / mean : 1.0;
}

}  // namespace

std::uint64_t cluster_summary::split_bound_hit_tokens() const {
  std::uint64_t n = 0;
  for (const replica_figures& r : replicas) n += r.bound_hit_tokens;
  return n;
}

double cluster_summary::busy_imbalance() const {
  std::vector<double> v;
  for (const replica_figures& r : replicas) v.push_back(static_cast<double>(r.summary.counters.busy_us));
  return max_over_mean(v);
}

double cluster_summary::queued_imbalance() const {
  std::vector<double> v;
  for (const replica_figures& r : replicas) v.push_back(r.mean_queued_tokens);
  return max_over_mean(v);
}

// Note [Replicas between arrivals]
// Between two arrivals the replicas of a cluster do not touch one another: a router acts only when
// a request arrives, each replica has its own policy, memory and step loop, and the observers a
// replica feeds are its own or key what they keep by request. So a replica's stretch of decode
// steps (Note [Steps run in a stretch] in replica.cpp) may run up to the next arrival whatever the
// other replicas have queued before it; stopping it at their step ends, as the queue's next event
// would, cut a cluster's stretches to a step or two and cost a whole-Mooncake replay at 8
// replicas a third of its time. The figures are the same either way: at an arrival every replica
// has run exactly the steps that began before it, which is what the router reads; and the events
// a stretch leaves (its last step's end) fall after the arrival that stopped it in the queue's
// order, as they would without the stretch, since that arrival was queued before the stretch
// began. The one state the replicas share, the eviction orders' clock (sim/eviction_feed.hpp),
// each replica puts back as its own last step left it before it calls its policy at a step's end.

cluster_summary run_cluster(traces::trace_reader& reader, std::span<kv_policy* const> policies,
                            const replay_config& config, router* route,
                            std::span<const std::vector<replica_observer*>> observers) {
  if (!(config.time_scale > 0) || !std::isfinite(config.time_scale)) {
    throw std::invalid_argument(fmt::format("time scale must be a positive number, not {}", config.time_scale));
  }
  if (policies.empty()) throw std::invalid_argument("a cluster needs at least one replica");
  if (policies.size() > 1 && route == nullptr) throw std::invalid_argument("more than one replica needs a router");
  if (!observers.empty() && observers.size() != policies.size()) {
    throw std::invalid_argument("observers must be one list per replica");
  }
  const std::size_t n = policies.size();
  const auto wall_start = std::chrono::steady_clock::now();
  const auto wall = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  };
  event_queue queue;
  std::vector<std::unique_ptr<replica>> reps;
  for (std::size_t i = 0; i < n; ++i) {
    replica_config settings = config.replica;
    settings.pipeline = policies[i]->pipelined();  // the policy decides (Note [Pipelined admission in the replica])
    reps.push_back(std::make_unique<replica>(queue, *policies[i], config.model, config.gpu, settings));
    if (!observers.empty()) {
      for (replica_observer* o : observers[i]) reps.back()->add_observer(*o);
    }
  }

  cluster_summary c;
  std::vector<std::uint64_t> decisions;
  std::vector<std::string_view> reasons;
  cluster_bounds bounds(n > 1 ? n : 0);  // more than one replica only
  if (n > 1) {
    c.router = std::string(route->name());
    c.router_options = route->describe();
    reasons = route->reasons();
    decisions.assign(reasons.size(), 0);
  }
  replicas_view view(reps, policies);
  std::vector<token_block> blocks;  // the routed request's
  std::vector<char> arrived(n, 0);

  const auto scaled = [&](std::uint64_t arrival_us) {
    return static_cast<time_us>(std::llround(static_cast<double>(arrival_us) * config.time_scale));
  };
  traces::trace_request next;
  std::uint64_t read = 0;
  time_us first_arrival = 0, last_arrival = 0;
  const auto read_next = [&] {
    if (config.max_requests != 0 && read >= config.max_requests) return false;
    if (!reader.next(next)) return false;
    ++read;
    return true;
  };
  // The replica request `next` goes to.
  const auto place = [&]() -> std::size_t {
    if (n == 1) return 0;
    blocks.clear();
    for (std::size_t i = 0; i < next.block_keys.size(); ++i) {
      blocks.push_back(token_block{next.block_keys[i], next.tokens_in_block(i)});
    }
    view.request_ = kv_request{request_id{read - 1}, blocks, next.input_tokens,
                               std::uint64_t{next.input_tokens} + next.output_tokens, std::nullopt};
    const route_choice choice = route->route(routed_request{next, blocks}, view);
    if (choice.replica >= n)
      throw std::logic_error(fmt::format("router {} chose replica {}", route->name(), choice.replica));
    const auto reason = std::find(reasons.begin(), reasons.end(), choice.reason);
    if (reason == reasons.end()) {
      throw std::logic_error(fmt::format("router {} gave an unlisted reason '{}'", route->name(), choice.reason));
    }
    ++decisions[static_cast<std::size_t>(reason - reasons.begin())];
    bounds.serve(next, choice.replica);
    return choice.replica;
  };
  // Note [Replicas between arrivals]
  time_us next_arrival = std::numeric_limits<time_us>::max();
  if (n > 1) {
    for (auto& r : reps) r->set_horizon(&next_arrival);
  }
  std::function<void()> arrive = [&] {
    const time_us now = queue.now();
    if (read == 1) first_arrival = now;
    last_arrival = now;
    bool more = true;
    do {
      const std::size_t i = place();
      reps[i]->submit(next, read - 1);
      arrived[i] = 1;
      more = read_next();
    } while (more && scaled(next.arrival_us) == now);
    for (std::size_t i = 0; i < n; ++i) {
      if (arrived[i] != 0) reps[i]->kick();
      arrived[i] = 0;
    }
    next_arrival = more ? scaled(next.arrival_us) : std::numeric_limits<time_us>::max();
    if (more) queue.schedule_at(next_arrival, arrive);
  };
  if (read_next()) {
    next_arrival = scaled(next.arrival_us);
    queue.schedule_at(next_arrival, arrive);
  }

  double last_progress = 0;
  std::uint64_t events = 0;
  const auto progress = [&] {
    replay_progress p{queue.now(), 0, 0, wall()};
    for (const auto& r : reps) {
      p.submitted += r->counters().submitted;
      p.completed += r->counters().completed;
    }
    return p;
  };
  while (!queue.empty()) {
    events += queue.run_until(std::numeric_limits<time_us>::max(), 4096);
    if (config.progress) {
      const double w = wall();
      if (w - last_progress >= 0.5) {
        last_progress = w;
        config.progress(progress());
      }
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!reps[i]->drained()) {
      throw std::logic_error(n == 1 ? std::string("replay ended with requests still in the replica")
                                    : fmt::format("replay ended with requests still in replica {}", i));
    }
    reps[i]->close();
    policies[i]->settle();  // the worker's figures are final, and the check below sees a quiet state
    policies[i]->check_invariants();
  }
  for (const auto& r : reps) events += r->counters().stretch_steps;
  for (std::size_t i = 0; i < n; ++i) {
    replica_figures f;
    f.summary = summarize(*reps[i], *policies[i], first_arrival, last_arrival, queue.now(), events, wall_start);
    f.mean_queued_tokens = reps[i]->mean_queued_tokens();
    f.bound_hit_tokens = n > 1 ? bounds.replica_hits(i) : 0;
    c.replicas.push_back(std::move(f));
  }
  if (n == 1) {
    c.total = c.replicas.front().summary;
  } else {
    c.total = merge(c.replicas, reps);
    c.total.first_arrival_seconds = static_cast<double>(first_arrival) / 1e6;
    c.total.last_arrival_seconds = static_cast<double>(last_arrival) / 1e6;
    c.total.simulated_seconds = static_cast<double>(queue.now()) / 1e6;
    c.total.events = events;
    c.total.wall_seconds = wall();
    c.global_bound_hit_tokens = bounds.global_hits();
    for (std::size_t k = 0; k < reasons.size(); ++k) c.decisions.emplace_back(std::string(reasons[k]), decisions[k]);
  }
  return c;
}

nlohmann::ordered_json cluster_json(const cluster_summary& c) {
  const std::uint64_t prompt = c.total.counters.prompt_tokens;
  nlohmann::ordered_json j;
  j["replicas"] = c.replicas.size();
  j["router"] = c.router;
  j["router_options"] = c.router_options;
  nlohmann::ordered_json decisions = nlohmann::ordered_json::object();
  for (const auto& [reason, count] : c.decisions) decisions[reason] = count;
  j["decisions"] = decisions;
  j["imbalance"] = {{"busy_max_over_mean", c.busy_imbalance()}, {"queued_max_over_mean", c.queued_imbalance()}};
  j["bounds"] = {{"global_infinite_hit_rate", prefix_hit_rate(c.global_bound_hit_tokens, prompt)},
                 {"split_infinite_hit_rate", prefix_hit_rate(c.split_bound_hit_tokens(), prompt)}};
  nlohmann::ordered_json per = nlohmann::ordered_json::array();
  for (const replica_figures& f : c.replicas) {
    const replay_summary& s = f.summary;
    per.push_back({{"requests", s.counters.submitted},
                   {"completed", s.counters.completed},
                   {"rejected", s.rejected()},
                   {"preemptions", s.counters.preemptions},
                   {"prompt_tokens", s.counters.prompt_tokens},
                   {"prefix_hit_rate", s.hit_rate()},
                   {"infinite_hit_rate", prefix_hit_rate(f.bound_hit_tokens, s.counters.prompt_tokens)},
                   {"ttft_ms", {{"p50", s.ttft.p50}, {"p90", s.ttft.p90}, {"p99", s.ttft.p99}}},
                   {"tpot_ms", {{"p50", s.tpot.p50}, {"p90", s.tpot.p90}, {"p99", s.tpot.p99}}},
                   {"busy_seconds", static_cast<double>(s.counters.busy_us) / 1e6},
                   {"busy_fraction", s.busy_fraction()},
                   {"mean_queued_tokens", f.mean_queued_tokens},
                   {"mean_waiting", s.mean_waiting},
                   {"peak_physical_bytes", s.peak.memory.physical_bytes},
                   {"evictions", s.final_memory.evictions},
                   {"throughput_tokens_per_s", s.throughput_tokens_per_s()}});
  }
  j["per_replica"] = per;
  return j;
}

}  // namespace vtensor::sim
