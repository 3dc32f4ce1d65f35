#include "bench/map_overhead/map_overhead.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backends/cuda_backend.hpp"
#include "backends/sim_backend.hpp"
#include "backends/units.hpp"
#include "bench/map_overhead/bare_driver.hpp"
#include "bench/map_overhead/call_log_backend.hpp"
#include "core/kv_geometry.hpp"
#include "core/manager.hpp"

namespace vtensor::bench {

// Note [Mapping overhead of the manager]
// Target: a chunk mapped through the manager costs at most 1.05 x a raw cuMemMap +
// cuMemSetAccess measured in the same process.
//
// Raw ("bare"): chunks created once, then mapped and given access one driver call after the
// other at consecutive addresses of one reserved range, with nothing else on the thread: no
// checks, no bookkeeping, no timing per call (this program's own driver table, bare_driver.hpp).
// That is the floor any allocator on this driver pays. The same loop through the cuda backend's
// contract (its checks, tracking and per-call timing) is a variant.
//
// Manager: requests of 4096 tokens of Llama-3-8B in `layout` (256 chunks in every layout: 4
// pages of 64 tensors in kv-split, 8 of 32 in kv-fused, 256 of 1 in token-major), mapped by one
// create each, or by a create of one token and extends of 1024 tokens. Its chunks and ranges
// exist before timing starts (free pool, range cache), so the timed calls issue no cuMemCreate
// and no reserve (both counted). Unmapping (finish, or the raw loop's unmap) is never timed.
//
// Design. The driver's cost per call drifts by 10-20% over seconds and depends on what ran just
// before. So the comparison is made in blocks of `requests` requests, each variant block paired
// with raw blocks of as many chunks in the order raw, variant, variant, raw (ABBA), which cancels
// linear drift and gives each side the other's unmapping before it as often as its own; every
// block starts after a context synchronize. The ratio of a variant is its total time over its
// paired raw blocks' total, per chunk; the median of the per-quartet ratios is reported beside it.
//
// Where a gap comes from. A twin manager (same configuration, same cuda backend) runs over a
// call_log_backend, which records its maps and set-accesses; its create and extend are logged once
// and replayed bare as variants: their difference to raw is what the driver charges for the
// manager's addresses, the rest is host work. The timed manager itself runs over the cuda backend
// directly, so logging adds nothing to its time. One logged create of the twin per round splits a
// create's time into driver calls (what the cuda backend charged) and host time before, between
// and after them (the cuda backend's own checks count as host time between calls); and the
// manager's host work alone is timed on the zero-latency simulated device.
//
// What it found, with the runs behind it, is in results/README.md ("Figures behind the notes of
// backends/, tools/ and bench/").

namespace {

using clock = std::chrono::steady_clock;

constexpr std::uint64_t k_tokens = 4096;  // tokens of a request
constexpr std::uint64_t k_step = 1024;    // tokens of an extend

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

// The sizes of one measurement.
struct plan {
  manager_config mc;
  std::uint32_t tensors = 0;
  std::uint64_t per_request = 0;  // chunks of one request
  std::uint64_t requests = 0;     // requests of a block
  std::uint64_t block_chunks = 0;
};

plan make_plan(const map_overhead_config& config) {
  plan p;
  p.mc.geometry = kv_geometry(*model_preset("llama-3-8b"), config.layout);
  p.mc.scheduler.max_context_tokens = 8192;
  p.tensors = p.mc.geometry.tensors();
  p.per_request = p.mc.geometry.pages_for_tokens(k_tokens) * p.tensors;
  p.requests = std::max<std::uint64_t>(1, config.chunks / p.per_request);
  p.block_chunks = p.requests * p.per_request;
  p.mc.scheduler.range_cache = p.requests + 1;  // the block's ranges stay reserved
  return p;
}

// Lookahead of 4 pages mapped in runs of 4 (Note [Lookahead in runs]), on requests of 8192
// tokens so that extends have pages to map ahead.
manager_config with_runs(manager_config mc) {
  mc.scheduler.lookahead_pages = 4;
  mc.scheduler.lookahead_batch = 4;
  return mc;
}

// Figures of the logged creates, per chunk, one entry a round.
struct decomposition {
  std::vector<double> total, driver, before, between, after, host_on_sim;
};

// Everything one measurement holds: the cuda backend and its bare twin, the managers (timed,
// with lookahead runs, logged twin, on the simulated device), the raw chunks and ranges.
struct rig {
  const map_overhead_config& config;
  plan p;
  cuda_backend b;
  bare_driver driver;
  manager mgr;
  manager mgr_runs;
  call_log_backend logging;
  manager mgr_logged;
  sim_backend sim;
  manager mgr_sim;
  manager_blocks blocks, runs_blocks, logged_blocks, sim_blocks;
  device_addr base = 0;
  std::vector<chunk_handle> handles;
  std::vector<call_record> create_log, extend_log;
  device_addr wide = 0, near = 0;  // ranges of the address patterns
  std::vector<chunk_handle> neighbours;

