#pragma once
/// Bounds on prefix reuse computed from a trace alone, for `vtensor compare`'s oracle rows
/// (docs/compare.md): the trace's prefix blocks as nodes of a trie, the infinite-cache hit of
/// every request (the bound of infinite_prefix_cache, per request), and an offline bound at a
/// finite capacity: Belady eviction on the evictable leaves of the trie.
///
/// Note [Offline prefix bound]
/// Sequential model, as Note [Sequential infinite-cache hit model]: requests are served one at a
/// time in file order; a request hits its longest run of leading cached blocks (matched blocks x
/// block_tokens, capped at input_tokens - 1); then every block of its prompt is cached. The cache
/// holds at most `capacity_blocks` blocks (a partial last block takes a whole one). Over capacity,
/// it evicts the cached leaf (a block none of whose children is cached) whose next use by a later
/// request is farthest (never: farthest of all; ties by node id), until it fits. Evicting leaves
/// only keeps the cached set closed under prefixes, so a cached block is always reachable.
/// This is a heuristic bound, not a proof of optimality: Belady's rule is optimal for a cache of
/// equal-sized independent items, but here a block is useful only with all its ancestors, so
/// keeping a deep block may be worth less than keeping a shallow one used sooner, and the greedy
/// rule may not find the best eviction sequence. It also ignores that a serving replica needs
/// part of the budget for the running requests' own KV (which makes it higher than any policy
/// can reach), and that requests overlap in time (which the infinite bound ignores too). It is
/// at most the infinite bound (its cache holds a subset of what the infinite cache holds).

#include <cstdint>
#include <span>
#include <vector>

#include "traces/trace_request.hpp"

namespace vtensor::traces {

/// The distinct prefix blocks of a trace (trie nodes keyed by parent and block key) and each
/// request's path through them. Node ids start at 1; 0 is the root.
struct prefix_index {
  std::vector<std::uint32_t> parent;        ///< per node id (index 0 unused)
  std::vector<std::uint64_t> path_begin;    ///< per request: its first entry in path_nodes; one more at the end
  std::vector<std::uint32_t> path_nodes;    ///< every request's blocks, as node ids, in prompt order
  std::vector<std::uint64_t> infinite_hit;  ///< per request: the infinite-cache hit, tokens

  [[nodiscard]] std::size_t nodes() const noexcept { return parent.size() - 1; }
  [[nodiscard]] std::span<const std::uint32_t> path(std::size_t request) const noexcept {
    return {path_nodes.data() + path_begin[request], path_nodes.data() + path_begin[request + 1]};
  }
};

/// Indexes `requests` (in file order) and computes each one's infinite-cache hit, which sums to
/// what infinite_prefix_cache::serve() gives over the same requests.
[[nodiscard]] prefix_index index_prefixes(std::span<const trace_request> requests);

/// The offline bound's hit tokens, summed over `requests` (those indexed by `index`), with a
/// cache of `capacity_blocks` blocks (Note [Offline prefix bound]).
[[nodiscard]] std::uint64_t offline_hit_tokens(const prefix_index& index, std::span<const trace_request> requests,
                                               std::uint64_t capacity_blocks);

}  // namespace vtensor::traces
