// The run operations of issue 13: a run of maps is the calls of its chunks (counts, charges,
// errors), the free pool gives a run in single-take order, and the inline worker keeps the
// threaded worker's contract.

#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backends/fault_injection_backend.hpp"
#include "backends/sim_backend.hpp"
#include "core/async_mapper.hpp"
#include "core/eviction_order.hpp"
#include "core/model_presets.hpp"
#include "core/mutex.hpp"
#include "core/operations.hpp"
#include "core/pset.hpp"
#include "sim/accounting_backend.hpp"

using namespace vtensor;

namespace {

struct run_device {
  sim_backend sim{sim_backend::k_unlimited, latency_model::h200()};
  device_addr base = sim.reserve(8 * k_chunk_bytes);
  std::vector<chunk_handle> handles;
  run_device() {
    for (int i = 0; i < 4; ++i) handles.push_back(*sim.create_chunk());
  }
};

}  // namespace

TEST_CASE("map_run_with_access: counted and charged as a map and a set-access per chunk") {
  run_device one, run;
  for (std::size_t i = 0; i < one.handles.size(); ++i) {
    one.sim.map_with_access(one.base + i * k_chunk_bytes, one.handles[i]);
  }
  std::size_t mapped = 0;
  run.sim.map_run_with_access(run.base, run.handles, mapped);
  CHECK(mapped == 4);
  CHECK(run.sim.counters().calls == one.sim.counters().calls);
  CHECK(run.sim.counters().time_ns == one.sim.counters().time_ns);
  CHECK(run.sim.counters().calls_of(vmm_call::map) == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(run.sim.accessible(run.base + i * k_chunk_bytes));
    CHECK(run.sim.mapped_chunk(run.base + i * k_chunk_bytes) == run.handles[i]);
  }
  run.sim.check_invariants();
}

TEST_CASE("map_run_with_access: a failing chunk leaves the ones before it mapped, as single calls would") {
  run_device one, run;
  for (run_device* d : {&one, &run}) {
    d->sim.map(d->base + 2 * k_chunk_bytes, d->handles[3]);  // the run's third span is taken
  }
  std::size_t done = 0;
  try {
    for (; done < one.handles.size(); ++done)
      one.sim.map_with_access(one.base + done * k_chunk_bytes, one.handles[done]);
  } catch (const vmm_error&) {
  }
  std::size_t mapped = 0;
  CHECK_THROWS_AS(run.sim.map_run_with_access(run.base, run.handles, mapped), vmm_error);
  CHECK(mapped == 2);
  CHECK(done == 2);
  CHECK(run.sim.counters().calls == one.sim.counters().calls);
  CHECK(run.sim.counters().time_ns == one.sim.counters().time_ns);
  CHECK(run.sim.accessible(run.base + k_chunk_bytes));
  run.sim.check_invariants();
}

TEST_CASE(
    "map_run_with_access: a run past its range's end or with a released chunk stops there, with the single call's "
    "error") {
  run_device d, one;
  std::string single;
  try {
    one.sim.map_with_access(one.base + 8 * k_chunk_bytes, one.handles[2]);  // the first chunk past the end
  } catch (const vmm_error& e) {
    single = e.what();
  }
  REQUIRE(!single.empty());
  std::size_t mapped = 0;
  // Chunks 6 and 7 of the 8-chunk range fit; the third is past the end.
  try {
    d.sim.map_run_with_access(d.base + 6 * k_chunk_bytes, d.handles, mapped);
    FAIL("no error");
  } catch (const vmm_error& e) {
    CHECK(std::string(e.what()) == single);
  }
  CHECK(mapped == 2);
  CHECK(d.sim.live().mappings == 2);
  d.sim.check_invariants();
  // A released chunk in the middle of a run: the ones before it are mapped.
  run_device r;
  r.sim.release_chunk(r.handles[1]);
  mapped = 0;
  try {
    r.sim.map_run_with_access(r.base, r.handles, mapped);
    FAIL("no error");
  } catch (const vmm_error& e) {
    CHECK(std::string(e.what()).find("unknown or already released") != std::string::npos);
  }
  CHECK(mapped == 1);
  CHECK(r.sim.live().mappings == 1);
  r.sim.check_invariants();
}

