#include "backends/address_space.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace vtensor {

namespace {

std::string span_text(device_addr va, std::uint64_t bytes) { return fmt::format("[{:#x}, {:#x})", va, va + bytes); }

}  // namespace

// ---- ranges ------------------------------------------------------------------------------------

void address_space::add_range(device_addr base, std::uint64_t bytes) {
  ranges_.emplace(base, range_info{bytes, 0, {}});
}

std::uint64_t address_space::check_free_range(device_addr base) const {
  const auto it = ranges_.find(base);
  if (it == ranges_.end()) {
    if (const auto inside = range_of(base)) {
      throw vmm_error(
          vmm_call::free_range, base,
          fmt::format("not the base of a reserved range (inside {})", span_text(inside->first, inside->second)));
    }
    throw vmm_error(vmm_call::free_range, base, "no reserved range at this address");
  }
  if (it->second.mapped_spans != 0) {
    throw vmm_error(
        vmm_call::free_range, base,
        fmt::format("range {} still holds {} mapping(s)", span_text(base, it->second.bytes), it->second.mapped_spans));
  }
  return it->second.bytes;
}

void address_space::remove_range(device_addr base) {
  const auto it = ranges_.find(base);
  if (it == ranges_.end()) return;
  if (last_range_ == it) last_range_ = ranges_.end();
  ranges_.erase(it);
}

address_space::range_map::iterator address_space::find_range(device_addr va) {
  if (last_range_ != ranges_.end() && va - last_range_->first < last_range_->second.bytes) return last_range_;
  auto it = ranges_.upper_bound(va);
  if (it == ranges_.begin()) return ranges_.end();
  --it;
  if (va - it->first >= it->second.bytes) return ranges_.end();
  last_range_ = it;
  return it;
}

std::optional<std::pair<device_addr, std::uint64_t>> address_space::range_of(device_addr va) const {
  auto it = ranges_.upper_bound(va);
  if (it == ranges_.begin()) return std::nullopt;
  --it;
  if (va - it->first >= it->second.bytes) return std::nullopt;
  return std::pair{it->first, it->second.bytes};
}

// ---- chunks ------------------------------------------------------------------------------------

std::uint32_t address_space::indexed_entry_of(chunk_handle h) const {
  const auto it = index_.find(h.value);
  return it == index_.end() ? k_no_entry : it->second;
}

void address_space::add_chunk(chunk_handle h) {
  if (h.value == 0 || entry_of(h) != k_no_entry) {
    throw std::logic_error(fmt::format("address_space: chunk handle {:#x} is zero or created twice", h.value));
  }
  std::uint32_t entry = 0;
  if (slotted_) {
    entry = slot_in(h);
    if (entry >= entries_.size()) entries_.resize(std::size_t{entry} + 1);
    if (entries_[entry].handle != 0) {
      throw std::logic_error(fmt::format("address_space: slot of chunk handle {:#x} is taken", h.value));
    }
  } else if (!free_entries_.empty()) {
    entry = free_entries_.back();
    free_entries_.pop_back();
  } else {
    entry = static_cast<std::uint32_t>(entries_.size());
    entries_.emplace_back();
  }
  entries_[entry] = chunk_entry{h.value, 0};
  if (!slotted_) index_.emplace(h.value, entry);
  ++live_chunks_;
}

void address_space::check_release(chunk_handle h) const {
  const std::uint32_t entry = entry_of(h);
  if (entry == k_no_entry) {
    throw vmm_error(vmm_call::release, 0, fmt::format("chunk handle {:#x} is unknown or already released", h.value));
  }
  if (entries_[entry].mappings != 0) {
    throw vmm_error(
        vmm_call::release, 0,
        fmt::format("chunk handle {:#x} is still mapped at {} address(es)", h.value, entries_[entry].mappings));
  }
}

void address_space::remove_chunk(chunk_handle h) {
  const std::uint32_t entry = entry_of(h);
  if (entry == k_no_entry) return;
  entries_[entry] = chunk_entry{};
  if (!slotted_) {
    index_.erase(h.value);
    free_entries_.push_back(entry);
  }
  --live_chunks_;
}

std::uint64_t address_space::mapping_count(chunk_handle h) const {
  const std::uint32_t entry = entry_of(h);
  return entry == k_no_entry ? 0 : entries_[entry].mappings;
}

// ---- mappings ----------------------------------------------------------------------------------

