#include "backends/cuda_backend.hpp"

#include <dlfcn.h>

#include <chrono>

#include <cuda.h>
#include <fmt/format.h>

#include "backends/address_space.hpp"

namespace vtensor {

namespace {

#define VTENSOR_STR2(x) #x
#define VTENSOR_STR(x) VTENSOR_STR2(x)

// Every driver entry point the backend uses, resolved from libcuda.so.1 at run time. The names go
// through cuda.h's macros first, so versioned symbols (cuMemGetInfo_v2, ...) are the ones looked up.
// clang-format off
#define VTENSOR_CUDA_DRIVER_CALLS(X) \
  X(cuInit) \
  X(cuDriverGetVersion) \
  X(cuDeviceGetCount) \
  X(cuDeviceGet) \
  X(cuDeviceGetName) \
  X(cuDeviceGetAttribute) \
  X(cuDevicePrimaryCtxRetain) \
  X(cuDevicePrimaryCtxRelease) \
  X(cuCtxSetCurrent) \
  X(cuGetErrorName) \
  X(cuMemGetInfo) \
  X(cuMemGetAllocationGranularity) \
  X(cuMemAddressReserve) \
  X(cuMemAddressFree) \
  X(cuMemCreate) \
  X(cuMemRelease) \
  X(cuMemMap) \
  X(cuMemUnmap) \
  X(cuMemSetAccess)
// clang-format on

struct driver_api {
#define VTENSOR_DECLARE(fn) decltype(&fn) fn##_ = nullptr;
  VTENSOR_CUDA_DRIVER_CALLS(VTENSOR_DECLARE)
#undef VTENSOR_DECLARE
};

using steady = std::chrono::steady_clock;

std::uint64_t ns_between(steady::time_point from, steady::time_point to) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
}

std::uint64_t elapsed_ns(steady::time_point since) { return ns_between(since, steady::now()); }

}  // namespace

struct cuda_backend::state {
  void* library = nullptr;
  driver_api api;
  CUdevice device = 0;
  int ordinal = 0;
  CUcontext context = nullptr;
  std::string device_name;
  int driver_version = 0;
  std::uint64_t capacity_chunks = 0;
  address_space space;       // ranges, chunks, mappings and the contract's checks
  CUmemAccessDesc access{};  // read-write for this device

  std::string error_name(CUresult r) const {
    const char* name = nullptr;
    if (api.cuGetErrorName_ != nullptr && api.cuGetErrorName_(r, &name) == CUDA_SUCCESS && name != nullptr) return name;
    return fmt::format("CUresult {}", static_cast<int>(r));
  }
  void check(CUresult r, vmm_call call, device_addr addr, const char* fn) const {
    if (r != CUDA_SUCCESS) throw vmm_error(call, addr, fmt::format("{} failed: {}", fn, error_name(r)));
  }
  /// Throws cuda_unavailable unless `r` is success (opening the device).
  void require(CUresult r, const char* what) const {
    if (r != CUDA_SUCCESS) throw cuda_unavailable(fmt::format("cuda backend: {}: {}", what, error_name(r)));
  }
  /// The primary context must be current on the calling thread (the manager may call from any).
  void make_current() const {
    thread_local CUcontext current = nullptr;
    if (current != context) {
      api.cuCtxSetCurrent_(context);
      current = context;
    }
  }
  /// A pinned allocation on this device.
  [[nodiscard]] CUmemAllocationProp chunk_prop() const {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal;
    return prop;
  }
  void load_driver();
  void open_device(int device_index);
};

void cuda_backend::state::load_driver() {
  library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    throw cuda_unavailable(fmt::format("cuda backend: no CUDA driver on this machine ({})", ::dlerror()));
  }
#define VTENSOR_RESOLVE(fn)                                                       \
  api.fn##_ = reinterpret_cast<decltype(&fn)>(::dlsym(library, VTENSOR_STR(fn))); \
  if (api.fn##_ == nullptr) throw cuda_unavailable("cuda backend: the driver lacks " VTENSOR_STR(fn));
  VTENSOR_CUDA_DRIVER_CALLS(VTENSOR_RESOLVE)
#undef VTENSOR_RESOLVE
}

