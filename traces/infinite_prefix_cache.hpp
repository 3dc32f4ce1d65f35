#pragma once

#include "traces/trace_request.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace vtensor::traces {

/// The upper bound on prefix reuse: a cache of unlimited capacity that keeps every block it has
/// seen, served strictly in order (the sequential model of the shared traces README).
///
/// Note [Sequential infinite-cache hit model]: requests are served one at a time in file order;
/// a request hits its longest run of leading blocks already cached, counted as matched blocks x
/// block_tokens but capped at input_tokens - 1 (the last prompt token is always computed, to
/// produce the first output token); after it is served all its blocks are cached. Keys are
/// matched through a trie keyed by (parent node, block key), so equal keys under different
/// prefixes never match, whether or not the trace's keys are chained. A real replay (finite
/// cache, concurrency, eviction) can never reuse more.
///
/// Memory: about 24-48 bytes per distinct cached prefix block (one open-addressing table).
class infinite_prefix_cache {
 public:
  infinite_prefix_cache();

  /// Prompt tokens of `request` served from the cache; then caches all its blocks.
  [[nodiscard]] std::uint64_t serve(const trace_request& request);
  /// As serve(), and `nodes` gets each block's node: the id of the prefix it ends (1 to
  /// cached_blocks(), equal for equal prefixes), with which a caller keeps its own subsets of
  /// this cache (the split bound of a cluster: sim/cluster.cpp).
  [[nodiscard]] std::uint64_t serve(const trace_request& request, std::vector<std::uint32_t>& nodes);

  /// Leading blocks of `keys` already cached (nothing is inserted).
  [[nodiscard]] std::size_t match_blocks(std::span<const std::uint64_t> keys) const noexcept;

  /// Distinct prefix blocks cached.
  [[nodiscard]] std::uint64_t cached_blocks() const noexcept { return size_; }

 private:
  struct slot {
    std::uint64_t key = 0;
    std::uint32_t parent = 0;
    std::uint32_t child = 0;  // 0: empty slot (node 0 is the root)
  };

  [[nodiscard]] std::size_t find_slot(std::uint32_t parent, std::uint64_t key) const noexcept;
  void grow();
  template <typename OnNode>
  std::uint64_t serve_each(const trace_request& request, OnNode on_node);  // serve(), each block's node to on_node

  std::vector<slot> slots_;
  std::uint64_t size_ = 0;
};

}  // namespace vtensor::traces
