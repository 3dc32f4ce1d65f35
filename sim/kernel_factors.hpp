#pragma once
/// Kernel factors: how much slower the attention kernels of a policy's KV layout run than the
/// contiguous (dense) kernels the roofline prices, prefill and decode apart.
///
/// Note [Kernel factors]
/// The roofline (Note [Roofline step cost] in sim/presets.hpp) prices attention as if it read a
/// contiguous KV cache at the GPU's measured bandwidth and FLOP rate. Kernels that read KV
/// through a block table (vLLM's paged attention, SGLang's token-granular pool) do extra index
/// loads and lose some coalescing; how much depends on the kernel generation, which is what
/// the vTensor and vAttention papers measured. A factor multiplies the attention part of a step
/// (never the linear layers) for one policy: `prefill` for sequences taking prompt tokens,
/// `decode` for sequences decoding one. Policies whose kernels read contiguous KV (vtensor,
/// vattention, static) pay 1. Two sets ship, each figure with its source (docs/kernel-factors.md):
/// - `modern` (default): kernels of 2025 (FlashInfer, FlashAttention-3 with paged KV), which
///   FlashInfer states reach about 90% of the bandwidth of its dense kernels: 1/0.9 = 1.11 for
///   paged and radix, prefill and decode. Applying the bandwidth figure to compute-bound prefill
///   is an assumption.
/// - `2024`: the kernels the vTensor paper measured against. Paged prefill 3.15 and radix
///   prefill 2.12 are that paper's *average* kernel speedups of its FlashAttention-based kernel
///   over vLLM's paged-attention kernel and SGLang's Triton prefix-prefill kernel (the maxima,
///   3.27 and 3.92, are not used); paged decode 1.23 is the middle of the vLLM paper's 20-26%
///   higher attention latency of its kernel against FasterTransformer's contiguous one; radix
///   decode stays 1.11 (SGLang decoded with FlashInfer's kernel in 2024).
/// A file (`--kernel-factors FILE`) replaces a set: JSON
///   {"name": "...", "factors": {"paged": {"prefill": 1.1, "decode": 1.1}, ...}, "sources": {...}}
/// with every factor at least 1 ("sources" free-form, recorded); policies it does not name pay 1.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace vtensor::sim {

/// Multipliers of the attention part of a step for one policy.
struct attention_factors {
  double prefill = 1.0;  ///< attention of sequences taking prompt tokens
  double decode = 1.0;   ///< attention of sequences decoding one token
  friend bool operator==(const attention_factors&, const attention_factors&) = default;
};

/// A named set of factors by policy name.
struct kernel_factor_set {
  std::string name;                                  ///< "modern", "2024", or the file's name
  std::map<std::string, attention_factors> factors;  ///< by policy; absent: 1
  std::map<std::string, std::string> sources;        ///< by policy: where the figures come from

  /// The factors of `policy` (1 and 1 when the set does not name it).
  [[nodiscard]] attention_factors of(std::string_view policy) const;
  /// {"name", "factors", "sources"} as a file holds them.
  [[nodiscard]] nlohmann::ordered_json to_json() const;
};

/// The built-in sets, "modern" first.
[[nodiscard]] const std::vector<kernel_factor_set>& builtin_kernel_factor_sets();
/// A built-in set by name, or the set in the JSON file at `name_or_path` when no built-in set
/// has that name. Throws std::invalid_argument naming the file and the bad field (or listing the
/// built-in names when the file does not exist).
[[nodiscard]] kernel_factor_set load_kernel_factors(const std::string& name_or_path);
/// A set from parsed JSON; `origin` names it in messages. Throws std::invalid_argument.
[[nodiscard]] kernel_factor_set kernel_factors_from_json(const nlohmann::json& j, const std::string& origin);

}  // namespace vtensor::sim
