#pragma once
/// Foresight for the offline eviction order (core/eviction_order.hpp): for each block key of a
/// trace, the requests (file order, 0-based) whose prompts hold it. Built by reading the trace
/// once before the replay; the offline order asks it when a cached item's key is used next.

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/eviction_order.hpp"
#include "traces/trace_request.hpp"

namespace vtensor::traces {

/// The uses of every block key, request by request. Memory: one 4-byte entry per block of the
/// trace plus a hash-map node per distinct key.
class next_use_index final : public next_use_oracle {
 public:
  /// Adds the next request of the trace (its index is the number added before it).
  void add(const trace_request& request);
  /// Requests added.
  [[nodiscard]] std::uint64_t requests() const { return added_; }
  /// The first request at or after `from` that holds `key`, or `never` (unknown keys and key 0 too).
  [[nodiscard]] std::uint64_t next_use(std::uint64_t key, std::uint64_t from) const override;

 private:
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> uses_;  // key -> requests, ascending
  std::uint32_t added_ = 0;
};

}  // namespace vtensor::traces