TEST_CASE("map_run_with_access: through an adaptor the run is split into its calls, whose faults hit the same chunk") {
  auto wrapped = std::make_unique<fault_injection_backend>(
      std::make_unique<sim_backend>(sim_backend::k_unlimited, latency_model::h200()), 1);
  fault_injection_backend& f = *wrapped;
  const device_addr base = f.reserve(4 * k_chunk_bytes);
  std::vector<chunk_handle> handles;
  for (int i = 0; i < 3; ++i) handles.push_back(*f.create_chunk());
  f.fail_nth(vmm_call::set_access, 2);  // the second chunk's access fails: its map is undone
  std::size_t mapped = 0;
  CHECK_THROWS_AS(f.map_run_with_access(base, handles, mapped), vmm_error);
  CHECK(mapped == 1);
  CHECK(f.counters().calls_of(vmm_call::map) == 2);
  CHECK(f.counters().calls_of(vmm_call::set_access) == 2);
  CHECK(f.counters().calls_of(vmm_call::unmap) == 1);
  CHECK(f.live().mappings == 1);
}

TEST_CASE("map_run_with_access: a misaligned run is refused at its first chunk") {
  run_device d;
  std::size_t mapped = 0;
  CHECK_THROWS_AS(d.sim.map_run_with_access(d.base + 4096, d.handles, mapped), vmm_error);
  CHECK(mapped == 0);
  CHECK(d.sim.counters().calls_of(vmm_call::map) == 1);
  CHECK(d.sim.live().mappings == 0);
}

namespace {

// A job's runs mapped in one map_runs_with_access call and the same entries mapped by single
// map_with_access calls must end alike: entries done, counts, charges, error text, mappings.
struct job_outcome {
  std::size_t done = 0;
  std::string error;
  vmm_counters counters;
  std::uint64_t mappings = 0;
};

enum class stack { sim, accounting, fault };

std::unique_ptr<vmm_backend> make_stack(stack s) {
  auto sim = std::make_unique<sim_backend>(sim_backend::k_unlimited, latency_model::h200());
  if (s == stack::accounting) return std::make_unique<sim::accounting_backend>(std::move(sim), latency_model::h200());
  if (s == stack::fault) {
    auto f = std::make_unique<fault_injection_backend>(std::move(sim), 1);
    f->fail_nth(vmm_call::set_access, 6);  // the sixth chunk's access fails: its map is undone
    return f;
  }
  return sim;
}

// Two ranges of 8 chunks and 6 chunks, apart; the job maps runs in each, out of address order, and
// `spoil` breaks it (or not) before it runs.
template <typename Spoil>
job_outcome run_job(stack s, bool single, Spoil&& spoil) {
  auto b = make_stack(s);
  const device_addr a = b->reserve(8 * k_chunk_bytes);
  const device_addr gap = b->reserve(2 * k_chunk_bytes);
  const device_addr c = b->reserve(6 * k_chunk_bytes);
  b->free_range(gap);  // so that nothing is reserved right after either range
  std::vector<chunk_handle> h;
  for (int i = 0; i < 9; ++i) h.push_back(*b->create_chunk());
  std::vector<mapping_entry> job = {
      {a + 1 * k_chunk_bytes, h[0]}, {a + 2 * k_chunk_bytes, h[1]}, {a + 3 * k_chunk_bytes, h[2]},
      {c + 4 * k_chunk_bytes, h[3]}, {c + 5 * k_chunk_bytes, h[4]},  // the second range's end
      {a + 6 * k_chunk_bytes, h[5]}, {a + 7 * k_chunk_bytes, h[6]},  // back in the first range
      {c + 0 * k_chunk_bytes, h[7]}, {c + 1 * k_chunk_bytes, h[8]},
  };
  spoil(*b, job, h);
  job_outcome out;
  try {
    if (single) {
      for (; out.done < job.size(); ++out.done) b->map_with_access(job[out.done].va, job[out.done].handle);
    } else {
      b->map_runs_with_access(job, out.done);
    }
  } catch (const vmm_error& e) {
    out.error = e.what();
  }
  out.counters = b->counters();
  out.mappings = b->live().mappings;
  return out;
}

template <typename Spoil>
void check_job_like_single_calls(stack s, Spoil&& spoil, std::size_t expect_done, bool expect_error) {
  const job_outcome single = run_job(s, true, spoil);
  const job_outcome runs = run_job(s, false, spoil);
  CHECK(single.done == expect_done);
  CHECK(runs.done == single.done);
  CHECK(!single.error.empty() == expect_error);
  CHECK(runs.error == single.error);
  CHECK(runs.counters.calls == single.counters.calls);
  CHECK(runs.counters.time_ns == single.counters.time_ns);
  CHECK(runs.mappings == single.mappings);
}

}  // namespace

