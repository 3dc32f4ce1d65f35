#include "tools/map_overhead.hpp"

#if VTENSOR_HAVE_CUDA

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backends/cuda_backend.hpp"
#include "backends/sim_backend.hpp"
#include "core/manager.hpp"
#include "core/kv_geometry.hpp"

namespace vtensor {

// Note [Mapping overhead of the manager]
// Target: a chunk mapped through the manager costs at most 1.05 x a raw cuMemMap +
// cuMemSetAccess measured in the same process.
//
// Raw ("bare"): chunks created once, then mapped and given access one driver call after the
// other at consecutive addresses of one reserved range, with nothing else on the thread: no
// checks, no bookkeeping, no timing per call. That is the floor any allocator on this driver
// pays. The same loop through the cuda backend's contract (its checks, tracking and per-call
// timing) is a variant.
//
// Manager: requests of 4096 tokens of Llama-3-8B in `layout` (256 chunks in every layout: 4
// pages of 64 tensors in kv-split, 8 of 32 in kv-fused, 256 of 1 in token-major), mapped by one
// create each, or by a create of one token and extends of 1024 tokens. Its chunks and ranges
// exist before timing starts (free pool, range cache), so the timed calls issue no cuMemCreate
// and no reserve (both counted). Unmapping (finish, or the raw loop's unmap) is never timed.
//
// Design. The driver's cost per call drifts by 10-20% over seconds and depends on what ran just
// before (first measurements: a bare replay of the manager's own calls came out 13% dearer than
// the manager right before it). So the comparison is made in blocks of `requests_per_block`
// requests, each variant block paired with raw blocks of as many chunks in the order raw,
// variant, variant, raw (ABBA), which cancels linear drift and gives each side the other's
// unmapping before it as often as its own; every block starts after a context synchronize. The
// ratio of a variant is its total time over its paired raw blocks' total, per chunk; the median of
// the per-quartet ratios is reported beside it.
//
// Where a gap comes from. A create and an extend of the manager are logged once (addresses,
// chunks, calls) and replayed bare as variants: their difference to raw is what the driver charges
// for the manager's addresses, the rest is host work. One logged create per round splits the
// manager's time into driver calls and host time before, between and after them; and the
// manager's host work alone is timed on the zero-latency simulated device.
//
// Measured (results/gpu/2026-12-02-h200-map-overhead-*.txt). The gap to raw was first 13-20%.
// Host side: every driver call leaves the calling thread's caches cold, so the manager's host
// work, 0.1 us a chunk on the simulated device, cost 1.2 us between driver calls on the GPU
// machine. A set-access per chunk instead of one per run (Note [One set-access per chunk]), a
// cuda backend that touches few cache lines (Note [Tracking on the map path]) and map + set-access
// as one call of the contract (Note [Map with access]) brought that to 0.15-0.2 us: the manager
// now costs 0.99-1.02 x the same driver calls issued bare. Driver side: the driver charges by
// address pattern (--map-overhead-patterns): single chunks 4-16 MiB apart cost 5% more than
// contiguous ones, 256 MiB apart 32%, 1 GiB apart 56%; runs of 4 chunks 16 MiB apart cost the
// same as contiguous. So kv-split and kv-fused, whose pages are one chunk in each tensor span,
// cost 3-5% more (create, runs of 4-8 a tensor) and 10-15% more (extend by a page) than contiguous
// addresses even with bare calls; token-major does not. Lookahead in runs (Note [Lookahead in
// runs]) brings extend to 1.05-1.06. Running the driver calls on the mapping worker, so that
// bookkeeping and driver use different cores, was measured too and was slower.

namespace {

using clock = std::chrono::steady_clock;

std::uint64_t ns_since(clock::time_point t) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t).count());
}

std::uint64_t ns_of(clock::time_point t) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::uint64_t maps_done(const manager& m) { return m.stats().vmm.calls_of(vmm_call::map); }

// Time and chunks of one timed block.
struct block {
  std::uint64_t ns = 0;
  std::uint64_t chunks = 0;
};

// Blocks of `requests` requests of `tokens` tokens on `mgr`, mapped by one create each, or by a
// create of one token and extends of `step` tokens. `around(start, end)` brackets each timed call.
struct manager_blocks {
  manager& mgr;
  std::uint64_t requests;
  std::uint64_t tokens;
  std::uint64_t step;
  using bracket = std::function<void(std::uint64_t, std::uint64_t)>;

