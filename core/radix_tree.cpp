#include "core/radix_tree.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

namespace vtensor {

namespace {

std::uint64_t sum_tokens(std::span<const token_block> blocks) {
  std::uint64_t t = 0;
  for (const auto& b : blocks) t += b.tokens;
  return t;
}

auto child_lower_bound(const std::vector<std::unique_ptr<radix_node>>& children, std::uint64_t key) {
  return std::lower_bound(
      children.begin(), children.end(), key,
      [](const std::unique_ptr<radix_node>& c, std::uint64_t k) { return c->edge.front().key < k; });
}

}  // namespace

radix_tree::radix_tree(std::unique_ptr<eviction_order> order) : order_(std::move(order)) {
  if (!order_) throw std::invalid_argument("radix_tree: null eviction order");
}

radix_tree::~radix_tree() = default;

void radix_tree::enter(radix_node& n, const radix_node* like) {
  if (free_slots_.empty()) {
    n.slot = static_cast<cache_slot>(slots_.size());
    slots_.push_back(&n);
  } else {
    n.slot = free_slots_.back();
    free_slots_.pop_back();
    slots_[n.slot] = &n;
  }
  if (like != nullptr) {
    order_->insert_like(n.slot, item_of(n), like->slot);
  } else {
    order_->insert(n.slot, item_of(n));
  }
}

void radix_tree::leave(radix_node& n) {
  slots_[n.slot] = nullptr;
  free_slots_.push_back(n.slot);
}

radix_node* radix_tree::find_child(const radix_node& n, std::uint64_t key) {
  auto it = child_lower_bound(n.children, key);
  return it != n.children.end() && (*it)->edge.front().key == key ? it->get() : nullptr;
}

void radix_tree::refresh_evictable(radix_node& n) {
  const bool should = &n != &root_ && n.is_leaf() && n.pins == 0;
  if (should == n.evictable) return;
  n.evictable = should;
  order_->set_candidate(n.slot, should);
}

radix_path radix_tree::match(std::span<const token_block> key) {
  radix_path r = peek(key);
  for (const radix_node* n : r.nodes) order_->touch(n->slot);  // root to leaf, as the walk meets them
  return r;
}

radix_path radix_tree::peek(std::span<const token_block> key) const {
  radix_path r;
  const radix_node* n = &root_;
  std::size_t i = 0;
  while (i < key.size()) {
    radix_node* child = find_child(*n, key[i].key);
    if (child == nullptr) break;
    r.nodes.push_back(child);
    const auto& edge = child->edge;
    std::size_t j = 0;
    bool stop = false;
    while (j < edge.size() && i < key.size() && edge[j].key == key[i].key) {
      r.tokens += std::min(edge[j].tokens, key[i].tokens);
      ++r.blocks;
      stop = edge[j].tokens < key[i].tokens;
      ++i;
      ++j;
      if (stop) break;
    }
    if (stop || j < edge.size()) break;
    n = child;
  }
  return r;
}

radix_node& radix_tree::split(radix_node& n, std::size_t at_block) {
  radix_node& parent = *n.parent;
  auto slot = std::find_if(parent.children.begin(), parent.children.end(),
                           [&](const std::unique_ptr<radix_node>& c) { return c.get() == &n; });
  auto up = std::make_unique<radix_node>();
  up->parent = &parent;
  up->edge.assign(n.edge.begin(), n.edge.begin() + static_cast<std::ptrdiff_t>(at_block));
  up->start_tokens = n.start_tokens;
  up->edge_tokens = sum_tokens(up->edge);
  up->pins = n.pins;
  enter(*up, &n);  // not a leaf: never a candidate while `n` hangs below
  n.edge.erase(n.edge.begin(), n.edge.begin() + static_cast<std::ptrdiff_t>(at_block));
  n.start_tokens += up->edge_tokens;
  n.edge_tokens -= up->edge_tokens;
  order_->resize(n.slot, item_of(n));
  // Page versions whose last token now lies on the upper edge move up (order is kept).
  auto moved = std::stable_partition(n.pages.begin(), n.pages.end(),
                                     [&](const page_version& p) { return p.last_token < n.start_tokens; });
  up->pages.assign(std::make_move_iterator(n.pages.begin()), std::make_move_iterator(moved));
  n.pages.erase(n.pages.begin(), moved);
  std::unique_ptr<radix_node> lower = std::move(*slot);
  lower->parent = up.get();
  up->children.push_back(std::move(lower));
  *slot = std::move(up);
  ++node_count_;
  return **slot;
}

radix_path radix_tree::insert(std::span<const token_block> key) {
  radix_path r;
  radix_node* n = &root_;
  std::size_t i = 0;
  while (i < key.size()) {
    radix_node* child = find_child(*n, key[i].key);
    if (child == nullptr) {
      auto leaf = std::make_unique<radix_node>();
      leaf->parent = n;
      leaf->edge.assign(key.begin() + static_cast<std::ptrdiff_t>(i), key.end());
      leaf->start_tokens = n == &root_ ? 0 : n->end_tokens();
      leaf->edge_tokens = sum_tokens(leaf->edge);
      enter(*leaf, nullptr);
      radix_node* raw = leaf.get();
      n->children.insert(child_lower_bound(n->children, key[i].key), std::move(leaf));
      ++node_count_;
      block_count_ += raw->edge.size();
      r.blocks += static_cast<std::uint32_t>(raw->edge.size());
      r.tokens += raw->edge_tokens;
      r.nodes.push_back(raw);
      refresh_evictable(*n);
      refresh_evictable(*raw);
      return r;
    }
    const auto& edge = child->edge;
    std::size_t j = 0;
    bool collision = false;
    while (j < edge.size() && i < key.size() && edge[j].key == key[i].key) {
      if (edge[j].tokens != key[i].tokens) {
        collision = true;
        break;
      }
      r.tokens += edge[j].tokens;
      ++r.blocks;
      ++i;
      ++j;
    }
    if (j == 0) return r;  // collision on the first block: nothing more can be cached here
    if (j < edge.size()) child = &split(*child, j);
    order_->refresh(child->slot);  // a walk, not a use: Note [Eviction orders]
    r.nodes.push_back(child);
    if (collision) return r;
    n = child;
  }
  return r;
}

std::optional<page_version> radix_tree::attach(radix_node& node, page_version version) {
  if (version.last_token < node.start_tokens || version.last_token >= node.end_tokens()) {
    throw std::logic_error(fmt::format("rtree: page {} ends at token {}, outside the node's tokens [{}, {})",
                                       version.page, version.last_token, node.start_tokens, node.end_tokens()));
  }
  auto it = std::lower_bound(node.pages.begin(), node.pages.end(), version.page,
                             [](const page_version& p, std::uint32_t page) { return p.page < page; });
  if (it != node.pages.end() && it->page == version.page) {
    if (it->valid_bytes >= version.valid_bytes) return version;
    std::swap(*it, version);
    return version;
  }
  node.pages.insert(it, std::move(version));
  ++page_count_;
  return std::nullopt;
}

bool radix_tree::covers(const radix_node& node, std::uint32_t page, std::uint64_t valid_bytes) {
  auto it = std::lower_bound(node.pages.begin(), node.pages.end(), page,
                             [](const page_version& p, std::uint32_t pg) { return p.page < pg; });
  return it != node.pages.end() && it->page == page && it->valid_bytes >= valid_bytes;
}

void radix_tree::pin(radix_node& node) {
  for (radix_node* p = &node; p != &root_ && p != nullptr; p = p->parent) {
    ++p->pins;
    refresh_evictable(*p);
  }
}

void radix_tree::unpin(radix_node& node) {
  for (radix_node* p = &node; p != &root_ && p != nullptr; p = p->parent) {
    if (p->pins == 0) throw std::logic_error("rtree: unpin of a node that is not pinned");
    if (--p->pins == 0) refresh_evictable(*p);
  }
}

std::optional<std::vector<page_version>> radix_tree::evict_one() {
  const std::optional<cache_slot> slot = order_->pop_victim();
  if (!slot) return std::nullopt;
  return remove_leaf(*slot);
}

std::optional<std::vector<page_version>> radix_tree::evict_expired() {
  const std::optional<cache_slot> slot = order_->pop_expired();
  if (!slot) return std::nullopt;
  return remove_leaf(*slot);
}

std::vector<page_version> radix_tree::remove_leaf(cache_slot slot) {
  radix_node* node = slot < slots_.size() ? slots_[slot] : nullptr;
  if (node == nullptr || !node->evictable) {
    throw std::logic_error(fmt::format("rtree: the eviction order picked slot {}, not a candidate", slot));
  }
  radix_node& victim = *node;
  victim.evictable = false;
  leave(victim);
  std::vector<page_version> pages = std::move(victim.pages);
  page_count_ -= pages.size();
  block_count_ -= victim.edge.size();
  --node_count_;
  radix_node& parent = *victim.parent;
  std::erase_if(parent.children, [&](const std::unique_ptr<radix_node>& c) { return c.get() == &victim; });
  refresh_evictable(parent);
  return pages;
}

void radix_tree::collect_pages(radix_node& n, std::vector<page_version>& out) {
  for (auto& p : n.pages) out.push_back(std::move(p));
  n.pages.clear();
  for (auto& c : n.children) collect_pages(*c, out);
  if (&n != &root_) {
    order_->erase(n.slot);
    leave(n);
  }
}

std::vector<page_version> radix_tree::clear() {
  std::vector<page_version> out;
  collect_pages(root_, out);
  root_.children.clear();
  node_count_ = 0;
  block_count_ = 0;
  page_count_ = 0;
  return out;
}

void radix_tree::check_invariants() const {
  std::size_t nodes = 0;
  std::uint64_t blocks = 0;
  std::uint64_t pages = 0;
  std::size_t evictable = 0;
  auto fail = [](const std::string& why) { throw std::logic_error("rtree invariant: " + why); };
  visit(root_, [&](const radix_node& n) {
    std::uint32_t child_pins = 0;
    for (std::size_t i = 0; i < n.children.size(); ++i) {
      const radix_node& c = *n.children[i];
      if (c.parent != &n) fail("child whose parent pointer is wrong");
      if (c.edge.empty()) fail("node with an empty edge");
      if (i > 0 && n.children[i - 1]->edge.front().key >= c.edge.front().key) fail("children not sorted by first key");
      if (c.start_tokens != (&n == &root_ ? 0 : n.end_tokens())) fail("start tokens do not follow the parent's");
      if (c.edge_tokens != sum_tokens(c.edge)) fail("edge tokens do not add up");
      child_pins += c.pins;
    }
    if (&n == &root_) return;
    ++nodes;
    blocks += n.edge.size();
    pages += n.pages.size();
    if (n.pins < child_pins) fail("a node has fewer pins than its children together");
    for (std::size_t i = 0; i < n.pages.size(); ++i) {
      const auto& p = n.pages[i];
      if (i > 0 && n.pages[i - 1].page >= p.page) fail("page versions not sorted by page");
      if (p.last_token < n.start_tokens || p.last_token >= n.end_tokens()) fail("page version on the wrong node");
      if (p.valid_bytes == 0 || p.chunks.empty()) fail("empty page version");
    }
    const bool should = n.is_leaf() && n.pins == 0;
    if (should != n.evictable) fail("evictable flag disagrees with leaf and pin state");
    if (n.slot >= slots_.size() || slots_[n.slot] != &n) fail("node not found at its slot");
    if (n.evictable) ++evictable;
  });
  if (nodes != node_count_) fail(fmt::format("{} nodes counted, {} recorded", nodes, node_count_));
  if (blocks != block_count_) fail("block count drifted");
  if (pages != page_count_) fail("page count drifted");
  if (evictable != order_->candidates()) fail("the eviction order's candidates drifted");
  if (nodes + free_slots_.size() != slots_.size()) fail("slots leaked");
}

}  // namespace vtensor
