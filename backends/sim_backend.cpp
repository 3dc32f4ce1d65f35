#include "backends/sim_backend.hpp"

#include <fmt/format.h>

namespace vtensor {

namespace {

constexpr std::uint64_t k_slot_mask = 0xffff'ffff;

std::string span_text(device_addr va, std::uint64_t bytes) {
  return fmt::format("[{:#x}, {:#x})", va, va + bytes);
}

}  // namespace

sim_backend::sim_backend(std::uint64_t capacity_bytes, latency_model model, va_window window)
    : capacity_chunks_(capacity_bytes == k_unlimited ? k_unlimited : capacity_bytes / k_chunk_bytes),
      model_(std::move(model)),
      window_(window),
      last_range_(ranges_.end()) {
  if (window.base % k_chunk_bytes != 0 || window.bytes % k_chunk_bytes != 0 || window.base == 0 ||
      window.bytes == 0 || window.bytes > std::numeric_limits<std::uint64_t>::max() - window.base) {
    throw std::invalid_argument(fmt::format(
        "sim_backend: address window {} must be non-empty, non-null and 2 MiB aligned",
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
  ranges_.emplace(base, range_info{bytes, 0});
  charge(vmm_call::reserve, cost_ns_[static_cast<std::size_t>(vmm_call::reserve)]);
  return base;
}

void sim_backend::do_free_range(device_addr base) {
  const auto it = ranges_.find(base);
  if (it == ranges_.end()) {
    if (const auto inside = range_of(base)) {
      throw vmm_error(vmm_call::free_range, base,
                      fmt::format("not the base of a reserved range (inside {})",
                                  span_text(inside->first, inside->second)));
    }
    throw vmm_error(vmm_call::free_range, base, "no reserved range at this address");
  }
  if (it->second.mapped_spans != 0) {
    throw vmm_error(vmm_call::free_range, base,
                    fmt::format("range {} still holds {} mapping(s)",
                                span_text(base, it->second.bytes), it->second.mapped_spans));
  }
  const std::uint64_t bytes = it->second.bytes;
  if (last_range_ == it) {
    last_range_ = ranges_.end();
  }
  ranges_.erase(it);
  add_free_block(base, bytes);
  free_va_bytes_ += bytes;
  charge(vmm_call::free_range, cost_ns_[static_cast<std::size_t>(vmm_call::free_range)]);
}

std::map<device_addr, sim_backend::range_info>::iterator sim_backend::find_range(device_addr va) {
  if (last_range_ != ranges_.end() && va - last_range_->first < last_range_->second.bytes) {
    return last_range_;
  }
  auto it = ranges_.upper_bound(va);
  if (it == ranges_.begin()) {
    return ranges_.end();
  }
  --it;
  if (va - it->first >= it->second.bytes) {
    return ranges_.end();
  }
  last_range_ = it;
  return it;
}

std::optional<std::pair<device_addr, std::uint64_t>> sim_backend::range_of(device_addr va) const {
  auto it = ranges_.upper_bound(va);
  if (it == ranges_.begin()) {
    return std::nullopt;
  }
  --it;
  if (va - it->first >= it->second.bytes) {
    return std::nullopt;
  }
  return std::pair{it->first, it->second.bytes};
}

// ---- chunks ----------------------------------------------------------------------------------

std::optional<chunk_handle> sim_backend::do_create_chunk() {
  charge(vmm_call::create, cost_ns_[static_cast<std::size_t>(vmm_call::create)]);
  if (live_chunks_ >= capacity_chunks_) {
    return std::nullopt;
  }
  std::uint32_t slot = 0;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    if (slots_.size() >= k_slot_mask) {
      return std::nullopt;
    }
    slot = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  chunk_slot& s = slots_[slot];
  s.live = true;
  s.mapped_at = 0;
  ++live_chunks_;
  return chunk_handle{(std::uint64_t{s.generation} << 32) | (std::uint64_t{slot} + 1)};
}

sim_backend::chunk_slot& sim_backend::live_slot(vmm_call call, device_addr addr, chunk_handle h) {
  const std::uint64_t slot_plus_one = h.value & k_slot_mask;
  const auto generation = static_cast<std::uint32_t>(h.value >> 32);
  if (slot_plus_one == 0 || slot_plus_one > slots_.size()) [[unlikely]] {
    throw vmm_error(call, addr, fmt::format("unknown chunk handle {:#x}", h.value));
  }
  chunk_slot& s = slots_[slot_plus_one - 1];
  if (s.generation != generation || !s.live) [[unlikely]] {
    if (generation < s.generation || (generation == s.generation && !s.live)) {
      throw vmm_error(call, addr, fmt::format("chunk handle {:#x} was already released", h.value));
    }
    throw vmm_error(call, addr, fmt::format("unknown chunk handle {:#x}", h.value));
  }
  return s;
}

void sim_backend::do_release_chunk(chunk_handle h) {
  chunk_slot& s = live_slot(vmm_call::release, 0, h);
  if (s.mapped_at != 0) {
    throw vmm_error(vmm_call::release, 0,
                    fmt::format("chunk handle {:#x} is still mapped at {} address(es)", h.value,
                                s.mapped_at));
  }
  s.live = false;
  ++s.generation;
  free_slots_.push_back(static_cast<std::uint32_t>((h.value & k_slot_mask) - 1));
  --live_chunks_;
  charge(vmm_call::release, cost_ns_[static_cast<std::size_t>(vmm_call::release)]);
}

std::uint64_t sim_backend::mapping_count(chunk_handle h) const {
  const std::uint64_t slot_plus_one = h.value & k_slot_mask;
  if (slot_plus_one == 0 || slot_plus_one > slots_.size()) {
    return 0;
  }
  const chunk_slot& s = slots_[slot_plus_one - 1];
  return s.live && s.generation == (h.value >> 32) ? s.mapped_at : 0;
}

// ---- mappings --------------------------------------------------------------------------------

void sim_backend::do_map(device_addr va, chunk_handle h) { (void)map_span(va, h); }

void sim_backend::do_map_with_access(device_addr va, chunk_handle h) {
  span_state& span = map_span(va, h);  // a span just mapped cannot refuse access: one lookup for both
  count(vmm_call::set_access);
  span.accessible = true;
  charge(vmm_call::set_access, cost_ns_[static_cast<std::size_t>(vmm_call::set_access)]);
}

sim_backend::span_state& sim_backend::map_span(device_addr va, chunk_handle h) {
  const auto range = find_range(va);
  if (range == ranges_.end()) [[unlikely]] {
    throw vmm_error(vmm_call::map, va, "range not reserved");
  }
  if (va + k_chunk_bytes - range->first > range->second.bytes) [[unlikely]] {
    throw vmm_error(vmm_call::map, va,
                    fmt::format("chunk crosses the end of its range {}",
                                span_text(range->first, range->second.bytes)));
  }
  chunk_slot& slot = live_slot(vmm_call::map, va, h);
  std::vector<span_state>& spans = range->second.spans;
  const std::uint64_t index = (va - range->first) / k_chunk_bytes;
  if (index >= spans.size()) {
    spans.resize(std::min(range->second.bytes / k_chunk_bytes, std::max<std::uint64_t>(index + 1, 2 * spans.size())));
  }
  span_state& span = spans[index];
  if (span.handle != 0) [[unlikely]] {
    throw vmm_error(vmm_call::map, va, fmt::format("span already mapped (chunk handle {:#x})", span.handle));
  }
  span = span_state{h.value, false};
  ++range->second.mapped_spans;
  ++slot.mapped_at;
  ++mappings_;
  charge(vmm_call::map, cost_ns_[static_cast<std::size_t>(vmm_call::map)]);
  return span;
}

void sim_backend::throw_unmapped(vmm_call call, device_addr span, device_addr va,
                                 std::uint64_t bytes) const {
  const std::string where = bytes == k_chunk_bytes
                                ? std::string{}
                                : fmt::format(" (in {})", span_text(va, bytes));
  const char* what = range_of(span) ? "span not mapped" : "span not mapped (range not reserved)";
  throw vmm_error(call, span, fmt::format("{}{}", what, where));
}

std::span<sim_backend::span_state> sim_backend::mapped_spans(vmm_call call, device_addr va, std::uint64_t bytes,
                                                             range_info*& range) {
  const auto it = find_range(va);
  if (it == ranges_.end()) [[unlikely]] {
    throw_unmapped(call, va, va, bytes);
  }
  range = &it->second;
  const std::uint64_t first = (va - it->first) / k_chunk_bytes;
  const std::uint64_t count = bytes / k_chunk_bytes;
  for (std::uint64_t i = 0; i < count; ++i) {
    if (first + i >= range->spans.size() || range->spans[first + i].handle == 0) [[unlikely]] {
      throw_unmapped(call, va + i * k_chunk_bytes, va, bytes);
    }
  }
  return std::span<span_state>(range->spans).subspan(first, count);
}

void sim_backend::do_set_access(device_addr va, std::uint64_t bytes) {
  range_info* range = nullptr;
  for (span_state& span : mapped_spans(vmm_call::set_access, va, bytes, range)) span.accessible = true;
  charge(vmm_call::set_access, cost_ns_[static_cast<std::size_t>(vmm_call::set_access)] * (bytes / k_chunk_bytes));
}

void sim_backend::do_unmap(device_addr va, std::uint64_t bytes) {
  range_info* range = nullptr;
  for (span_state& span : mapped_spans(vmm_call::unmap, va, bytes, range)) {
    --slots_[(span.handle & k_slot_mask) - 1].mapped_at;
    span = span_state{};
  }
  range->mapped_spans -= bytes / k_chunk_bytes;
  mappings_ -= bytes / k_chunk_bytes;
  charge(vmm_call::unmap, cost_ns_[static_cast<std::size_t>(vmm_call::unmap)] * (bytes / k_chunk_bytes));
}

const sim_backend::span_state* sim_backend::span_at(device_addr va) const {
  auto it = ranges_.upper_bound(va);
  if (it == ranges_.begin()) return nullptr;
  --it;
  const std::uint64_t index = (va - it->first) / k_chunk_bytes;
  if (va - it->first >= it->second.bytes || index >= it->second.spans.size()) return nullptr;
  const span_state& span = it->second.spans[index];
  return span.handle == 0 ? nullptr : &span;
}

bool sim_backend::accessible(device_addr va) const {
  const span_state* span = span_at(va - va % k_chunk_bytes);
  return span != nullptr && span->accessible;
}

std::optional<chunk_handle> sim_backend::mapped_chunk(device_addr va) const {
  const span_state* span = span_at(va - va % k_chunk_bytes);
  if (span == nullptr) {
    return std::nullopt;
  }
  return chunk_handle{span->handle};
}

vmm_live sim_backend::do_live() const {
  return vmm_live{ranges_.size(), live_chunks_, mappings_};
}

void sim_backend::check_invariants() const {
  const auto fail = [](const std::string& why) {
    throw std::logic_error("sim_backend invariant broken: " + why);
  };
  std::uint64_t reserved_bytes = 0;
  device_addr previous_end = window_.base;
  for (const auto& [base, info] : ranges_) {
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
    if (const auto next = free_by_addr_.upper_bound(base);
        next != free_by_addr_.end() && base + bytes >= next->first) {
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
  std::vector<std::uint64_t> mappings_per_slot(slots_.size(), 0);
  std::uint64_t mappings = 0;
  for (const auto& [base, info] : ranges_) {
    std::uint64_t spans = 0;
    for (std::size_t i = 0; i < info.spans.size(); ++i) {
      const std::uint64_t handle = info.spans[i].handle;
      if (handle == 0) continue;
      const std::uint64_t slot = (handle & k_slot_mask) - 1;
      if (slot >= slots_.size() || !slots_[slot].live || slots_[slot].generation != (handle >> 32)) {
        fail(fmt::format("mapping at {:#x} holds a dead chunk handle {:#x}", base + i * k_chunk_bytes, handle));
      }
      ++mappings_per_slot[slot];
      ++spans;
    }
    if (info.mapped_spans != spans) {
      fail(fmt::format("range at {:#x} miscounts its mappings", base));
    }
    mappings += spans;
  }
  if (mappings != mappings_) {
    fail("mapping count drifted");
  }
  std::uint64_t live = 0;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    live += slots_[i].live ? 1 : 0;
    if (slots_[i].mapped_at != mappings_per_slot[i]) {
      fail(fmt::format("chunk slot {} miscounts its mappings", i));
    }
  }
  if (live != live_chunks_ || live + free_slots_.size() != slots_.size()) {
    fail("chunk slot accounting does not add up");
  }
}

}  // namespace vtensor
