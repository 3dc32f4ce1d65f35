#pragma once
/// rTree: a radix tree over token-block keys. Each edge holds a run of blocks; a path from the
/// root spells a prompt prefix. Nodes carry the *page versions* that hold that prefix's KV.
///
/// Note [Page versions]: a page version is one page's chunks (one per tensor) with how many bytes
/// of each chunk are valid. It hangs on the node whose edge holds its last valid token, so any
/// path through that node agrees with its content. The same page index may have several versions
/// along a path (a short one from an early turn, a fuller one from a later turn); a reader takes,
/// page by page, the fullest version on its matched path. A version fully dominated at the same
/// node is replaced.
///
/// Pins: a live request that maps pages of a path pins the path's deepest node it uses (and so
/// all its ancestors); pinned nodes are never evicted. Eviction removes unpinned leaves in the
/// order of an eviction_order (LRU by default; Note [Eviction orders] in core/eviction_order.hpp),
/// and hands their page versions back so that the caller drops the chunk references. The tree
/// tells the order of every node's creation (a split's upper node inherits the lower's history),
/// every match or insert that walks through it (a touch), and whether it is an unpinned leaf.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/eviction_order.hpp"
#include "core/ids.hpp"

namespace vtensor {

/// One page's chunks in the tree.
struct page_version {
  std::uint32_t page = 0;         ///< page index within the vTensor
  std::uint64_t valid_bytes = 0;  ///< valid bytes of each chunk, from the page start (1..chunk bytes)
  std::uint64_t last_token = 0;   ///< index of the token holding the last valid byte
  std::vector<chunk_id> chunks;   ///< one chunk per tensor
};

/// A node of the tree. Owned by its parent (the root by the tree).
struct radix_node {
  radix_node* parent = nullptr;                       ///< nullptr for the root
  std::vector<token_block> edge;                      ///< blocks from the parent to this node
  std::uint64_t start_tokens = 0;                     ///< tokens on the path before this edge
  std::uint64_t edge_tokens = 0;                      ///< tokens on this edge
  std::vector<std::unique_ptr<radix_node>> children;  ///< sorted by their first block's key
  std::vector<page_version> pages;                    ///< page versions, sorted by page index
  std::uint32_t pins = 0;                             ///< live requests pinning this node or a descendant
  cache_slot slot = 0;                                ///< its name in the eviction order
  bool evictable = false;                             ///< a candidate of the eviction order

  [[nodiscard]] std::uint64_t end_tokens() const { return start_tokens + edge_tokens; }
  [[nodiscard]] bool is_leaf() const { return children.empty(); }
};

/// The result of walking a key down the tree.
struct radix_path {
  std::vector<radix_node*> nodes;  ///< nodes entered, root excluded; the last may be matched only in part
  std::uint32_t blocks = 0;        ///< leading blocks of the key found in the tree
  std::uint64_t tokens = 0;        ///< tokens of those blocks
  [[nodiscard]] radix_node* deepest() const { return nodes.empty() ? nullptr : nodes.back(); }
};

/// The radix tree. Not thread-safe (the manager serialises).
class radix_tree {
 public:
  explicit radix_tree(std::unique_ptr<eviction_order> order);
  ~radix_tree();
  radix_tree(const radix_tree&) = delete;
  radix_tree& operator=(const radix_tree&) = delete;

  /// Longest-prefix match of `key`, comparing block keys. Touches the matched nodes (access
  /// clock, hit count). A block stored shorter than the query's ends the match after it.
  /// Cost: O(matched blocks + path length x log(children)).
  [[nodiscard]] radix_path match(std::span<const token_block> key);
  /// match() without touching anything: what it would match now (a router's read, Note [Replica
  /// load] in sim/replica.cpp).
  [[nodiscard]] radix_path peek(std::span<const token_block> key) const;
  /// Inserts `key`, splitting edges as needed, and returns the path that spells it (every block
  /// matched). Stops early, with a shorter path, where a stored block has the same key but another
  /// length (a key collision: the rest is not cached).
  radix_path insert(std::span<const token_block> key);

  /// Hangs `version` on `node` (its last token must lie on the node's edge). A version of the
  /// same page at the same node with fewer valid bytes is replaced and returned, so the caller
  /// drops its references; if the node already holds as much, `version` itself is returned
  /// unattached.
  [[nodiscard]] std::optional<page_version> attach(radix_node& node, page_version version);
  /// Whether `node` holds a version of `page` with at least `valid_bytes`: attach() would hand a
  /// version of that page and size straight back.
  [[nodiscard]] static bool covers(const radix_node& node, std::uint32_t page, std::uint64_t valid_bytes);

  /// Pins `node` and its ancestors.
  void pin(radix_node& node);
  /// Undoes one pin().
  void unpin(radix_node& node);

  /// Evicts the evictable leaf the order picks; returns its page versions (possibly none), or
  /// nullopt when no leaf can be evicted.
  [[nodiscard]] std::optional<std::vector<page_version>> evict_one();
  /// Evicts an evictable leaf whose time is up (eviction_order::pop_expired); returns its page
  /// versions, or nullopt when none has expired.
  [[nodiscard]] std::optional<std::vector<page_version>> evict_expired();
  /// Removes every node (pinned ones too) and returns all page versions.
  [[nodiscard]] std::vector<page_version> clear();

  /// Nodes, root excluded.
  [[nodiscard]] std::size_t node_count() const { return node_count_; }
  /// Blocks stored on all edges.
  [[nodiscard]] std::uint64_t block_count() const { return block_count_; }
  /// Page versions attached.
  [[nodiscard]] std::uint64_t page_count() const { return page_count_; }
  /// Leaves that eviction may take now.
  [[nodiscard]] std::size_t evictable_count() const { return order_->candidates(); }
  /// The eviction order's name.
  [[nodiscard]] std::string_view policy_name() const { return order_->name(); }
  [[nodiscard]] const radix_node& root() const { return root_; }

  /// Visits every attached page version.
  template <class F>
  void for_each_page(F&& f) const {
    visit(root_, [&](const radix_node& n) {
      for (const auto& p : n.pages) f(n, p);
    });
  }
  /// Checks structure, counts, sort orders, pins and the evictable set; throws std::logic_error.
  void check_invariants() const;

 private:
  template <class F>
  static void visit(const radix_node& n, F&& f) {
    f(n);
    for (const auto& c : n.children) visit(*c, f);
  }
  [[nodiscard]] static radix_node* find_child(const radix_node& n, std::uint64_t key);
  [[nodiscard]] static cache_item item_of(const radix_node& n) {
    return {n.edge_tokens, n.start_tokens, n.edge.front().key};
  }
  void enter(radix_node& n, const radix_node* like);  // gives `n` a slot and tells the order
  void leave(radix_node& n);                          // frees `n`'s slot (the order already dropped it)
  void refresh_evictable(radix_node& n);
  radix_node& split(radix_node& n, std::size_t at_block);
  std::vector<page_version> remove_leaf(cache_slot slot);
  void collect_pages(radix_node& n, std::vector<page_version>& out);

  std::unique_ptr<eviction_order> order_;
  radix_node root_;
  std::vector<radix_node*> slots_;      // node by slot
  std::vector<cache_slot> free_slots_;  // slots to reuse, last freed first
  std::size_t node_count_ = 0;
  std::uint64_t block_count_ = 0;
  std::uint64_t page_count_ = 0;
};

}  // namespace vtensor
