// Running the grid of `vtensor compare` (tools/compare_run.hpp).

#include "tools/compare_run.hpp"

#include "sim/cluster.hpp"
#include "sim/eviction_feed.hpp"
#include "sim/outputs.hpp"
#include "sim/policy_registry.hpp"
#include "sim/replay.hpp"
#include "sim/step_log.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

namespace vtensor::tools {

compare_traces load_traces(const experiment& x, const replay_options& first, std::optional<std::size_t> only) {
  compare_traces t;
  for (std::size_t i = 0; i < x.traces.size(); ++i) {
    const std::string& path = x.traces[i];
    if (only && *only != i) {
      t.loaded.emplace_back();
      t.indexes.emplace_back();
      continue;
    }
    t.loaded.push_back(traces::load_trace(path, first.format, first.config.max_requests));
    if (t.loaded.back().requests.empty()) throw usage_error(fmt::format("trace {}: no requests", path));
    t.indexes.push_back(traces::index_prefixes(t.loaded.back().requests));
  }
  return t;
}

void add_bounds(std::vector<cell>& cells, const compare_traces& traces, std::uint64_t token_bytes) {
  std::map<std::pair<std::size_t, std::uint64_t>, std::uint64_t> offline;
  for (cell& c : cells) {
    const traces::loaded_trace& t = traces.loaded[c.trace];
    const traces::prefix_index& index = traces.indexes[c.trace];
    std::uint64_t prompt = 0, infinite = 0;
    for (const auto& r : t.requests) prompt += r.input_tokens;
    for (const std::uint64_t h : index.infinite_hit) infinite += h;
    c.infinite_hit_rate = prefix_hit_rate(infinite, prompt);
    if (!c.memory_bytes || t.block_tokens == 0) {  // unlimited: the infinite bound (no keys: both 0)
      c.offline_hit_rate = c.infinite_hit_rate;
      continue;
    }
    const std::uint64_t blocks = *c.memory_bytes / token_bytes / t.block_tokens * c.replica_count;
    const auto key = std::make_pair(c.trace, blocks);
    if (offline.count(key) == 0) offline[key] = traces::offline_hit_tokens(index, t.requests, blocks);
    c.offline_hit_rate = prefix_hit_rate(offline[key], prompt);
  }
}

namespace {

struct run_context {
  const compare_traces& traces;
  const std::vector<cell>& cells;
  const std::optional<std::filesystem::path>& timeseries_dir;
  const std::optional<request_limits>& limits;
};

void run_point(const run_context& ctx, point& p) {
  const cell& c = ctx.cells[p.cell];
  const traces::loaded_trace& trace = ctx.traces.loaded[c.trace];
  const replay_options& o = p.options;
  sim::shared_foresight foresight([&trace](traces::next_use_index& index) {
    for (const auto& r : trace.requests) index.add(r);
  });
  sim::eviction_feed feed(&foresight);
  sim::kv_policy_options options = o.policy;
  feed.attach(options);
  std::vector<std::unique_ptr<sim::kv_policy>> policies;
  std::vector<sim::kv_policy*> raw;
  for (std::uint32_t r = 0; r < o.replicas; ++r) {
    policies.push_back(sim::make_kv_policy(o.choice, options));
    raw.push_back(policies.back().get());
  }
  traces::memory_trace_reader reader(trace);
  sim::step_log log(*policies[0], false);
  point_recorder recorder(trace.requests.size());  // every replica's requests (ids are the trace's)
  std::vector<std::vector<sim::replica_observer*>> observers(o.replicas, {&recorder});
  observers[0].push_back(&log);
  std::unique_ptr<sim::timeseries_writer> timeseries;
  if (ctx.timeseries_dir) {  // replica 0's (a cluster's replicas each have their own state)
    timeseries = std::make_unique<sim::timeseries_writer>((*ctx.timeseries_dir / (p.id + ".csv")).string());
    observers[0].push_back(timeseries.get());
  }
  sim::replay_config config = o.config;
  feed.attach(config);
  const auto router = o.replicas > 1 ? sim::make_router(o.router, o.router_options) : nullptr;
  sim::cluster_summary cluster = sim::run_cluster(reader, raw, config, router.get(), observers);
  const sim::replay_summary& summary = cluster.total;
  // The modelled figures only (the measured VMM block is wall time); wall_seconds apart.
  p.result = make_replay_result(o, o.policy, *policies[0], summary, trace.format, log, std::nullopt, false);
  if (o.replicas > 1) {
    p.result.vmm.reset();  // one policy's split is not the cluster's
    p.cluster = std::move(cluster);
  }
  if (ctx.limits) p.goodput = goodput_share(recorder.requests(), *ctx.limits);
  p.analysis = analyse_point(trace, ctx.traces.indexes[c.trace], recorder.requests(),
                             sim::policy_sharing(o.choice, o.policy), summary.counters);
  if (timeseries) timeseries->commit();
}

}  // namespace

double goodput_share(const std::vector<request_times>& times, const request_limits& limits) {
  if (times.empty()) return 0.0;
  std::uint64_t good = 0;
  for (const request_times& t : times) {
    if (t.rejected || t.first_token == k_never || t.finish == k_never) continue;
    const double ttft = static_cast<double>(t.first_token - t.arrival) / 1e3;
    const double e2e = static_cast<double>(t.finish - t.arrival) / 1e3;
    const double tpot =
        t.output_tokens >= 2 ? static_cast<double>(t.finish - t.first_token) / 1e3 / (t.output_tokens - 1) : 0.0;
    if (ttft <= limits.ttft_ms && tpot <= limits.tpot_ms && e2e <= limits.e2e_ms) ++good;
  }
  return static_cast<double>(good) / static_cast<double>(times.size());
}

void run_point_at(compare_grid& grid, std::size_t k, const compare_traces& traces,
                  const std::optional<std::filesystem::path>& timeseries_dir,
                  const std::optional<request_limits>& limits) {
  const run_context ctx{traces, grid.cells, timeseries_dir, limits};
  run_point(ctx, grid.points.at(k));
}

// Runs every point on `jobs` threads; the first failure stops the others and is rethrown.
void run_points(compare_grid& grid, const compare_traces& traces,
                const std::optional<std::filesystem::path>& timeseries_dir, unsigned jobs, const cli_streams& io,
                const std::optional<request_limits>& limits) {
  const run_context ctx{traces, grid.cells, timeseries_dir, limits};
  std::vector<point>& points = grid.points;
  const bool tty = &io.err == &std::cerr && isatty(STDERR_FILENO) == 1;
  const auto start = std::chrono::steady_clock::now();
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::size_t done = 0;
  std::exception_ptr error;
  const auto worker = [&] {
    while (!failed) {
      const std::size_t i = next++;
      if (i >= points.size()) return;
      try {
        run_point(ctx, points[i]);
      } catch (...) {
        const std::lock_guard lock(mutex);
        if (!error) error = std::current_exception();
        failed = true;
        return;
      }
      const std::lock_guard lock(mutex);
      ++done;
      if (tty) {
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double left = elapsed / static_cast<double>(done) * static_cast<double>(points.size() - done);
        io.err << fmt::format("\rcompare: {}/{} points done, {:.0f} s elapsed, about {:.0f} s left   ", done,
                              points.size(), elapsed, left)
               << std::flush;
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned n = std::max(1u, std::min<unsigned>(jobs, static_cast<unsigned>(points.size())));
  threads.reserve(n);
  for (unsigned t = 0; t < n; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  if (tty) io.err << "\r" << std::string(80, ' ') << "\r" << std::flush;
  if (error) std::rethrow_exception(error);
}

}  // namespace vtensor::tools
