#include "backends/sim_backend.hpp"

#include <fmt/format.h>

namespace vtensor {

namespace {

constexpr std::uint64_t k_slot_mask = 0xffff'ffff;

std::string span_text(device_addr va, std::uint64_t bytes) { return fmt::format("[{:#x}, {:#x})", va, va + bytes); }

}  // namespace

sim_backend::sim_backend(std::uint64_t capacity_bytes, latency_model model, va_window window)
    : capacity_chunks_(capacity_bytes == k_unlimited ? k_unlimited : capacity_bytes / k_chunk_bytes),
      model_(std::move(model)),
      window_(window),
      space_(address_space::handle_kind::slotted) {
  if (window.base % k_chunk_bytes != 0 || window.bytes % k_chunk_bytes != 0 || window.base == 0 || window.bytes == 0 ||
      window.bytes > std::numeric_limits<std::uint64_t>::max() - window.base) {
    throw std::invalid_argument(
        fmt::format("sim_backend: address window {} must be non-empty, non-null and 2 MiB aligned",
                    span_text(window.base, window.bytes)));
  }
  for (std::size_t i = 0; i < k_vmm_call_kinds; ++i) {
    cost_ns_[i] = model_.cost_ns(static_cast<vmm_call>(i));
  }
  add_free_block(window.base, window.bytes);
  free_va_bytes_ = window.bytes;
}

std::uint64_t sim_backend::do_capacity_bytes() const {
  return unlimited() ? k_unlimited : capacity_chunks_ * k_chunk_bytes;
}

// ---- virtual ranges --------------------------------------------------------------------------

void sim_backend::add_free_block(device_addr base, std::uint64_t bytes) {
  auto next = free_by_addr_.lower_bound(base);
  if (next != free_by_addr_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == base) {
      base = prev->first;
      bytes += prev->second;
      remove_free_block(prev);
    }
  }
  if (next != free_by_addr_.end() && base + bytes == next->first) {
    bytes += next->second;
    remove_free_block(next);
  }
  free_by_addr_.emplace(base, bytes);
  free_by_size_.emplace(bytes, base);
}

void sim_backend::remove_free_block(std::map<device_addr, std::uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_addr_.erase(it);
}

device_addr sim_backend::do_reserve(std::uint64_t bytes) {
  const auto fit = free_by_size_.lower_bound({bytes, 0});
  if (fit == free_by_size_.end()) {
    const std::uint64_t largest = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
    throw vmm_error(vmm_call::reserve, 0,
                    fmt::format("virtual address window exhausted: no free block of {} bytes "
                                "(largest free block {} bytes, {} bytes free in all)",
                                bytes, largest, free_va_bytes_));
  }
  const auto [block_bytes, block_base] = *fit;
  remove_free_block(free_by_addr_.find(block_base));
  if (block_bytes > bytes) {
    free_by_addr_.emplace(block_base, block_bytes - bytes);
    free_by_size_.emplace(block_bytes - bytes, block_base);
  }
  const device_addr base = block_base + (block_bytes - bytes);
  free_va_bytes_ -= bytes;
  space_.add_range(base, bytes);
  charge(vmm_call::reserve, cost(vmm_call::reserve));
  return base;
}

void sim_backend::do_free_range(device_addr base) {
  const std::uint64_t bytes = space_.check_free_range(base);
  space_.remove_range(base);
  add_free_block(base, bytes);
  free_va_bytes_ += bytes;
  charge(vmm_call::free_range, cost(vmm_call::free_range));
}

std::optional<std::pair<device_addr, std::uint64_t>> sim_backend::range_of(device_addr va) const {
  return space_.range_of(va);
}

// ---- chunks ----------------------------------------------------------------------------------

std::optional<chunk_handle> sim_backend::do_create_chunk() {
  charge(vmm_call::create, cost(vmm_call::create));
  if (space_.live().chunks >= capacity_chunks_) {
    return std::nullopt;
  }
  std::uint32_t slot = 0;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    if (generations_.size() >= k_slot_mask) {
      return std::nullopt;
    }
    slot = static_cast<std::uint32_t>(generations_.size());
    generations_.push_back(0);
  }
  const chunk_handle h{(std::uint64_t{generations_[slot]} << 32) | (std::uint64_t{slot} + 1)};
  space_.add_chunk(h);
  return h;
}

