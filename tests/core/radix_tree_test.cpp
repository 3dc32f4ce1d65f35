#include "core/radix_tree.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace vtensor;

namespace {

std::vector<token_block> blocks(std::initializer_list<std::uint64_t> keys, std::uint32_t tokens = 512) {
  std::vector<token_block> v;
  for (auto k : keys) v.push_back({k, tokens});
  return v;
}

page_version page(std::uint32_t index, std::uint64_t valid, std::uint64_t last_token, std::uint32_t chunk) {
  return page_version{index, valid, last_token, {chunk_id{chunk}}};
}

}  // namespace

TEST_CASE("rtree: insert, longest-prefix match and node split") {
  radix_tree t(make_eviction_order({}));
  auto p1 = t.insert(blocks({1, 2, 3, 4}));
  CHECK(p1.blocks == 4);
  CHECK(p1.tokens == 2048);
  CHECK(t.node_count() == 1);

  auto m = t.match(blocks({1, 2, 9}));
  CHECK(m.blocks == 2);
  CHECK(m.tokens == 1024);
  CHECK(m.nodes.size() == 1);  // matched inside the one edge

  // Diverging at block 2 splits the edge: [1,2] -> {[3,4], [7]}.
  auto p2 = t.insert(blocks({1, 2, 7}));
  CHECK(p2.blocks == 3);
  CHECK(t.node_count() == 3);
  CHECK(t.block_count() == 5);
  CHECK(p2.nodes.size() == 2);
  CHECK(p2.nodes[0]->edge.size() == 2);
  CHECK(p2.nodes[0]->end_tokens() == 1024);
  CHECK(p2.nodes[1]->start_tokens == 1024);
  t.check_invariants();

  CHECK(t.match(blocks({1, 2, 3, 4, 5})).blocks == 4);
  CHECK(t.match(blocks({1, 2, 7})).blocks == 3);
  CHECK(t.match(blocks({8})).blocks == 0);
  CHECK(t.match({}).blocks == 0);

  // A key ending inside an edge splits it too, so its path ends on a node boundary.
  auto p3 = t.insert(blocks({1, 2, 3}));
  CHECK(p3.deepest()->end_tokens() == 1536);
  CHECK(t.node_count() == 4);
  t.check_invariants();
}

TEST_CASE("rtree: match at block and at chunk granularity") {
  radix_tree t(make_eviction_order({}));
  // Last block partial (100 tokens): the match counts the shorter of the two lengths and stops.
  std::vector<token_block> key = blocks({1, 2, 3});
  key.back().tokens = 100;
  auto path = t.insert(key);
  CHECK(path.tokens == 1124);
  auto m = t.match(blocks({1, 2, 3, 4}));
  CHECK(m.blocks == 3);
  CHECK(m.tokens == 1124);

  // Pages hang on the node holding their last token; a split moves them up with their tokens.
  radix_node& leaf = *path.deepest();
  CHECK_FALSE(t.attach(leaf, page(0, 1u << 21, 1023, 10)).has_value());
  CHECK_FALSE(t.attach(leaf, page(1, 100 * 2048, 1123, 11)).has_value());
  CHECK_THROWS_AS((void)t.attach(leaf, page(2, 1, 5000, 12)), std::logic_error);
  CHECK(t.page_count() == 2);
  auto split_path = t.insert(blocks({1, 2, 5}));
  CHECK(split_path.nodes[0]->pages.size() == 1);  // page 0 ends at token 1023, inside [1, 2]
  CHECK(split_path.nodes[0]->pages[0].page == 0);
  CHECK(leaf.pages.size() == 1);
  CHECK(leaf.pages[0].page == 1);
  t.check_invariants();

  // A fuller version of a page at the same node replaces the shorter one, which is handed back.
  auto back = t.attach(leaf, page(1, 101 * 2048, 1123, 13));
  REQUIRE(back.has_value());
  CHECK(back->chunks[0] == chunk_id{11});
  auto same = t.attach(leaf, page(1, 50 * 2048, 1123, 14));
  REQUIRE(same.has_value());
  CHECK(same->chunks[0] == chunk_id{14});  // redundant: not attached
  CHECK(t.page_count() == 2);
}

TEST_CASE("rtree: pins protect paths - eviction takes unpinned leaves in LRU order") {
  radix_tree t(make_eviction_order({}));
  auto a = t.insert(blocks({1, 2}));
  auto b = t.insert(blocks({1, 3}));
  auto c = t.insert(blocks({4}));
  // Tree: [1] -> {[2], [3]}, [4]. Leaves 2, 3, 4 evictable; [1] is not a leaf.
  CHECK(t.evictable_count() == 3);
  CHECK_FALSE(t.attach(*a.deepest(), page(1, 1, 512, 20)).has_value());
  (void)t.match(blocks({1, 2}));  // touch a: most recent
  t.pin(*c.deepest());
  CHECK(t.evictable_count() == 2);
  t.check_invariants();

  auto first = t.evict_one();  // b: least recently used unpinned leaf
  REQUIRE(first.has_value());
  CHECK(first->empty());
  CHECK(t.match(blocks({1, 3})).blocks == 1);
  auto second = t.evict_one();  // a, with its page
  REQUIRE(second.has_value());
  REQUIRE(second->size() == 1);
  CHECK((*second)[0].chunks[0] == chunk_id{20});
  // [1] became a leaf and goes next; [4] is pinned.
  auto third = t.evict_one();
  REQUIRE(third.has_value());
  CHECK_FALSE(t.evict_one().has_value());
  CHECK(t.node_count() == 1);
  t.unpin(*c.deepest());
  CHECK(t.evictable_count() == 1);
  CHECK_THROWS_AS(t.unpin(*c.deepest()), std::logic_error);
  t.check_invariants();
  CHECK(t.clear().empty());
  CHECK(t.node_count() == 0);
}

TEST_CASE("rtree: eviction policies order leaves differently") {
  for (const char* name : {"lru", "fifo", "lfu"}) {
    CAPTURE(name);
    eviction_config config;
    config.name = name;
    radix_tree t(make_eviction_order(config));
    (void)t.insert(blocks({1}));
    (void)t.insert(blocks({2}));
    // Leaf 1 is used three times, after leaf 2 was created.
    for (int i = 0; i < 3; ++i) (void)t.match(blocks({1}));
    (void)t.match(blocks({2}));
    auto victim = t.evict_one();
    REQUIRE(victim.has_value());
    const bool one_left = t.match(blocks({1})).blocks == 1;
    // lru: 1 was used before 2's last use -> 1 goes. fifo: 1 is older -> 1 goes. lfu: 2 has fewer hits -> 2 goes.
    CHECK(one_left == (std::string(name) == "lfu"));
  }
  eviction_config random;
  random.name = "random";
  CHECK_THROWS_AS((void)make_eviction_order(random), std::invalid_argument);
}
