#pragma once
/// GPU and model presets for the step cost, and the roofline formula itself.
///
/// Note [Roofline step cost]
/// One serving step (one forward pass over a batch) runs, layer by layer, the linear layers over
/// every computed token and then attention, each kernel bounded by its own roofline. On each of
/// the `tp` GPUs of a tensor-parallel replica:
///
///     linear    = max(2 * params * computed_tokens / tp / gpu.flop_rate,
///                     weight_bytes / tp / gpu.bandwidth)          (weights streamed once per step)
///     attention = max(4 * layers * hidden * attended_pairs / tp / gpu.flop_rate,
///                     (kv_read_tokens + kv_write_tokens) * kv_bytes_per_token / tp / gpu.bandwidth)
///                 for the prefilling sequences and for the decoding ones apart
///     step_s    = linear + f_prefill * attention_prefill + f_decode * attention_decode + overhead
///
/// `computed_tokens` are the tokens of the batch (one per decoding sequence, the prefill chunk of
/// each prefilling one; prefix-cache hits are not computed); `attended_pairs` sums, over those
/// tokens, the tokens each one attends to (causal: a prefill chunk of n tokens after c cached
/// ones attends n*c + n(n+1)/2); `kv_read_tokens` sums, over sequences, the context they read
/// (c + n). Pricing linear and attention apart, rather than one max over their sums, follows
/// the kernels: a prefill-heavy step is compute-bound in its GEMMs while its decode attention
/// is bandwidth-bound, and a kernel waiting on memory does not lend its FLOPs to another. The
/// factors f are the policy's kernel factors (Note [Kernel factors] in sim/kernel_factors.hpp):
/// 1 for contiguous KV. The rates are *measured* ceilings, not datasheet peaks, so the formula
/// has no efficiency factor. `overhead` is a fixed cost per step for what the roofline does not
/// see (scheduling, sampling, kernel launches, the all-reduces of tensor parallelism); it is an
/// assumption, not a measurement: 1 ms by default (vLLM-class engines spend around a
/// millisecond of host time per step). Not modelled: kernel efficiency at small batches,
/// overlap between kernels, communication volume. A compute calibration measured on the GPU
/// replaces the ceilings of the linear layers and of decode attention with measured rates by
/// size (Note [Measured step cost] in sim/compute_calibration.hpp); this formula is the fallback.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/kv_geometry.hpp"
#include "sim/kernel_factors.hpp"

namespace vtensor::sim {

/// A GPU's ceilings and memory.
struct gpu_preset {
  std::string name;                ///< "h200", "a100-80gb"
  double flop_rate = 0;            ///< dense bf16 FLOP/s the step cost uses (measured where stated)
  double bandwidth = 0;            ///< HBM bytes/s the step cost uses (measured where stated)
  std::uint64_t memory_bytes = 0;  ///< device memory a process can allocate chunks from
};

/// The GPU presets known by name; nullopt for another name.
[[nodiscard]] std::optional<gpu_preset> gpu_by_name(std::string_view name);
/// Names of the GPU presets, for messages.
[[nodiscard]] std::vector<std::string> gpu_names();

/// What the step cost needs of a model, on one GPU of a tensor-parallel replica.
struct model_compute {
  std::string name;               ///< preset name, from core's table (model_presets())
  double params = 0;              ///< parameters of the whole model
  std::uint32_t layers = 0;       ///< transformer layers
  std::uint32_t hidden = 0;       ///< attention width: query heads x head dim
  std::uint32_t dtype_bytes = 2;  ///< bytes per weight and per KV element (bf16)
  std::uint32_t tp = 1;           ///< tensor-parallel degree: GPUs sharing weights and KV heads
  model_spec kv;                  ///< KV shape on one GPU (kv heads already divided by tp)

