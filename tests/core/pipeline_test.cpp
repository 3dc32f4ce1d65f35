// Pipelined admission on the recording backend: which VMM calls run on which thread (Note
// [Pipelined admission], Note [Releases on the worker] in core/scheduler.cpp), and a map failing
// on the worker (Note [A map failing on the worker] in core/async_mapper.cpp).

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/backend_adaptor.hpp"
#include "backends/fault_injection_backend.hpp"
#include "backends/sim_backend.hpp"
#include "core/async_mapper.hpp"
#include "core/manager.hpp"
#include "core/mutex.hpp"
#include "tests/support/recording_backend.hpp"

using namespace vtensor;
using vtensor::testing::recording_backend;

// CI runs this suite under ThreadSanitizer (tools/test-all.sh, label "threads"): the admissions
// mapped beside a step run on two threads.
TEST_SUITE_BEGIN("threads");
using calls = std::vector<std::string>;

namespace {

// One layer, one 128-dim KV head, bf16, K/V split: 2 tensors of 256 bytes a token, 8192 tokens a
// page; a 16384-token context makes 2 pages a tensor, 8 MiB a vTensor.
manager_config pipeline_config(std::uint64_t chunk_tokens = 0) {
  manager_config c{kv_geometry(model_spec{"tiny", 1, 1, 128, 2}, kv_layout::kv_split), {}, "lru"};
  c.scheduler.max_context_tokens = 16384;
  c.scheduler.pipeline = true;
  c.scheduler.pipeline_chunk_tokens = chunk_tokens;
  return c;
}

// The recording backend, each call tagged with the thread that made it: "S " the thread that
// built the adaptor (the step thread), "W " any other (the mapping worker).
class sided final : public backend_adaptor {
 public:
  sided() : sided(std::make_unique<recording_backend>()) {}
  [[nodiscard]] std::string do_name() const override { return "sided(recording)"; }
  /// The calls since the last take(), tagged.
  calls take() {
    std::lock_guard lock(mutex_);
    return std::exchange(log_, {});
  }
  /// The worker's next map blocks inside the driver call (holding the backend lock) until
  /// release_worker(); worker_held() returns once it is there. The worker's maps after it take
  /// 2 ms each, so that a lock handed over unfairly would go back to the worker.
  void hold_next_worker_map() { hold_map_ = true; }
  void worker_held() { held_.acquire(); }
  void release_worker() { release_.release(); }

 private:
  explicit sided(std::unique_ptr<recording_backend> r) : backend_adaptor(std::move(r)) {
    rec_ = &dynamic_cast<recording_backend&>(inner());
  }
  template <class F>
  decltype(auto) tagged(vmm_call call, F&& f) {
    struct tag {
      sided& self;
      ~tag() {
        std::lock_guard lock(self.mutex_);
        self.log_.push_back((std::this_thread::get_id() == self.step_ ? "S " : "W ") + self.rec_->log().back());
      }
    } t{*this};
    return forward(call, std::forward<F>(f));
  }
  device_addr do_reserve(std::uint64_t b) override {
    return tagged(vmm_call::reserve, [&] { return inner().reserve(b); });
  }
  void do_free_range(device_addr a) override {
    tagged(vmm_call::free_range, [&] { inner().free_range(a); });
  }
  std::optional<chunk_handle> do_create_chunk() override {
    return tagged(vmm_call::create, [&] { return inner().create_chunk(); });
  }
  void do_release_chunk(chunk_handle h) override {
    tagged(vmm_call::release, [&] { inner().release_chunk(h); });
  }
  void do_map(device_addr va, chunk_handle h) override {
    tagged(vmm_call::map, [&] {
      if (std::this_thread::get_id() != step_ && hold_map_.exchange(false)) {
        held_.release();
        release_.acquire();
        slow_ = true;
      } else if (slow_ && std::this_thread::get_id() != step_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a driver call that takes time
      }
      inner().map(va, h);
    });
  }
  void do_set_access(device_addr va, std::uint64_t b) override {
    tagged(vmm_call::set_access, [&] { inner().set_access(va, b); });
  }
  void do_unmap(device_addr va, std::uint64_t b) override {
    tagged(vmm_call::unmap, [&] { inner().unmap(va, b); });
  }

  recording_backend* rec_ = nullptr;
  std::atomic<bool> hold_map_{false};
  std::atomic<bool> slow_{false};  // worker maps after the held one take 2 ms
  std::binary_semaphore held_{0};
  std::binary_semaphore release_{0};
  std::thread::id step_ = std::this_thread::get_id();
  std::mutex mutex_;
  calls log_;
};

}  // namespace

