#pragma once
/// Device memory for the policies that hold one preallocated region (the paged block pool, the
/// radix token pool, the static arena): one reserved virtual range backed by 2 MiB chunks mapped
/// once, through the same VMM backend (and accounting adaptor) as the vtensor policy, so that the
/// policies run on `sim` and on `cuda` alike and the driver's used memory equals their physical
/// bytes.
///
/// Note [Preallocated pools]
/// vLLM and SGLang size their KV pool from the memory budget at start-up and allocate it whole;
/// Orca-style servers do the same for their arena. With a finite budget the pool maps
/// floor(budget / 2 MiB) chunks in its constructor, before any step runs (start-up work, so its
/// VMM time is on no step: `startup_vmm_ns()` reports it). With `--memory unlimited` there is no
/// size to preallocate; the pool then grows by whole chunks when its owner asks (grow_to), and
/// each growth's VMM time is on the step that asked: a departure from the engines, which never
/// grow, stated in docs/policies.md.

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/registry.hpp"
#include "sim/accounting_backend.hpp"

namespace vtensor::sim {

/// One mapped region. Not thread-safe (the step thread only).
class device_pool {
 public:
  /// Builds the backend `backend_name` with `config` (capacity = the budget) under an accounting
  /// adaptor, reserves `max_bytes` of address space (rounded down to chunks; UINT64_MAX: a
  /// range of `unlimited_reserve_bytes`) and, unless `grow_on_demand`, maps all of it now.
  /// Throws unknown_backend_error, calibration_error, vmm_error, or std::runtime_error when the
  /// device cannot back the budget (naming both sizes).
  device_pool(const std::string& backend_name, const backend_config& config, std::uint64_t max_bytes);
  /// The same over a backend built by the caller (tests inject faults this way); `model` prices
  /// the calls.
  device_pool(std::unique_ptr<vmm_backend> inner, const latency_model& model, std::uint64_t max_bytes);
  ~device_pool();
  device_pool(const device_pool&) = delete;
  device_pool& operator=(const device_pool&) = delete;

  /// Virtual range reserved for unlimited budgets: 64 TiB (an infinite cache of a whole trace
  /// can outgrow any GPU; the sim window holds 112 TiB).
  static constexpr std::uint64_t unlimited_reserve_bytes = std::uint64_t{1} << 46;

  /// Maps chunks until at least `bytes` are backed; false when the device (or the reserved
  /// range) is out of room, with what was mapped kept. A no-op when `bytes` are backed already.
  [[nodiscard]] bool grow_to(std::uint64_t bytes);
  /// True when the pool was sized by a finite budget (mapped whole at start).
  [[nodiscard]] bool preallocated() const { return preallocated_; }
  /// Bytes backed (chunks mapped) now.
  [[nodiscard]] std::uint64_t physical_bytes() const { return chunks_.size() * k_chunk_bytes; }
  /// Bytes the range can hold at most.
  [[nodiscard]] std::uint64_t capacity_bytes() const { return range_bytes_; }
  /// Base of the range (the pool's offset 0).
  [[nodiscard]] device_addr base() const { return base_; }
  /// The accounting adaptor (counters, the step/worker split, prices).
  [[nodiscard]] accounting_backend& backend() { return *backend_; }
  [[nodiscard]] const accounting_backend& backend() const { return *backend_; }
  /// Modelled VMM time of the constructor's work: the reserve, and the preallocation when the
  /// budget is finite.
  [[nodiscard]] std::uint64_t startup_vmm_ns() const { return startup_vmm_ns_; }

 private:
  void release_all() noexcept;  // unmaps, releases and frees everything

  std::unique_ptr<accounting_backend> backend_;
  std::uint64_t range_bytes_ = 0;
  device_addr base_ = 0;
  bool preallocated_ = false;
  std::vector<chunk_handle> chunks_;  // chunk i backs [base + i * chunk, base + (i + 1) * chunk)
  std::uint64_t startup_vmm_ns_ = 0;
};

}  // namespace vtensor::sim
