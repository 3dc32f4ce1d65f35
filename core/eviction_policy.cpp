#include "core/eviction_policy.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace vtensor {

namespace {

/// Least recently used first (SGLang's and vLLM's default).
class lru_policy final : public eviction_policy {
 public:
  std::string name() const override { return "lru"; }
  std::uint64_t priority(const node_stats& s) const override { return s.last_access; }
};

/// Oldest insertion first, whatever its use.
class fifo_policy final : public eviction_policy {
 public:
  std::string name() const override { return "fifo"; }
  std::uint64_t priority(const node_stats& s) const override { return s.created; }
};

/// Least frequently used first; recency breaks ties among equal counts (counts saturate at 2^20).
class lfu_policy final : public eviction_policy {
 public:
  std::string name() const override { return "lfu"; }
  std::uint64_t priority(const node_stats& s) const override {
    const std::uint64_t hits = std::min<std::uint64_t>(s.hits, (1u << 20) - 1);
    return (hits << 43) | (s.last_access & ((std::uint64_t{1} << 43) - 1));
  }
};

}  // namespace

std::vector<std::string> eviction_policy_names() { return {"lru", "fifo", "lfu"}; }

std::unique_ptr<eviction_policy> make_eviction_policy(std::string_view name) {
  if (name == "lru") return std::make_unique<lru_policy>();
  if (name == "fifo") return std::make_unique<fifo_policy>();
  if (name == "lfu") return std::make_unique<lfu_policy>();
  throw std::invalid_argument(
      fmt::format("unknown eviction policy '{}'; known: {}", name, fmt::join(eviction_policy_names(), ", ")));
}

}  // namespace vtensor