TEST_CASE("pipeline: admissions map on the worker, the next extend waits first, releases unmap on the worker") {
  sided b;
  manager m(b, pipeline_config());

  // Create: the step thread takes the chunks and the range; every map goes to the worker.
  create_result c = m.create(request_id{1}, {}, 100);
  REQUIRE(c.ok());
  CHECK(c.effects.step_pages == 0);
  CHECK(c.effects.worker_pages == 1);
  CHECK(c.effects.first_pages == 1);
  CHECK(c.effects.first_job == c.effects.worker_job);
  m.settle();
  CHECK(b.take() == calls{"S create -> c1", "S create -> c2", "S reserve 8MiB -> r0", "W map r0+0 c1",
                          "W set_access r0+0 2MiB", "W map r0+4MiB c2", "W set_access r0+4MiB 2MiB"});

  // A page boundary: the extend waits for the request's last job before it maps on its thread.
  extend_result e = m.extend(request_id{1}, 8100);
  REQUIRE(e.ok());
  CHECK(e.effects.waited_first);
  CHECK(e.effects.waited_job == c.effects.worker_job);
  CHECK(e.effects.step_pages == 1);
  CHECK(b.take() == calls{"S create -> c3", "S create -> c4", "S map r0+2MiB c3", "S set_access r0+2MiB 2MiB",
                          "S map r0+6MiB c4", "S set_access r0+6MiB 2MiB"});

  // Finish: bookkeeping now, the unmaps on the worker; nobody waits.
  const op_effects f = m.finish(request_id{1});
  CHECK(f.waited_job == 0);
  CHECK(f.worker_unmaps == 4);
  CHECK(f.unmap_runs == 2);
  // The next request reuses the cached range and pooled chunks: its maps queue behind the unmaps.
  REQUIRE(m.create(request_id{2}, {}, 100).ok());
  m.settle();
  const calls log = b.take();
  CHECK(log == calls{"W unmap r0+0 4MiB", "W unmap r0+4MiB 4MiB", "W map r0+0 c4", "W set_access r0+0 2MiB",
                     "W map r0+4MiB c2", "W set_access r0+4MiB 2MiB"});
  m.check_invariants();
  m.finish(request_id{2});
  m.settle();
  CHECK(m.trim() == 4);
  m.check_invariants();
}

// Note [Driver hand-over] in core/async_mapper.cpp: a step-thread operation waits for the worker's
// call in flight, then holds the driver until it returns; the worker's next call waits for it.
TEST_CASE("pipeline: a step-thread operation waits for the worker's call in flight, then holds the driver") {
  sided b;
  manager m(b, pipeline_config());
  b.hold_next_worker_map();
  REQUIRE(m.create(request_id{1}, {}, 16000).ok());  // 2 pages a tensor: 4 maps on the worker
  b.worker_held();                                   // the worker is inside its first map
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the step thread block on the lock
    b.release_worker();
  });
  REQUIRE(m.create(request_id{2}, {}, 100).ok());  // its calls wait for that map, then run together
  releaser.join();
  m.settle();
  const calls log = b.take();
  // The step thread's calls of the second create come in one run, after the map that was in flight.
  std::vector<std::size_t> second;  // positions of the step-thread calls after the first worker call
  bool worker_seen = false;
  for (std::size_t i = 0; i < log.size(); ++i) {
    if (log[i].starts_with("W ")) worker_seen = true;
    if (worker_seen && log[i].starts_with("S ")) second.push_back(i);
  }
  INFO(fmt::format("{}", fmt::join(log, " | ")));
  // The first create: 4 chunks and the range on the step thread, then the worker's first call,
  // a map and its set-access as one (map_with_access), was in flight.
  REQUIRE(log.size() > 7);
  CHECK(log[5] == "W map r0+0 c1");
  CHECK(log[6] == "W set_access r0+0 2MiB");
  REQUIRE(!second.empty());
  CHECK(second.front() == 7);  // right after the call in flight, before the worker's next map
  CHECK(second.back() - second.front() + 1 == second.size());  // contiguous
  CHECK(m.stats().driver_lock_waits <= 1);                     // one wait at most, for the call in flight
  m.check_invariants();
}

TEST_CASE("async mapper: while the step thread holds the driver the worker starts no call, and a wait lets go") {
  sided b;
  vtensor::mutex backend_lock;
  const device_addr va = b.reserve(4ull << 20);
  const chunk_handle c1 = *b.create_chunk();
  const chunk_handle c2 = *b.create_chunk();
  (void)b.take();
  async_mapper w(b, backend_lock);
  w.hold_driver();
  const std::uint64_t t1 = w.submit(mapping_job{{{va, c1}}, 0, {}, {}});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // time for the worker to run, were it allowed
  CHECK(!w.done(t1));
  CHECK(b.take().empty());
  // A wait for the job lets go of the driver while it blocks (no deadlock) and takes it back.
  w.wait(t1, true);
  CHECK(b.take() == calls{"W map r0+0 c1", "W set_access r0+0 2MiB"});
  const std::uint64_t t2 = w.submit(mapping_job{{{va + (2ull << 20), c2}}, 0, {}, {}});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(!w.done(t2));  // held again after the wait
  w.release_driver();
  w.wait(t2, false);
  CHECK(b.take() == calls{"W map r0+2MiB c2", "W set_access r0+2MiB 2MiB"});
  w.drain();
  b.unmap(va, 4ull << 20);
  b.release_chunk(c1);
  b.release_chunk(c2);
  b.free_range(va);
}

