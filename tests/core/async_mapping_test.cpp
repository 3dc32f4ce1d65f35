// The asynchronous mapping worker: lookahead pages mapped off the step, steps waiting only for
// pages not mapped yet, chunks created ahead of need, and a steady state without cuMemCreate.

#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "backends/backend_adaptor.hpp"
#include "backends/sim_backend.hpp"
#include "core/manager.hpp"
#include "tests/core/manager_test_support.hpp"

using namespace vtensor;
using namespace vtensor::core_testing;

namespace {

/// A sim device the test may probe while the worker maps: every call and probe holds one mutex.
class probed_sim final : public backend_adaptor {
 public:
  probed_sim() : backend_adaptor(std::make_unique<sim_backend>(sim_backend::k_unlimited, latency_model::h200())) {}
  [[nodiscard]] std::string do_name() const override { return "probed(sim)"; }
  [[nodiscard]] bool accessible(device_addr va) const {
    std::lock_guard lock(mutex_);
    return sim().accessible(va);
  }

 private:
  [[nodiscard]] const sim_backend& sim() const { return dynamic_cast<const sim_backend&>(inner()); }
  template <class F>
  decltype(auto) locked(vmm_call call, F&& f) {
    std::lock_guard lock(mutex_);
    return forward(call, std::forward<F>(f));
  }
  device_addr do_reserve(std::uint64_t bytes) override {
    return locked(vmm_call::reserve, [&] { return inner().reserve(bytes); });
  }
  void do_free_range(device_addr base) override {
    locked(vmm_call::free_range, [&] { inner().free_range(base); });
  }
  std::optional<chunk_handle> do_create_chunk() override {
    return locked(vmm_call::create, [&] { return inner().create_chunk(); });
  }
  void do_release_chunk(chunk_handle h) override {
    locked(vmm_call::release, [&] { inner().release_chunk(h); });
  }
  void do_map(device_addr va, chunk_handle h) override {
    locked(vmm_call::map, [&] { inner().map(va, h); });
  }
  void do_set_access(device_addr va, std::uint64_t bytes) override {
    locked(vmm_call::set_access, [&] { inner().set_access(va, bytes); });
  }
  void do_unmap(device_addr va, std::uint64_t bytes) override {
    locked(vmm_call::unmap, [&] { inner().unmap(va, bytes); });
  }
  mutable std::mutex mutex_;
};

}  // namespace

TEST_CASE("async lookahead: pages mapped by the worker, needed pages in place when extend returns") {
  probed_sim sim;
  manager_config config = llama_config(kv_layout::token_major, 4);  // 16 tokens a page
  config.scheduler.async_lookahead = true;
  manager m(sim, config);
  REQUIRE(m.create(request_id{1}, run_of_blocks(0, 2, 16), 40).ok());
  for (int i = 0; i < 5000; ++i) {
    REQUIRE(m.extend(request_id{1}, 1).ok());
    if (i % 97 == 0) {
      // Every page holding tokens is mapped and accessible: the step never sees a missing page.
      const auto v = *m.view(request_id{1});
      for (std::uint64_t p = 0; p * 16 < v.tokens; ++p) REQUIRE(sim.accessible(v.base + p * k_chunk_bytes));
    }
  }
  m.settle();  // the worker's figures are final
  m.check_invariants();
  const auto s = m.stats();
  CHECK(s.async_mapped_chunks >= 5040 / 16 - 4);  // all but the first pages came from the worker
  CHECK(s.async_vmm_ns > 0);
  CHECK(s.async_vmm_ns < s.vmm.total_time_ns());
  CHECK(m.view(request_id{1})->mapped_tokens >= 5040 + 3 * 16);
  MESSAGE("mapping waits: " << s.mapping_waits << ", " << s.mapping_wait_ns / 1000 << " us");
  m.finish(request_id{1});
  m.check_invariants();
  m.shutdown();
  CHECK(sim.live().chunks == 0);
  CHECK(sim.live().mappings == 0);
}

TEST_CASE("async lookahead: many requests, forks and preemptions keep every invariant") {
  sim_backend sim(200 * k_chunk_bytes, latency_model::zero());
  manager_config config = llama_config(kv_layout::token_major, 2);
  config.scheduler.async_lookahead = true;
  manager m(sim, config);
  std::uint64_t next = 1;
  for (int round = 0; round < 200; ++round) {
    const request_id a{next++};
    if (!m.create(a, run_of_blocks(round % 7, 3, 16), 60).ok()) continue;
    const request_id b{next++};
    if (!m.fork(a, b).ok()) {
      m.preempt(a);
      continue;
    }
    for (int k = 0; k < 30; ++k) {
      if (!m.extend(a, 3).ok() || !m.extend(b, 2).ok()) break;
    }
    m.finish(a);
    if (round % 3 == 0) {
      m.preempt(b);
    } else {
      m.finish(b);
    }
    if (round % 20 == 0) m.check_invariants();
  }
  m.settle();
  m.check_invariants();
  CHECK(m.stats().async_mapped_chunks > 0);
  m.shutdown();
  CHECK(sim.live().chunks == 0);
  CHECK(sim.live().ranges == 0);
}

