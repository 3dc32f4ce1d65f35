#include "sim/presets.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>

#include <stdexcept>
#include "backends/units.hpp"

namespace vtensor::sim {
namespace {

// Note [GPU ceilings]
// The step cost uses measured ceilings, not datasheet peaks (Note [Roofline step cost]), and the
// memory a process could actually fill with 2 MiB chunks (the figure behind backend_config's
// default capacity), not the datasheet's. The A100 row is a realistic rate below its peak, not a
// measurement of ours. The figures, with peaks beside them: results/README.md, "Figures behind
// the notes of core/ and sim/".
const std::array<gpu_preset, 2> k_gpus{{
    {"h200", 790e12, 4.3e12, std::uint64_t{71'313} * 2 * k_mib},
    {"a100-80gb", 280e12, 1.9e12, std::uint64_t{81'920} * k_mib},
}};

}  // namespace

std::optional<gpu_preset> gpu_by_name(std::string_view name) {
  for (const auto& g : k_gpus) {
    if (g.name == name) return g;
  }
  return std::nullopt;
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> names;
  for (const auto& g : k_gpus) names.push_back(g.name);
  return names;
}

std::uint64_t model_compute::weight_bytes_per_gpu() const {
  return static_cast<std::uint64_t>(params * dtype_bytes / tp);
}

model_compute model_compute_preset(std::string_view name, std::uint32_t tp) {
  const model_preset_entry* row = find_model_preset(name);  // core's table (core/model_presets.hpp)
  if (row == nullptr) {
    throw std::invalid_argument(
        fmt::format("unknown model '{}' (known: {})", name, fmt::join(model_preset_names(), ", ")));
  }
  const model_spec* kv = &row->kv;
  if (tp == 0 || kv->kv_heads % tp != 0) {
    throw std::invalid_argument(
        fmt::format("model '{}': tensor-parallel degree {} must divide its {} KV heads", name, tp, kv->kv_heads));
  }
  model_compute m;
  m.name = std::string(name);
  m.params = row->params;
  m.layers = kv->layers;
  m.hidden = row->hidden;
  m.dtype_bytes = kv->dtype_bytes;
  m.tp = tp;
  m.kv = *kv;
  m.kv.kv_heads /= tp;
  return m;
}

roofline_sides attention_roofline(const model_compute& model, const gpu_preset& gpu, const attention_work& a) {
  const double tp = model.tp;
  const double kv_per_token = static_cast<double>(model.kv_bytes_per_token_per_gpu());
  roofline_sides r;
  r.compute_s = 4.0 * model.layers * model.hidden * static_cast<double>(a.attended_pairs) / tp / gpu.flop_rate;
  r.memory_s = kv_per_token * static_cast<double>(a.kv_read_tokens + a.kv_write_tokens) / gpu.bandwidth;
  return r;
}

step_cost roofline(const model_compute& model, const gpu_preset& gpu, const step_work& work, double overhead_s,
                   attention_factors factors) {
  const double tp = model.tp;
  step_cost c;
  c.linear.compute_s = 2.0 * model.params * static_cast<double>(work.computed_tokens) / tp / gpu.flop_rate;
  c.linear.memory_s = static_cast<double>(model.weight_bytes_per_gpu()) / gpu.bandwidth;
  c.prefill_attention = attention_roofline(model, gpu, work.prefill);
  c.decode_attention = attention_roofline(model, gpu, work.decode);
  c.factors = factors;
  c.overhead_s = overhead_s;
  return c;
}

}  // namespace vtensor::sim