  explicit rig(const map_overhead_config& c)
      : config(c),
        p(make_plan(c)),
        b(c.device, (6 * p.block_chunks + 64) * k_chunk_bytes),
        driver(c.device),
        mgr(b, p.mc),
        mgr_runs(b, with_runs(p.mc)),
        logging(b),
        mgr_logged(logging, p.mc),
        sim(sim_backend::k_unlimited, latency_model::zero()),
        mgr_sim(sim, p.mc),
        blocks{mgr, p.requests, k_tokens, k_step},
        runs_blocks{mgr_runs, p.requests, 2 * k_tokens, k_step},
        logged_blocks{mgr_logged, p.requests, k_tokens, k_step},
        sim_blocks{mgr_sim, p.requests, k_tokens, k_step} {}
};

std::vector<chunk_handle> create_chunks(cuda_backend& b, std::uint64_t n) {
  std::vector<chunk_handle> out;
  for (std::uint64_t i = 0; i < n; ++i) {
    auto h = b.create_chunk();
    if (!h) throw std::runtime_error("map overhead: out of memory creating raw chunks");
    out.push_back(*h);
  }
  return out;
}

// Raw chunks and range; the managers' chunks and ranges created; the twin's calls logged once.
void prepare(rig& r) {
  r.base = r.b.reserve(r.p.block_chunks * k_chunk_bytes);
  r.handles = create_chunks(r.b, r.p.block_chunks);
  for (const manager_blocks* m : {&r.blocks, &r.runs_blocks, &r.logged_blocks}) {
    (void)m->create();
    (void)m->extend();
  }
  (void)r.sim_blocks.create();
  r.logging.set_log(&r.create_log);
  (void)r.logged_blocks.create();
  r.logging.set_log(&r.extend_log);
  (void)r.logged_blocks.extend();
  r.logging.set_log(nullptr);
}

// Bare map + set-access of the raw chunks, runs of `run` chunks `stride` apart from `from`
// (+ `offset`), timed; then unmapped. Raw is one run of contiguous chunks from the raw range.
std::function<block()> bare_pattern(rig& r, device_addr from, std::uint64_t stride, std::uint64_t run,
                                    std::uint64_t offset) {
  return [&r, from, stride, run, offset] {
    const auto at = [&](std::uint64_t i) { return from + (i / run) * stride + (i % run) * k_chunk_bytes + offset; };
    const std::uint64_t n = r.p.block_chunks;
    r.driver.synchronize();
    const auto t = clock::now();
    for (std::uint64_t i = 0; i < n; ++i) {
      r.driver.map(at(i), r.handles[i]);
      r.driver.set_access(at(i), k_chunk_bytes);
    }
    const block timed{ns_since(t), n};
    for (std::uint64_t i = 0; i < n; ++i) r.driver.unmap(at(i));
    return timed;
  };
}

// A logged manager's driver calls issued bare; `maps_first`: every map of the log, then every
// set-access (same addresses, other order).
block replay_bare(rig& r, const std::vector<call_record>& log, bool maps_first) {
  r.driver.synchronize();
  block out;
  const auto t = clock::now();
  for (const call_record& c : log) {
    if (c.call == vmm_call::map) {
      r.driver.map(c.va, c.handle);
      ++out.chunks;
    } else if (!maps_first) {
      r.driver.set_access(c.va, c.bytes);
    }
  }
  if (maps_first) {
    for (const call_record& c : log) {
      if (c.call == vmm_call::set_access) r.driver.set_access(c.va, c.bytes);
    }
  }
  out.ns = ns_since(t);
  for (const call_record& c : log) {
    if (c.call == vmm_call::map) r.driver.unmap(c.va);
  }
  return out;
}

// The raw loop through the cuda backend's contract.
block raw_through_backend(rig& r) {
  r.driver.synchronize();
  const auto t = clock::now();
  for (std::uint64_t i = 0; i < r.p.block_chunks; ++i) r.b.map_with_access(r.base + i * k_chunk_bytes, r.handles[i]);
  const block timed{ns_since(t), r.p.block_chunks};
  r.b.unmap(r.base, r.p.block_chunks * k_chunk_bytes);
  return timed;
}

std::function<block()> synchronized(rig& r, std::function<block()> body) {
  return [&r, body = std::move(body)] {
    r.driver.synchronize();
    return body();
  };
}

std::vector<variant> core_variants(rig& r) {
  const auto create = synchronized(r, [&r] { return r.blocks.create(); });
  const auto extend = synchronized(r, [&r] { return r.blocks.extend(); });
  const auto replay_create = [&r] { return replay_bare(r, r.create_log, false); };
  const auto replay_extend = [&r] { return replay_bare(r, r.extend_log, false); };
  return {
      {"raw_backend", "raw loop through the cuda backend's map_with_access (checks, tracking, timing)",
       [&r] { return raw_through_backend(r); }},
      {"manager_create", "manager create", create},
      {"manager_extend", "manager extend", extend},
      {"extend_runs", "manager extend with 4 pages of lookahead mapped in runs of 4 (8192-token requests)",
       synchronized(r, [&r] { return r.runs_blocks.extend(); })},
      {"replay_create", "a manager create's driver calls replayed bare (its addresses and chunks)", replay_create},
      {"replay_extend", "a manager extend's driver calls replayed bare", replay_extend},
      {"replay_extend_mf", "the same, all maps first, then all set-accesses",
       [&r] { return replay_bare(r, r.extend_log, true); }},
      {"create_vs_replay", "manager create against its calls replayed bare: what the manager adds", create,
       "replay_create", replay_create},
      {"extend_vs_replay", "manager extend against its calls replayed bare: what the manager adds", extend,
       "replay_extend", replay_extend},
  };
}

// The driver's cost by address pattern: bare map + set-access of single chunks (or runs of 4) at
// growing strides in a wide range, and singles whose lower neighbour is already mapped.
void add_pattern_variants(rig& r, std::vector<variant>& variants) {
  const std::uint64_t n = r.p.block_chunks;
  r.wide = r.b.reserve(n * k_gib);
  r.near = r.b.reserve(n * 16 * k_mib);
  r.neighbours = create_chunks(r.b, n);
  const std::pair<const char*, std::uint64_t> strides[] = {
      {"4MiB", 4 * k_mib}, {"16MiB", 16 * k_mib}, {"64MiB", 64 * k_mib}, {"256MiB", 256 * k_mib}, {"1GiB", k_gib}};
  for (const auto& [label, stride] : strides) {
    variants.push_back({fmt::format("pattern_{}", label), fmt::format("pattern: single chunks {} apart, bare", label),
                        bare_pattern(r, r.wide, stride, 1, 0)});
  }
  variants.push_back(
      {"pattern_4x16MiB", "pattern: runs of 4 chunks, 16 MiB apart, bare", bare_pattern(r, r.wide, 16 * k_mib, 4, 0)});
  variants.push_back({"pattern_4x256MiB", "pattern: runs of 4 chunks, 256 MiB apart, bare",
                      bare_pattern(r, r.wide, 256 * k_mib, 4, 0)});
  // Singles 16 MiB apart, each right above a chunk that stays mapped.
  for (std::uint64_t i = 0; i < n; ++i) {
    r.driver.map(r.near + i * 16 * k_mib, r.neighbours[i]);
    r.driver.set_access(r.near + i * 16 * k_mib, k_chunk_bytes);
  }
  variants.push_back({"pattern_neighbour", "pattern: single chunks 16 MiB apart, each above a mapped chunk, bare",
                      bare_pattern(r, r.near, 16 * k_mib, 1, k_chunk_bytes)});
}

// Raw totals over every quartet against raw (the reference figure of the table).
struct raw_totals {
  double ns = 0, chunks = 0;
};

// One ABBA quartet of `v` against its reference.
void run_quartet(variant& v, const std::function<block()>& raw_bare, raw_totals& raw) {
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
    raw.ns += raw_ns;
    raw.chunks += raw_chunks;
  }
}

// One logged create of the twin manager: where its time goes; and the host work on sim.
void log_one_create(rig& r, decomposition& d) {
  std::vector<call_record> log;
  std::uint64_t total = 0, driver = 0, before = 0, after = 0;
  std::size_t next = 0;
  r.driver.synchronize();
  r.logging.set_log(&log);
  const block logged = r.logged_blocks.create([&](std::uint64_t start, std::uint64_t end) {
    total += end - start;
    if (next == log.size()) return;
    before += log[next].start_ns - start;
    for (; next < log.size(); ++next) driver += log[next].driver_ns;
    after += end - log.back().end_ns;
  });
  r.logging.set_log(nullptr);
  const auto per = [&](std::uint64_t x) { return static_cast<double>(x) / static_cast<double>(logged.chunks); };
  d.total.push_back(per(total));
  d.driver.push_back(per(driver));
  d.before.push_back(per(before));
  d.after.push_back(per(after));
  d.between.push_back(per(total - driver - before - after));
  const block on_sim = r.sim_blocks.create();
  d.host_on_sim.push_back(static_cast<double>(on_sim.ns) / static_cast<double>(on_sim.chunks));
}

// Everything created for the measurement released; the managers shut down.
void tear_down(rig& r) {
  r.mgr.shutdown();
  r.mgr_runs.shutdown();
  r.mgr_logged.shutdown();
  for (chunk_handle h : r.handles) r.b.release_chunk(h);
  r.b.free_range(r.base);
  if (!r.config.patterns) return;
  for (std::uint64_t i = 0; i < r.p.block_chunks; ++i) r.driver.unmap(r.near + i * 16 * k_mib);
  for (chunk_handle h : r.neighbours) r.b.release_chunk(h);
  r.b.free_range(r.wide);
  r.b.free_range(r.near);
}

// The table of variants, printed and as JSON.
nlohmann::ordered_json report_variants(const std::vector<variant>& variants, double raw, std::ostream& out) {
  out << fmt::format("  {:<16} {:>8}  {:<13} {:>6}  {:>6}\n", "variant", "us/chunk", "against", "x ref", "median");
  out << fmt::format(
      "  {:<16} {:8.2f}  {:<13} {:6.3f}  {:6.3f}  raw: map + set-access a chunk, contiguous, bare driver "
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
  return vj;
}

nlohmann::ordered_json report_decomposition(const decomposition& dec, std::ostream& out) {
  nlohmann::ordered_json d;
  d["total_us_per_chunk"] = median(dec.total) / 1e3;
  d["driver_us_per_chunk"] = median(dec.driver) / 1e3;
  d["host_before_first_call_us_per_chunk"] = median(dec.before) / 1e3;
  d["host_between_calls_us_per_chunk"] = median(dec.between) / 1e3;
  d["host_after_last_call_us_per_chunk"] = median(dec.after) / 1e3;
  d["host_on_sim_us_per_chunk"] = median(dec.host_on_sim) / 1e3;
  out << fmt::format(
      "  a logged manager create: {:.2f} us a chunk = driver {:.2f} + host before the first call {:.2f} + "
      "between calls {:.2f} + after the last {:.2f}; the manager's host work on the simulated device: "
      "{:.2f}\n",
      d["total_us_per_chunk"].get<double>(), d["driver_us_per_chunk"].get<double>(),
      d["host_before_first_call_us_per_chunk"].get<double>(), d["host_between_calls_us_per_chunk"].get<double>(),
      d["host_after_last_call_us_per_chunk"].get<double>(), d["host_on_sim_us_per_chunk"].get<double>());
  return d;
}

// The target's verdicts, added to `j` (which holds the variants) and printed.
void report_target(nlohmann::ordered_json& j, std::uint64_t creates, std::uint64_t reserves, std::ostream& out) {
  const nlohmann::ordered_json& vj = j["variants"];
  const double create = vj["manager_create"]["ratio"].get<double>();
  const double extend = vj["manager_extend"]["ratio"].get<double>();
  const double create_same = vj["create_vs_replay"]["ratio"].get<double>();
  const double extend_same = vj["extend_vs_replay"]["ratio"].get<double>();
  j["cuMemCreate_in_timed_rounds"] = creates;
  j["reserve_in_timed_rounds"] = reserves;
  j["target"] = "manager <= 1.05 x raw map + set-access";
  j["ratio_create_vs_contiguous"] = create;
  j["ratio_extend_vs_contiguous"] = extend;
  j["ratio_create_vs_same_calls"] = create_same;
  j["ratio_extend_vs_same_calls"] = extend_same;
  j["met_vs_contiguous"] = create <= 1.05 && extend <= 1.05;
  j["met_vs_same_calls"] = create_same <= 1.05 && extend_same <= 1.05;
  out << fmt::format(
      "  target <= 1.05 x raw: against raw at contiguous addresses create {:.3f}, extend {:.3f}: {}; "
      "against the same calls raw create {:.3f}, extend {:.3f}: {}; cuMemCreate in timed rounds: {}, "
      "reserve: {}\n",
      create, extend, j["met_vs_contiguous"].get<bool>() ? "met" : "NOT met", create_same, extend_same,
      j["met_vs_same_calls"].get<bool>() ? "met" : "NOT met", creates, reserves);
}

}  // namespace

nlohmann::ordered_json measure_map_overhead(const map_overhead_config& config, std::ostream& out) {
  rig r(config);
  prepare(r);
  std::vector<variant> variants = core_variants(r);
  if (config.patterns) add_pattern_variants(r, variants);
  const std::function<block()> raw_bare = bare_pattern(r, r.base, k_chunk_bytes, 1, 0);

  const std::uint64_t creates_before = r.b.counters().calls_of(vmm_call::create);
  const std::uint64_t reserves_before = r.b.counters().calls_of(vmm_call::reserve);
  raw_totals raw;
  decomposition dec;
  for (int round = 0; round < config.rounds; ++round) {
    for (variant& v : variants) run_quartet(v, raw_bare, raw);
    log_one_create(r, dec);
  }
  const std::uint64_t creates = r.b.counters().calls_of(vmm_call::create) - creates_before;
  const std::uint64_t reserves = r.b.counters().calls_of(vmm_call::reserve) - reserves_before;
  tear_down(r);

  const double raw_ns = raw.ns / raw.chunks;
  nlohmann::ordered_json j;
  j["device"] = r.b.device_name();
  j["layout"] = std::string(to_string(config.layout));
  j["tensors"] = r.p.tensors;
  j["request_tokens"] = k_tokens;
  j["request_chunks"] = r.p.per_request;
  j["extend_tokens"] = k_step;
  j["block_chunks"] = r.p.block_chunks;
  j["rounds"] = config.rounds;
  j["raw_us_per_chunk"] = raw_ns / 1e3;
  out << fmt::format(
      "map overhead, {} layout ({} tensors): requests of {} tokens ({} chunks), extends of {} tokens; "
      "blocks of {} chunks, each variant against raw in {} ABBA quartets\n",
      to_string(config.layout), r.p.tensors, k_tokens, r.p.per_request, k_step, r.p.block_chunks, config.rounds);
  j["variants"] = report_variants(variants, raw_ns, out);
  j["manager_create_decomposition"] = report_decomposition(dec, out);
  report_target(j, creates, reserves, out);
  return j;
}

}  // namespace vtensor::bench
