#pragma once
/// The prefix cache's hold on chunks: the rTree and the chunk references its page versions take.
/// Recording a page takes one tree reference per chunk; evicting a leaf, replacing a dominated
/// version or dropping the whole tree gives them back, and a chunk left with no reference goes
/// to the free pool (pset::drop_ref).
/// Threads: not thread-safe; the step thread only (the manager serialises).

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/eviction_order.hpp"
#include "core/pset.hpp"
#include "core/radix_tree.hpp"

namespace vtensor {

/// The rTree over the pSet's chunks.
class prefix_cache {
 public:
  /// Holds references in `chunks` (owned by the chunk pool); evicts in `eviction`'s order.
  prefix_cache(pset& chunks, std::unique_ptr<eviction_order> eviction) : chunks_(chunks), tree_(std::move(eviction)) {}

  /// Takes a tree reference on each chunk of `version` and hangs it on `node`; whatever the tree
  /// hands back (a dominated version, or this one if redundant) loses its references.
  void record_page(radix_node& node, page_version version);
  /// Evicts one rTree leaf (policy order) and drops its references; false when nothing is evictable.
  bool evict_one();
  /// Evicts every leaf whose time is up (a ttl order; others: none) and drops its references.
  void drop_expired();
  /// Drops the whole rTree and its references.
  void clear();
  /// Called with a chunk that loses its last tree reference while parked vTensors map it, before
  /// the reference is dropped: the host unmaps them, so that the chunk frees as it would without
  /// them (Note [Parked vTensors] in scheduler.cpp).
  void on_parked_orphan(std::function<void(chunk_id)> hook) { parked_orphan_ = std::move(hook); }

  [[nodiscard]] radix_tree& tree() { return tree_; }
  [[nodiscard]] const radix_tree& tree() const { return tree_; }
  /// rTree leaves evicted so far.
  [[nodiscard]] std::uint64_t evicted_nodes() const { return evicted_nodes_; }

 private:
  void drop_pages(std::vector<page_version>& pages);

  pset& chunks_;
  radix_tree tree_;
  std::uint64_t evicted_nodes_ = 0;
  std::function<void(chunk_id)> parked_orphan_;
};

}  // namespace vtensor
