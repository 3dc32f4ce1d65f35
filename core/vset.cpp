#include "core/vset.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace vtensor {

vset::~vset() { by_base_.clear(); }

mapping& vset::make(device_addr va, chunk_id chunk, request_id owner, bool shared) {
  mapping* m = nullptr;
  if (spare_.empty()) {
    m = &nodes_.emplace_back();
  } else {
    m = spare_.back();
    spare_.pop_back();
  }
  m->va = va;
  m->chunk = chunk;
  m->owner = owner;
  m->shared = shared;
  m->parked = false;
  return *m;
}

void vset::recycle(mapping& m) { spare_.push_back(&m); }

void vset::insert(mapped_range& r) {
  auto next = by_base_.lower_bound(r.base);
  if ((next != by_base_.end() && next->base < r.end()) ||
      (next != by_base_.begin() && std::prev(next)->end() > r.base)) {
    throw std::logic_error(fmt::format("vset: range at {:#x} overlaps a range in the set", r.base));
  }
  by_base_.insert_unique(next, r);
}

void vset::erase(mapped_range& r) { by_base_.erase(by_base_.iterator_to(r)); }

const mapping* vset::any_mapping_of(chunk_id chunk) const {
  for (const mapped_range& r : by_base_) {
    for (const mapping* m : r.maps) {
      if (m != nullptr && m->chunk == chunk) return m;
    }
  }
  return nullptr;
}

const mapped_range* vset::range_containing(device_addr addr) const {
  auto it = by_base_.upper_bound(addr);
  if (it == by_base_.begin()) return nullptr;
  --it;
  return addr < it->end() ? &*it : nullptr;
}

const mapping* vset::find_containing(device_addr addr, std::uint64_t chunk_bytes) const {
  const mapped_range* r = range_containing(addr);
  if (r == nullptr || r->tensor_span_bytes == 0) return nullptr;
  const std::uint64_t offset = addr - r->base;
  const std::uint64_t tensor = offset / r->tensor_span_bytes;
  const std::uint64_t page = offset % r->tensor_span_bytes / chunk_bytes;
  const std::size_t index = page * r->tensors + tensor;
  return index < r->maps.size() ? r->maps[index] : nullptr;
}

const mapping* vset::find(device_addr va) const {
  const mapping* m = find_containing(va, k_chunk_bytes);
  return m != nullptr && m->va == va ? m : nullptr;
}

}  // namespace vtensor
