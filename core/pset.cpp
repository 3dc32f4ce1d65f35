#include "core/pset.hpp"

#include <algorithm>
#include <cassert>
#include <stdexcept>

#include <fmt/format.h>

namespace vtensor {

chunk_id pset::adopt(chunk_handle h) {
  if (h.value == 0) throw std::logic_error("pset: adopting the null chunk handle");
  if (!empty_slots_.empty()) {
    chunk_id id = empty_slots_.back();
    empty_slots_.pop_back();
    chunks_[id.value].handle = h;
    return id;
  }
  chunks_.emplace_back().handle = h;
  return chunk_id{static_cast<std::uint32_t>(chunks_.size() - 1)};
}

std::optional<chunk_id> pset::take_free() {
  if (free_.empty()) return std::nullopt;
  chunk_id id = free_.back();
  free_.pop_back();
  chunks_[id.value].in_free_pool = false;
  return id;
}

std::size_t pset::take_free(std::size_t n, std::vector<chunk_id>& out) {
  n = std::min(n, free_.size());
  const auto first = free_.end() - static_cast<std::ptrdiff_t>(n);
  for (auto it = free_.end(); it != first;) {
    const chunk_id id = *--it;
    chunks_[id.value].in_free_pool = false;
    out.push_back(id);
  }
  free_.erase(first, free_.end());
  return n;
}

chunk_handle pset::forget(chunk_id id) {
  chunk_record& c = chunks_[id.value];
  if (c.ref_count != 0 || !c.mappings.empty()) {
    throw std::logic_error(fmt::format("pset: releasing chunk {} that is still referenced", id.value));
  }
  if (c.in_free_pool) {
    std::erase(free_, id);
    c.in_free_pool = false;
  }
  chunk_handle h = c.handle;
  c = chunk_record{};
  empty_slots_.push_back(id);
  return h;
}

void pset::put_free(chunk_id id) {
  chunk_record& c = chunks_[id.value];
  if (c.ref_count != 0 || c.in_free_pool) {
    throw std::logic_error(
        fmt::format("pset: chunk {} put back to the free pool while referenced or already there", id.value));
  }
  c.in_free_pool = true;
  free_.push_back(id);
}

bool pset::drop_ref(chunk_id id) {
  chunk_record& c = chunks_[id.value];
  assert(c.ref_count > 0);
  if (--c.ref_count != 0) return false;
  c.in_free_pool = true;
  free_.push_back(id);
  return true;
}

}  // namespace vtensor
