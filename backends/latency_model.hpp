#pragma once
/// What each VMM call costs on the simulated device, and the calibration file that carries those
/// costs from a real GPU (`vtensor calibrate` writes it, `sim` reads it).
///
/// Note [Calibration file format]
/// A JSON object:
///   {"format": "vtensor-calibration", "version": 1, "device": "NVIDIA H200", "source": "...",
///    "calls": {"create": {"mean_ns": 15740, "p50_ns": 13840, "p99_ns": 29090}, ...}}
/// `calls` holds exactly the seven call names of `to_string(vmm_call)`, each with a non-negative
/// integer `mean_ns` (required) and `p50_ns`, `p99_ns` (optional, 0 when absent). Other top-level
/// keys are ignored (room for notes). The simulated device charges `mean_ns`.
///
/// Note [Cost per mapping]
/// The driver's set-access and unmap cost per mapping they cover, not per call or per byte: one
/// set-access over 4096 separately mapped chunks took 4096 times one chunk's cost. So `set_access`
/// and `unmap` are charged `mean_ns` per chunk-sized mapping in their span; every other call is
/// charged a flat `mean_ns`.

#include <array>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "backends/vmm_backend.hpp"

namespace vtensor {

/// Measured cost of one call kind, nanoseconds.
struct call_cost {
  std::uint64_t mean_ns = 0;  ///< mean; what the simulated device charges
  std::uint64_t p50_ns = 0;   ///< median, for reports
  std::uint64_t p99_ns = 0;   ///< 99th percentile, for reports
  friend bool operator==(const call_cost&, const call_cost&) = default;
};

/// A calibration file that cannot be read or does not follow Note [Calibration file format].
class calibration_error : public std::runtime_error {
 public:
  /// `file` and `key` (a dotted path such as "calls.map.mean_ns", or "" for the whole file) go
  /// into the message with `why`.
  calibration_error(std::string file, std::string key, const std::string& why);
  [[nodiscard]] const std::string& file() const { return file_; }
  [[nodiscard]] const std::string& key() const { return key_; }

 private:
  std::string file_;
  std::string key_;
};

/// Cost per VMM call kind. A plain value; the default-constructed model costs nothing.
class latency_model {
 public:
  latency_model() = default;

  /// The NVIDIA H200 figures of backends/calibration/README.md (means of 4096 calls per kind;
  /// reserve and free_range: the median of the four sizes probed, 1 GiB to 16 TiB, p99 the largest).
  [[nodiscard]] static latency_model h200();
  /// Every call free: for functional tests and host-speed benchmarks.
  [[nodiscard]] static latency_model zero();
  /// Reads a calibration file. Throws calibration_error naming the file, the key and the reason.
  [[nodiscard]] static latency_model load(const std::filesystem::path& file);
  /// Parses calibration JSON text; `source_name` names it in errors (a file name, "<string>").
  [[nodiscard]] static latency_model parse(std::string_view json_text, std::string_view source_name);
  /// Writes this model as a calibration file (through a temporary file, so a failure leaves no
  /// half-written file). Throws calibration_error when the file cannot be written.
  void save(const std::filesystem::path& file) const;
  /// This model as calibration JSON text, pretty-printed.
  [[nodiscard]] std::string to_json() const;

  /// The mean cost charged for one call (per mapping for set_access and unmap).
  [[nodiscard]] std::uint64_t cost_ns(vmm_call call) const { return costs_[index(call)].mean_ns; }
  /// All measured figures for one call kind.
  [[nodiscard]] const call_cost& cost(vmm_call call) const { return costs_[index(call)]; }
  void set_cost(vmm_call call, call_cost cost) { costs_[index(call)] = cost; }

  /// Device the figures were measured on ("" for a synthetic model).
  [[nodiscard]] const std::string& device() const { return device_; }
  void set_device(std::string device) { device_ = std::move(device); }
  /// Where the figures come from (probe run, date, driver).
  [[nodiscard]] const std::string& source() const { return source_; }
  void set_source(std::string source) { source_ = std::move(source); }

  friend bool operator==(const latency_model&, const latency_model&) = default;

 private:
  static constexpr std::size_t index(vmm_call call) { return static_cast<std::size_t>(call); }

  std::array<call_cost, k_vmm_call_kinds> costs_{};  ///< indexed by vmm_call
  std::string device_;                               ///< e.g. "NVIDIA H200"
  std::string source_;                               ///< provenance of the figures
};

}  // namespace vtensor
