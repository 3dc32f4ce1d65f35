#pragma once
// Which backends a test runs on: GPU tests (doctest suite "gpu") take the GPU backends, the
// others the rest. A GPU backend that finds no device here makes the test print GPU_SKIP, which
// CTest reports as skipped (tests/CMakeLists.txt).

#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "backends/registry.hpp"
#if VTENSOR_HAVE_CUDA
#include "backends/cuda_backend.hpp"
#endif

namespace vtensor::testing {

/// Registered backend names: the GPU ones (`cuda`) when `gpu`, else the others. A GPU run in a
/// build without a GPU backend prints GPU_SKIP.
inline std::vector<std::string> backends_for(bool gpu) {
  std::vector<std::string> names;
  for (const std::string& name : backend_names()) {
    if ((name == "cuda") == gpu) names.push_back(name);
  }
  if (gpu && names.empty()) MESSAGE("GPU_SKIP: this build has no cuda backend");
  return names;
}

/// Makes backend `name`, or prints GPU_SKIP and returns null when it has no device here.
inline std::unique_ptr<vmm_backend> make_backend_or_skip(const std::string& name, const backend_config& config) {
#if VTENSOR_HAVE_CUDA
  try {
    return make_backend(name, config);
  } catch (const cuda_unavailable& e) {
    MESSAGE("GPU_SKIP: backend " << name << ": " << std::string(e.what()));
    return nullptr;
  }
#else
  return make_backend(name, config);
#endif
}

/// Whether this machine has a GPU the cuda backend can open.
inline bool gpu_present() {
#if VTENSOR_HAVE_CUDA
  try {
    const cuda_backend probe(0, k_chunk_bytes);
    return true;
  } catch (const cuda_unavailable&) {
    return false;
  }
#else
  return false;
#endif
}

}  // namespace vtensor::testing
