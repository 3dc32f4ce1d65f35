#pragma once
/// A backend in front of another one (not owned) that, while a log is set, records every map and
/// set-access with the time the inner call took and the part the inner backend charged (the
/// driver call's wall time on `cuda`). The map-overhead measurement runs a twin manager over it to
/// learn the manager's driver calls (to replay them bare) and where a create's time goes.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/vmm_backend.hpp"

namespace vtensor::bench {

/// One map or set-access as the inner backend saw it.
struct call_record {
  vmm_call call = vmm_call::map;  ///< map or set_access
  device_addr va = 0;             ///< address of the call
  std::uint64_t bytes = 0;        ///< span of the call
  chunk_handle handle{};          ///< the chunk mapped (map only)
  std::uint64_t start_ns = 0;     ///< steady-clock time the inner call began
  std::uint64_t end_ns = 0;       ///< and returned
  std::uint64_t driver_ns = 0;    ///< what the inner backend charged for this call (driver time on cuda)
};

/// Forwards every call to `inner`; logs maps and set-accesses while set_log() holds a log.
class call_log_backend final : public vmm_backend {
 public:
  explicit call_log_backend(vmm_backend& inner) : inner_(inner) {}
  /// Starts (non-null) or stops (null) logging into `log`.
  void set_log(std::vector<call_record>* log) { log_ = log; }

 private:
  using clock = std::chrono::steady_clock;
  static std::uint64_t ns_of(clock::time_point t) {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
  }
  /// Runs `fn` (a call on inner_) and charges this backend what the inner one charged for it.
  template <typename F>
  decltype(auto) forwarded(F&& fn) {
    const vmm_counters before = inner_.counters();
    struct guard {
      call_log_backend& self;
      const vmm_counters& before;
      ~guard() {
        for (const vmm_call k : k_vmm_calls)
          self.charge(k, self.inner_.counters().time_ns_of(k) - before.time_ns_of(k));
      }
    } g{*this, before};
    return std::forward<F>(fn)();
  }
  /// Runs `fn` and logs `records` (map and/or set-access at `va`) with its timing.
  template <typename F>
  void logged(device_addr va, chunk_handle h, bool map, bool access, std::uint64_t bytes, F&& fn) {
    if (log_ == nullptr) return forwarded(std::forward<F>(fn));
    const vmm_counters before = inner_.counters();
    const auto t0 = clock::now();
    forwarded(std::forward<F>(fn));
    const auto t1 = clock::now();
    const auto charged = [&](vmm_call k) { return inner_.counters().time_ns_of(k) - before.time_ns_of(k); };
    if (map) log_->push_back({vmm_call::map, va, k_chunk_bytes, h, ns_of(t0), ns_of(t1), charged(vmm_call::map)});
    if (access)
      log_->push_back({vmm_call::set_access, va, bytes, {}, ns_of(t0), ns_of(t1), charged(vmm_call::set_access)});
  }

  [[nodiscard]] std::string do_name() const override { return "call_log(" + inner_.name() + ")"; }
  [[nodiscard]] std::uint64_t do_granularity_bytes() const override { return inner_.granularity_bytes(); }
  [[nodiscard]] std::uint64_t do_capacity_bytes() const override { return inner_.capacity_bytes(); }
  [[nodiscard]] vmm_live do_live() const override { return inner_.live(); }
  [[nodiscard]] device_addr do_reserve(std::uint64_t bytes) override {
    return forwarded([&] { return inner_.reserve(bytes); });
  }
  void do_free_range(device_addr base) override {
    forwarded([&] { inner_.free_range(base); });
  }
  [[nodiscard]] std::optional<chunk_handle> do_create_chunk() override {
    return forwarded([&] { return inner_.create_chunk(); });
  }
  void do_release_chunk(chunk_handle h) override {
    forwarded([&] { inner_.release_chunk(h); });
  }
  void do_map(device_addr va, chunk_handle h) override {
    logged(va, h, true, false, 0, [&] { inner_.map(va, h); });
  }
  void do_set_access(device_addr va, std::uint64_t bytes) override {
    logged(va, {}, false, true, bytes, [&] { inner_.set_access(va, bytes); });
  }
  void do_map_with_access(device_addr va, chunk_handle h) override {
    logged(va, h, true, true, k_chunk_bytes, [&] { inner_.map_with_access(va, h); });
  }
  void do_unmap(device_addr va, std::uint64_t bytes) override {
    forwarded([&] { inner_.unmap(va, bytes); });
  }

  vmm_backend& inner_;
  std::vector<call_record>* log_ = nullptr;
};

}  // namespace vtensor::bench