void sim_backend::do_release_chunk(chunk_handle h) {
  space_.check_release(h);
  space_.remove_chunk(h);
  const std::uint32_t slot = address_space::slot_in(h);  // Note [Simulated chunk handles]
  ++generations_[slot];
  free_slots_.push_back(slot);
  charge(vmm_call::release, cost(vmm_call::release));
}

std::uint64_t sim_backend::mapping_count(chunk_handle h) const { return space_.mapping_count(h); }

// ---- mappings --------------------------------------------------------------------------------

void sim_backend::do_map(device_addr va, chunk_handle h) {
  space_.commit_map(space_.check_map(va, h), h);
  charge(vmm_call::map, cost(vmm_call::map));
}

// A span just mapped cannot refuse access: one lookup for both calls.
void sim_backend::do_map_with_access(device_addr va, chunk_handle h) {
  const address_space::map_slot slot = space_.check_map(va, h);
  space_.commit_map(slot, h);
  slot.span->accessible = true;
  charge(vmm_call::map, cost(vmm_call::map));
  charge(vmm_call::set_access, cost(vmm_call::set_access));
}

void sim_backend::do_map_run_with_access(device_addr va, std::span<const chunk_handle> handles, std::size_t& mapped) {
  const maps_charge guard{*this, mapped, mapped};
  space_.map_run_with_access(va, handles, mapped);
}

void sim_backend::do_map_runs_with_access(std::span<const mapping_entry> maps, std::size_t& done) {
  const maps_charge guard{*this, done, done};
  space_.map_runs_with_access(maps, done);
}

void sim_backend::charge_maps(std::size_t n) {
  charge(vmm_call::map, cost(vmm_call::map) * n);
  charge(vmm_call::set_access, cost(vmm_call::set_access) * n);
}

void sim_backend::do_set_access(device_addr va, std::uint64_t bytes) {
  address_space::commit_set_access(space_.check_mapped(vmm_call::set_access, va, bytes));
  charge(vmm_call::set_access, cost(vmm_call::set_access) * (bytes / k_chunk_bytes));
}

void sim_backend::do_unmap(device_addr va, std::uint64_t bytes) {
  space_.commit_unmap(space_.check_mapped(vmm_call::unmap, va, bytes));
  charge(vmm_call::unmap, cost(vmm_call::unmap) * (bytes / k_chunk_bytes));
}

bool sim_backend::accessible(device_addr va) const {
  const address_space::span_state* span = space_.mapped_span(va);
  return span != nullptr && span->accessible;
}

std::optional<chunk_handle> sim_backend::mapped_chunk(device_addr va) const {
  const address_space::span_state* span = space_.mapped_span(va);
  if (span == nullptr) {
    return std::nullopt;
  }
  return chunk_handle{span->handle};
}

void sim_backend::check_invariants() const {
  const auto fail = [](const std::string& why) { throw std::logic_error("sim_backend invariant broken: " + why); };
  std::uint64_t reserved_bytes = 0;
  device_addr previous_end = window_.base;
  for (const auto& [base, info] : space_.ranges()) {
    if (base < previous_end || base + info.bytes > window_.base + window_.bytes) {
      fail(fmt::format("range {} overlaps another or leaves the window", span_text(base, info.bytes)));
    }
    previous_end = base + info.bytes;
    reserved_bytes += info.bytes;
  }
  std::uint64_t free_bytes = 0;
  for (const auto& [base, bytes] : free_by_addr_) {
    if (!free_by_size_.contains({bytes, base})) {
      fail(fmt::format("free block {} missing from the size index", span_text(base, bytes)));
    }
    if (const auto next = free_by_addr_.upper_bound(base); next != free_by_addr_.end() && base + bytes >= next->first) {
      fail(fmt::format("free block {} not coalesced with its successor", span_text(base, bytes)));
    }
    if (range_of(base) || range_of(base + bytes - 1)) {
      fail(fmt::format("free block {} overlaps a reserved range", span_text(base, bytes)));
    }
    free_bytes += bytes;
  }
  if (free_by_size_.size() != free_by_addr_.size() || free_bytes != free_va_bytes_ ||
      free_bytes + reserved_bytes != window_.bytes) {
    fail("free block accounting does not add up to the window");
  }
  space_.check_invariants();
  if (space_.live().chunks + free_slots_.size() != generations_.size()) {
    fail("chunk slot accounting does not add up");
  }
}

}  // namespace vtensor
