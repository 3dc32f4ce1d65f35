#include "tests/support/recording_backend.hpp"

#include <fmt/format.h>

namespace vtensor::testing {

std::string format_bytes(std::uint64_t bytes) {
  constexpr std::uint64_t k_kib = 1024;
  constexpr std::uint64_t k_mib = k_kib * 1024;
  constexpr std::uint64_t k_gib = k_mib * 1024;
  if (bytes != 0 && bytes % k_gib == 0) {
    return fmt::format("{}GiB", bytes / k_gib);
  }
  if (bytes != 0 && bytes % k_mib == 0) {
    return fmt::format("{}MiB", bytes / k_mib);
  }
  if (bytes != 0 && bytes % k_kib == 0) {
    return fmt::format("{}KiB", bytes / k_kib);
  }
  return fmt::format("{}B", bytes);
}

recording_backend::recording_backend(std::uint64_t capacity_bytes) : sim_(capacity_bytes, latency_model::zero()) {}

std::vector<std::string> recording_backend::take() {
  std::vector<std::string> out;
  out.swap(log_);
  return out;
}

std::string recording_backend::describe_addr(device_addr va) const {
  if (const auto range = sim_.range_of(va)) {
    const auto id = range_ids_.find(range->first);
    if (id != range_ids_.end()) {
      const std::uint64_t offset = va - range->first;
      return fmt::format("r{}+{}", id->second, offset == 0 ? "0" : format_bytes(offset));
    }
  }
  return fmt::format("{:#x}", va);
}

std::string recording_backend::describe_chunk(chunk_handle h) const {
  const auto id = chunk_ids_.find(h.value);
  return id == chunk_ids_.end() ? fmt::format("{:#x}", h.value) : fmt::format("c{}", id->second);
}

template <typename F>
void recording_backend::logged(std::string entry, F&& fn) {
  log_.push_back(std::move(entry));
  const std::size_t index = log_.size() - 1;
  try {
    std::forward<F>(fn)();
  } catch (...) {
    log_[index] += " -> error";
    throw;
  }
}

device_addr recording_backend::do_reserve(std::uint64_t bytes) {
  device_addr base = 0;
  logged("reserve " + format_bytes(bytes), [&] { base = sim_.reserve(bytes); });
  const std::uint64_t id = next_range_id_++;
  range_ids_[base] = id;
  log_.back() += fmt::format(" -> r{}", id);
  return base;
}

void recording_backend::do_free_range(device_addr base) {
  const auto id = range_ids_.find(base);
  const std::string name = id == range_ids_.end() ? describe_addr(base) : fmt::format("r{}", id->second);
  logged("free " + name, [&] { sim_.free_range(base); });
  range_ids_.erase(base);
}

std::optional<chunk_handle> recording_backend::do_create_chunk() {
  std::optional<chunk_handle> h;
  logged("create", [&] { h = sim_.create_chunk(); });
  if (!h) {
    log_.back() += " -> oom";
    return h;
  }
  const std::uint64_t id = next_chunk_id_++;
  chunk_ids_[h->value] = id;
  log_.back() += fmt::format(" -> c{}", id);
  return h;
}

void recording_backend::do_release_chunk(chunk_handle h) {
  logged("release " + describe_chunk(h), [&] { sim_.release_chunk(h); });
  chunk_ids_.erase(h.value);
}

void recording_backend::do_map(device_addr va, chunk_handle h) {
  logged(fmt::format("map {} {}", describe_addr(va), describe_chunk(h)), [&] { sim_.map(va, h); });
}

void recording_backend::do_set_access(device_addr va, std::uint64_t bytes) {
  logged(fmt::format("set_access {} {}", describe_addr(va), format_bytes(bytes)), [&] { sim_.set_access(va, bytes); });
}

void recording_backend::do_unmap(device_addr va, std::uint64_t bytes) {
  logged(fmt::format("unmap {} {}", describe_addr(va), format_bytes(bytes)), [&] { sim_.unmap(va, bytes); });
}

}  // namespace vtensor::testing
