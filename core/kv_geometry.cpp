#include "core/kv_geometry.hpp"

#include <array>
#include <stdexcept>

#include <fmt/format.h>

namespace vtensor {

kv_geometry::kv_geometry(model_spec model, kv_layout layout, std::uint64_t chunk_bytes)
    : model_(std::move(model)), layout_(layout), chunk_bytes_(chunk_bytes) {
  if (model_.layers == 0 || model_.kv_heads == 0 || model_.head_dim == 0 || model_.dtype_bytes == 0) {
    throw std::invalid_argument(
        fmt::format("model '{}': layers, kv heads, head dim and dtype bytes must be positive", model_.name));
  }
  if (chunk_bytes_ == 0) throw std::invalid_argument("kv geometry: chunk bytes must be positive");
  const std::uint64_t head_bytes = std::uint64_t{model_.kv_heads} * model_.head_dim * model_.dtype_bytes;
  switch (layout_) {
    case kv_layout::kv_split:
      tensors_ = 2 * model_.layers;
      token_bytes_ = head_bytes;
      break;
    case kv_layout::kv_fused:
      tensors_ = model_.layers;
      token_bytes_ = 2 * head_bytes;
      break;
    case kv_layout::token_major:
      tensors_ = 1;
      token_bytes_ = 2 * head_bytes * model_.layers;
      break;
  }
}

layer_addressing kv_geometry::layer(std::uint32_t layer, std::uint64_t tensor_span) const {
  if (layer >= model_.layers) {
    throw std::out_of_range(fmt::format("layer {} of model '{}' with {} layers", layer, model_.name, model_.layers));
  }
  const std::uint64_t head_bytes = std::uint64_t{model_.kv_heads} * model_.head_dim * model_.dtype_bytes;
  switch (layout_) {
    case kv_layout::kv_split: return {2 * layer * tensor_span, (2 * layer + 1) * tensor_span, token_bytes_};
    case kv_layout::kv_fused: return {layer * tensor_span, layer * tensor_span + head_bytes, token_bytes_};
    case kv_layout::token_major: return {layer * 2 * head_bytes, layer * 2 * head_bytes + head_bytes, token_bytes_};
  }
  return {};
}

}  // namespace vtensor