TEST_CASE("create ahead: after warm-up a steady state creates no chunk") {
  sim_backend sim(sim_backend::k_unlimited, latency_model::zero());
  manager_config config = llama_config(kv_layout::kv_fused, 1);
  config.scheduler.async_lookahead = true;
  config.scheduler.create_ahead_chunks = 64;
  manager m(sim, config);
  std::uint64_t created_after_warmup = 0;
  for (std::uint64_t i = 0; i < 300; ++i) {
    REQUIRE(m.create(request_id{i}, {}, 1500).ok());
    if (i >= 2) {
      REQUIRE(m.extend(request_id{i - 2}, 700).ok());
      m.finish(request_id{i - 2});
    }
    if (i == 50) {
      m.settle();  // the worker's chunks are in the pool
      m.check_invariants();
      created_after_warmup = m.stats().chunks_created;
    }
  }
  m.settle();
  m.check_invariants();
  const auto s = m.stats();
  CHECK(s.chunks_created_ahead > 0);
  CHECK(s.chunks_created == created_after_warmup);  // steady state: zero creates
  CHECK(s.memory.free_pool_bytes >= 64 * k_chunk_bytes);
}

namespace {

/// A sim device whose maps from any thread but its builder's (the worker's) block while the gate
/// is closed: a worker job stays in flight for as long as the test wants.
class gated_sim final : public backend_adaptor {
 public:
  gated_sim() : backend_adaptor(std::make_unique<sim_backend>(sim_backend::k_unlimited, latency_model::zero())) {}
  [[nodiscard]] std::string do_name() const override { return "gated(sim)"; }
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    cv_.notify_all();
  }
  /// Whether a worker map waits at the gate now.
  [[nodiscard]] bool blocked() const {
    std::lock_guard lock(mutex_);
    return waiting_ > 0;
  }

 private:
  device_addr do_reserve(std::uint64_t bytes) override {
    return forward(vmm_call::reserve, [&] { return inner().reserve(bytes); });
  }
  void do_free_range(device_addr base) override {
    forward(vmm_call::free_range, [&] { inner().free_range(base); });
  }
  std::optional<chunk_handle> do_create_chunk() override {
    return forward(vmm_call::create, [&] { return inner().create_chunk(); });
  }
  void do_release_chunk(chunk_handle h) override {
    forward(vmm_call::release, [&] { inner().release_chunk(h); });
  }
  void do_map(device_addr va, chunk_handle h) override {
    if (std::this_thread::get_id() != builder_) {
      std::unique_lock lock(mutex_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
      --waiting_;
    }
    forward(vmm_call::map, [&] { inner().map(va, h); });
  }
  void do_set_access(device_addr va, std::uint64_t bytes) override {
    forward(vmm_call::set_access, [&] { inner().set_access(va, bytes); });
  }
  void do_unmap(device_addr va, std::uint64_t bytes) override {
    forward(vmm_call::unmap, [&] { inner().unmap(va, bytes); });
  }
  const std::thread::id builder_ = std::this_thread::get_id();
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
  int waiting_ = 0;
};

}  // namespace

TEST_CASE("async lookahead: check_invariants() does not wait for a job in flight, nor change it") {
  gated_sim gate;
  manager_config config = llama_config(kv_layout::token_major, 2);
  config.scheduler.async_lookahead = true;
  manager m(gate, config);
  const create_result c = m.create(request_id{1}, {}, 32);  // 2 pages now, 2 handed to the worker
  REQUIRE(c.ok());
  REQUIRE(c.effects.worker_pages == 2);
  while (!gate.blocked()) std::this_thread::yield();  // the worker is inside the job, at the gate

  // The check returns while the job is in flight (were it to wait, it would never return: the
  // gate opens only below), and leaves the job as it was.
  auto check = std::async(std::launch::async, [&] { m.check_invariants(); });
  const bool returned = check.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  CHECK(returned);
  CHECK(gate.blocked());  // the job is still where it was (stats() would wait: the worker holds the backend)
  gate.open();
  check.get();

  m.settle();
  CHECK(m.stats().async_mapped_chunks == 2);
  m.check_invariants();  // the whole check, backend counts included
  m.finish(request_id{1});
  m.shutdown();
  CHECK(gate.live().mappings == 0);
}
