// The accounting adaptor books each VMM call to the side whose view it was made through (the
// adaptor for the step, worker_view() for the worker), with the inner backend's charged time and
// the latency model's price.

#include <doctest/doctest.h>

#include <memory>
#include <thread>

#include "backends/fault_injection_backend.hpp"
#include "backends/sim_backend.hpp"
#include "core/manager.hpp"
#include "sim/accounting_backend.hpp"
#include "tests/core/manager_test_support.hpp"

using namespace vtensor;
using namespace vtensor::sim;

TEST_CASE("accounting_backend: map_with_access is booked as a map and a set-access, on the caller's side") {
  accounting_backend b(std::make_unique<sim_backend>(sim_backend::k_unlimited, latency_model::h200()),
                       latency_model::h200());
  const device_addr base = b.reserve(4 * k_chunk_bytes);
  const auto h = b.create_chunk();
  REQUIRE(h);
  b.map_with_access(base, *h);
  const auto m = static_cast<std::size_t>(vmm_call::map);
  const auto a = static_cast<std::size_t>(vmm_call::set_access);
  CHECK(b.step_side().calls[m] == 1);
  CHECK(b.step_side().calls[a] == 1);
  CHECK(b.step_side().model_ns[a] == b.price_ns(vmm_call::set_access));
  CHECK(b.step_side().charged_ns[a] == b.inner().counters().time_ns_of(vmm_call::set_access));
  CHECK(b.counters().calls_of(vmm_call::set_access) == 1);
  CHECK(b.counters().time_ns_of(vmm_call::map) == b.inner().counters().time_ns_of(vmm_call::map));
  CHECK(dynamic_cast<const sim_backend&>(b.inner()).accessible(base));

  b.worker_view().map_with_access(base + k_chunk_bytes, *h);  // the worker's view, on this thread
  CHECK(b.step_side().calls[a] == 1);
  CHECK(b.worker_side().calls[m] == 1);
  CHECK(b.worker_side().calls[a] == 1);
  CHECK(b.counters().calls_of(vmm_call::map) == 1);  // each view counts its own calls
  CHECK(b.worker_view().counters().calls_of(vmm_call::map) == 1);
  CHECK(b.worker_view().counters().time_ns_of(vmm_call::map) == b.worker_side().charged_ns[m]);
  CHECK(b.inner().counters().calls_of(vmm_call::map) == 2);

  std::thread other([&] { b.map_with_access(base + 2 * k_chunk_bytes, *h); });  // another thread, the step's view
  other.join();
  CHECK(b.step_side().calls[m] == 2);
  CHECK(b.worker_side().calls[m] == 1);
  b.unmap(base, 3 * k_chunk_bytes);
  b.release_chunk(*h);
  b.free_range(base);
  CHECK(b.live().chunks == 0);
  CHECK(b.worker_view().live().chunks == 0);
}

TEST_CASE("accounting_backend: a failed map_with_access books the set-access and the unmap that undid it") {
  auto faulty = std::make_unique<fault_injection_backend>(
      std::make_unique<sim_backend>(sim_backend::k_unlimited, latency_model::h200()));
  faulty->fail_nth(vmm_call::set_access, 1);
  accounting_backend b(std::move(faulty), latency_model::h200());
  const device_addr base = b.reserve(2 * k_chunk_bytes);
  const auto h = b.create_chunk();
  REQUIRE(h);
  CHECK_THROWS_AS(b.map_with_access(base, *h), vmm_error);
  CHECK(b.live().mappings == 0);
  CHECK(b.counters().calls_of(vmm_call::set_access) == 1);
  CHECK(b.counters().calls_of(vmm_call::unmap) == 1);
  CHECK(b.step_side().calls[static_cast<std::size_t>(vmm_call::unmap)] == 1);
  b.release_chunk(*h);
  b.free_range(base);
}

TEST_CASE(
    "accounting_backend: a manager's views book its steps to the step side and its worker's jobs to the worker's") {
  for (const bool inline_jobs : {true, false}) {
    CAPTURE(inline_jobs);
    accounting_backend b(std::make_unique<sim_backend>(sim_backend::k_unlimited, latency_model::h200()),
                         latency_model::h200());
    manager_config config = core_testing::llama_config(kv_layout::token_major, 4);  // 16 tokens a page
    config.scheduler.async_lookahead = true;
    config.scheduler.inline_worker = inline_jobs;
    {
      manager m(b.views(), config);
      REQUIRE(m.create(request_id{1}, core_testing::run_of_blocks(0, 2, 16), 40).ok());
      for (int i = 0; i < 200; ++i) REQUIRE(m.extend(request_id{1}, 1).ok());
      m.settle();
      const auto calls = [](const vmm_side& s) {
        std::uint64_t n = 0;
        for (const std::uint64_t c : s.calls) n += c;
        return n;
      };
      CHECK(calls(b.step_side()) > 0);                                            // the first pages
      CHECK(b.worker_side().calls[static_cast<std::size_t>(vmm_call::map)] > 0);  // the lookahead's
      CHECK(m.stats().async_vmm_ns == b.worker_side().total_charged_ns());
      const vmm_counters total = m.vmm();  // both views' calls
      CHECK(total.total_calls() == calls(b.step_side()) + calls(b.worker_side()));
      CHECK(total.total_calls() == b.inner().counters().total_calls());
      CHECK(total.total_time_ns() == b.inner().counters().total_time_ns());
      m.shutdown();
    }
    CHECK(b.live().chunks == 0);
  }
}
