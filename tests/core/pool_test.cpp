#include <doctest/doctest.h>

#include "core/pset.hpp"
#include "core/vset.hpp"

using namespace vtensor;

TEST_CASE("vset: ranges ordered by address, page lookup and node reuse") {
  vset vs;
  // Two ranges of 2 tensors x 2 pages (4 MiB a tensor): [0x10000000, +8 MiB) and [0x20000000, +8 MiB).
  mapped_range low, high;
  for (auto* r : {&low, &high}) {
    r->tensor_span_bytes = 2 * k_chunk_bytes;
    r->tensors = 2;
  }
  low.base = 0x10000000;
  high.base = 0x20000000;
  vs.insert(high);
  vs.insert(low);
  CHECK(vs.range_count() == 2);
  mapped_range overlapping;
  overlapping.base = 0x10600000;
  overlapping.tensor_span_bytes = 2 * k_chunk_bytes;
  overlapping.tensors = 2;
  CHECK_THROWS_AS(vs.insert(overlapping), std::logic_error);

  // low: page 0 of both tensors mapped; tensor 1 starts at base + 4 MiB.
  low.maps = {&vs.make(low.page_addr(0, 0, k_chunk_bytes), chunk_id{1}, request_id{1}, false),
              &vs.make(low.page_addr(1, 0, k_chunk_bytes), chunk_id{2}, request_id{1}, true)};
  low.mapped_pages = 1;
  CHECK(vs.size() == 2);
  CHECK(vs.find(0x10000000) == low.maps[0]);
  CHECK(vs.find(0x10400000) == low.maps[1]);
  CHECK(vs.find(0x10400001) == nullptr);  // not chunk-aligned
  CHECK(vs.find(0x10200000) == nullptr);  // page 1 of tensor 0: unmapped
  CHECK(vs.find_containing(0x105fffff, k_chunk_bytes) == low.maps[1]);
  CHECK(vs.find_containing(0x10800000, k_chunk_bytes) == nullptr);  // past the range
  CHECK(vs.find_containing(0x0fffffff, k_chunk_bytes) == nullptr);
  CHECK(vs.range_containing(0x20000000) == &high);
  CHECK(vs.range_containing(0x20800000) == nullptr);
  std::vector<device_addr> order;
  vs.for_each([&](const mapping& m) { order.push_back(m.va); });
  CHECK(order == std::vector<device_addr>{0x10000000, 0x10400000});

  mapping* last = low.maps[1];
  vs.recycle(*low.maps[0]);
  vs.recycle(*low.maps[1]);
  low.maps.clear();
  CHECK(vs.size() == 0);
  CHECK(&vs.make(0x20000000, chunk_id{5}, request_id{3}, false) == last);  // the last recycled node
  CHECK(vs.size() == 1);
  vs.erase(low);
  vs.erase(high);
  CHECK(vs.range_count() == 0);
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
