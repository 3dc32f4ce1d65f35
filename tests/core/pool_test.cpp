#include <doctest/doctest.h>

#include "core/pset.hpp"
#include "core/vset.hpp"

using namespace vtensor;

TEST_CASE("vset: ordered by address, lookup and node reuse") {
  vset vs;
  mapping& b = vs.insert(0x400000, chunk_id{2}, request_id{1}, false);
  mapping& a = vs.insert(0x200000, chunk_id{1}, request_id{1}, true);
  CHECK(vs.size() == 2);
  CHECK_THROWS_AS(vs.insert(0x200000, chunk_id{3}, request_id{2}, false), std::logic_error);
  CHECK(vs.size() == 2);
  std::vector<device_addr> order;
  vs.for_each([&](const mapping& m) { order.push_back(m.va); });
  CHECK(order == std::vector<device_addr>{0x200000, 0x400000});
  CHECK(vs.find(0x200000) == &a);
  CHECK(vs.find(0x300000) == nullptr);
  CHECK(vs.find_containing(0x3fffff, k_chunk_bytes) == &a);
  CHECK(vs.find_containing(0x400001, k_chunk_bytes) == &b);
  CHECK(vs.find_containing(0x100000, k_chunk_bytes) == nullptr);
  CHECK(vs.find_containing(0x600000, k_chunk_bytes) == nullptr);
  vs.erase(a);
  mapping& c = vs.insert(0x800000, chunk_id{5}, request_id{3}, false);
  CHECK(&c == &a);  // the recycled node
  CHECK(vs.size() == 2);
  vs.erase(b);
  vs.erase(c);
  CHECK(vs.size() == 0);
}

TEST_CASE("pset: references, free pool and slot reuse") {
  pset ps;
  const chunk_id a = ps.adopt(chunk_handle{11});
  const chunk_id b = ps.adopt(chunk_handle{12});
  CHECK(ps.live() == 2);
  CHECK(ps.free_count() == 0);
  CHECK(ps[a].state() == chunk_state::free);
  ps.add_ref(a);
  ps.add_ref(a);
  CHECK_FALSE(ps.drop_ref(a));
  CHECK(ps.drop_ref(a));  // last reference: to the free pool
  CHECK(ps.free_count() == 1);
  CHECK(ps[a].in_free_pool);
  CHECK(ps.in_use() == 1);  // b is neither free nor referenced: taken, not yet used
  ps.put_free(b);
  CHECK_THROWS_AS(ps.put_free(b), std::logic_error);
  CHECK(ps.take_free() == b);  // most recently freed first
  CHECK(ps.take_free() == a);
  CHECK_FALSE(ps.take_free().has_value());
  ps.put_free(a);
  CHECK(ps.forget(a).value == 11);
  CHECK(ps.live() == 1);
  CHECK(ps.free_count() == 0);
  const chunk_id c = ps.adopt(chunk_handle{13});
  CHECK(c == a);  // the emptied slot is reused
  ps.add_ref(b);
  CHECK_THROWS_AS(ps.forget(b), std::logic_error);
}