TEST_CASE("map_runs_with_access: a job's runs end as single calls would, on the sim, through accounting and faults") {
  const auto nothing = [](vmm_backend&, std::vector<mapping_entry>&, std::vector<chunk_handle>&) {};
  for (const stack s : {stack::sim, stack::accounting}) {
    CAPTURE(static_cast<int>(s));
    SUBCASE("every run maps") { check_job_like_single_calls(s, nothing, 9, false); }
    SUBCASE("a span of the third run is taken") {
      check_job_like_single_calls(
          s,
          [](vmm_backend& b, std::vector<mapping_entry>& job, std::vector<chunk_handle>&) {
            b.map(job[6].va, *b.create_chunk());
          },
          6, true);
    }
    SUBCASE("a released chunk in the second run") {
      check_job_like_single_calls(
          s, [](vmm_backend& b, std::vector<mapping_entry>&, std::vector<chunk_handle>& h) { b.release_chunk(h[4]); },
          4, true);
    }
    SUBCASE("a run past its range's end") {
      check_job_like_single_calls(
          s,
          [](vmm_backend&, std::vector<mapping_entry>& job, std::vector<chunk_handle>& h) {
            // After the second range's last chunk, in the same run (a chunk may be mapped twice).
            job.insert(job.begin() + 5, mapping_entry{job[4].va + k_chunk_bytes, h[0]});
          },
          5, true);
    }
    SUBCASE("a misaligned entry") {
      check_job_like_single_calls(
          s, [](vmm_backend&, std::vector<mapping_entry>& job, std::vector<chunk_handle>&) { job[5].va += 4096; }, 5,
          true);
    }
  }
  SUBCASE("an adaptor without a job hook: its run hook per run, the fault at the same chunk") {
    check_job_like_single_calls(stack::fault, nothing, 5, true);
  }
}

TEST_CASE("pset: a run taken from the free pool comes in single-take order, and a reversal is a take and give-back") {
  pset a, b;
  for (pset* p : {&a, &b}) {
    for (std::uint64_t h = 1; h <= 6; ++h) p->put_free(p->adopt(chunk_handle{h}));
  }
  std::vector<chunk_id> run;
  CHECK(a.take_free(4, run) == 4);
  std::vector<chunk_id> single;
  for (int i = 0; i < 4; ++i) single.push_back(*b.take_free());
  CHECK(run == single);
  CHECK(a.free_count() == 2);
  CHECK(a.take_free(5, run) == 2);  // only what the pool holds
  CHECK(a.free_count() == 0);
  CHECK_FALSE(a[run.back()].in_free_pool);

  pset c, d;
  for (pset* p : {&c, &d}) {
    for (std::uint64_t h = 1; h <= 5; ++h) p->put_free(p->adopt(chunk_handle{h}));
  }
  c.reverse_free_pool();
  std::vector<chunk_id> taken;
  (void)d.take_free(5, taken);
  for (chunk_id id : taken) d.put_free(id);
  CHECK(c.free_pool() == d.free_pool());
}

TEST_CASE("async_mapper inline: a job runs in submit, as the worker's, and a failed map waits for a retry") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::h200());
  vtensor::mutex backend_mutex;
  const device_addr base = sim.reserve(4 * k_chunk_bytes);
  const chunk_handle h = *sim.create_chunk();
  async_mapper mapper(sim, backend_mutex, /*inline_jobs=*/true);
  CHECK(mapper.inline_jobs());
  mapping_job job;
  job.maps.push_back({base, h});
  job.create_chunks = 2;
  const std::uint64_t ticket = mapper.submit(std::move(job));
  CHECK(mapper.done(ticket));
  CHECK(sim.accessible(base));
  CHECK(mapper.take_created().size() == 2);
  CHECK(mapper.counters().mapped_chunks == 1);
  CHECK(mapper.counters().worker_vmm_ns == sim.counters().time_ns_of(vmm_call::map) +
                                               sim.counters().time_ns_of(vmm_call::set_access) +
                                               2 * latency_model::h200().cost_ns(vmm_call::create));
  mapper.wait(ticket, true);
  CHECK(mapper.counters().waits == 0);  // never blocked

  mapping_job taken;  // the span is mapped already: the map fails, the job is kept for a retry
  taken.maps.push_back({base, h});
  const std::uint64_t second = mapper.submit(std::move(taken));
  mapper.wait(second, true);
  CHECK(mapper.counters().failed_jobs == 1);
  CHECK(mapper.unmapped_failed() == 1);
  const std::vector<failed_job> failed = mapper.take_failed();
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].ticket == second);
}

