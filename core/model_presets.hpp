#pragma once
/// The model presets, in one table: each model's KV shape (what the manager lays out) and the
/// figures the simulator's step cost needs of it (parameters, attention width).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vtensor {

/// A transformer's KV shape. Tensor parallelism divides kv heads before it reaches here.
struct model_spec {
  std::string name;               ///< preset name, e.g. "llama-3-8b"
  std::uint32_t layers = 0;       ///< transformer layers
  std::uint32_t kv_heads = 0;     ///< KV heads held by this GPU
  std::uint32_t head_dim = 0;     ///< elements per head
  std::uint32_t dtype_bytes = 2;  ///< bytes per element (2 for bf16)
  /// Bytes of K and V for one token over all layers.
  [[nodiscard]] std::uint64_t kv_bytes_per_token() const {
    return std::uint64_t{2} * layers * kv_heads * head_dim * dtype_bytes;
  }
};

/// One preset: the KV shape of the whole model (one GPU) and its compute figures.
struct model_preset_entry {
  model_spec kv;             ///< layers, KV heads, head dim, dtype (config.json of the model)
  double params = 0;         ///< parameters of the released checkpoint (embeddings and LM head included)
  std::uint32_t hidden = 0;  ///< attention width: query heads x head dim
};

/// Every preset, in display order ("llama-3-8b", "yi-6b", "yi-34b", "llama-3-70b").
[[nodiscard]] std::span<const model_preset_entry> model_presets();
/// The preset named `name`, or nullptr.
[[nodiscard]] const model_preset_entry* find_model_preset(std::string_view name);
/// The KV shape of preset `name`, or nullopt.
[[nodiscard]] std::optional<model_spec> model_preset(std::string_view name);
/// Names of the presets, for messages.
[[nodiscard]] std::vector<std::string> model_preset_names();

}  // namespace vtensor
