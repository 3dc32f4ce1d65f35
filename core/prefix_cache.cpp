#include "core/prefix_cache.hpp"

namespace vtensor {

void prefix_cache::drop_pages(std::vector<page_version>& pages) {
  pset& chunks = chunks_;  // read once: a member reference is reloaded after every call
  for (auto& v : pages) {
    for (chunk_id c : v.chunks) chunks.prefetch(c);  // Note [Dense chunk records]
    for (chunk_id c : v.chunks) {
      chunk_record& r = chunks[c];
      if (--r.tree_refs == 0 && r.parked_mappings > 0 && parked_orphan_) parked_orphan_(c);
      chunks.drop_ref(c);
    }
  }
}

bool prefix_cache::evict_one() {
  auto pages = tree_.evict_one();
  if (!pages) return false;
  ++evicted_nodes_;
  drop_pages(*pages);
  return true;
}

void prefix_cache::drop_expired() {
  while (auto pages = tree_.evict_expired()) {
    ++evicted_nodes_;
    drop_pages(*pages);
  }
}

void prefix_cache::record_page(radix_node& node, page_version version) {
  for (chunk_id c : version.chunks) chunks_.prefetch(c);  // Note [Dense chunk records]
  for (chunk_id c : version.chunks) {
    ++chunks_[c].tree_refs;
    chunks_.add_ref(c);
  }
  if (auto back = tree_.attach(node, std::move(version))) {
    std::vector<page_version> dropped;
    dropped.push_back(std::move(*back));
    drop_pages(dropped);
  }
}

void prefix_cache::clear() {
  auto pages = tree_.clear();
  drop_pages(pages);
}

}  // namespace vtensor
