#include "core/vset.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace vtensor {

vset::~vset() { by_va_.clear(); }

mapping& vset::insert(device_addr va, chunk_id chunk, request_id owner, bool shared, const mapping* before) {
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
  bool inserted = true;
  if (before != nullptr && before->va < va) {
    auto hint = std::next(by_va_.iterator_to(*before));
    if (hint == by_va_.end() || va < hint->va) {
      by_va_.insert_unique(hint, *m);  // the hint is exact: no search
    } else {
      inserted = by_va_.insert_unique(*m).second;
    }
  } else {
    inserted = by_va_.insert_unique(*m).second;
  }
  if (!inserted) {
    spare_.push_back(m);
    throw std::logic_error(fmt::format("vset: address {:#x} is already mapped", va));
  }
  return *m;
}

void vset::erase(mapping& m) {
  by_va_.erase(by_va_.iterator_to(m));
  spare_.push_back(&m);
}

const mapping* vset::find(device_addr va) const {
  auto it = by_va_.find(va);
  return it == by_va_.end() ? nullptr : &*it;
}

const mapping* vset::find_containing(device_addr addr, std::uint64_t chunk_bytes) const {
  auto it = by_va_.upper_bound(addr);
  if (it == by_va_.begin()) return nullptr;
  --it;
  return addr < it->va + chunk_bytes ? &*it : nullptr;
}

}  // namespace vtensor
