#include "backends/fault_injection_backend.hpp"

#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

namespace vtensor {

fault_injection_backend::fault_injection_backend(std::unique_ptr<vmm_backend> inner, std::uint64_t seed)
    : backend_adaptor(std::move(inner)), seed_(seed), rng_(seed) {}

void fault_injection_backend::fail_nth(vmm_call call, std::uint64_t n) {
  fault_rule& rule = rules_[static_cast<std::size_t>(call)];
  rule.nth = n;
  rule.repeat = false;
}

void fault_injection_backend::fail_every(vmm_call call, std::uint64_t n) {
  fault_rule& rule = rules_[static_cast<std::size_t>(call)];
  rule.nth = n;
  rule.repeat = true;
}

void fault_injection_backend::fail_with_probability(vmm_call call, double p) {
  if (!(p >= 0.0 && p <= 1.0)) {
    throw std::invalid_argument(
        fmt::format("fault_injection_backend: probability {} for {} is not in [0, 1]", p, to_string(call)));
  }
  rules_[static_cast<std::size_t>(call)].probability = p;
}

void fault_injection_backend::clear_faults() { rules_ = {}; }

std::uint64_t fault_injection_backend::faults_injected() const {
  return std::accumulate(injected_.begin(), injected_.end(), std::uint64_t{0});
}

bool fault_injection_backend::should_fail(vmm_call call) {
  const fault_rule& rule = rules_[static_cast<std::size_t>(call)];
  const std::uint64_t number = ++received_[static_cast<std::size_t>(call)];
  bool fail = false;
  if (rule.nth != 0) {
    fail = rule.repeat ? number % rule.nth == 0 : number == rule.nth;
  }
  if (rule.probability > 0.0) {
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    fail = (uniform(rng_) < rule.probability) || fail;
  }
  if (fail) {
    ++injected_[static_cast<std::size_t>(call)];
  }
  return fail;
}

void fault_injection_backend::maybe_throw(vmm_call call, device_addr va) {
  if (should_fail(call)) {
    throw vmm_error(call, va, "injected fault");
  }
}

device_addr fault_injection_backend::do_reserve(std::uint64_t bytes) {
  maybe_throw(vmm_call::reserve, 0);
  return forward(vmm_call::reserve, [&] { return inner().reserve(bytes); });
}

void fault_injection_backend::do_free_range(device_addr base) {
  maybe_throw(vmm_call::free_range, base);
  forward(vmm_call::free_range, [&] { inner().free_range(base); });
}

std::optional<chunk_handle> fault_injection_backend::do_create_chunk() {
  if (should_fail(vmm_call::create)) {
    return std::nullopt;
  }
  return forward(vmm_call::create, [&] { return inner().create_chunk(); });
}

void fault_injection_backend::do_release_chunk(chunk_handle h) {
  maybe_throw(vmm_call::release, 0);
  forward(vmm_call::release, [&] { inner().release_chunk(h); });
}

void fault_injection_backend::do_map(device_addr va, chunk_handle h) {
  maybe_throw(vmm_call::map, va);
  forward(vmm_call::map, [&] { inner().map(va, h); });
}

void fault_injection_backend::do_set_access(device_addr va, std::uint64_t bytes) {
  maybe_throw(vmm_call::set_access, va);
  forward(vmm_call::set_access, [&] { inner().set_access(va, bytes); });
}

void fault_injection_backend::do_unmap(device_addr va, std::uint64_t bytes) {
  maybe_throw(vmm_call::unmap, va);
  forward(vmm_call::unmap, [&] { inner().unmap(va, bytes); });
}

}  // namespace vtensor
