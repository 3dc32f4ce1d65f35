#pragma once
// `vtensor calibrate --compute` (tools/calibrate_compute.cpp): the model's linear-layer shapes,
// the token grid, and the measurement itself (GPU builds only). The shapes and the grid are
// plain host code, tested without a GPU.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/compute_calibration.hpp"
#include "tools/cli.hpp"
#include "tools/gpu_compute.hpp"

namespace vtensor::tools {

/// What `calibrate --compute` measures.
struct compute_options {
  int device = 0;
  std::string model = "llama-3-8b";
  std::uint32_t tp = 1;
  std::uint32_t token_budget = 8192;  ///< largest token count of the GEMM grid
  int reps = 20;                      ///< timed runs per size (median)
  std::vector<std::uint32_t> batches{1, 8, 32, 128};
  std::vector<std::uint32_t> contexts{512, 2048, 8192, 32768};
  std::vector<std::uint32_t> block_tokens{1, 16};
  std::uint64_t max_decode_tokens = std::uint64_t{1} << 22;  ///< batch x context at most
  std::string out_file = "compute-calibration.json";
};

/// One layer's GEMMs of preset `model` on one of `tp` GPUs (Note [Linear shapes]). Throws
/// std::invalid_argument for a model without shapes or a tp that does not divide its KV heads.
[[nodiscard]] std::vector<gemm_shape> layer_gemm_shapes(std::string_view model, std::uint32_t tp);
/// The LM head of `model` on one of `tp` GPUs.
[[nodiscard]] gemm_shape lm_head_shape(std::string_view model, std::uint32_t tp);
/// Parameters of the embedding table (not a GEMM).
[[nodiscard]] std::uint64_t embedding_params(std::string_view model);
/// Today's date in UTC, YYYY-MM-DD: when a calibration was measured.
[[nodiscard]] std::string utc_date();
/// Token counts timed: powers of two from 1, with the midpoints 1.5 x 2^k from 192 on, and the
/// budget itself; increasing, ending at `budget`.
[[nodiscard]] std::vector<std::uint32_t> token_grid(std::uint32_t budget);

#if VTENSOR_HAVE_GPU_KERNELS
/// Measures on the GPU and writes the calibration file; prints the tables on io.out.
int calibrate_compute(const compute_options& options, const cli_streams& io);
#endif

}  // namespace vtensor::tools