  block create(const bracket& around = {}) const {
    const std::uint64_t maps0 = maps_done(mgr);
    block b;
    for (std::uint64_t r = 0; r < requests; ++r) {
      const auto t = clock::now();
      const create_result c = mgr.create(request_id{r + 1}, {}, tokens, tokens);
      const std::uint64_t d = ns_since(t);
      b.ns += d;
      if (around) around(ns_of(t), ns_of(t) + d);
      if (!c.ok()) throw std::runtime_error("map overhead: the manager ran out of memory");
    }
    b.chunks = maps_done(mgr) - maps0;
    for (std::uint64_t r = 0; r < requests; ++r) mgr.finish(request_id{r + 1});
    return b;
  }

  // The first page, mapped by the untimed create of one token, is not counted.
  block extend() const {
    for (std::uint64_t r = 0; r < requests; ++r) {
      if (!mgr.create(request_id{r + 1}, {}, 1, tokens).ok()) {
        throw std::runtime_error("map overhead: the manager ran out of memory");
      }
    }
    const std::uint64_t maps0 = maps_done(mgr);
    block b;
    for (std::uint64_t grown = 1; grown + step <= tokens; grown += step) {
      for (std::uint64_t r = 0; r < requests; ++r) {
        const auto t = clock::now();
        const alloc_status st = mgr.extend(request_id{r + 1}, step).status;
        b.ns += ns_since(t);
        if (st != alloc_status::ok) throw std::runtime_error("map overhead: the manager ran out of memory");
      }
    }
    b.chunks = maps_done(mgr) - maps0;
    for (std::uint64_t r = 0; r < requests; ++r) mgr.finish(request_id{r + 1});
    return b;
  }
};

// A variant measured against a reference (raw, unless named) in ABBA quartets.
struct variant {
  std::string key;
  std::string label;
  std::function<block()> run;
  std::string reference = "raw_bare";
  std::function<block()> ref;
  double ns = 0, chunks = 0, raw_ns = 0, raw_chunks = 0;  // totals
  std::vector<double> quartet_ratios;
};

}  // namespace

