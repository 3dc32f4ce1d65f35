#pragma once
/// The vTensor KV policy: the core manager (one vTensor per request, prefix sharing through the
/// rTree, lazy deallocation) over a VMM backend chosen by name.

#include <memory>
#include <string>

#include "backends/registry.hpp"
#include "core/manager.hpp"
#include "sim/kv_policy.hpp"

namespace vtensor::sim {

/// Options of the vTensor policy.
struct vtensor_policy_options {
  std::string backend = "sim";  ///< backend registry name
  backend_config device;        ///< capacity (the KV memory budget), calibration, latency
  manager_config manager;       ///< geometry (model x layout), scheduler (context, lookahead, cow|recompute), eviction
};

/// The policy. Owns its backend and manager.
class vtensor_policy final : public kv_policy {
 public:
  /// Throws unknown_backend_error, calibration_error, or std::invalid_argument (unknown eviction
  /// policy).
  explicit vtensor_policy(vtensor_policy_options options);
  ~vtensor_policy() override;

  /// The manager, for inspection.
  [[nodiscard]] const manager& kv_manager() const { return *manager_; }

 private:
  kv_admit_result do_admit(const kv_request& r) override;
  bool do_grow(request_id id, std::uint64_t tokens) override;
  void do_release(request_id id, release_reason why) override;
  [[nodiscard]] kv_stats do_stats() const override;
  [[nodiscard]] std::uint64_t do_vmm_time_ns() const override;
  [[nodiscard]] bool do_maps_ahead() const override;
  [[nodiscard]] std::string do_name() const override { return "vtensor"; }
  [[nodiscard]] nlohmann::ordered_json do_describe() const override;
  void do_check_invariants() const override;

  vtensor_policy_options options_;
  std::unique_ptr<vmm_backend> backend_;  // outlives manager_ (declared first)
  std::unique_ptr<manager> manager_;
};

}  // namespace vtensor::sim