TEST_CASE("async_mapper inline: a release's unmaps skip the spans whose map failed, and count the chunks unmapped") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::h200());
  vtensor::mutex backend_mutex;
  const device_addr a = sim.reserve(4 * k_chunk_bytes);
  const device_addr b = sim.reserve(2 * k_chunk_bytes);
  std::vector<chunk_handle> h;
  for (int i = 0; i < 4; ++i) h.push_back(*sim.create_chunk());
  async_mapper mapper(sim, backend_mutex, /*inline_jobs=*/true);
  mapping_job maps;  // four chunks in range a
  for (std::size_t i = 0; i < 4; ++i) maps.maps.push_back({a + i * k_chunk_bytes, h[i]});
  mapper.wait(mapper.submit(std::move(maps)), true);
  sim.unmap(a + 2 * k_chunk_bytes, k_chunk_bytes);  // so that a map there can be made to fail
  sim.map(a + 2 * k_chunk_bytes, h[0]);
  mapping_job failing;  // a second request's page at a + 2, taken: it fails and waits for a retry
  failing.maps.push_back({b, h[1]});
  failing.maps.push_back({a + 2 * k_chunk_bytes, h[2]});
  mapper.wait(mapper.submit(std::move(failing)), true);
  REQUIRE(mapper.unmapped_failed() == 2);           // the job's spans, b's undone
  sim.unmap(a + 2 * k_chunk_bytes, k_chunk_bytes);  // the taken span is free again: never mapped by the job
  SUBCASE("with a failed map, the run skips its span") {
    mapping_job release;
    release.unmaps.push_back({a, 4 * k_chunk_bytes});  // span a + 2 was never mapped by the job
    const std::uint64_t before = mapper.counters().unmapped_chunks;
    mapper.wait(mapper.submit(std::move(release)), true);
    CHECK(mapper.counters().unmapped_chunks - before == 3);
    CHECK(mapper.unmapped_failed() == 1);  // b's is left
    CHECK(sim.live().mappings == 0);
  }
  SUBCASE("with none failed, every run is unmapped whole and counted once") {
    (void)mapper.take_failed();  // given up: b's mapping was undone
    sim.map(a + 2 * k_chunk_bytes, h[2]);
    mapping_job release;
    release.unmaps.push_back({a, 2 * k_chunk_bytes});
    release.unmaps.push_back({a + 2 * k_chunk_bytes, 2 * k_chunk_bytes});
    const std::uint64_t before = mapper.counters().unmapped_chunks;
    const std::uint64_t unmaps = sim.counters().calls_of(vmm_call::unmap);
    mapper.wait(mapper.submit(std::move(release)), true);
    CHECK(mapper.counters().unmapped_chunks - before == 4);
    CHECK(sim.counters().calls_of(vmm_call::unmap) - unmaps == 2);
    CHECK(sim.live().mappings == 0);
  }
  sim.check_invariants();
}

TEST_CASE("operations: a run that cannot be allocated leaves the pool as taking and giving back every chunk would") {
  sim_backend sim(4 * k_chunk_bytes, latency_model::h200());
  const kv_geometry geometry(*model_preset("llama-3-8b"), kv_layout::kv_fused);
  operations ops(sim, geometry, 64 * k_chunk_bytes, make_eviction_order({}), 0);
  std::vector<chunk_id> chunks;
  REQUIRE(ops.pool().alloc_run(4, nullptr, chunks));  // the device is full
  for (chunk_id c : chunks) ops.pool().unuse(c);
  std::vector<chunk_id> expected = ops.pool().records().free_pool();
  std::reverse(expected.begin(), expected.end());
  const std::uint64_t hits = ops.counters().pool_hits;
  const std::uint64_t calls = sim.counters().total_calls();
  std::vector<chunk_id> out{chunk_id{99}};
  CHECK_FALSE(ops.pool().alloc_run(5, &ops.cache(), out));  // nothing to create, nothing to evict
  CHECK(out == std::vector<chunk_id>{chunk_id{99}});
  CHECK(ops.pool().records().free_pool() == expected);
  CHECK(ops.counters().pool_hits == hits + 4);
  CHECK(sim.counters().total_calls() == calls);
  out.clear();
  CHECK(ops.pool().alloc_run(3, nullptr, out));  // what fits still comes, most recently freed first
  CHECK(out == std::vector<chunk_id>(expected.rbegin(), expected.rbegin() + 3));
  for (chunk_id c : out) ops.pool().unuse(c);
  ops.check_invariants();
}

