#pragma once
/// `vtensor_map_overhead`: what a chunk mapped through the manager costs on the real driver
/// against raw cuMemMap + cuMemSetAccess, measured in one process (Note [Mapping overhead of the
/// manager] in map_overhead.cpp). Built only with the CUDA toolkit; needs a GPU to run.

#include <cstdint>
#include <ostream>

#include <nlohmann/json.hpp>

#include "core/kv_geometry.hpp"

namespace vtensor::bench {

/// What to measure.
struct map_overhead_config {
  int device = 0;                          ///< GPU index
  kv_layout layout = kv_layout::kv_split;  ///< layout of the manager's vTensors (Llama-3-8B)
  std::uint64_t chunks = 1024;             ///< chunks of a block (rounded down to whole requests)
  int rounds = 16;                         ///< ABBA quartets per variant
  bool patterns = false;                   ///< also the driver's cost by address pattern
};

/// Runs the measurement on the GPU, prints a table to `out` and returns the figures (the keys of
/// the `map_overhead` object of the results under results/gpu/). Throws cuda_unavailable or
/// std::runtime_error without a device, vmm_error on a driver failure.
nlohmann::ordered_json measure_map_overhead(const map_overhead_config& config, std::ostream& out);

}  // namespace vtensor::bench
