#include "traces/next_use_index.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace vtensor::traces {

void next_use_index::add(const trace_request& request) {
  if (added_ == std::numeric_limits<std::uint32_t>::max()) {
    throw std::length_error("next-use index: more than 2^32 - 1 requests");
  }
  for (const std::uint64_t key : request.block_keys) {
    auto& uses = uses_[key];
    if (uses.empty() || uses.back() != added_) uses.push_back(added_);
  }
  ++added_;
}

std::uint64_t next_use_index::next_use(std::uint64_t key, std::uint64_t from) const {
  if (key == 0) return never;
  const auto it = uses_.find(key);
  if (it == uses_.end()) return never;
  const auto& uses = it->second;
  const auto at = std::lower_bound(uses.begin(), uses.end(), from);
  return at == uses.end() ? never : std::uint64_t{*at};
}

}  // namespace vtensor::traces
