#include "backends/cuda_backend.hpp"

#include <dlfcn.h>

#include <chrono>
#include <array>
#include <map>
#include <unordered_map>

#include <cuda.h>
#include <fmt/format.h>

namespace vtensor {

namespace {

#define VTENSOR_STR2(x) #x
#define VTENSOR_STR(x) VTENSOR_STR2(x)

// Every driver entry point vtensor uses, resolved from libcuda.so.1 at run time. The names go
// through cuda.h's macros first, so versioned symbols (cuMemGetInfo_v2, ...) are the ones looked up.
#define VTENSOR_CUDA_DRIVER_CALLS(X)                                                                       \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuGetErrorName)                \
  X(cuMemGetInfo) X(cuMemGetAllocationGranularity) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate)    \
  X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)

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
  std::uint64_t granularity = 0;
  std::uint64_t capacity_chunks = 0;
  // Note [Tracking on the map path]
  // Each driver call (an ioctl) leaves the calling thread's caches cold, so every cache line the
  // backend touches between two calls costs a miss: with node-based hash maps for chunks and
  // mappings, that host work was about 1 us a chunk on the H200 machine, 3% of a map +
  // set-access (results/gpu/2026-12-02-h200-map-overhead-2.txt). So a range keeps what is mapped
  // in it as a two-level table of handles indexed by chunk (leaves of 512 slots, allocated when
  // first used), the range last used is looked at first, and the change to a chunk's mapping count
  // is appended to a log that is applied to the per-chunk table only when a release needs the
  // counts (or the log grows long). map_with_access checks and records once for both calls and
  // leaves the handle's validity to the driver: about five lines a chunk instead of twenty, and
  // the host work between driver calls fell to 0.15 us a chunk (...-map-overhead-final.txt).
  struct range_info {
    static constexpr std::uint64_t k_leaf = 512;
    using leaf = std::array<std::uint64_t, k_leaf>;  // handle mapped at each chunk (0: none)
    std::uint64_t bytes = 0;                          // size of the range
    std::uint64_t mapped_spans = 0;                   // chunk-sized mappings inside it
    std::vector<std::unique_ptr<leaf>> leaves;
    std::uint64_t& slot(std::uint64_t index) {
      auto& l = leaves[index / k_leaf];
      if (!l) l = std::make_unique<leaf>();
      return (*l)[index % k_leaf];
    }
    [[nodiscard]] std::uint64_t at(std::uint64_t index) const {
      const auto& l = leaves[index / k_leaf];
      return l ? (*l)[index % k_leaf] : 0;
    }
  };
  using range_map = std::map<device_addr, range_info>;
  range_map ranges;                                         // reserved ranges by base
  range_map::iterator last_range = ranges.end();            // the range a call used last
  std::unordered_map<std::uint64_t, std::uint32_t> chunks;  // live handle -> addresses it is mapped at
  std::vector<std::pair<std::uint64_t, std::int32_t>> count_log;  // changes not yet in `chunks`
  std::uint64_t mappings = 0;                               // chunk-sized mappings in all

  /// Records that `handle` gained (+1) or lost (-1) a mapping.
  void note_mapping(std::uint64_t handle, std::int32_t change) {
    count_log.emplace_back(handle, change);
    if (count_log.size() >= 65536) apply_count_log();
  }
  /// Brings the per-chunk mapping counts up to date.
  void apply_count_log() {
    for (const auto& [handle, change] : count_log) {
      if (auto it = chunks.find(handle); it != chunks.end()) it->second += static_cast<std::uint32_t>(change);
    }
    count_log.clear();
  }
  std::vector<cuda_call_record>* call_log = nullptr;         // measurement only
  CUmemAccessDesc access{};                                  // read-write for this device

  std::string error_name(CUresult r) const {
    const char* name = nullptr;
    if (api.cuGetErrorName_ != nullptr && api.cuGetErrorName_(r, &name) == CUDA_SUCCESS && name != nullptr) return name;
    return fmt::format("CUresult {}", static_cast<int>(r));
  }
  void log(vmm_call call, device_addr va, std::uint64_t bytes, std::uint64_t handle, steady::time_point t0,
           steady::time_point t1) const {
    const auto ns = [](steady::time_point t) {
      return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
    };
    call_log->push_back({call, va, bytes, chunk_handle{handle}, ns(t0), ns(t1)});
  }
  void check(CUresult r, vmm_call call, device_addr addr, const char* fn) const {
    if (r != CUDA_SUCCESS) throw vmm_error(call, addr, fmt::format("{} failed: {}", fn, error_name(r)));
  }
  /// The primary context must be current on the calling thread (the manager may call from any).
  void make_current() const {
    thread_local CUcontext current = nullptr;
    if (current != context) {
      api.cuCtxSetCurrent_(context);
      current = context;
    }
  }
  /// The range holding [va, va + bytes), or ranges.end().
  range_map::iterator range_holding(device_addr va, std::uint64_t bytes) {
    const auto inside = [&](range_map::iterator it) { return va >= it->first && va + bytes <= it->first + it->second.bytes; };
    if (last_range != ranges.end() && inside(last_range)) return last_range;
    auto it = ranges.upper_bound(va);
    if (it == ranges.begin()) return ranges.end();
    --it;
    if (!inside(it)) return ranges.end();
    last_range = it;
    return it;
  }
};

