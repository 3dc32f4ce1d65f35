#pragma once
/// The VMM backend contract: the operations of the CUDA driver's virtual memory management API,
/// stated once here for every implementation (the simulated device `sim`, the real driver `cuda`,
/// and the adaptors that wrap either).
///
/// Rules (the simulated device enforces all of them; the real driver enforces its own, which are
/// the same or looser):
///  - Sizes and virtual addresses are multiples of `granularity_bytes()` (2 MiB on every device
///    measured). The base class checks alignment for every backend before the hook runs; the
///    device backends check the other rules through one shared address_space
///    (backends/address_space.hpp), so `sim` and `cuda` reject the same calls the same way.
///  - `reserve(bytes)` returns a fresh virtual range; `free_range(base)` takes the base of a range
///    that holds no mapping any more.
///  - `create_chunk()` makes one physical chunk of `chunk_bytes()`; past capacity it returns
///    `std::nullopt` (out of memory: an expected result, handled by the caller: evict, preempt,
///    retry). `release_chunk(h)` takes a chunk that is mapped nowhere.
///  - `map(va, h)` needs `va` inside a reserved range and the chunk-sized span at `va` unmapped. A
///    chunk may be mapped at several addresses (prefix sharing maps one chunk into several
///    ranges).
///  - `set_access(va, bytes)` makes mapped memory readable and writable; every chunk-sized span of
///    `[va, va + bytes)` must be mapped. Memory is usable only after it.
///  - `unmap(va, bytes)` needs every chunk-sized span of `[va, va + bytes)` mapped.
///  - Every other violation is a programming error: the backend throws `vmm_error` naming the call
///    and the address. The backend never retries and never hides an error.
/// Ownership: the caller owns every range and chunk it got until it frees or releases it; a
/// backend destroyed while holding some reports nothing (the core's shutdown must leave none, and
/// `live()` lets tests check that).
/// Threads: a backend is not thread-safe; the manager serialises calls.

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "backends/enum_names.hpp"
#include "backends/units.hpp"

namespace vtensor {

/// A device virtual address (CUdeviceptr on a GPU).
using device_addr = std::uint64_t;

/// The 2 MiB unit of every chunk vtensor creates.
inline constexpr std::uint64_t k_chunk_bytes = 2 * k_mib;

/// One physical chunk (CUmemGenericAllocationHandle on a GPU). Opaque to the core.
struct chunk_handle {
  std::uint64_t value = 0;  ///< backend-defined; 0 is never a valid handle
  friend bool operator==(chunk_handle, chunk_handle) = default;
};

/// The kinds of VMM call, for counters, latency models and fault injection.
enum class vmm_call : std::uint8_t { reserve, free_range, create, release, map, set_access, unmap };
inline constexpr std::size_t k_vmm_call_kinds = 7;

/// The names of the call kinds, in enum order (backends/enum_names.hpp).
inline constexpr enum_names<vmm_call, k_vmm_call_kinds> k_vmm_call_names{{{
    {vmm_call::reserve, "reserve"},
    {vmm_call::free_range, "free_range"},
    {vmm_call::create, "create"},
    {vmm_call::release, "release"},
    {vmm_call::map, "map"},
    {vmm_call::set_access, "set_access"},
    {vmm_call::unmap, "unmap"},
}}};

/// k_vmm_call_names.name(call): "reserve", "free_range", ... ("?" outside the enum).
[[nodiscard]] constexpr std::string_view to_string(vmm_call call) { return k_vmm_call_names.name(call); }
/// k_vmm_call_names.parse(name): std::nullopt for an unknown name.
[[nodiscard]] constexpr std::optional<vmm_call> vmm_call_from_string(std::string_view name) {
  return k_vmm_call_names.parse(name);
}
/// Every call kind, in enum order.
inline constexpr std::array<vmm_call, k_vmm_call_kinds> k_vmm_calls = {
    vmm_call::reserve, vmm_call::free_range, vmm_call::create, vmm_call::release,
    vmm_call::map,     vmm_call::set_access, vmm_call::unmap};

/// Calls and time per call kind. Time is what the backend charged: modelled latency on `sim`,
/// measured wall time on `cuda`.
struct vmm_counters {
  std::array<std::uint64_t, k_vmm_call_kinds> calls{};    ///< calls made, failed ones included
  std::array<std::uint64_t, k_vmm_call_kinds> time_ns{};  ///< time charged per kind, nanoseconds
  [[nodiscard]] std::uint64_t calls_of(vmm_call c) const { return calls[static_cast<std::size_t>(c)]; }
  [[nodiscard]] std::uint64_t time_ns_of(vmm_call c) const { return time_ns[static_cast<std::size_t>(c)]; }
  [[nodiscard]] std::uint64_t total_calls() const;
  [[nodiscard]] std::uint64_t total_time_ns() const;
};

/// What a backend holds right now, for leak checks and invariants.
struct vmm_live {
  std::uint64_t ranges = 0;    ///< reserved virtual ranges not freed
  std::uint64_t chunks = 0;    ///< chunks created and not released
  std::uint64_t mappings = 0;  ///< chunk-sized mappings in place
};

/// A broken contract or a driver failure other than out-of-memory.
class vmm_error : public std::runtime_error {
 public:
  vmm_error(vmm_call call, device_addr addr, const std::string& why);
  [[nodiscard]] vmm_call call() const { return call_; }
  [[nodiscard]] device_addr addr() const { return addr_; }

