#pragma once
/// Base of the backends that wrap another one (counting, fault injection): owns the inner backend,
/// forwards geometry and live(), and charges to itself what the inner backend charged for each
/// forwarded call, so the outermost backend's counters are the truth.

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "backends/vmm_backend.hpp"

namespace vtensor {

/// A backend stacked on an owned inner backend. Throws std::invalid_argument on a null inner.
class backend_adaptor : public vmm_backend {
 public:
  /// The wrapped backend (for its own counters and extra queries).
  [[nodiscard]] vmm_backend& inner() { return *inner_; }
  [[nodiscard]] const vmm_backend& inner() const { return *inner_; }

 protected:
  explicit backend_adaptor(std::unique_ptr<vmm_backend> inner) : inner_(std::move(inner)) {
    if (!inner_) {
      throw std::invalid_argument("backend_adaptor: null inner backend");
    }
  }

  /// Runs `forward_call()` (a call on inner()) and charges `call` the time the inner backend
  /// charged for it, also when it throws.
  template <typename F>
  decltype(auto) forward(vmm_call call, F&& forward_call) {
    const std::uint64_t before = inner_->counters().time_ns_of(call);
    const charge_guard guard{*this, call, before};
    return std::forward<F>(forward_call)();
  }

 private:
  struct charge_guard {
    backend_adaptor& self;
    vmm_call call;
    std::uint64_t before;
    charge_guard(backend_adaptor& s, vmm_call c, std::uint64_t b) : self(s), call(c), before(b) {}
    charge_guard(const charge_guard&) = delete;
    charge_guard& operator=(const charge_guard&) = delete;
    ~charge_guard() { self.charge(call, self.inner_->counters().time_ns_of(call) - before); }
  };

  [[nodiscard]] std::uint64_t do_granularity_bytes() const override { return inner_->granularity_bytes(); }
  [[nodiscard]] std::uint64_t do_capacity_bytes() const override { return inner_->capacity_bytes(); }
  [[nodiscard]] vmm_live do_live() const override { return inner_->live(); }

  std::unique_ptr<vmm_backend> inner_;
};

}  // namespace vtensor
