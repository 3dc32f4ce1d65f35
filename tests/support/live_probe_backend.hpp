#pragma once
/// A forwarding adaptor that writes what its inner backend still holds (vmm_live) into a slot
/// the test keeps when the adaptor is destroyed, so a test can check that a policy owning its
/// backend gave everything back: "nothing held after shutdown".

#include <memory>

#include "backends/backend_adaptor.hpp"

namespace vtensor::testing {

/// Forwards every call; on destruction stores inner().live() in `*at_exit`.
class live_probe_backend final : public backend_adaptor {
 public:
  live_probe_backend(std::unique_ptr<vmm_backend> inner, std::shared_ptr<vmm_live> at_exit)
      : backend_adaptor(std::move(inner)), at_exit_(std::move(at_exit)) {}
  ~live_probe_backend() override { *at_exit_ = inner().live(); }
  live_probe_backend(const live_probe_backend&) = delete;
  live_probe_backend& operator=(const live_probe_backend&) = delete;

 private:
  [[nodiscard]] std::string do_name() const override { return "live_probe(" + inner().name() + ")"; }
  [[nodiscard]] device_addr do_reserve(std::uint64_t bytes) override {
    return forward(vmm_call::reserve, [&] { return inner().reserve(bytes); });
  }
  void do_free_range(device_addr base) override {
    forward(vmm_call::free_range, [&] { inner().free_range(base); });
  }
  [[nodiscard]] std::optional<chunk_handle> do_create_chunk() override {
    return forward(vmm_call::create, [&] { return inner().create_chunk(); });
  }
  void do_release_chunk(chunk_handle h) override {
    forward(vmm_call::release, [&] { inner().release_chunk(h); });
  }
  void do_map(device_addr va, chunk_handle h) override {
    forward(vmm_call::map, [&] { inner().map(va, h); });
  }
  void do_set_access(device_addr va, std::uint64_t bytes) override {
    forward(vmm_call::set_access, [&] { inner().set_access(va, bytes); });
  }
  void do_unmap(device_addr va, std::uint64_t bytes) override {
    forward(vmm_call::unmap, [&] { inner().unmap(va, bytes); });
  }

  std::shared_ptr<vmm_live> at_exit_;
};

}  // namespace vtensor::testing