 private:
  vmm_call call_;
  device_addr addr_;
};

/// One chunk to map at `va`; its set-access follows at once.
struct mapping_entry {
  device_addr va = 0;     ///< chunk-aligned address
  chunk_handle handle{};  ///< the chunk mapped there
};

/// Abstract VMM device. Public non-virtual methods check alignment and count every call; the
/// private `do_*` hooks do the work and never count (Note [Counting in the base class]).
/// Implementations charge time through `charge()`.
class vmm_backend {
 public:
  virtual ~vmm_backend() = default;
  vmm_backend(const vmm_backend&) = delete;
  vmm_backend& operator=(const vmm_backend&) = delete;

  /// Registry name of this backend ("sim", "cuda", or an adaptor's "counting(sim)").
  [[nodiscard]] std::string name() const { return do_name(); }
  /// Mapping granularity in bytes (2 MiB). Asked of the backend once: every call checks its
  /// alignment with it, and through an adaptor the question was two virtual calls a VMM call.
  [[nodiscard]] std::uint64_t granularity_bytes() const {
    std::uint64_t g = granularity_.load(std::memory_order_relaxed);
    if (g == 0) [[unlikely]] {
      g = do_granularity_bytes();
      granularity_.store(g, std::memory_order_relaxed);
    }
    return g;
  }
  /// Bytes of one chunk (== granularity on every supported device).
  [[nodiscard]] std::uint64_t chunk_bytes() const { return k_chunk_bytes; }
  /// Physical capacity in bytes; create_chunk fails past it.
  [[nodiscard]] std::uint64_t capacity_bytes() const { return do_capacity_bytes(); }
  /// Capacity in chunks.
  [[nodiscard]] std::uint64_t capacity_chunks() const { return capacity_bytes() / chunk_bytes(); }

