#pragma once
// Shared set-up for the manager tests: geometries and block-key helpers.

#include <cstdint>
#include <vector>

#include "core/ids.hpp"
#include "core/kv_geometry.hpp"
#include "core/manager.hpp"

namespace vtensor::core_testing {

/// Llama-3-8B in `layout`, 128k context.
inline manager_config llama_config(kv_layout layout, std::uint32_t lookahead = 0,
                                   partial_page_policy partial = partial_page_policy::cow) {
  manager_config c{kv_geometry(*model_preset("llama-3-8b"), layout), {}, "lru"};
  c.scheduler.max_context_tokens = 131072;
  c.scheduler.lookahead_pages = lookahead;
  c.scheduler.partial = partial;
  return c;
}

/// `count` full blocks of `tokens` with keys first, first+1, ...
inline std::vector<token_block> run_of_blocks(std::uint64_t first, std::size_t count, std::uint32_t tokens = 512) {
  std::vector<token_block> v;
  for (std::size_t i = 0; i < count; ++i) v.push_back({first + i, tokens});
  return v;
}

/// Concatenation.
inline std::vector<token_block> operator+(std::vector<token_block> a, const std::vector<token_block>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace vtensor::core_testing
