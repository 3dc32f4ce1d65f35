#pragma once
// `vtensor calibrate --transfers` (tools/calibrate_transfer.cpp): the host-memory tier's copy
// costs measured on the GPU (Note [Transfer grid] in tools/gpu_transfer.hpp) and fitted to the
// model the simulator prices a tier's copies with (Note [Transfer model]). The fit and the file
// are plain host code, tested without a GPU.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/cli.hpp"
#include "tools/gpu_transfer.hpp"

namespace vtensor::tools {

/// A direction's copies as the simulator prices them: a batch of n copies of S bytes each takes
/// n x (per_copy_us + S / bytes_per_us) (Note [Transfer model]).
struct transfer_fit {
  double per_copy_us = 0;   ///< what a copy costs beyond its bytes (call, DMA set-up)
  double bytes_per_us = 0;  ///< the streaming rate (1e-3 GB/s)
  double max_error = 0;     ///< largest |model - measured| / measured over the grid's points
  /// The modelled time of `copies` copies of `bytes` each, microseconds.
  [[nodiscard]] double batch_us(std::uint64_t bytes, std::uint32_t copies) const;
};

/// Least-squares fit, in relative error, of one direction's samples. Throws std::invalid_argument
/// when the samples of `direction` do not span two copy sizes.
[[nodiscard]] transfer_fit fit_transfers(const std::vector<transfer_sample>& samples, const std::string& direction);

/// The transfer calibration file: device, samples, each direction's fit, and how it was measured.
[[nodiscard]] nlohmann::ordered_json transfer_calibration_json(const transfer_device& device,
                                                               const std::vector<transfer_sample>& samples,
                                                               const std::string& source);

#if VTENSOR_HAVE_GPU_KERNELS
/// Measures on the GPU, prints the table and writes the file (whole or not at all).
int calibrate_transfers(const transfer_options& options, const cli_streams& io);
#endif

}  // namespace vtensor::tools