address_space::map_slot address_space::check_map(device_addr va, chunk_handle h) {
  const auto range = find_range(va);
  if (range == ranges_.end()) [[unlikely]] {
    throw vmm_error(vmm_call::map, va, "range not reserved");
  }
  if (va + k_chunk_bytes - range->first > range->second.bytes) [[unlikely]] {
    throw vmm_error(vmm_call::map, va,
                    fmt::format("chunk crosses the end of its range {}", span_text(range->first, range->second.bytes)));
  }
  const std::uint32_t entry = entry_of(h);
  if (entry == k_no_entry) [[unlikely]] {
    throw vmm_error(vmm_call::map, va, fmt::format("chunk handle {:#x} is unknown or already released", h.value));
  }
  std::vector<span_state>& spans = range->second.spans;
  const std::uint64_t index = (va - range->first) / k_chunk_bytes;
  if (index >= spans.size()) {
    spans.resize(std::min(range->second.bytes / k_chunk_bytes, std::max<std::uint64_t>(index + 1, 2 * spans.size())));
  }
  span_state& span = spans[index];
  if (span.handle != 0) [[unlikely]] {
    throw vmm_error(vmm_call::map, va, fmt::format("span already mapped (chunk handle {:#x})", span.handle));
  }
  return {&range->second, &span, entry};
}

// One run of adjacent chunks from `va`: handle_at(k) is its k-th handle for k < `count`, and
// for k < `known` the handles past it, whose entries are asked for ahead (k_entries_ahead). The
// counts are kept in locals and written as a chunk is about to throw and at the end.
template <typename HandleAt>
void address_space::map_run(device_addr va, std::size_t count, std::size_t known, HandleAt handle_at,
                            std::size_t& mapped) {
  if (mapped >= count) return;
  const device_addr base = va + mapped * k_chunk_bytes;
  const auto range = find_range(base);
  if (range == ranges_.end()) [[unlikely]] {
    (void)check_map(base, handle_at(mapped));  // throws
  }
  range_info& info = range->second;
  const std::uint64_t first = (base - range->first) / k_chunk_bytes;
  const std::uint64_t in_range = info.bytes / k_chunk_bytes;
  const std::uint64_t n = std::min<std::uint64_t>(count - mapped, in_range - std::min(first, in_range));
  std::vector<span_state>& spans = info.spans;
  if (first + n > spans.size()) spans.resize(std::min(in_range, std::max<std::uint64_t>(first + n, 2 * spans.size())));
  span_state* const run = spans.data() + first;
  chunk_entry* const entries = entries_.data();
  const std::size_t from = mapped;
  std::uint64_t i = 0;
  const auto commit = [&] {
    mapped = from + i;
    info.mapped_spans += i;
    mappings_ += i;
  };
  for (; i < n; ++i) {
    if (slotted_ && from + i + k_entries_ahead < known) {
      const std::uint32_t ahead = slot_in(handle_at(from + i + k_entries_ahead));
      if (ahead < entries_.size()) __builtin_prefetch(&entries[ahead], 1);
    }
    const chunk_handle h = handle_at(from + i);
    const std::uint32_t entry = entry_of(h);
    span_state& span = run[i];
    if (entry == k_no_entry || span.handle != 0) [[unlikely]] {
      commit();
      (void)check_map(base + i * k_chunk_bytes, h);  // throws the rule it breaks
    }
    span = span_state{h.value, entry, true};
    ++entries[entry].mappings;
  }
  commit();
  if (mapped < count) (void)check_map(va + mapped * k_chunk_bytes, handle_at(mapped));  // past the range: throws
}

void address_space::map_run_with_access(device_addr va, std::span<const chunk_handle> handles, std::size_t& mapped) {
  map_run(
      va, handles.size(), handles.size(), [handles](std::size_t k) { return handles[k]; }, mapped);
}

void address_space::map_runs_with_access(std::span<const mapping_entry> maps, std::size_t& done) {
  if (slotted_) {  // the first entries, which the runs do not ask for ahead
    for (std::size_t k = done; k < maps.size() && k < done + k_entries_ahead; ++k) {
      const std::uint32_t ahead = slot_in(maps[k].handle);
      if (ahead < entries_.size()) __builtin_prefetch(&entries_[ahead], 1);
    }
  }
  while (done < maps.size()) {
    std::size_t end = done + 1;
    while (end < maps.size() && maps[end].va == maps[end - 1].va + k_chunk_bytes) ++end;
    const mapping_entry* const run = maps.data() + done;
    std::size_t mapped = 0;
    try {
      map_run(
          run->va, end - done, maps.size() - done, [run](std::size_t k) { return run[k].handle; }, mapped);
    } catch (...) {
      done += mapped;
      throw;
    }
    done += mapped;
  }
}

