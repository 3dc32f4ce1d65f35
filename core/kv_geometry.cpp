#include "core/kv_geometry.hpp"

#include <array>
#include <stdexcept>

#include <fmt/format.h>

namespace vtensor {

namespace {

// Published configurations (config.json of each model); bf16 KV.
const std::array<model_spec, 4> k_presets{{
    {"llama-3-8b", 32, 8, 128, 2},
    {"yi-6b", 32, 4, 128, 2},
    {"yi-34b", 60, 8, 128, 2},
    {"llama-3-70b", 80, 8, 128, 2},
}};

}  // namespace

std::optional<model_spec> model_preset(std::string_view name) {
  for (const auto& m : k_presets) {
    if (m.name == name) return m;
  }
  return std::nullopt;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& m : k_presets) names.push_back(m.name);
  return names;
}

std::string_view to_string(kv_layout layout) {
  switch (layout) {
    case kv_layout::kv_split: return "kv-split";
    case kv_layout::kv_fused: return "kv-fused";
    case kv_layout::token_major: return "token-major";
  }
  return "?";
}

std::optional<kv_layout> kv_layout_from_string(std::string_view name) {
  for (auto l : {kv_layout::kv_split, kv_layout::kv_fused, kv_layout::token_major}) {
    if (to_string(l) == name) return l;
  }
  return std::nullopt;
}

kv_geometry::kv_geometry(model_spec model, kv_layout layout, std::uint64_t chunk_bytes)
    : model_(std::move(model)), layout_(layout), chunk_bytes_(chunk_bytes) {
  if (model_.layers == 0 || model_.kv_heads == 0 || model_.head_dim == 0 || model_.dtype_bytes == 0) {
    throw std::invalid_argument(fmt::format("model '{}': layers, kv heads, head dim and dtype bytes must be positive",
                                            model_.name));
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
    case kv_layout::kv_split:
      return {2 * layer * tensor_span, (2 * layer + 1) * tensor_span, token_bytes_};
    case kv_layout::kv_fused:
      return {layer * tensor_span, layer * tensor_span + head_bytes, token_bytes_};
    case kv_layout::token_major:
      return {layer * 2 * head_bytes, layer * 2 * head_bytes + head_bytes, token_bytes_};
  }
  return {};
}

}  // namespace vtensor
