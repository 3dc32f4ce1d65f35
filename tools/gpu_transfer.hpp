#pragma once
/// The GPU side of `vtensor calibrate --transfers` (tools/gpu_transfer.cu): copies between pinned
/// host memory and device memory, timed with CUDA events, for the host-memory KV tier (issue 37).
/// Plain C++ so host code includes it without the toolkit; measure_transfers is defined only in
/// builds with the CUDA kernels (VTENSOR_HAVE_GPU_KERNELS).
///
/// Note [Transfer grid]
/// A host tier moves KV in the units a policy keeps it in: vtensor's 2 MiB chunks, paged's and
/// radix's 16-token blocks of one layer (16 x 4 KiB = 64 KiB for Llama-3-8B's K and V rows, 32
/// KiB each apart), single pages of 4 KiB rows; and it moves a request's pages as a batch, one
/// copy call per page (cudaMemcpyAsync on one stream), since a page's host copy and its device
/// page are at unrelated addresses. So the grid is copy size x copies per batch, each direction:
/// a batch's time is from an event before its first copy to one after its last, the median of
/// the repetitions, the first (warm-up) run dropped. Copies of a batch go to distinct, 4 KiB
/// aligned places spread over a buffer of up to 1 GiB each side (not back to back, which the DMA
/// engine would stream as one), and every byte that arrives is checked against what was sent
/// (a checksum of each direction's last run), so a fast wrong copy cannot pass.

#include <cstdint>
#include <string>
#include <vector>

#include "tools/gpu_kernels.hpp"

namespace vtensor::tools {

/// What `calibrate --transfers` measures.
struct transfer_options {
  int device = 0;
  std::vector<std::uint64_t> sizes{4096, 32768, 65536, 262144, 1 << 20, 2 << 20};  ///< bytes per copy
  std::vector<std::uint32_t> copies{1, 8, 64, 512};                                ///< copies per batch
  std::uint64_t max_batch_bytes = std::uint64_t{1} << 30;                          ///< a batch moves at most this much
  int reps = 20;                                                                   ///< timed runs per point (median)
  std::string out_file = "transfer-calibration.json";
};

/// One timed point.
struct transfer_sample {
  std::string direction;    ///< "h2d" (reload) or "d2h" (offload)
  std::uint64_t bytes = 0;  ///< per copy
  std::uint32_t copies = 0;
  double median_us = 0;  ///< the batch
  double min_us = 0;
  double p90_us = 0;
};

/// The device measured.
struct transfer_device {
  std::string name;
  int driver_version = 0;
  int runtime_version = 0;
};

#if VTENSOR_HAVE_GPU_KERNELS
/// Times the grid of `o` on the GPU (Note [Transfer grid]), checking the bytes that arrive.
/// Throws gpu_error (no device, out of memory, a failed copy, or a checksum mismatch).
[[nodiscard]] std::vector<transfer_sample> measure_transfers(const transfer_options& o, transfer_device& device);
#endif

}  // namespace vtensor::tools
