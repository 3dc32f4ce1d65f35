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
    at(id.value).handle = h;
    return id;
  }
  if (size_ == blocks_.size() << k_block_bits) blocks_.push_back(std::make_unique<chunk_record[]>(k_block_mask + 1));
  at(size_).handle = h;
  return chunk_id{size_++};
}

std::optional<chunk_id> pset::take_free() {
  if (free_.empty()) return std::nullopt;
  chunk_id id = free_.back();
  free_.pop_back();
  at(id.value).in_free_pool = false;
  return id;
}

std::size_t pset::take_free(std::size_t n, std::vector<chunk_id>& out) {
  n = std::min(n, free_.size());
  const auto first = free_.end() - static_cast<std::ptrdiff_t>(n);
  constexpr std::ptrdiff_t k_ahead = 8;  // Note [Dense chunk records]
  for (auto it = free_.end(); it != first;) {
    if (it - first > k_ahead) prefetch(*(it - 1 - k_ahead));
    const chunk_id id = *--it;
    at(id.value).in_free_pool = false;
    out.push_back(id);
  }
  free_.erase(first, free_.end());
  return n;
}

void pset::take_oldest_free(std::size_t n, std::vector<chunk_id>& out) {
  n = std::min(n, free_.size());
  const auto last = free_.begin() + static_cast<std::ptrdiff_t>(n);
  for (auto it = free_.begin(); it != last; ++it) {
    at(it->value).in_free_pool = false;
    out.push_back(*it);
  }
  free_.erase(free_.begin(), last);
}

chunk_handle pset::forget(chunk_id id) {
  chunk_record& c = at(id.value);
  if (c.ref_count != 0 || c.mappings != 0) {
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
  chunk_record& c = at(id.value);
  if (c.ref_count != 0 || c.in_free_pool) {
    throw std::logic_error(
        fmt::format("pset: chunk {} put back to the free pool while referenced or already there", id.value));
  }
  c.in_free_pool = true;
  free_.push_back(id);
}

bool pset::drop_ref(chunk_id id) {
  chunk_record& c = at(id.value);
  assert(c.ref_count > 0);
  if (--c.ref_count != 0) return false;
  c.in_free_pool = true;
  free_.push_back(id);
  return true;
}

}  // namespace vtensor
