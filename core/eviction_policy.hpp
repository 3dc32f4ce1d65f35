#pragma once
/// Which cached prefix leaves go first when memory runs short. The rTree keeps its evictable
/// leaves (unpinned, childless) ordered by the policy's priority and evicts the lowest first.
/// A policy is a pure function of a node's statistics, so the tree can keep its order with one
/// re-key per access.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace vtensor {

/// What a policy may look at.
struct node_stats {
  std::uint64_t last_access = 0;  ///< logical clock of the last match or insert that touched the node
  std::uint64_t created = 0;      ///< logical clock of the node's creation
  std::uint64_t hits = 0;         ///< matches that went through the node
  std::uint64_t tokens = 0;       ///< tokens on the node's edge
};

/// Eviction order: lower priority leaves go first.
class eviction_policy {
 public:
  virtual ~eviction_policy() = default;
  /// Registry name ("lru", "fifo", "lfu").
  [[nodiscard]] virtual std::string name() const = 0;
  /// Sort key; ties are broken by node creation order.
  [[nodiscard]] virtual std::uint64_t priority(const node_stats& s) const = 0;
};

/// Makes a policy by name; throws std::invalid_argument listing the known names otherwise.
[[nodiscard]] std::unique_ptr<eviction_policy> make_eviction_policy(std::string_view name);
/// Known policy names.
[[nodiscard]] std::vector<std::string> eviction_policy_names();

}  // namespace vtensor
