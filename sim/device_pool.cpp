#include "sim/device_pool.hpp"

#include <fmt/format.h>

#include <limits>
#include <stdexcept>

#include "backends/units.hpp"

namespace vtensor::sim {

device_pool::device_pool(const std::string& backend_name, const backend_config& config, std::uint64_t max_bytes)
    : device_pool(make_backend(backend_name, config), latency_model_for(config), max_bytes) {}

device_pool::device_pool(std::unique_ptr<vmm_backend> inner, const latency_model& model, std::uint64_t max_bytes)
    : backend_(std::make_unique<accounting_backend>(std::move(inner), model)) {
  preallocated_ = max_bytes != std::numeric_limits<std::uint64_t>::max();
  range_bytes_ = preallocated_ ? max_bytes / k_chunk_bytes * k_chunk_bytes : unlimited_reserve_bytes;
  if (range_bytes_ == 0) {
    throw std::invalid_argument(
        fmt::format("a KV budget of {} bytes holds no whole {} MiB chunk", max_bytes, k_chunk_bytes / k_mib));
  }
  const std::uint64_t before = backend_->step_side().total_model_ns();
  base_ = backend_->reserve(range_bytes_);
  startup_vmm_ns_ = backend_->step_side().total_model_ns() - before;  // the reserve, start-up work either way
  if (!preallocated_) return;
  try {
    if (!grow_to(range_bytes_)) {
      throw std::runtime_error(fmt::format("the {} backend could back only {} of the {} bytes of the KV budget",
                                           backend_->inner().name(), physical_bytes(), range_bytes_));
    }
  } catch (...) {
    release_all();  // the destructor will not run: undo what the pool did
    throw;
  }
  startup_vmm_ns_ = backend_->step_side().total_model_ns() - before;
}

device_pool::~device_pool() { release_all(); }

void device_pool::release_all() noexcept {
  try {
    if (!chunks_.empty()) backend_->unmap(base_, physical_bytes());
    for (const chunk_handle h : chunks_) backend_->release_chunk(h);
    chunks_.clear();
    if (base_ != 0) backend_->free_range(base_);
    base_ = 0;
  } catch (...) {  // nothing to do in a destructor: the backend reports what it still holds
  }
}

bool device_pool::grow_to(std::uint64_t bytes) {
  if (bytes > range_bytes_) return false;
  while (physical_bytes() < bytes) {
    const std::optional<chunk_handle> h = backend_->create_chunk();
    if (!h) return false;
    const device_addr va = base_ + physical_bytes();
    try {
      backend_->map_with_access(va, *h);
    } catch (...) {
      backend_->release_chunk(*h);
      throw;
    }
    chunks_.push_back(*h);
  }
  return true;
}

}  // namespace vtensor::sim