  /// Weight bytes held by one GPU.
  [[nodiscard]] std::uint64_t weight_bytes_per_gpu() const;
  /// KV bytes of one token on one GPU (all layers, K and V).
  [[nodiscard]] std::uint64_t kv_bytes_per_token_per_gpu() const { return kv.kv_bytes_per_token(); }
};

/// Model `name` split over `tp` GPUs. Throws std::invalid_argument for an unknown name (the
/// message lists the known ones) or a `tp` that is zero or does not divide the KV heads.
[[nodiscard]] model_compute model_compute_preset(std::string_view name, std::uint32_t tp = 1);

/// Attention work of a set of sequences (Note [Roofline step cost]).
struct attention_work {
  std::uint64_t attended_pairs = 0;   ///< sum over computed tokens of tokens attended
  std::uint64_t kv_read_tokens = 0;   ///< sum over sequences of context tokens read
  std::uint64_t kv_write_tokens = 0;  ///< tokens whose KV the step writes
};

/// The work of one step, summed over its sequences (Note [Roofline step cost]).
struct step_work {
  std::uint64_t computed_tokens = 0;  ///< tokens run through the model
  attention_work prefill;             ///< of the sequences taking prompt tokens
  attention_work decode;              ///< of the sequences decoding one token

  /// Adds a sequence computing `tokens` new tokens after `context` tokens already in its cache;
  /// `decoding`: it decodes (its attention goes to `decode`, else to `prefill`).
  void add_sequence(std::uint64_t context, std::uint64_t tokens, bool decoding) {
    computed_tokens += tokens;
    attention_work& a = decoding ? decode : prefill;
    a.attended_pairs += tokens * context + tokens * (tokens + 1) / 2;
    a.kv_read_tokens += context + tokens;
    a.kv_write_tokens += tokens;
  }
};

/// One kernel's roofline sides, seconds.
struct roofline_sides {
  double compute_s = 0;  ///< FLOPs at the FLOP rate
  double memory_s = 0;   ///< bytes at the bandwidth
  /// max(compute, memory).
  [[nodiscard]] double bound_s() const { return compute_s > memory_s ? compute_s : memory_s; }
};

/// A step's cost and its parts, seconds.
struct step_cost {
  roofline_sides linear;             ///< the linear layers (weights)
  roofline_sides prefill_attention;  ///< attention of the prefilling sequences, before its factor
  roofline_sides decode_attention;   ///< attention of the decoding sequences, before its factor
  attention_factors factors;         ///< the policy's kernel factors
  double overhead_s = 0;             ///< fixed per step

  /// Compute side of the whole step (linear + attention, factors applied).
  [[nodiscard]] double compute_s() const {
    return linear.compute_s + factors.prefill * prefill_attention.compute_s +
           factors.decode * decode_attention.compute_s;
  }
  /// Memory side of the whole step (factors applied).
  [[nodiscard]] double memory_s() const {
    return linear.memory_s + factors.prefill * prefill_attention.memory_s + factors.decode * decode_attention.memory_s;
  }
  /// Attention time, factors applied.
  [[nodiscard]] double attention_s() const {
    return factors.prefill * prefill_attention.bound_s() + factors.decode * decode_attention.bound_s();
  }
  /// linear + attention (factors applied) + overhead.
  [[nodiscard]] double total_s() const { return linear.bound_s() + attention_s() + overhead_s; }
  /// True when compute bounds the step (compute side at least the memory side).
  [[nodiscard]] bool compute_bound() const { return compute_s() >= memory_s(); }
};

/// The roofline cost of `work` for `model` on `gpu` (Note [Roofline step cost]). Cheap: a few
/// multiplications.
[[nodiscard]] step_cost roofline(const model_compute& model, const gpu_preset& gpu, const step_work& work,
                                 double overhead_s, attention_factors factors = {});

/// One attention kernel's part of roofline(): what a decode stretch reprices each step, the
/// linear and prefill parts being the step before's (Note [Steps run in a stretch]).
[[nodiscard]] roofline_sides attention_roofline(const model_compute& model, const gpu_preset& gpu,
                                                const attention_work& a);

/// Default fixed per-step overhead, seconds (Note [Roofline step cost]).
inline constexpr double k_default_step_overhead_s = 1e-3;

}  // namespace vtensor::sim
