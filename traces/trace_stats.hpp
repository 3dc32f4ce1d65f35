#pragma once

#include "traces/trace_reader.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace vtensor::traces {

/// Nearest-rank percentiles of a length distribution (value at rank ceil(p x n)).
struct length_percentiles {
  std::uint32_t p50 = 0;  ///< median
  std::uint32_t p90 = 0;  ///< 90th percentile
  std::uint32_t p99 = 0;  ///< 99th percentile
  std::uint32_t max = 0;  ///< largest
  double mean = 0;        ///< arithmetic mean
};

/// Computes nearest-rank percentiles; reorders `values`. All zero when empty.
[[nodiscard]] length_percentiles compute_percentiles(std::span<std::uint32_t> values);

/// What one pass over a trace shows: load, lengths, arrival rate and the prefix reuse bound.
struct trace_stats {
  std::uint64_t requests = 0;            ///< requests read
  std::uint64_t sessions = 0;            ///< distinct session ids
  std::uint32_t max_turn = 0;            ///< largest turn index
  std::uint64_t prompt_tokens = 0;       ///< sum of input_tokens
  std::uint64_t output_tokens = 0;       ///< sum of output_tokens
  length_percentiles input_lengths;      ///< of input_tokens
  length_percentiles output_lengths;     ///< of output_tokens
  std::uint64_t first_arrival_us = 0;    ///< arrival of the first request
  std::uint64_t last_arrival_us = 0;     ///< arrival of the last request
  double duration_s = 0;                 ///< last minus first arrival
  double requests_per_s = 0;             ///< requests / duration (0 when duration is 0)
  double prompt_tokens_per_s = 0;        ///< prompt tokens / duration (0 when duration is 0)
  std::uint32_t block_tokens = 0;        ///< tokens per prefix block, 0 without prefix identity
  std::uint64_t requests_with_keys = 0;  ///< requests carrying block keys
  std::uint64_t cached_blocks = 0;       ///< distinct prefix blocks in the whole trace
  std::uint64_t prefix_hit_tokens = 0;   ///< infinite-cache hits, Note [Sequential infinite-cache hit model]
  double prefix_hit_rate = 0;            ///< prefix_hit_tokens / prompt_tokens
};

/// Reads `reader` to its end in one streaming pass. Memory: 8 bytes a request for lengths,
/// 8 for session ids, plus the prefix trie (infinite_prefix_cache). Throws trace_error.
[[nodiscard]] trace_stats compute_trace_stats(trace_reader& reader);

}  // namespace vtensor::traces
