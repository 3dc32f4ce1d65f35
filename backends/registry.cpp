#include "backends/registry.hpp"

#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/latency_model.hpp"
#include "backends/sim_backend.hpp"
#if VTENSOR_HAVE_CUDA
#include "backends/cuda_backend.hpp"
#endif

namespace vtensor {

namespace {

std::unique_ptr<vmm_backend> make_sim(const backend_config& config) {
  return std::make_unique<sim_backend>(config.capacity_bytes, latency_model_for(config));
}

#if VTENSOR_HAVE_CUDA
std::unique_ptr<vmm_backend> make_cuda(const backend_config& config) {
  return std::make_unique<cuda_backend>(config.device_index, config.capacity_bytes);
}
#endif

}  // namespace

latency_model latency_model_for(const backend_config& config) {
  if (config.zero_latency) return latency_model::zero();
  if (config.calibration_file.empty()) return latency_model::h200();
  return latency_model::load(config.calibration_file);
}

namespace {

struct registry_entry {
  std::string_view name;
  std::unique_ptr<vmm_backend> (*make)(const backend_config&);
  bool simulated;  // calls take no wall time
};

/// Every backend of this build, one entry each (cuda when the toolkit was found at configure time).
constexpr std::array k_registry = {
    registry_entry{"sim", &make_sim, true},
#if VTENSOR_HAVE_CUDA
    registry_entry{"cuda", &make_cuda, false},
#endif
};

}  // namespace

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  names.reserve(k_registry.size());
  for (const registry_entry& entry : k_registry) {
    names.emplace_back(entry.name);
  }
  return names;
}

bool backend_is_simulated(std::string_view name) {
  for (const registry_entry& entry : k_registry) {
    if (entry.name == name) return entry.simulated;
  }
  return false;
}

std::unique_ptr<vmm_backend> make_backend(std::string_view name, const backend_config& config) {
  for (const registry_entry& entry : k_registry) {
    if (entry.name == name) {
      std::unique_ptr<vmm_backend> backend = entry.make(config);
      return config.wrap ? config.wrap(std::move(backend)) : std::move(backend);
    }
  }
  throw unknown_backend_error(
      fmt::format("unknown backend '{}'; this build has: {}", name, fmt::join(backend_names(), ", ")));
}

}  // namespace vtensor
