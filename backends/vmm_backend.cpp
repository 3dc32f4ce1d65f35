#include "backends/vmm_backend.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>
#include <vector>

#include <fmt/format.h>

namespace vtensor {

namespace {

std::string format_error(vmm_call call, device_addr addr, const std::string& why) {
  if (addr == 0) {
    return fmt::format("{}: {}", to_string(call), why);
  }
  return fmt::format("{} at {:#x}: {}", to_string(call), addr, why);
}

}  // namespace

std::uint64_t vmm_counters::total_calls() const {
  return std::accumulate(calls.begin(), calls.end(), std::uint64_t{0});
}

std::uint64_t vmm_counters::total_time_ns() const {
  return std::accumulate(time_ns.begin(), time_ns.end(), std::uint64_t{0});
}

vmm_error::vmm_error(vmm_call call, device_addr addr, const std::string& why)
    : std::runtime_error(format_error(call, addr, why)), call_(call), addr_(addr) {}

void vmm_backend::check_aligned(vmm_call call, device_addr va, std::uint64_t bytes) const {
  const std::uint64_t granularity = granularity_bytes();
  // Not std::has_single_bit: without -mpopcnt it is a libgcc call (__popcountdi2) on every VMM call.
  const bool power_of_two = granularity != 0 && (granularity & (granularity - 1)) == 0;
  const auto misaligned = [&](std::uint64_t x) {
    return power_of_two ? (x & (granularity - 1)) != 0 : x % granularity != 0;
  };
  if (misaligned(va)) [[unlikely]] {
    throw vmm_error(call, va, fmt::format("address is not a multiple of the {} byte granularity", granularity));
  }
  if (bytes == 0) [[unlikely]] {
    throw vmm_error(call, va, "size is zero bytes");
  }
  if (misaligned(bytes)) [[unlikely]] {
    throw vmm_error(call, va,
                    fmt::format("size {} bytes is not a multiple of the {} byte granularity", bytes, granularity));
  }
  if (bytes > std::numeric_limits<std::uint64_t>::max() - va) [[unlikely]] {
    throw vmm_error(call, va, fmt::format("span of {} bytes wraps around the address space", bytes));
  }
}

device_addr vmm_backend::reserve(std::uint64_t bytes) {
  count(vmm_call::reserve);
  check_aligned(vmm_call::reserve, 0, bytes);
  return do_reserve(bytes);
}

void vmm_backend::free_range(device_addr base) {
  count(vmm_call::free_range);
  check_aligned(vmm_call::free_range, base, granularity_bytes());
  do_free_range(base);
}

std::optional<chunk_handle> vmm_backend::create_chunk() {
  count(vmm_call::create);
  return do_create_chunk();
}

void vmm_backend::release_chunk(chunk_handle h) {
  count(vmm_call::release);
  do_release_chunk(h);
}

void vmm_backend::map(device_addr va, chunk_handle h) {
  count(vmm_call::map);
  check_aligned(vmm_call::map, va, chunk_bytes());
  do_map(va, h);
}

void vmm_backend::set_access(device_addr va, std::uint64_t bytes) {
  count(vmm_call::set_access);
  check_aligned(vmm_call::set_access, va, bytes);
  do_set_access(va, bytes);
}

// Note [Map with access]
// Every chunk the pool maps gets its set-access at once (Note [One set-access per chunk] in
// async_mapper.cpp), so the pair is one call of the contract. The default runs the two hooks; a
// device backend checks and records once, around its two driver calls back to back, because every
// driver call leaves the thread's caches cold and each line touched between two calls costs a miss
// (Note [Tracking on the map path] in address_space.hpp).
//
// Note [Counting in the base class]
// Every call is counted here, in the public method, for every backend and adaptor: a hook never
// counts, so no backend can count differently. map_with_access counts the map before the hook
// (a failed call is a call) and learns the rest from how the hook ended: returned, a map and a
// set-access; threw a vmm_error for set_access, a map, a set-access and the unmap that undid it;
// threw anything else, the map only. An adaptor that forwards the pair as one inner call passes
// the inner backend's vmm_error on, so it counts what the inner backend counted.
void vmm_backend::map_with_access(device_addr va, chunk_handle h) {
  count(vmm_call::map);
  check_aligned(vmm_call::map, va, chunk_bytes());
  try {
    do_map_with_access(va, h);
  } catch (const vmm_error& e) {
    if (e.call() == vmm_call::set_access) {
      count(vmm_call::set_access);
      count(vmm_call::unmap);
    }
    throw;
  }
  count(vmm_call::set_access);
}

// Note [Runs of maps]
// The pool maps a request's pages in runs of adjacent chunks (a tensor's pages, ascending). A
// run is the calls of its chunks, in order, with their checks, counts and charges: only the work
// between them may be shared. The simulated device checks and books the run at once (one charge
// per kind, one lookup of the range); an adaptor forwards the run when it books whole calls
// (accounting) and otherwise lets the default split it into its per-chunk hooks (counting, fault
// injection), so that what each call does is unchanged; the cuda backend makes its driver calls
// chunk by chunk as before. The counts are taken here, as for map_with_access (Note [Counting in
// the base class]): the chunks done, plus the failing chunk's map and, when its access failed,
// its set-access and the unmap that undid it. A run whose address is misaligned, or whose end
// wraps, goes chunk by chunk through map_with_access, which raises the same error at the same
// chunk. A mapping job's runs go down in one call, map_runs_with_access, so that the layers above
// the device (the accounting adaptor's booking, the checks here) run once a job and not once a
// run: a decode step's job is one run of a chunk or a few per tensor, and on a gen-trace replay
// the layers cost more than the device's own work (results/README.md, "Session 16").
// The simulated device maps the job's runs in one loop; every other backend and adaptor gets the
// default, its run hook once per run, as before.
void vmm_backend::map_run_with_access(device_addr va, std::span<const chunk_handle> handles, std::size_t& mapped) {
  mapped = 0;
  if (handles.empty()) return;
  const std::uint64_t chunk = chunk_bytes();
  const std::uint64_t granularity = granularity_bytes();
  const std::uint64_t bytes = chunk * handles.size();
  if (va % granularity != 0 || chunk % granularity != 0 || bytes / chunk != handles.size() ||
      bytes > std::numeric_limits<std::uint64_t>::max() - va) [[unlikely]] {
    for (; mapped < handles.size(); ++mapped) map_with_access(va + mapped * chunk, handles[mapped]);
    return;
  }
  try {
    do_map_run_with_access(va, handles, mapped);
  } catch (const vmm_error& e) {
    count_stopped_maps(mapped, e.call() == vmm_call::set_access);
    throw;
  } catch (...) {
    count_stopped_maps(mapped, false);
    throw;
  }
  count(vmm_call::map, handles.size());
  count(vmm_call::set_access, handles.size());
}

void vmm_backend::count_stopped_maps(std::size_t done, bool access_failed) {
  count(vmm_call::map, done + 1);
  count(vmm_call::set_access, done);
  if (access_failed) {
    count(vmm_call::set_access);
    count(vmm_call::unmap);
  }
}

void vmm_backend::do_map_run_with_access(device_addr va, std::span<const chunk_handle> handles, std::size_t& mapped) {
  for (; mapped < handles.size(); ++mapped) do_map_with_access(va + mapped * chunk_bytes(), handles[mapped]);
}

namespace {

// Calls map_run(va, handles, mapped) for each run of adjacent addresses in `maps` from maps[done]
// on, adding each run's `mapped` to `done`, also when the call throws.
template <typename F>
void for_each_run(std::span<const mapping_entry> maps, std::size_t& done, std::uint64_t chunk, F&& map_run) {
  // Kept between jobs: a job is a few runs, and a fresh vector was a malloc and a free per job
  // (1% of a replay's instructions). One per thread: the step thread and the worker both map.
  thread_local std::vector<chunk_handle> handles;
  while (done < maps.size()) {
    std::size_t end = done + 1;
    while (end < maps.size() && maps[end].va == maps[end - 1].va + chunk) ++end;
    handles.clear();
    for (std::size_t i = done; i < end; ++i) handles.push_back(maps[i].handle);
    std::size_t mapped = 0;
    try {
      map_run(maps[done].va, std::span<const chunk_handle>(handles), mapped);
    } catch (...) {
      done += mapped;
      throw;
    }
    done += mapped;
  }
}

}  // namespace

// A job's runs are counted as its runs' calls would count them (Note [Runs of maps]): the
// entries done, plus the failing chunk's map and, when its access failed, its set-access and the
// unmap that undid it. A job with a misaligned or wrapping entry goes run by run through
// map_run_with_access, which raises the same error at the same chunk.
void vmm_backend::map_runs_with_access(std::span<const mapping_entry> maps, std::size_t& done) {
  if (done >= maps.size()) return;
  const std::uint64_t chunk = chunk_bytes();
  const std::uint64_t granularity = granularity_bytes();
  // A power of two (as check_aligned tests it) that divides the chunk: else run by run.
  bool plain = granularity != 0 && (granularity & (granularity - 1)) == 0 && chunk % granularity == 0;
  std::uint64_t bits = 0;  // every address or'ed: aligned when no bit under the granularity is set
  std::uint64_t top = 0;
  for (std::size_t i = done; i < maps.size(); ++i) {
    bits |= maps[i].va;
    top = std::max(top, maps[i].va);
  }
  plain = plain && (bits & (granularity - 1)) == 0 && top <= std::numeric_limits<std::uint64_t>::max() - chunk;
  if (!plain) [[unlikely]] {
    for_each_run(maps, done, chunk, [this](device_addr va, std::span<const chunk_handle> handles, std::size_t& mapped) {
      map_run_with_access(va, handles, mapped);
    });
    return;
  }
  const std::size_t first = done;
  try {
    do_map_runs_with_access(maps, done);
  } catch (const vmm_error& e) {
    count_stopped_maps(done - first, e.call() == vmm_call::set_access);
    throw;
  } catch (...) {
    count_stopped_maps(done - first, false);
    throw;
  }
  count(vmm_call::map, maps.size() - first);
  count(vmm_call::set_access, maps.size() - first);
}

void vmm_backend::do_map_runs_with_access(std::span<const mapping_entry> maps, std::size_t& done) {
  for_each_run(maps, done, chunk_bytes(),
               [this](device_addr va, std::span<const chunk_handle> handles, std::size_t& mapped) {
                 do_map_run_with_access(va, handles, mapped);
               });
}

void vmm_backend::do_map_with_access(device_addr va, chunk_handle h) {
  do_map(va, h);
  try {
    do_set_access(va, chunk_bytes());
  } catch (...) {
    do_unmap(va, chunk_bytes());
    throw;
  }
}

void vmm_backend::unmap(device_addr va, std::uint64_t bytes) {
  count(vmm_call::unmap);
  check_aligned(vmm_call::unmap, va, bytes);
  do_unmap(va, bytes);
}

}  // namespace vtensor
