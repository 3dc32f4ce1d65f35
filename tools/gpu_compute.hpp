#pragma once
/// The GPU side of `vtensor calibrate --compute` (tools/gpu_compute.cu): cuBLAS bf16 GEMMs at a
/// model's linear-layer shapes, and the decode-attention kernels over contiguous and paged KV.
/// Plain C++ so host code includes it without the toolkit; defined only when k_gpu_kernels_built
/// (tools/gpu_kernels.hpp). cuBLAS is opened at run time (dlopen), so the binary starts, and every
/// other subcommand runs, on a machine without it.
///
/// Note [Decode attention kernels]
/// One kernel design, two ways to find a token's KV. The KV of one layer is a pool of token
/// slots, each slot holding the token's K (or V) for every KV head, head after head (128 bf16
/// each: FlashInfer's "NHD" layout, vLLM's within a block). A request's token t lives at slot
///   contiguous: start[r] + t                       (vtensor, vAttention: one virtual range)
///   paged:      table[r][t / B] * B + t % B        (vLLM, SGLang: a block table of B-token blocks)
/// and that lookup is the only difference between the two instantiations of one template. The
/// kernel is split-K ("flash decoding"): a thread block per (256-token partition, KV head,
/// request) computes the scores of the partition for every query head of the GQA group (K read
/// once for the group), their softmax statistics and the weighted sum of V, 16 threads per token
/// row with 16-byte loads, four rows in flight per thread; a second kernel merges the partitions.
/// Paged blocks are laid out in a random permutation of the pool, as a long-running allocator
/// leaves them. Timings flush the L2 cache (a 256 MiB write) before each repetition.
///
/// Note [Layout addressing]
/// Contiguous KV comes in vtensor's three layouts (core/kv_geometry.hpp), and the kernel reads
/// one layer's K row of token t (head h) at  k_base + slot(t) * stride + h * 128, V the same from
/// v_base; only the bases and the stride (in elements; row = KV heads x 128) differ:
///   kv-split     K and V pools apart:             k_base = K, v_base = V,       stride = row
///   kv-fused     [token][K|V]:                    k_base = P, v_base = P + row, stride = 2 row
///   token-major  [token][layer][K|V], layer l:    k_base = P + 2 row l, v_base = k_base + row,
///                                                 stride = 2 row x layers
/// so kv-split reads a layer's K rows back to back, kv-fused every other row, and token-major
/// one row pair in every 2 x layers rows (4 KiB in each 128 KiB for Llama-3-8B): the cost the
/// layout trade-off weighs (issue 33). The same arithmetic runs in the same order
/// for every layout and for paged blocks: outputs are bitwise equal on the same KV (tested on
/// the GPU). Paged pools are kv-split (vLLM's per-layer K and V caches).

#include <cstdint>
#include <string>
#include <vector>

#include "tools/gpu_kernels.hpp"

namespace vtensor::tools {

/// One weight matrix of a linear layer: `out` x `in`, run on `tokens` activations.
struct gemm_shape {
  std::string name;       ///< "qkv", "o", "gate_up", "down", "lm_head"
  std::uint32_t out = 0;  ///< output features (on this GPU)
  std::uint32_t in = 0;   ///< input features (on this GPU)
};

/// How contiguous KV is addressed (Note [Layout addressing]); vtensor's kv_layout, restated
/// here so that nvcc compiles this header without the core.
enum class kv_addressing : std::uint8_t { kv_split, kv_fused, token_major };

/// A decode-attention configuration (Note [Decode attention kernels]).
struct decode_shape {
  std::uint32_t batch = 1;                         ///< requests
  std::uint32_t context = 1;                       ///< KV tokens each request reads
  std::uint32_t q_heads = 32;                      ///< query heads (this GPU)
  std::uint32_t kv_heads = 8;                      ///< KV heads (this GPU); q_heads / kv_heads at most 8
  std::uint32_t block_tokens = 0;                  ///< 0: contiguous; else a power of two (paged, kv-split pools)
  kv_addressing layout = kv_addressing::kv_split;  ///< contiguous only
  std::uint32_t layers = 1;                        ///< token-major: layers in a token's row
};

/// Bytes of KV the device holds for `s` (K and V of every slot; for token-major, of all layers).
[[nodiscard]] std::uint64_t decode_pool_bytes(const decode_shape& s);

/// What check_decode found.
struct decode_check_result {
  std::uint64_t elements = 0;           ///< outputs compared
  std::uint64_t differing = 0;          ///< outputs where paged and contiguous differ (bitwise)
  double max_abs_diff_paged = 0;        ///< max |paged - contiguous|
  std::uint64_t differing_layouts = 0;  ///< outputs where kv-fused or token-major differ from kv-split
  double max_rel_err_reference = 0;     ///< ||contiguous - reference||_2 / ||reference||_2 (float64 CPU reference)
};

/// A CUDA device with a cuBLAS handle and scratch memory. Throws gpu_error (no kernels in this
/// build, no device, no cuBLAS, or a runtime failure). Not thread-safe.
class gpu_compute {
 public:
  explicit gpu_compute(int device_index);
  ~gpu_compute();
  gpu_compute(const gpu_compute&) = delete;
  gpu_compute& operator=(const gpu_compute&) = delete;

  /// "NVIDIA H200", and the runtime and cuBLAS versions.
  [[nodiscard]] std::string device_name() const;
  [[nodiscard]] int cublas_version() const;
  /// HBM bytes of the device.
  [[nodiscard]] std::uint64_t memory_bytes() const;

  /// For each token count of `tokens`: the median seconds (over `reps`, after warm-up) of running
  /// every shape in order, once, on that many tokens of random bf16 activations against random
  /// bf16 weights (fp32 accumulation, cublasGemmEx).
  [[nodiscard]] std::vector<double> time_gemms(const std::vector<gemm_shape>& shapes,
                                               const std::vector<std::uint32_t>& tokens, int reps);
  /// Median seconds of one decode attention (partitions and merge) over `s` on random KV.
  [[nodiscard]] double time_decode(const decode_shape& s, int reps);
  /// Achieved device-to-device copy bandwidth (bytes read + written per second) over `bytes`.
  [[nodiscard]] double copy_bandwidth(std::uint64_t bytes, int reps);
  /// Runs the contiguous kernel (kv-split), the paged one (block size `block_tokens`) and the
  /// contiguous kernel over kv-fused and token-major pools (layer `layer` of `layers`) on the
  /// same random KV (the other pools rearranged copies, NaN wherever no token of the layer
  /// lives) with per-request contexts `contexts`, and compares them with each other and kv-split
  /// with a float64 reference on the CPU.
  [[nodiscard]] decode_check_result check_decode(const std::vector<std::uint32_t>& contexts, std::uint32_t q_heads,
                                                 std::uint32_t kv_heads, std::uint32_t block_tokens, std::uint64_t seed,
                                                 std::uint32_t layers = 4, std::uint32_t layer = 2);

 private:
  struct impl;
  impl* impl_ = nullptr;
};

}  // namespace vtensor::tools
