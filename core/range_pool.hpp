#pragma once
/// Virtual allocation: vTensor ranges (reserved without physical memory), the cache of freed
/// ranges kept reserved for reuse, and the one-chunk scratch range that copy-on-write maps a
/// cached chunk at. A range the cache does not keep goes back to the driver at once; trim
/// (release()) gives back the cached ones and the scratch range.
/// Threads: not thread-safe; the step thread only (the manager serialises). Driver calls go
/// through the vmm_gate, under its backend lock.

#include <cstdint>
#include <vector>

#include "core/async_mapper.hpp"
#include "core/vmm_gate.hpp"

namespace vtensor {

/// vTensor ranges, the range cache and the scratch range.
class range_pool {
 public:
  /// Ranges of `range_bytes` each, at most `cache_limit` of them kept when freed; the scratch
  /// range holds `scratch_bytes` (one chunk).
  range_pool(vmm_gate& gate, std::uint64_t range_bytes, std::uint64_t scratch_bytes, std::size_t cache_limit)
      : gate_(gate), range_bytes_(range_bytes), scratch_bytes_(scratch_bytes), cache_limit_(cache_limit) {}

  /// A vTensor range: from the range cache, else reserved.
  [[nodiscard]] device_addr alloc();
  /// Returns a vTensor range (holding no mapping) to the range cache, or frees it when full.
  void free(device_addr base);
  /// As free(), but a range the cache does not keep is freed by `job`, after its unmaps.
  void free_deferred(device_addr base, mapping_job& job);
  /// The scratch range on `backend` (called inside vmm_gate::locked), reserved on first use.
  [[nodiscard]] device_addr scratch(vmm_backend& backend) {
    if (scratch_ == 0) scratch_ = backend.reserve(scratch_bytes_);
    return scratch_;
  }
  /// Frees every cached range and the scratch range on `backend` (called inside vmm_gate::locked).
  void release(vmm_backend& backend);

  /// Freed ranges kept reserved for reuse.
  [[nodiscard]] std::size_t cached() const { return cache_.size(); }
  [[nodiscard]] bool has_scratch() const { return scratch_ != 0; }

 private:
  vmm_gate& gate_;
  std::uint64_t range_bytes_;
  std::uint64_t scratch_bytes_;
  std::size_t cache_limit_;
  std::vector<device_addr> cache_;
  device_addr scratch_ = 0;
};

}  // namespace vtensor