void cuda_backend::state::open_device(int device_index) {
  require(api.cuInit_(0), "cuInit");
  require(api.cuDriverGetVersion_(&driver_version), "cuDriverGetVersion");
  int count = 0;
  require(api.cuDeviceGetCount_(&count), "cuDeviceGetCount");
  if (device_index < 0 || device_index >= count) {
    throw cuda_unavailable(fmt::format("cuda backend: no device {} (this machine has {})", device_index, count));
  }
  require(api.cuDeviceGet_(&device, device_index), "cuDeviceGet");
  ordinal = device_index;
  char name[256] = {};
  require(api.cuDeviceGetName_(name, sizeof name, device), "cuDeviceGetName");
  device_name = name;
  int vmm = 0;
  require(api.cuDeviceGetAttribute_(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device),
          "cuDeviceGetAttribute");
  if (vmm == 0)
    throw cuda_unavailable(fmt::format("cuda backend: {} does not support virtual memory management", name));
  require(api.cuDevicePrimaryCtxRetain_(&context, device), "cuDevicePrimaryCtxRetain");
  make_current();
  const CUmemAllocationProp prop = chunk_prop();
  std::size_t granularity = 0;
  require(api.cuMemGetAllocationGranularity_(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity");
  if (k_chunk_bytes % granularity != 0) {
    throw cuda_unavailable(fmt::format("cuda backend: granularity {} does not divide the 2 MiB chunk", granularity));
  }
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = ordinal;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

cuda_backend::cuda_backend(int device_index, std::uint64_t capacity_bytes) : s_(std::make_unique<state>()) {
  s_->load_driver();
  s_->open_device(device_index);
  const std::uint64_t budget = capacity_bytes != 0 ? capacity_bytes : mem_info().free_bytes;
  s_->capacity_chunks = budget / k_chunk_bytes;
}

cuda_backend::~cuda_backend() {
  if (s_->context != nullptr) s_->api.cuDevicePrimaryCtxRelease_(s_->device);
  // The library stays loaded: other code of the process may hold driver state.
}

const std::string& cuda_backend::device_name() const { return s_->device_name; }
int cuda_backend::driver_version() const { return s_->driver_version; }

cuda_mem_info cuda_backend::mem_info() const {
  s_->make_current();
  std::size_t free = 0, total = 0;
  s_->check(s_->api.cuMemGetInfo_(&free, &total), vmm_call::create, 0, "cuMemGetInfo");
  return {free, total};
}

// Every chunk is 2 MiB, a multiple of the device's minimum granularity (checked when opening).
std::uint64_t cuda_backend::do_granularity_bytes() const { return k_chunk_bytes; }
std::uint64_t cuda_backend::do_capacity_bytes() const { return s_->capacity_chunks * k_chunk_bytes; }

device_addr cuda_backend::do_reserve(std::uint64_t bytes) {
  s_->make_current();
  CUdeviceptr ptr = 0;
  const auto t0 = steady::now();
  const CUresult r = s_->api.cuMemAddressReserve_(&ptr, bytes, k_chunk_bytes, 0, 0);
  charge(vmm_call::reserve, elapsed_ns(t0));
  s_->check(r, vmm_call::reserve, 0, "cuMemAddressReserve");
  s_->space.add_range(ptr, bytes);
  return ptr;
}

void cuda_backend::do_free_range(device_addr base) {
  const std::uint64_t bytes = s_->space.check_free_range(base);
  s_->make_current();
  const auto t0 = steady::now();
  const CUresult r = s_->api.cuMemAddressFree_(base, bytes);
  charge(vmm_call::free_range, elapsed_ns(t0));
  s_->check(r, vmm_call::free_range, base, "cuMemAddressFree");
  s_->space.remove_range(base);
}

std::optional<chunk_handle> cuda_backend::do_create_chunk() {
  if (s_->space.live().chunks >= s_->capacity_chunks) return std::nullopt;
  s_->make_current();
  const CUmemAllocationProp prop = s_->chunk_prop();
  CUmemGenericAllocationHandle h = 0;
  const auto t0 = steady::now();
  const CUresult r = s_->api.cuMemCreate_(&h, k_chunk_bytes, &prop, 0);
  charge(vmm_call::create, elapsed_ns(t0));
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return std::nullopt;
  s_->check(r, vmm_call::create, 0, "cuMemCreate");
  s_->space.add_chunk(chunk_handle{h});
  return chunk_handle{h};
}

void cuda_backend::do_release_chunk(chunk_handle h) {
  s_->space.check_release(h);
  s_->make_current();
  const auto t0 = steady::now();
  const CUresult r = s_->api.cuMemRelease_(h.value);
  charge(vmm_call::release, elapsed_ns(t0));
  s_->check(r, vmm_call::release, 0, "cuMemRelease");
  s_->space.remove_chunk(h);
}

void cuda_backend::do_map(device_addr va, chunk_handle h) { map_chunk(va, h, false); }

void cuda_backend::do_map_with_access(device_addr va, chunk_handle h) { map_chunk(va, h, true); }

// With access, a failed set-access unmaps before its error (a vmm_error for set_access, Note
// [Counting in the base class]) propagates.
void cuda_backend::map_chunk(device_addr va, chunk_handle h, bool with_access) {
  const address_space::map_slot slot = s_->space.check_map(va, h);
  s_->make_current();
  const auto t0 = steady::now();
  const CUresult r = s_->api.cuMemMap_(va, k_chunk_bytes, 0, h.value, 0);
  const auto t1 = steady::now();
  charge(vmm_call::map, ns_between(t0, t1));
  s_->check(r, vmm_call::map, va, "cuMemMap");
  if (with_access) {
    const CUresult a = s_->api.cuMemSetAccess_(va, k_chunk_bytes, &s_->access, 1);
    const auto t2 = steady::now();
    charge(vmm_call::set_access, ns_between(t1, t2));
    if (a != CUDA_SUCCESS) {
      (void)s_->api.cuMemUnmap_(va, k_chunk_bytes);  // the set-access error is the one reported
      charge(vmm_call::unmap, elapsed_ns(t2));
      s_->check(a, vmm_call::set_access, va, "cuMemSetAccess");
    }
  }
  s_->space.commit_map(slot, h);
  if (with_access) slot.span->accessible = true;
}

void cuda_backend::do_set_access(device_addr va, std::uint64_t bytes) {
  const address_space::mapped_run run = s_->space.check_mapped(vmm_call::set_access, va, bytes);
  s_->make_current();
  const auto t0 = steady::now();
  const CUresult r = s_->api.cuMemSetAccess_(va, bytes, &s_->access, 1);
  charge(vmm_call::set_access, elapsed_ns(t0));
  s_->check(r, vmm_call::set_access, va, "cuMemSetAccess");
  address_space::commit_set_access(run);
}

void cuda_backend::do_unmap(device_addr va, std::uint64_t bytes) {
  const address_space::mapped_run run = s_->space.check_mapped(vmm_call::unmap, va, bytes);
  s_->make_current();
  // One driver call per mapping: cuMemUnmap must cover whole mappings, and costs per mapping anyway.
  const auto t0 = steady::now();
  for (std::size_t i = 0; i < run.spans.size(); ++i) {
    const device_addr at = va + i * k_chunk_bytes;
    const CUresult r = s_->api.cuMemUnmap_(at, k_chunk_bytes);
    if (r != CUDA_SUCCESS) {
      charge(vmm_call::unmap, elapsed_ns(t0));
      s_->space.commit_unmap(run, i);  // the spans before it are unmapped
      s_->check(r, vmm_call::unmap, at, "cuMemUnmap");
    }
  }
  charge(vmm_call::unmap, elapsed_ns(t0));
  s_->space.commit_unmap(run);
}

vmm_live cuda_backend::do_live() const { return s_->space.live(); }

}  // namespace vtensor