nlohmann::ordered_json measure_map_overhead(const map_overhead_config& config, std::ostream& out) {
  const std::uint64_t chunk = k_chunk_bytes;
  manager_config mc;
  mc.geometry = kv_geometry(*model_preset("llama-3-8b"), config.layout);
  mc.scheduler.max_context_tokens = 8192;
  const std::uint32_t tensors = mc.geometry.tensors();
  constexpr std::uint64_t k_tokens = 4096;
  constexpr std::uint64_t k_step = 1024;
  const std::uint64_t per_request = mc.geometry.pages_for_tokens(k_tokens) * tensors;
  const std::uint64_t requests = std::max<std::uint64_t>(1, config.chunks / per_request);
  const std::uint64_t block_chunks = requests * per_request;
  mc.scheduler.range_cache = requests + 1;  // the block's ranges stay reserved

  cuda_backend b(config.device, (5 * block_chunks + 64) * chunk);
  manager mgr(b, mc);
  const manager_blocks blocks{mgr, requests, k_tokens, k_step};
  // Lookahead of 4 pages mapped in runs of 4 (Note [Lookahead in runs]), on requests of 8192
  // tokens so that extends have pages to map ahead.
  manager_config rc = mc;
  rc.scheduler.lookahead_pages = 4;
  rc.scheduler.lookahead_batch = 4;
  manager mgr_runs(b, rc);
  const manager_blocks runs_blocks{mgr_runs, requests, 2 * k_tokens, k_step};
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  manager mgr_sim(sim, mc);
  const manager_blocks sim_blocks{mgr_sim, requests, k_tokens, k_step};

  const device_addr base = b.reserve(block_chunks * chunk);
  std::vector<chunk_handle> handles;
  for (std::uint64_t i = 0; i < block_chunks; ++i) {
    auto h = b.create_chunk();
    if (!h) throw std::runtime_error("map overhead: out of memory creating raw chunks");
    handles.push_back(*h);
  }
  (void)blocks.create();  // the manager's chunks and ranges now exist
  (void)blocks.extend();
  (void)runs_blocks.create();
  (void)runs_blocks.extend();
  (void)sim_blocks.create();

  // The manager's calls, logged once, to replay bare.
  std::vector<cuda_call_record> create_log, extend_log;
  b.set_call_log(&create_log);
  (void)blocks.create();
  b.set_call_log(&extend_log);
  (void)blocks.extend();
  b.set_call_log(nullptr);

  // Bare map + set-access of the raw chunks, runs of `run` chunks `stride` apart from `from`
  // (+ `offset`), timed; then unmapped. Raw is one run of contiguous chunks from `base`.
  const auto pattern = [&](device_addr from, std::uint64_t stride, std::uint64_t run, std::uint64_t offset) {
    return [&b, &handles, from, stride, run, offset, block_chunks] {
      const auto at = [&](std::uint64_t i) { return from + (i / run) * stride + (i % run) * k_chunk_bytes + offset; };
      b.bare_synchronize();
      const auto t = clock::now();
      for (std::uint64_t i = 0; i < block_chunks; ++i) {
        b.bare_map(at(i), handles[i]);
        b.bare_set_access(at(i), k_chunk_bytes);
      }
      const block r{ns_since(t), block_chunks};
      for (std::uint64_t i = 0; i < block_chunks; ++i) b.bare_unmap(at(i));
      return r;
    };
  };
  const std::function<block()> raw_bare = pattern(base, chunk, 1, 0);
  // `maps_first`: every map of the log, then every set-access (same addresses, other order).
  const auto replay = [&](const std::vector<cuda_call_record>& log, bool maps_first = false) {
    b.bare_synchronize();
    block r;
    const auto t = clock::now();
    for (const cuda_call_record& c : log) {
      if (c.call == vmm_call::map) {
        b.bare_map(c.va, c.handle);
        ++r.chunks;
      } else if (!maps_first) {
        b.bare_set_access(c.va, c.bytes);
      }
    }
    if (maps_first) {
      for (const cuda_call_record& c : log) {
        if (c.call == vmm_call::set_access) b.bare_set_access(c.va, c.bytes);
      }
    }
    r.ns = ns_since(t);
    for (const cuda_call_record& c : log) {
      if (c.call == vmm_call::map) b.bare_unmap(c.va);
    }
    return r;
  };
  std::vector<variant> variants = {
      {"raw_backend", "raw loop through the cuda backend's map_with_access (checks, tracking, timing)",
       [&] {
         b.bare_synchronize();
         const auto t = clock::now();
         for (std::uint64_t i = 0; i < block_chunks; ++i) b.map_with_access(base + i * chunk, handles[i]);
         const block r{ns_since(t), block_chunks};
         b.unmap(base, block_chunks * chunk);
         return r;
       }},
      {"manager_create", "manager create",
       [&] {
         b.bare_synchronize();
         return blocks.create();
       }},
      {"manager_extend", "manager extend",
       [&] {
         b.bare_synchronize();
         return blocks.extend();
       }},
      {"extend_runs", "manager extend with 4 pages of lookahead mapped in runs of 4 (8192-token requests)",
       [&] {
         b.bare_synchronize();
         return runs_blocks.extend();
       }},
      {"replay_create", "a manager create's driver calls replayed bare (its addresses and chunks)",
       [&] { return replay(create_log); }},
      {"replay_extend", "a manager extend's driver calls replayed bare", [&] { return replay(extend_log); }},
      {"replay_extend_mf", "the same, all maps first, then all set-accesses", [&] { return replay(extend_log, true); }},
      {"create_vs_replay", "manager create against its calls replayed bare: what the manager adds",
       [&] {
         b.bare_synchronize();
         return blocks.create();
       },
       "replay_create", [&] { return replay(create_log); }},
      {"extend_vs_replay", "manager extend against its calls replayed bare: what the manager adds",
       [&] {
         b.bare_synchronize();
         return blocks.extend();
       },
       "replay_extend", [&] { return replay(extend_log); }},
  };

  // The driver's cost by address pattern: bare map + set-access of single chunks (or runs of 4) at
  // growing strides in a wide range, and singles whose lower neighbour is already mapped.
  device_addr wide = 0;
  device_addr near = 0;  // for the neighbour pattern
  std::vector<chunk_handle> neighbours;
  if (config.patterns) {
    wide = b.reserve(block_chunks * (std::uint64_t{1} << 30));
    near = b.reserve(block_chunks * 16 * (std::uint64_t{1} << 20));
    for (std::uint64_t i = 0; i < block_chunks; ++i) {
      auto h = b.create_chunk();
      if (!h) throw std::runtime_error("map overhead: out of memory creating neighbour chunks");
      neighbours.push_back(*h);
    }
    constexpr std::uint64_t mib = std::uint64_t{1} << 20;
    const std::pair<const char*, std::uint64_t> strides[] = {
        {"4MiB", 4 * mib}, {"16MiB", 16 * mib}, {"64MiB", 64 * mib}, {"256MiB", 256 * mib}, {"1GiB", 1024 * mib}};
    for (const auto& [label, stride] : strides) {
      variants.push_back({fmt::format("pattern_{}", label),
                          fmt::format("pattern: single chunks {} apart, bare", label), pattern(wide, stride, 1, 0)});
    }
    variants.push_back({"pattern_4x16MiB", "pattern: runs of 4 chunks, 16 MiB apart, bare", pattern(wide, 16 * mib, 4, 0)});
    variants.push_back({"pattern_4x256MiB", "pattern: runs of 4 chunks, 256 MiB apart, bare", pattern(wide, 256 * mib, 4, 0)});
    // Singles 16 MiB apart, each right above a chunk that stays mapped.
    for (std::uint64_t i = 0; i < block_chunks; ++i) {
      b.bare_map(near + i * 16 * mib, neighbours[i]);
      b.bare_set_access(near + i * 16 * mib, chunk);
    }
    variants.push_back({"pattern_neighbour",
                        "pattern: single chunks 16 MiB apart, each above a mapped chunk, bare",
                        pattern(near, 16 * mib, 1, chunk)});
  }

  const std::uint64_t creates_before = b.counters().calls_of(vmm_call::create);
  const std::uint64_t reserves_before = b.counters().calls_of(vmm_call::reserve);
  double raw_total_ns = 0, raw_total_chunks = 0;
  std::vector<double> logged_total, logged_driver, logged_before, logged_between, logged_after, host_on_sim;
  std::vector<cuda_call_record> log;
  for (int round = 0; round < config.rounds; ++round) {
    for (variant& v : variants) {
      const auto& ref = v.ref ? v.ref : raw_bare;
      const block a1 = ref();
      const block v1 = v.run();
      const block v2 = v.run();
      const block a2 = ref();
      const double raw_ns = static_cast<double>(a1.ns + a2.ns), raw_chunks = static_cast<double>(a1.chunks + a2.chunks);
      const double ns = static_cast<double>(v1.ns + v2.ns), chunks = static_cast<double>(v1.chunks + v2.chunks);
      v.ns += ns;
      v.chunks += chunks;
      v.raw_ns += raw_ns;
      v.raw_chunks += raw_chunks;
      v.quartet_ratios.push_back((ns / chunks) / (raw_ns / raw_chunks));
      if (!v.ref) {
        raw_total_ns += raw_ns;
        raw_total_chunks += raw_chunks;
      }
    }
    // One logged create: where the manager's time goes.
    log.clear();
    std::uint64_t total = 0, driver = 0, before = 0, after = 0;
    std::size_t next = 0;
    b.bare_synchronize();
    b.set_call_log(&log);
    const block logged = blocks.create([&](std::uint64_t start, std::uint64_t end) {
      total += end - start;
      if (next == log.size()) return;
      before += log[next].start_ns - start;
      for (; next < log.size(); ++next) driver += log[next].end_ns - log[next].start_ns;
      after += end - log.back().end_ns;
    });
    b.set_call_log(nullptr);
    const auto per = [&](std::uint64_t x) { return static_cast<double>(x) / static_cast<double>(logged.chunks); };
    logged_total.push_back(per(total));
    logged_driver.push_back(per(driver));
    logged_before.push_back(per(before));
    logged_after.push_back(per(after));
    logged_between.push_back(per(total - driver - before - after));
    const block on_sim = sim_blocks.create();
    host_on_sim.push_back(static_cast<double>(on_sim.ns) / static_cast<double>(on_sim.chunks));
  }
  const std::uint64_t creates_in_rounds = b.counters().calls_of(vmm_call::create) - creates_before;
  const std::uint64_t reserves_in_rounds = b.counters().calls_of(vmm_call::reserve) - reserves_before;
  mgr.shutdown();
  mgr_runs.shutdown();
  for (chunk_handle h : handles) b.release_chunk(h);
  b.free_range(base);
  if (config.patterns) {
    for (std::uint64_t i = 0; i < block_chunks; ++i) b.bare_unmap(near + i * 16 * (std::uint64_t{1} << 20));
    for (chunk_handle h : neighbours) b.release_chunk(h);
    b.free_range(wide);
    b.free_range(near);
  }

  const double raw = raw_total_ns / raw_total_chunks;
  nlohmann::ordered_json j;
  j["device"] = b.device_name();
  j["layout"] = std::string(to_string(config.layout));
  j["tensors"] = tensors;
  j["request_tokens"] = k_tokens;
  j["request_chunks"] = per_request;
  j["extend_tokens"] = k_step;
  j["block_chunks"] = block_chunks;
  j["rounds"] = config.rounds;
  j["raw_us_per_chunk"] = raw / 1e3;
  out << fmt::format("map overhead, {} layout ({} tensors): requests of {} tokens ({} chunks), extends of {} tokens; "
                     "blocks of {} chunks, each variant against raw in {} ABBA quartets\n",
                     to_string(config.layout), tensors, k_tokens, per_request, k_step, block_chunks, config.rounds);
  out << fmt::format("  {:<16} {:>8}  {:<13} {:>6}  {:>6}\n", "variant", "us/chunk", "against", "x ref", "median");
  out << fmt::format("  {:<16} {:8.2f}  {:<13} {:6.3f}  {:6.3f}  raw: map + set-access a chunk, contiguous, bare driver "
                     "calls\n",
                     "raw_bare", raw / 1e3, "-", 1.0, 1.0);
  nlohmann::ordered_json vj = nlohmann::ordered_json::object();
  for (const variant& v : variants) {
    const double per_chunk = v.ns / v.chunks;
    const double ratio = per_chunk / (v.raw_ns / v.raw_chunks);
    vj[v.key] = {{"us_per_chunk", per_chunk / 1e3},
                 {"reference", v.reference},
                 {"ratio", ratio},
                 {"median_quartet_ratio", median(v.quartet_ratios)},
                 {"quartet_ratios", v.quartet_ratios},
                 {"label", v.label}};
    out << fmt::format("  {:<16} {:8.2f}  {:<13} {:6.3f}  {:6.3f}  {}\n", v.key, per_chunk / 1e3, v.reference, ratio,
                       median(v.quartet_ratios), v.label);
  }
  j["variants"] = vj;
  nlohmann::ordered_json d;
  d["total_us_per_chunk"] = median(logged_total) / 1e3;
  d["driver_us_per_chunk"] = median(logged_driver) / 1e3;
  d["host_before_first_call_us_per_chunk"] = median(logged_before) / 1e3;
  d["host_between_calls_us_per_chunk"] = median(logged_between) / 1e3;
  d["host_after_last_call_us_per_chunk"] = median(logged_after) / 1e3;
  d["host_on_sim_us_per_chunk"] = median(host_on_sim) / 1e3;
  j["manager_create_decomposition"] = d;
  out << fmt::format("  a logged manager create: {:.2f} us a chunk = driver {:.2f} + host before the first call {:.2f} + "
                     "between calls {:.2f} + after the last {:.2f}; the manager's host work on the simulated device: "
                     "{:.2f}\n",
                     d["total_us_per_chunk"].get<double>(), d["driver_us_per_chunk"].get<double>(),
                     d["host_before_first_call_us_per_chunk"].get<double>(),
                     d["host_between_calls_us_per_chunk"].get<double>(),
                     d["host_after_last_call_us_per_chunk"].get<double>(), d["host_on_sim_us_per_chunk"].get<double>());
  j["cuMemCreate_in_timed_rounds"] = creates_in_rounds;
  j["reserve_in_timed_rounds"] = reserves_in_rounds;
  const double create = vj["manager_create"]["ratio"].get<double>();
  const double extend = vj["manager_extend"]["ratio"].get<double>();
  const double create_same = vj["create_vs_replay"]["ratio"].get<double>();
  const double extend_same = vj["extend_vs_replay"]["ratio"].get<double>();
  j["target"] = "manager <= 1.05 x raw map + set-access";
  j["ratio_create_vs_contiguous"] = create;
  j["ratio_extend_vs_contiguous"] = extend;
  j["ratio_create_vs_same_calls"] = create_same;
  j["ratio_extend_vs_same_calls"] = extend_same;
  j["met_vs_contiguous"] = create <= 1.05 && extend <= 1.05;
  j["met_vs_same_calls"] = create_same <= 1.05 && extend_same <= 1.05;
  out << fmt::format("  target <= 1.05 x raw: against raw at contiguous addresses create {:.3f}, extend {:.3f}: {}; "
                     "against the same calls raw create {:.3f}, extend {:.3f}: {}; cuMemCreate in timed rounds: {}, "
                     "reserve: {}\n",
                     create, extend, j["met_vs_contiguous"].get<bool>() ? "met" : "NOT met", create_same, extend_same,
                     j["met_vs_same_calls"].get<bool>() ? "met" : "NOT met", creates_in_rounds, reserves_in_rounds);
  return j;
}

}  // namespace vtensor

#endif  // VTENSOR_HAVE_CUDA
