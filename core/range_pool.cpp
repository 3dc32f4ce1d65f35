#include "core/range_pool.hpp"

namespace vtensor {

device_addr range_pool::alloc() {
  if (!cache_.empty()) {
    const device_addr base = cache_.back();
    cache_.pop_back();
    return base;
  }
  return gate_.vmm([&](vmm_backend& b) { return b.reserve(range_bytes_); });
}

void range_pool::free(device_addr base) {
  if (cache_.size() < cache_limit_) {
    cache_.push_back(base);
  } else {
    gate_.vmm([&](vmm_backend& b) { b.free_range(base); });
  }
}

void range_pool::free_deferred(device_addr base, mapping_job& job) {
  if (cache_.size() < cache_limit_) {
    cache_.push_back(base);  // reused by a later request: its maps queue behind the unmaps
  } else {
    job.free_ranges.push_back(base);
  }
}

void range_pool::release(vmm_backend& backend) {
  for (device_addr base : cache_) backend.free_range(base);
  cache_.clear();
  if (scratch_ != 0) {
    backend.free_range(scratch_);
    scratch_ = 0;
  }
}

}  // namespace vtensor
