#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/units.hpp"

namespace vtensor::traces {

/// One request of a trace, as every reader yields it and every writer takes it.
///
/// Prefix identity: block i of the prompt covers tokens [i * block_tokens, min((i + 1) *
/// block_tokens, input_tokens)); two requests whose keys agree on blocks 0..i share the prompt's
/// first tokens up to the end of block i. The last block may be partial. An empty `block_keys`
/// means the trace carries no prefix identity (every prompt is unique). Owns its keys: copying a
/// request copies them, so readers hand out values and callers move them on.
struct trace_request {
  std::uint64_t arrival_us = 0;           ///< arrival, microseconds from the trace's first request
  std::uint64_t session = 0;              ///< conversation id; formats without one use the index
  std::uint32_t turn = 0;                 ///< turn in the session, 0 for the first
  std::uint32_t input_tokens = 0;         ///< prompt tokens, at least 1
  std::uint32_t output_tokens = 0;        ///< tokens to generate, 0 allowed (prefill only)
  std::uint32_t block_tokens = 0;         ///< tokens per block of block_keys; 0 if the format has none
  std::vector<std::uint64_t> block_keys;  ///< one key per prompt block, or empty
  std::uint64_t line = 0;                 ///< 1-based source line (or sequence number if generated)

  /// Tokens of block `index` (the last one may be partial). Precondition: index < block count.
  [[nodiscard]] std::uint32_t tokens_in_block(std::size_t index) const noexcept {
    const std::uint64_t begin = std::uint64_t{block_tokens} * index;
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(block_tokens, input_tokens - begin));
  }
};

/// Number of blocks of `block_tokens` needed to cover `tokens` tokens (last block partial).
[[nodiscard]] constexpr std::uint64_t blocks_for_tokens(std::uint64_t tokens, std::uint32_t block_tokens) noexcept {
  return block_tokens == 0 ? 0 : ceil_div(tokens, block_tokens);
}

}  // namespace vtensor::traces