namespace {

// A full device whose chunks are: 5 in the free pool (in a scrambled order) and three cached
// prefixes of one kv-fused page each (32 chunks a page), least recently used first.
struct evicting_pool {
  const kv_geometry geometry{*model_preset("llama-3-8b"), kv_layout::kv_fused};
  const std::uint32_t tensors = geometry.tensors();
  sim_backend sim{(3 * std::uint64_t{geometry.tensors()} + 5) * k_chunk_bytes, latency_model::zero()};
  operations ops{sim, geometry, 64 * k_chunk_bytes, make_eviction_order({}), 0};
  evicting_pool() {
    std::vector<chunk_id> all;
    REQUIRE(ops.pool().alloc_run(3 * std::size_t{tensors} + 5, nullptr, all));
    for (std::uint64_t node = 0; node < 3; ++node) {
      const std::vector<token_block> key{{node + 1, 16}};
      radix_path path = ops.cache().tree().insert(key);
      page_version v;
      v.page = 0;
      v.valid_bytes = 16 * geometry.bytes_per_token_per_tensor();
      v.last_token = 15;
      v.chunks.assign(all.begin() + static_cast<std::ptrdiff_t>(node * tensors),
                      all.begin() + static_cast<std::ptrdiff_t>((node + 1) * tensors));
      ops.cache().record_page(*path.deepest(), std::move(v));
    }
    for (const std::size_t i : {2, 0, 4, 1, 3}) ops.pool().unuse(all[3 * std::size_t{tensors} + i]);
  }
  // What alloc_chunks(count, true, out) must match: single evicting takes, all given back on failure.
  bool single_takes(std::size_t count, std::vector<chunk_id>& out) {
    std::vector<chunk_id> got;
    while (got.size() < count) {
      const auto c = ops.pool().alloc_evicting(ops.cache());
      if (!c) {
        for (chunk_id g : got) ops.pool().unuse(g);
        return false;
      }
      got.push_back(*c);
    }
    out.insert(out.end(), got.begin(), got.end());
    return true;
  }
};

// `settled`: every chunk taken was given back (the invariants want unreferenced chunks pooled).
void check_same(evicting_pool& run, evicting_pool& single, bool settled = true) {
  CHECK(run.ops.pool().records().free_pool() == single.ops.pool().records().free_pool());
  CHECK(run.ops.counters().pool_hits == single.ops.counters().pool_hits);
  CHECK(run.ops.counters().evicted_nodes == single.ops.counters().evicted_nodes);
  CHECK(run.ops.cache().tree().page_count() == single.ops.cache().tree().page_count());
  CHECK(run.sim.counters().calls == single.sim.counters().calls);
  if (!settled) return;
  run.ops.check_invariants();
  single.ops.check_invariants();
}

}  // namespace

TEST_CASE("operations: a run evicted for on a full device ends as single evicting takes would, failing or not") {
  evicting_pool run, single;
  const std::size_t t = run.tensors;
  SUBCASE("more than the pool and every cached page: fails, everything evicted and back in the pool") {
    std::vector<chunk_id> a{chunk_id{999}}, b{chunk_id{999}};
    CHECK_FALSE(run.ops.pool().alloc_run(3 * t + 6, &run.ops.cache(), a));
    CHECK_FALSE(single.single_takes(3 * t + 6, b));
    CHECK(a == std::vector<chunk_id>{chunk_id{999}});
    CHECK(run.ops.pool().records().free_count() == 3 * t + 5);
    CHECK(run.ops.counters().evicted_nodes == 3);
    check_same(run, single);
  }
  SUBCASE("the pool, one page and part of the next: succeeds, the rest of that page stays in the pool") {
    std::vector<chunk_id> a{chunk_id{999}}, b{chunk_id{999}};
    REQUIRE(run.ops.pool().alloc_run(5 + t + 7, &run.ops.cache(), a));
    REQUIRE(single.single_takes(5 + t + 7, b));
    CHECK(a == b);
    CHECK(run.ops.pool().records().free_count() == t - 7);
    CHECK(run.ops.counters().evicted_nodes == 2);
    check_same(run, single, false);
    for (std::size_t i = 1; i < a.size(); ++i) {
      run.ops.pool().unuse(a[i]);
      single.ops.pool().unuse(b[i]);
    }
    check_same(run, single);
  }
}