cuda_backend::cuda_backend(int device_index, std::uint64_t capacity_bytes) : s_(std::make_unique<state>()) {
  s_->library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (s_->library == nullptr) {
    throw cuda_unavailable(fmt::format("cuda backend: no CUDA driver on this machine ({})", ::dlerror()));
  }
#define VTENSOR_RESOLVE(fn)                                                                  \
  s_->api.fn##_ = reinterpret_cast<decltype(&fn)>(::dlsym(s_->library, VTENSOR_STR(fn)));   \
  if (s_->api.fn##_ == nullptr) throw cuda_unavailable("cuda backend: the driver lacks " VTENSOR_STR(fn));
  VTENSOR_CUDA_DRIVER_CALLS(VTENSOR_RESOLVE)
#undef VTENSOR_RESOLVE
  const driver_api& api = s_->api;
  auto require = [&](CUresult r, const char* what) {
    if (r != CUDA_SUCCESS) throw cuda_unavailable(fmt::format("cuda backend: {}: {}", what, s_->error_name(r)));
  };
  require(api.cuInit_(0), "cuInit");
  require(api.cuDriverGetVersion_(&s_->driver_version), "cuDriverGetVersion");
  int count = 0;
  require(api.cuDeviceGetCount_(&count), "cuDeviceGetCount");
  if (device_index < 0 || device_index >= count) {
    throw cuda_unavailable(fmt::format("cuda backend: no device {} (this machine has {})", device_index, count));
  }
  require(api.cuDeviceGet_(&s_->device, device_index), "cuDeviceGet");
  s_->ordinal = device_index;
  char name[256] = {};
  require(api.cuDeviceGetName_(name, sizeof name, s_->device), "cuDeviceGetName");
  s_->device_name = name;
  int vmm = 0;
  require(api.cuDeviceGetAttribute_(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, s_->device),
          "cuDeviceGetAttribute");
  if (vmm == 0) throw cuda_unavailable(fmt::format("cuda backend: {} does not support virtual memory management", name));
  require(api.cuDevicePrimaryCtxRetain_(&s_->context, s_->device), "cuDevicePrimaryCtxRetain");
  s_->make_current();

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = s_->ordinal;
  std::size_t granularity = 0;
  require(api.cuMemGetAllocationGranularity_(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity");
  if (k_chunk_bytes % granularity != 0) {
    throw cuda_unavailable(fmt::format("cuda backend: granularity {} does not divide the 2 MiB chunk", granularity));
  }
  s_->granularity = k_chunk_bytes;
  s_->access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  s_->access.location.id = s_->ordinal;
  s_->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
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

std::uint64_t cuda_backend::do_granularity_bytes() const { return s_->granularity; }
std::uint64_t cuda_backend::do_capacity_bytes() const { return s_->capacity_chunks * k_chunk_bytes; }

device_addr cuda_backend::do_reserve(std::uint64_t bytes) {
  s_->make_current();
  CUdeviceptr ptr = 0;
  const auto t0 = steady::now();
  const CUresult r = s_->api.cuMemAddressReserve_(&ptr, bytes, k_chunk_bytes, 0, 0);
  charge(vmm_call::reserve, elapsed_ns(t0));
  s_->check(r, vmm_call::reserve, 0, "cuMemAddressReserve");
  state::range_info info;
  info.bytes = bytes;
  info.leaves.resize((bytes / k_chunk_bytes + state::range_info::k_leaf - 1) / state::range_info::k_leaf);
  s_->ranges.emplace(ptr, std::move(info));
  return ptr;
}

void cuda_backend::do_free_range(device_addr base) {
  auto it = s_->ranges.find(base);
  if (it == s_->ranges.end()) throw vmm_error(vmm_call::free_range, base, "not the base of a reserved range");
  if (it->second.mapped_spans != 0) {
    throw vmm_error(vmm_call::free_range, base,
                    fmt::format("range still holds {} mappings", it->second.mapped_spans));
  }
  s_->make_current();
  const auto t0 = steady::now();
  const CUresult r = s_->api.cuMemAddressFree_(base, it->second.bytes);
  charge(vmm_call::free_range, elapsed_ns(t0));
  s_->check(r, vmm_call::free_range, base, "cuMemAddressFree");
  if (s_->last_range == it) s_->last_range = s_->ranges.end();
  s_->ranges.erase(it);
}

std::optional<chunk_handle> cuda_backend::do_create_chunk() {
  if (s_->chunks.size() >= s_->capacity_chunks) return std::nullopt;
  s_->make_current();
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = s_->ordinal;
  CUmemGenericAllocationHandle h = 0;
  const auto t0 = steady::now();
  const CUresult r = s_->api.cuMemCreate_(&h, k_chunk_bytes, &prop, 0);
  charge(vmm_call::create, elapsed_ns(t0));
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return std::nullopt;
  s_->check(r, vmm_call::create, 0, "cuMemCreate");
  s_->chunks.emplace(h, 0);
  return chunk_handle{h};
}

void cuda_backend::do_release_chunk(chunk_handle h) {
  s_->apply_count_log();
  auto chunk = s_->chunks.find(h.value);
  if (chunk == s_->chunks.end()) {
    throw vmm_error(vmm_call::release, 0, fmt::format("chunk {:#x} is unknown or already released", h.value));
  }
  if (chunk->second > 0) {
    throw vmm_error(vmm_call::release, 0, fmt::format("chunk {:#x} is still mapped at {} addresses", h.value, chunk->second));
  }
  s_->make_current();
  const auto t0 = steady::now();
  const CUresult r = s_->api.cuMemRelease_(h.value);
  charge(vmm_call::release, elapsed_ns(t0));
  s_->check(r, vmm_call::release, 0, "cuMemRelease");
  s_->chunks.erase(chunk);
}

void cuda_backend::do_map(device_addr va, chunk_handle h) { map_chunk(va, h, false); }

void cuda_backend::do_map_with_access(device_addr va, chunk_handle h) { map_chunk(va, h, true); }

// Checks and records once around the driver calls (Note [Tracking on the map path]). With access,
// an unknown or released handle is the driver's to reject (CUDA_ERROR_INVALID_VALUE), and a failed
// set-access unmaps before the error propagates.
void cuda_backend::map_chunk(device_addr va, chunk_handle h, bool with_access) {
  auto range = s_->range_holding(va, k_chunk_bytes);
  if (range == s_->ranges.end()) throw vmm_error(vmm_call::map, va, "span not inside a reserved range");
  if (with_access ? h.value == 0 : !s_->chunks.contains(h.value)) {
    throw vmm_error(vmm_call::map, va, fmt::format("chunk {:#x} is unknown or released", h.value));
  }
  std::uint64_t& slot = range->second.slot((va - range->first) / k_chunk_bytes);
  if (slot != 0) throw vmm_error(vmm_call::map, va, "span already mapped");
  s_->make_current();
  const auto t0 = steady::now();
  const CUresult r = s_->api.cuMemMap_(va, k_chunk_bytes, 0, h.value, 0);
  const auto t1 = steady::now();
  charge(vmm_call::map, ns_between(t0, t1));
  if (s_->call_log != nullptr) s_->log(vmm_call::map, va, k_chunk_bytes, h.value, t0, t1);
  s_->check(r, vmm_call::map, va, "cuMemMap");
  if (with_access) {
    count(vmm_call::set_access);
    const CUresult a = s_->api.cuMemSetAccess_(va, k_chunk_bytes, &s_->access, 1);
    const auto t2 = steady::now();
    charge(vmm_call::set_access, ns_between(t1, t2));
    if (s_->call_log != nullptr) s_->log(vmm_call::set_access, va, k_chunk_bytes, 0, t1, t2);
    if (a != CUDA_SUCCESS) {
      count(vmm_call::unmap);
      (void)s_->api.cuMemUnmap_(va, k_chunk_bytes);  // the set-access error is the one reported
      charge(vmm_call::unmap, elapsed_ns(t2));
      s_->check(a, vmm_call::set_access, va, "cuMemSetAccess");
    }
  }
  slot = h.value;
  s_->note_mapping(h.value, +1);
  ++range->second.mapped_spans;
  ++s_->mappings;
}

void cuda_backend::do_set_access(device_addr va, std::uint64_t bytes) {
  auto range = s_->range_holding(va, bytes);
  for (std::uint64_t off = 0; off < bytes; off += k_chunk_bytes) {
    if (range == s_->ranges.end() || range->second.at((va + off - range->first) / k_chunk_bytes) == 0) {
      throw vmm_error(vmm_call::set_access, va + off, "span not mapped");
    }
  }
  s_->make_current();
  const auto t0 = steady::now();
  const CUresult r = s_->api.cuMemSetAccess_(va, bytes, &s_->access, 1);
  const auto t1 = steady::now();
  charge(vmm_call::set_access, ns_between(t0, t1));
  if (s_->call_log != nullptr) s_->log(vmm_call::set_access, va, bytes, 0, t0, t1);
  s_->check(r, vmm_call::set_access, va, "cuMemSetAccess");
}

void cuda_backend::do_unmap(device_addr va, std::uint64_t bytes) {
  auto range = s_->range_holding(va, bytes);
  for (std::uint64_t off = 0; off < bytes; off += k_chunk_bytes) {
    if (range == s_->ranges.end() || range->second.at((va + off - range->first) / k_chunk_bytes) == 0) {
      throw vmm_error(vmm_call::unmap, va + off, "span not mapped");
    }
  }
  s_->make_current();
  // One driver call per mapping: cuMemUnmap must cover whole mappings, and costs per mapping anyway.
  const auto t0 = steady::now();
  for (std::uint64_t off = 0; off < bytes; off += k_chunk_bytes) {
    const CUresult r = s_->api.cuMemUnmap_(va + off, k_chunk_bytes);
    if (r != CUDA_SUCCESS) {
      charge(vmm_call::unmap, elapsed_ns(t0));
      s_->check(r, vmm_call::unmap, va + off, "cuMemUnmap");
    }
    std::uint64_t& slot = range->second.slot((va + off - range->first) / k_chunk_bytes);
    s_->note_mapping(slot, -1);
    slot = 0;
    --range->second.mapped_spans;
    --s_->mappings;
  }
  charge(vmm_call::unmap, elapsed_ns(t0));
}

void cuda_backend::bare_map(device_addr va, chunk_handle h) {
  s_->make_current();
  s_->check(s_->api.cuMemMap_(va, k_chunk_bytes, 0, h.value, 0), vmm_call::map, va, "cuMemMap");
}

void cuda_backend::bare_set_access(device_addr va, std::uint64_t bytes) {
  s_->make_current();
  s_->check(s_->api.cuMemSetAccess_(va, bytes, &s_->access, 1), vmm_call::set_access, va, "cuMemSetAccess");
}

void cuda_backend::bare_unmap(device_addr va) {
  s_->make_current();
  s_->check(s_->api.cuMemUnmap_(va, k_chunk_bytes), vmm_call::unmap, va, "cuMemUnmap");
}

void cuda_backend::bare_synchronize() {
  s_->make_current();
  s_->check(s_->api.cuCtxSynchronize_(), vmm_call::map, 0, "cuCtxSynchronize");
}

void cuda_backend::set_call_log(std::vector<cuda_call_record>* log) { s_->call_log = log; }

vmm_live cuda_backend::do_live() const { return {s_->ranges.size(), s_->chunks.size(), s_->mappings}; }

}  // namespace vtensor
