// Fuzzes the configuration files a user hands the replay: the calibration file
// (latency_model::parse), the kernel-factor file (kernel_factors_from_json) and the compute
// calibration (compute_calibration_from_json). Bad input must throw the documented error
// (calibration_error, std::invalid_argument); nothing else.
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "backends/latency_model.hpp"
#include "sim/compute_calibration.hpp"
#include "sim/kernel_factors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const vtensor::latency_model m = vtensor::latency_model::parse(text, "<fuzz>");
    (void)m.to_json();
  } catch (const vtensor::calibration_error&) {
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    const vtensor::sim::kernel_factor_set s = vtensor::sim::kernel_factors_from_json(j, "<fuzz>");
    for (const auto& [policy, f] : s.factors) {
      if (!(f.prefill >= 1.0) || !(f.decode >= 1.0)) __builtin_trap();  // a factor below 1 got through
    }
    (void)s.to_json().dump();
  } catch (const std::invalid_argument&) {
  }
  try {
    const vtensor::sim::compute_calibration c = vtensor::sim::compute_calibration_from_json(j, "<fuzz>");
    // A file that passed gives finite, positive rates and factors anywhere it is asked.
    for (const double x : {0.5, 1.0, 3.0, 1e5}) {
      if (!(c.linear_flop_rate(x) > 0) || !(c.decode_bandwidth(x * 1e6) > 0)) __builtin_trap();
    }
    if (!(c.paged_decode_factor(16) > 0)) __builtin_trap();
    (void)c.to_json().dump();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