  /// Reserves `bytes` of virtual address space. Throws vmm_error if none is left.
  [[nodiscard]] device_addr reserve(std::uint64_t bytes);
  /// Frees a range returned by reserve; it must hold no mapping.
  void free_range(device_addr base);
  /// Creates one chunk; std::nullopt when the device is out of memory.
  [[nodiscard]] std::optional<chunk_handle> create_chunk();
  /// Releases a chunk mapped nowhere.
  void release_chunk(chunk_handle h);
  /// Maps chunk `h` at `va` (one chunk-sized span).
  void map(device_addr va, chunk_handle h);
  /// Grants read-write access to the mapped span `[va, va + bytes)`.
  void set_access(device_addr va, std::uint64_t bytes);
  /// Unmaps the mapped span `[va, va + bytes)`.
  void unmap(device_addr va, std::uint64_t bytes);
  /// map(va, h), then set_access over that chunk: counted and charged as those two calls. When the
  /// access fails, the mapping is undone (counted as an unmap) before the error propagates, a
  /// vmm_error for set_access. A backend may do both with less work between its driver calls
  /// (Note [Map with access]).
  void map_with_access(device_addr va, chunk_handle h);
  /// map_with_access(va + i * chunk_bytes(), handles[i]) for each i in order: counted and charged
  /// as those calls, whose checks and errors it has. `mapped` counts the chunks mapped with access
  /// so far; when a call fails the first `mapped` stay mapped (the failing one undid itself) and
  /// the error propagates. A backend may book the run at once (Note [Runs of maps]); a driver's
  /// backend keeps one call per chunk.
  void map_run_with_access(device_addr va, std::span<const chunk_handle> handles, std::size_t& mapped);
  /// map_run_with_access over each run of adjacent addresses in `maps`, from maps[done] on: the
  /// same calls, counts, charges and errors as those calls one after the other (Note [Runs of
  /// maps]). `done` counts the entries mapped with access, also when a call fails.
  void map_runs_with_access(std::span<const mapping_entry> maps, std::size_t& done);

  /// Calls and charged time so far.
  [[nodiscard]] const vmm_counters& counters() const { return counters_; }
  /// What the backend holds now.
  [[nodiscard]] vmm_live live() const { return do_live(); }

 protected:
  vmm_backend() = default;
  /// Adds `ns` to the time charged to `call`.
  void charge(vmm_call call, std::uint64_t ns) { counters_.time_ns[static_cast<std::size_t>(call)] += ns; }

 private:
  void count(vmm_call call, std::uint64_t calls = 1) { counters_.calls[static_cast<std::size_t>(call)] += calls; }
  void check_aligned(vmm_call call, device_addr va, std::uint64_t bytes) const;
  /// Counts a run or job of maps with access that stopped after `done` chunks: theirs, the failing
  /// chunk's map and, when its access failed, its set-access and the unmap that undid it.
  void count_stopped_maps(std::size_t done, bool access_failed);

  [[nodiscard]] virtual std::string do_name() const = 0;
  /// Constant for the backend's life: granularity_bytes() asks it once.
  [[nodiscard]] virtual std::uint64_t do_granularity_bytes() const { return k_chunk_bytes; }
  [[nodiscard]] virtual std::uint64_t do_capacity_bytes() const = 0;
  [[nodiscard]] virtual device_addr do_reserve(std::uint64_t bytes) = 0;
  virtual void do_free_range(device_addr base) = 0;
  [[nodiscard]] virtual std::optional<chunk_handle> do_create_chunk() = 0;
  virtual void do_release_chunk(chunk_handle h) = 0;
  virtual void do_map(device_addr va, chunk_handle h) = 0;
  virtual void do_set_access(device_addr va, std::uint64_t bytes) = 0;
  virtual void do_unmap(device_addr va, std::uint64_t bytes) = 0;
  /// Maps with access. The default runs do_map, do_set_access and, when the access fails,
  /// do_unmap. An override must do the same and report how far it got by what it throws: a
  /// vmm_error for `map` when nothing was mapped, one for `set_access` when the access failed and
  /// the mapping was undone (Note [Counting in the base class]).
  virtual void do_map_with_access(device_addr va, chunk_handle h);
  /// Maps a run with access (map_run_with_access, whose alignment is checked), counting the chunks
  /// done in `mapped`; on an error the chunk that failed is reported as by do_map_with_access. The
  /// default runs do_map_with_access per chunk.
  virtual void do_map_run_with_access(device_addr va, std::span<const chunk_handle> handles, std::size_t& mapped);
  /// Maps the runs of a job (map_runs_with_access, whose entries are aligned and do not wrap),
  /// counting the entries done in `done`; an error is reported as by do_map_run_with_access. The
  /// default runs do_map_run_with_access per run.
  virtual void do_map_runs_with_access(std::span<const mapping_entry> maps, std::size_t& done);
  [[nodiscard]] virtual vmm_live do_live() const = 0;

  vmm_counters counters_;
  mutable std::atomic<std::uint64_t> granularity_{0};  ///< do_granularity_bytes(), once asked (0: not yet)
};

}  // namespace vtensor
