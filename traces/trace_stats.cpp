#include "traces/trace_stats.hpp"

#include "traces/infinite_prefix_cache.hpp"

#include <algorithm>
#include <cmath>

namespace vtensor::traces {
namespace {

std::uint32_t nearest_rank(std::span<std::uint32_t> values, double percentile) {
  const auto rank = static_cast<std::size_t>(std::ceil(percentile * static_cast<double>(values.size())));
  const std::size_t index = std::clamp<std::size_t>(rank, 1, values.size()) - 1;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(index), values.end());
  return values[index];
}

}  // namespace

length_percentiles compute_percentiles(std::span<std::uint32_t> values) {
  length_percentiles result;
  if (values.empty()) return result;
  double sum = 0;
  for (const std::uint32_t value : values) {
    sum += value;
    result.max = std::max(result.max, value);
  }
  result.mean = sum / static_cast<double>(values.size());
  result.p50 = nearest_rank(values, 0.50);
  result.p90 = nearest_rank(values, 0.90);
  result.p99 = nearest_rank(values, 0.99);
  return result;
}

trace_stats compute_trace_stats(trace_reader& reader) {
  trace_stats stats;
  std::vector<std::uint32_t> input_lengths;
  std::vector<std::uint32_t> output_lengths;
  std::vector<std::uint64_t> sessions;
  infinite_prefix_cache cache;
  trace_request request;
  while (reader.next(request)) {
    if (stats.requests == 0) stats.first_arrival_us = request.arrival_us;
    stats.last_arrival_us = request.arrival_us;
    ++stats.requests;
    stats.prompt_tokens += request.input_tokens;
    stats.output_tokens += request.output_tokens;
    stats.max_turn = std::max(stats.max_turn, request.turn);
    input_lengths.push_back(request.input_tokens);
    output_lengths.push_back(request.output_tokens);
    sessions.push_back(request.session);
    if (!request.block_keys.empty()) {
      ++stats.requests_with_keys;
      stats.prefix_hit_tokens += cache.serve(request);
    }
  }
  std::sort(sessions.begin(), sessions.end());
  stats.sessions = static_cast<std::uint64_t>(std::unique(sessions.begin(), sessions.end()) - sessions.begin());
  stats.input_lengths = compute_percentiles(input_lengths);
  stats.output_lengths = compute_percentiles(output_lengths);
  stats.duration_s = static_cast<double>(stats.last_arrival_us - stats.first_arrival_us) / 1e6;
  if (stats.duration_s > 0) {
    stats.requests_per_s = static_cast<double>(stats.requests) / stats.duration_s;
    stats.prompt_tokens_per_s = static_cast<double>(stats.prompt_tokens) / stats.duration_s;
  }
  stats.block_tokens = stats.requests_with_keys > 0 ? reader.block_tokens() : 0;
  stats.cached_blocks = cache.cached_blocks();
  if (stats.prompt_tokens > 0) {
    stats.prefix_hit_rate = static_cast<double>(stats.prefix_hit_tokens) / static_cast<double>(stats.prompt_tokens);
  }
  return stats;
}

}  // namespace vtensor::traces
