#pragma once
/// Strong id types and the token-block key shared by the core's structures.

#include <compare>
#include <cstdint>
#include <functional>

namespace vtensor {

/// A request, as the caller names it.
struct request_id {
  std::uint64_t value = 0;  ///< caller-chosen, unique among live requests
  friend auto operator<=>(request_id, request_id) = default;
};

/// Index of a chunk record in the pSet (dense, reused after a chunk is released).
struct chunk_id {
  std::uint32_t value = 0;  ///< slot in pset
  friend auto operator<=>(chunk_id, chunk_id) = default;
};

/// One block of prompt tokens named by a content key (a Mooncake hash id, say). Equal keys at
/// equal positions after equal prefixes mean equal tokens.
struct token_block {
  std::uint64_t key = 0;     ///< content identity of the block (chained with its prefix)
  std::uint32_t tokens = 0;  ///< tokens in the block; only a request's last block may be short
  friend bool operator==(const token_block&, const token_block&) = default;
};

}  // namespace vtensor

template <>
struct std::hash<vtensor::request_id> {
  std::size_t operator()(vtensor::request_id id) const noexcept { return std::hash<std::uint64_t>{}(id.value); }
};
