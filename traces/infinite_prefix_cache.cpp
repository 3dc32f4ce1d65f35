#include "traces/infinite_prefix_cache.hpp"

#include <algorithm>
#include <stdexcept>

namespace vtensor::traces {
namespace {

constexpr std::size_t initial_slots = 1024;

std::uint64_t mix(std::uint32_t parent, std::uint64_t key) noexcept {
  std::uint64_t x = key ^ (std::uint64_t{parent} * 0x9E3779B97F4A7C15ull);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

}  // namespace

infinite_prefix_cache::infinite_prefix_cache() : slots_(initial_slots) {}

std::size_t infinite_prefix_cache::find_slot(std::uint32_t parent, std::uint64_t key) const noexcept {
  const std::size_t mask = slots_.size() - 1;
  std::size_t at = static_cast<std::size_t>(mix(parent, key)) & mask;
  while (slots_[at].child != 0 && (slots_[at].parent != parent || slots_[at].key != key)) {
    at = (at + 1) & mask;
  }
  return at;
}

void infinite_prefix_cache::grow() {
  std::vector<slot> old(slots_.size() * 2);
  old.swap(slots_);
  for (const slot& entry : old) {
    if (entry.child != 0) slots_[find_slot(entry.parent, entry.key)] = entry;
  }
}

std::size_t infinite_prefix_cache::match_blocks(std::span<const std::uint64_t> keys) const noexcept {
  std::uint32_t node = 0;
  std::size_t matched = 0;
  for (const std::uint64_t key : keys) {
    const slot& entry = slots_[find_slot(node, key)];
    if (entry.child == 0) break;
    node = entry.child;
    ++matched;
  }
  return matched;
}

template <typename OnNode>
std::uint64_t infinite_prefix_cache::serve_each(const trace_request& request, OnNode on_node) {
  std::uint32_t node = 0;
  std::uint64_t matched = 0;
  bool missed = false;
  for (const std::uint64_t key : request.block_keys) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    slot& entry = slots_[find_slot(node, key)];
    if (entry.child == 0) {
      if (size_ + 1 >= UINT32_MAX) throw std::length_error("infinite_prefix_cache: too many blocks");
      entry = slot{key, node, static_cast<std::uint32_t>(++size_)};
      missed = true;
    } else if (!missed) {
      ++matched;
    }
    node = entry.child;
    on_node(node);
  }
  if (request.input_tokens == 0) return 0;
  return std::min<std::uint64_t>(matched * request.block_tokens, request.input_tokens - 1u);
}

std::uint64_t infinite_prefix_cache::serve(const trace_request& request) {
  return serve_each(request, [](std::uint32_t) {});
}

std::uint64_t infinite_prefix_cache::serve(const trace_request& request, std::vector<std::uint32_t>& nodes) {
  nodes.clear();
  return serve_each(request, [&nodes](std::uint32_t node) { nodes.push_back(node); });
}

}  // namespace vtensor::traces
