// The accounting adaptor books each VMM call to the thread that made it (step or worker), with the
// inner backend's charged time and the latency model's price.

#include <doctest/doctest.h>

#include <memory>
#include <thread>

#include "backends/fault_injection_backend.hpp"
#include "backends/sim_backend.hpp"
#include "sim/accounting_backend.hpp"

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

  std::thread worker([&] { b.map_with_access(base + k_chunk_bytes, *h); });  // not the step thread
  worker.join();
  CHECK(b.step_side().calls[a] == 1);
  CHECK(b.worker_side().calls[m] == 1);
  CHECK(b.worker_side().calls[a] == 1);
  CHECK(b.counters().calls_of(vmm_call::map) == 2);
  b.unmap(base, 2 * k_chunk_bytes);
  b.release_chunk(*h);
  b.free_range(base);
  CHECK(b.live().chunks == 0);
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