TEST_CASE("pipeline: with chunked prefill the first chunk's pages go in a first job, the rest after") {
  sided b;
  manager m(b, pipeline_config(100));                         // a step computes 100 prompt tokens at most
  const create_result c = m.create(request_id{1}, {}, 9000);  // 2 pages; the first chunk needs 1
  REQUIRE(c.ok());
  CHECK(c.effects.worker_pages == 2);
  CHECK(c.effects.first_pages == 1);
  CHECK(c.effects.first_job + 1 == c.effects.worker_job);  // two jobs
  m.settle();
  const calls log = b.take();
  CHECK(log == calls{"S create -> c1", "S create -> c2", "S create -> c3", "S create -> c4", "S reserve 8MiB -> r0",
                     "W map r0+0 c1", "W set_access r0+0 2MiB", "W map r0+4MiB c2", "W set_access r0+4MiB 2MiB",
                     "W map r0+2MiB c3", "W set_access r0+2MiB 2MiB", "W map r0+6MiB c4", "W set_access r0+6MiB 2MiB"});
  m.finish(request_id{1});
  m.settle();
  m.check_invariants();
}

TEST_CASE("pipeline: a map failing on the worker is retried by the step thread at its next wait") {
  auto owner = std::make_unique<fault_injection_backend>(std::make_unique<sim_backend>(sim_backend::k_unlimited));
  fault_injection_backend& fb = *owner;
  fb.fail_nth(vmm_call::map, 2);  // the worker's second map: the create's job fails half-way
  manager m(fb, pipeline_config());
  REQUIRE(m.create(request_id{1}, {}, 100).ok());
  m.check_invariants();  // may find the job in flight or failed: either way the records agree
  // The extend across the page boundary waits for the job, finds it failed, maps it again.
  const extend_result e = m.extend(request_id{1}, 8100);
  REQUIRE(e.ok());
  CHECK(e.effects.retried_jobs == 1);
  CHECK(fb.faults_injected(vmm_call::map) == 1);
  m.settle();
  m.check_invariants();
  CHECK(fb.live().mappings == 4);
  m.finish(request_id{1});
  m.settle();
  m.check_invariants();
  CHECK(fb.live().mappings == 0);
  m.trim();
  CHECK(fb.live().chunks == 0);
}

TEST_CASE("pipeline: a request released before its failed maps are retried leaks nothing") {
  auto owner = std::make_unique<fault_injection_backend>(std::make_unique<sim_backend>(sim_backend::k_unlimited));
  fault_injection_backend& fb = *owner;
  fb.fail_nth(vmm_call::map, 1);
  manager m(fb, pipeline_config());
  REQUIRE(m.create(request_id{1}, {}, 100).ok());
  REQUIRE(m.create(request_id{2}, {}, 100).ok());
  m.preempt(request_id{1});  // its unmaps skip the page that never got mapped
  m.settle();                // request 2's job went through: nothing to retry
  m.check_invariants();
  CHECK(fb.live().mappings == 2);
  m.finish(request_id{2});
  m.settle();
  m.check_invariants();
  CHECK(fb.live().mappings == 0);
  m.trim();
  CHECK(fb.live().chunks == 0);
  CHECK(fb.live().ranges == 0);
}

TEST_CASE("pipeline: a map that keeps failing surfaces at the wait, and the request can still be released") {
  auto owner = std::make_unique<fault_injection_backend>(std::make_unique<sim_backend>(sim_backend::k_unlimited));
  fault_injection_backend& fb = *owner;
  fb.fail_every(vmm_call::map, 1);
  manager m(fb, pipeline_config());
  REQUIRE(m.create(request_id{1}, {}, 100).ok());
  CHECK_THROWS_AS((void)m.extend(request_id{1}, 8100), vmm_error);
  m.check_invariants();  // the failed pages are known to be unmapped
  fb.clear_faults();
  m.finish(request_id{1});
  m.settle();
  m.check_invariants();
  CHECK(fb.live().mappings == 0);
  m.trim();
  CHECK(fb.live().chunks == 0);
}

TEST_SUITE_END();
