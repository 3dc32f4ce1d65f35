#pragma once
/// KV geometry: how a model's KV cache is laid out in vTensor tensors and 2 MiB chunks.
/// Note [Pages]: a *page* is the span of one chunk in every tensor of a request: page p covers
/// tensor bytes [p * chunk, (p + 1) * chunk) of each tensor, so a page is `tensors` chunks. Pages
/// are the unit of mapping and of prefix sharing. When a token's bytes do not divide the chunk,
/// a token may straddle two pages; sharing rules are stated in bytes so that it stays correct.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/enum_names.hpp"
#include "backends/units.hpp"
#include "backends/vmm_backend.hpp"
#include "core/model_presets.hpp"

namespace vtensor {

/// How a request's KV is split into vTensor tensors.
enum class kv_layout : std::uint8_t {
  kv_split,     ///< per layer, K and V separate: 2 x layers tensors (vAttention, GLake)
  kv_fused,     ///< per layer, K and V together: layers tensors, [token][K|V][head][dim]
  token_major,  ///< one tensor, [token][layer][K|V][head][dim]
};
/// The layouts' names, as users type them.
inline constexpr enum_names<kv_layout, 3> k_kv_layout_names{
    {{{kv_layout::kv_split, "kv-split"}, {kv_layout::kv_fused, "kv-fused"}, {kv_layout::token_major, "token-major"}}}};
[[nodiscard]] inline std::string_view to_string(kv_layout layout) { return k_kv_layout_names.name(layout); }
[[nodiscard]] inline std::optional<kv_layout> kv_layout_from_string(std::string_view name) {
  return k_kv_layout_names.parse(name);
}

/// Where layer l's K and V live inside a vTensor: byte offsets from the vTensor base and the
/// stride between consecutive tokens.
struct layer_addressing {
  std::uint64_t k_offset_bytes = 0;      ///< first token's K of this layer, from the vTensor base
  std::uint64_t v_offset_bytes = 0;      ///< first token's V of this layer, from the vTensor base
  std::uint64_t token_stride_bytes = 0;  ///< distance between token t and t+1 of this layer
};

/// Model x layout, and the derived sizes. Cheap to copy.
class kv_geometry {
 public:
  /// Throws std::invalid_argument for a model with a zero dimension.
  kv_geometry(model_spec model, kv_layout layout, std::uint64_t chunk_bytes = k_chunk_bytes);

  [[nodiscard]] const model_spec& model() const { return model_; }
  [[nodiscard]] kv_layout layout() const { return layout_; }
  [[nodiscard]] std::uint64_t chunk_bytes() const { return chunk_bytes_; }
  /// Tensors per request (2 x layers, layers, or 1).
  [[nodiscard]] std::uint32_t tensors() const { return tensors_; }
  /// Bytes one token takes in one tensor.
  [[nodiscard]] std::uint64_t bytes_per_token_per_tensor() const { return token_bytes_; }
  /// Bytes one token takes over all tensors (the model's KV bytes per token).
  [[nodiscard]] std::uint64_t bytes_per_token() const { return token_bytes_ * tensors_; }
  /// Whole tokens that fit one chunk (1024, 512 and 16 for Llama-3-8B's three layouts).
  [[nodiscard]] std::uint64_t tokens_per_chunk() const { return chunk_bytes_ / token_bytes_; }
  /// Pages (chunks per tensor) needed to hold `tokens` tokens.
  [[nodiscard]] std::uint64_t pages_for_tokens(std::uint64_t tokens) const {
    return ceil_div(tokens * token_bytes_, chunk_bytes_);
  }
  /// Virtual bytes of one tensor able to hold `max_tokens`, rounded up to whole chunks.
  [[nodiscard]] std::uint64_t tensor_span_bytes(std::uint64_t max_tokens) const {
    return pages_for_tokens(max_tokens) * chunk_bytes_;
  }
  /// Virtual bytes of a whole vTensor able to hold `max_tokens`.
  [[nodiscard]] std::uint64_t vtensor_bytes(std::uint64_t max_tokens) const {
    return tensor_span_bytes(max_tokens) * tensors_;
  }
  /// Offsets and stride of layer `layer` inside a vTensor whose tensors span `tensor_span` bytes.
  [[nodiscard]] layer_addressing layer(std::uint32_t layer, std::uint64_t tensor_span) const;

 private:
  model_spec model_;
  kv_layout layout_;
  std::uint64_t chunk_bytes_;
  std::uint32_t tensors_;
  std::uint64_t token_bytes_;
};

}  // namespace vtensor
