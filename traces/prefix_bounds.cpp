#include "traces/prefix_bounds.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace vtensor::traces {
namespace {

struct edge_hash {
  std::size_t operator()(const std::pair<std::uint32_t, std::uint64_t>& e) const noexcept {
    std::uint64_t x = e.second ^ (std::uint64_t{e.first} * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return static_cast<std::size_t>(x);
  }
};

std::uint64_t capped_hit(const trace_request& r, std::uint64_t matched_blocks) {
  return std::min<std::uint64_t>(matched_blocks * r.block_tokens, r.input_tokens - 1u);
}

}  // namespace

prefix_index index_prefixes(std::span<const trace_request> requests) {
  prefix_index index;
  index.parent.push_back(0);
  index.path_begin.reserve(requests.size() + 1);
  index.infinite_hit.reserve(requests.size());
  std::unordered_map<std::pair<std::uint32_t, std::uint64_t>, std::uint32_t, edge_hash> children;
  for (const trace_request& r : requests) {
    index.path_begin.push_back(index.path_nodes.size());
    std::uint32_t node = 0;
    std::uint64_t matched = 0;
    bool missed = false;
    for (const std::uint64_t key : r.block_keys) {
      const auto [it, inserted] = children.try_emplace({node, key}, 0);
      if (inserted) {
        if (index.parent.size() >= std::numeric_limits<std::uint32_t>::max())
          throw std::length_error("prefix_index: too many blocks");
        it->second = static_cast<std::uint32_t>(index.parent.size());
        index.parent.push_back(node);
        missed = true;
      } else if (!missed) {
        ++matched;
      }
      node = it->second;
      index.path_nodes.push_back(node);
    }
    index.infinite_hit.push_back(r.input_tokens == 0 ? 0 : capped_hit(r, matched));
  }
  index.path_begin.push_back(index.path_nodes.size());
  return index;
}

std::uint64_t offline_hit_tokens(const prefix_index& index, std::span<const trace_request> requests,
                                 std::uint64_t capacity_blocks) {
  if (capacity_blocks == 0 || requests.empty()) return 0;
  const std::size_t n = requests.size();
  const auto never = static_cast<std::uint64_t>(n);
  // The next request using each path entry's block (never: n), by a backward scan.
  std::vector<std::uint64_t> next_use(index.path_nodes.size());
  {
    std::vector<std::uint64_t> seen(index.parent.size(), never);
    for (std::size_t i = n; i-- > 0;) {
      for (std::uint64_t k = index.path_begin[i]; k < index.path_begin[i + 1]; ++k) {
        next_use[k] = seen[index.path_nodes[k]];
        seen[index.path_nodes[k]] = i;
      }
    }
  }
  std::vector<std::uint64_t> node_next(index.parent.size(), never);
  std::vector<std::uint32_t> cached_children(index.parent.size(), 0);
  std::vector<char> cached(index.parent.size(), 0);
  std::set<std::pair<std::uint64_t, std::uint32_t>> leaves;  // (next use, node) of evictable leaves
  std::uint64_t size = 0;
  std::uint64_t hits = 0;
  const auto is_leaf = [&](std::uint32_t node) { return node != 0 && cached[node] != 0 && cached_children[node] == 0; };
  for (std::size_t i = 0; i < n; ++i) {
    const auto path = index.path(i);
    std::size_t matched = 0;
    while (matched < path.size() && cached[path[matched]] != 0) ++matched;
    if (!path.empty()) hits += capped_hit(requests[i], matched);
    // The blocks of this request are used now: their next use moves on.
    for (std::size_t k = 0; k < path.size(); ++k) {
      const std::uint32_t node = path[k];
      const std::uint64_t next = next_use[index.path_begin[i] + k];
      if (is_leaf(node)) {
        leaves.erase({node_next[node], node});
        leaves.insert({next, node});
      }
      node_next[node] = next;
    }
    // Cache the rest of the path, then evict farthest-used leaves down to the capacity.
    for (std::size_t k = matched; k < path.size(); ++k) {
      const std::uint32_t node = path[k];
      const std::uint32_t parent = index.parent[node];
      if (is_leaf(parent)) leaves.erase({node_next[parent], parent});
      if (parent != 0) ++cached_children[parent];
      cached[node] = 1;
      ++size;
      leaves.insert({node_next[node], node});
    }
    while (size > capacity_blocks) {
      const auto victim = std::prev(leaves.end());
      const std::uint32_t node = victim->second;
      leaves.erase(victim);
      cached[node] = 0;
      --size;
      const std::uint32_t parent = index.parent[node];
      if (parent != 0 && --cached_children[parent] == 0) leaves.insert({node_next[parent], parent});
    }
  }
  return hits;
}

}  // namespace vtensor::traces
