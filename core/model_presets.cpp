#include "core/model_presets.hpp"

#include <array>

namespace vtensor {
namespace {

// Published configurations (config.json of each model), bf16 KV; parameter counts of the
// released checkpoints.
const std::array<model_preset_entry, 4> k_presets{{
    {{"llama-3-8b", 32, 8, 128, 2}, 8.030e9, 32 * 128},
    {{"yi-6b", 32, 4, 128, 2}, 6.061e9, 32 * 128},
    {{"yi-34b", 60, 8, 128, 2}, 34.389e9, 56 * 128},
    {{"llama-3-70b", 80, 8, 128, 2}, 70.554e9, 64 * 128},
}};

}  // namespace

std::span<const model_preset_entry> model_presets() { return k_presets; }

const model_preset_entry* find_model_preset(std::string_view name) {
  for (const auto& m : k_presets) {
    if (m.kv.name == name) return &m;
  }
  return nullptr;
}

std::optional<model_spec> model_preset(std::string_view name) {
  const model_preset_entry* m = find_model_preset(name);
  if (m == nullptr) return std::nullopt;
  return m->kv;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& m : k_presets) names.push_back(m.kv.name);
  return names;
}

}  // namespace vtensor
