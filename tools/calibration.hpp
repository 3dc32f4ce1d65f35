#pragma once
// What `vtensor calibrate` makes of its measurements (tools/cmd_calibrate.cpp): per-call samples
// summarised into the calibration file the sim backend loads. Plain host code, so it is tested
// without a GPU.

#include <array>
#include <cstdint>
#include <ostream>
#include <vector>

#include "backends/latency_model.hpp"
#include "backends/vmm_backend.hpp"

namespace vtensor::tools {

/// Samples of each call kind, nanoseconds per call, indexed by vmm_call.
using call_samples = std::array<std::vector<std::uint64_t>, k_vmm_call_kinds>;

/// Mean (integer division), p50 and p99 by nearest rank (element n/2 and floor(0.99 n) of the
/// sorted samples, as the probes behind backends/calibration/h200.json did); zeros for no samples.
[[nodiscard]] call_cost summarise(std::vector<std::uint64_t> ns);

/// The samples as a latency model (costs only: the caller sets device and source), printed as a
/// Markdown table against the built-in H200 figures on `out`.
[[nodiscard]] latency_model calibration_model(const call_samples& samples, std::ostream& out);

}  // namespace vtensor::tools