void address_space::commit_map(const map_slot& slot, chunk_handle h) {
  *slot.span = span_state{h.value, slot.entry, false};
  ++slot.range->mapped_spans;
  ++entries_[slot.entry].mappings;
  ++mappings_;
}

void address_space::throw_unmapped(vmm_call call, device_addr span, device_addr va, std::uint64_t bytes) const {
  const std::string where = bytes == k_chunk_bytes ? std::string{} : fmt::format(" (in {})", span_text(va, bytes));
  const char* what = range_of(span) ? "span not mapped" : "span not mapped (range not reserved)";
  throw vmm_error(call, span, fmt::format("{}{}", what, where));
}

address_space::mapped_run address_space::check_mapped(vmm_call call, device_addr va, std::uint64_t bytes) {
  const auto it = find_range(va);
  if (it == ranges_.end()) [[unlikely]] {
    throw_unmapped(call, va, va, bytes);
  }
  range_info& range = it->second;
  const std::uint64_t first = (va - it->first) / k_chunk_bytes;
  const std::uint64_t count = bytes / k_chunk_bytes;
  for (std::uint64_t i = 0; i < count; ++i) {
    if (first + i >= range.spans.size() || range.spans[first + i].handle == 0) [[unlikely]] {
      throw_unmapped(call, va + i * k_chunk_bytes, va, bytes);
    }
  }
  return {&range, std::span<span_state>(range.spans).subspan(first, count)};
}

void address_space::commit_set_access(const mapped_run& run) {
  for (span_state& span : run.spans) span.accessible = true;
}

void address_space::commit_unmap(const mapped_run& run, std::size_t count) {
  const std::span<span_state> spans = run.spans.first(count);
  for (std::size_t i = 0; i < spans.size(); ++i) {
    if (i + k_entries_ahead < spans.size()) __builtin_prefetch(&entries_[spans[i + k_entries_ahead].entry], 1);
    --entries_[spans[i].entry].mappings;
    spans[i] = span_state{};
  }
  run.range->mapped_spans -= count;
  mappings_ -= count;
}

const address_space::span_state* address_space::mapped_span(device_addr va) const {
  auto it = ranges_.upper_bound(va);
  if (it == ranges_.begin()) return nullptr;
  --it;
  const std::uint64_t index = (va - it->first) / k_chunk_bytes;
  if (va - it->first >= it->second.bytes || index >= it->second.spans.size()) return nullptr;
  const span_state& span = it->second.spans[index];
  return span.handle == 0 ? nullptr : &span;
}

void address_space::check_invariants() const {
  const auto fail = [](const std::string& why) { throw std::logic_error("address_space invariant broken: " + why); };
  std::vector<std::uint64_t> per_entry(entries_.size(), 0);
  std::uint64_t mappings = 0;
  device_addr previous_end = 0;
  for (const auto& [base, info] : ranges_) {
    if (base < previous_end) fail(fmt::format("range {} overlaps the one before", span_text(base, info.bytes)));
    previous_end = base + info.bytes;
    std::uint64_t spans = 0;
    for (std::size_t i = 0; i < info.spans.size(); ++i) {
      const span_state& span = info.spans[i];
      if (span.handle == 0) continue;
      if (span.entry >= entries_.size() || entries_[span.entry].handle != span.handle) {
        fail(fmt::format("mapping at {:#x} holds a dead chunk handle {:#x}", base + i * k_chunk_bytes, span.handle));
      }
      ++per_entry[span.entry];
      ++spans;
    }
    if (info.mapped_spans != spans) fail(fmt::format("range at {:#x} miscounts its mappings", base));
    mappings += spans;
  }
  if (mappings != mappings_) fail("mapping count drifted");
  std::uint64_t live = 0;
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    const chunk_entry& c = entries_[e];
    if (c.handle == 0) continue;
    ++live;
    if (c.mappings != per_entry[e]) fail(fmt::format("chunk {:#x} miscounts its mappings", c.handle));
    if (entry_of(chunk_handle{c.handle}) != e) fail(fmt::format("chunk {:#x} is not found at its entry", c.handle));
  }
  if (live != live_chunks_) fail("live chunk count drifted");
  if (!slotted_ && index_.size() != live_chunks_) fail("chunk index size drifted");
}

}  // namespace vtensor
