#include "bench/map_overhead/bare_driver.hpp"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include <cuda.h>
#include <fmt/format.h>

namespace vtensor::bench {

namespace {

#define VTENSOR_BARE_STR2(x) #x
#define VTENSOR_BARE_STR(x) VTENSOR_BARE_STR2(x)
// Resolved through cuda.h's macros, so versioned symbols are the ones looked up.
// clang-format off
#define VTENSOR_BARE_CALLS(X) \
  X(cuInit) \
  X(cuDeviceGet) \
  X(cuDevicePrimaryCtxRetain) \
  X(cuDevicePrimaryCtxRelease) \
  X(cuCtxSetCurrent) \
  X(cuCtxSynchronize) \
  X(cuGetErrorName) \
  X(cuMemMap) \
  X(cuMemUnmap) \
  X(cuMemSetAccess)
// clang-format on

struct table {
#define VTENSOR_BARE_DECLARE(fn) decltype(&fn) fn##_ = nullptr;
  VTENSOR_BARE_CALLS(VTENSOR_BARE_DECLARE)
#undef VTENSOR_BARE_DECLARE
};

}  // namespace

struct bare_driver::state {
  table api;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUmemAccessDesc access{};

  void check(CUresult r, vmm_call call, device_addr va, const char* fn) const {
    if (r == CUDA_SUCCESS) return;
    const char* name = nullptr;
    const std::string error = api.cuGetErrorName_(r, &name) == CUDA_SUCCESS && name != nullptr
                                  ? std::string(name)
                                  : fmt::format("CUresult {}", static_cast<int>(r));
    throw vmm_error(call, va, fmt::format("{} failed: {}", fn, error));
  }
  void require(CUresult r, const char* what) const {
    if (r != CUDA_SUCCESS)
      throw std::runtime_error(fmt::format("bare driver: {} failed ({})", what, static_cast<int>(r)));
  }
};

bare_driver::bare_driver(int device) : s_(std::make_unique<state>()) {
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) throw std::runtime_error(fmt::format("bare driver: no CUDA driver ({})", ::dlerror()));
#define VTENSOR_BARE_RESOLVE(fn)                                                           \
  s_->api.fn##_ = reinterpret_cast<decltype(&fn)>(::dlsym(library, VTENSOR_BARE_STR(fn))); \
  if (s_->api.fn##_ == nullptr) throw std::runtime_error("bare driver: the driver lacks " VTENSOR_BARE_STR(fn));
  VTENSOR_BARE_CALLS(VTENSOR_BARE_RESOLVE)
#undef VTENSOR_BARE_RESOLVE
  s_->require(s_->api.cuInit_(0), "cuInit");
  s_->require(s_->api.cuDeviceGet_(&s_->device, device), "cuDeviceGet");
  s_->require(s_->api.cuDevicePrimaryCtxRetain_(&s_->context, s_->device), "cuDevicePrimaryCtxRetain");
  s_->require(s_->api.cuCtxSetCurrent_(s_->context), "cuCtxSetCurrent");
  s_->access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  s_->access.location.id = device;
  s_->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

bare_driver::~bare_driver() {
  if (s_->context != nullptr) s_->api.cuDevicePrimaryCtxRelease_(s_->device);
}

void bare_driver::map(device_addr va, chunk_handle h) {
  s_->check(s_->api.cuMemMap_(va, k_chunk_bytes, 0, h.value, 0), vmm_call::map, va, "cuMemMap");
}

void bare_driver::set_access(device_addr va, std::uint64_t bytes) {
  s_->check(s_->api.cuMemSetAccess_(va, bytes, &s_->access, 1), vmm_call::set_access, va, "cuMemSetAccess");
}

void bare_driver::unmap(device_addr va) {
  s_->check(s_->api.cuMemUnmap_(va, k_chunk_bytes), vmm_call::unmap, va, "cuMemUnmap");
}

void bare_driver::synchronize() { s_->check(s_->api.cuCtxSynchronize_(), vmm_call::map, 0, "cuCtxSynchronize"); }

}  // namespace vtensor::bench
