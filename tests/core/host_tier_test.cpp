// The host-memory KV tier (core/host_tier.hpp, Note [Host tier]) against hand-worked sequences:
// what it keeps, what it evicts in each order, what a match reloads, and its refusals.

#include "core/host_tier.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

using vtensor::eviction_config;
using vtensor::host_block;
using vtensor::host_tier;

namespace {

// 16-token blocks of keys 1, 2, ... at offsets 0, 16, ...: one prompt's chain.
host_block block(std::uint64_t key) { return {key, 16, (key - 1) * 16}; }

eviction_config order(const char* name) {
  eviction_config c;
  c.name = name;
  return c;
}

}  // namespace

TEST_CASE("host tier: lru keeps what was matched and evicts the least recently used block for room") {
  host_tier t(48 * 1000, 1000, order("lru"));  // 48 tokens: three blocks
  CHECK(t.capacity_tokens() == 48);
  for (std::uint64_t k = 1; k <= 3; ++k) CHECK(t.offer(block(k)) == 16 * 1000);  // copied in: 16 KB each
  t.check_invariants();
  const std::vector<host_block> first = {block(1)};
  CHECK(t.match(first) == 16);  // block 1 is used: block 2 is now the least recent
  CHECK(t.offer(block(4)) == 16 * 1000);
  t.check_invariants();
  CHECK(!t.holds(2));
  CHECK(t.holds(1));
  CHECK(t.holds(3));
  CHECK(t.holds(4));
  CHECK(t.stats().evicted_tokens == 16);
  // A run stops at the first block missing: 1 is held, 2 is not, so 3 cannot be used.
  const std::vector<host_block> prompt = {block(1), block(2), block(3)};
  CHECK(t.match(prompt) == 16);
  CHECK(t.stats().hit_tokens == 32);
  // Offered again: held already, nothing copied; its recency moves (a refresh).
  CHECK(t.offer(block(3)) == 0);
  CHECK(t.offer(block(5)) == 16 * 1000);  // evicts 4: 1 and 3 were used since
  CHECK(!t.holds(4));
  CHECK(t.holds(1));
  CHECK(t.holds(3));
  t.check_invariants();
  CHECK(t.stats().stored_tokens == 5 * 16);
  CHECK(t.stats().offered_tokens == 6 * 16);
  CHECK(t.stats().held_tokens == 48);
  CHECK(t.stats().peak_held_tokens == 48);
}

TEST_CASE("host tier: fifo evicts in the order blocks came in, whatever was matched") {
  host_tier t(48 * 1000, 1000, order("fifo"));
  for (std::uint64_t k = 1; k <= 3; ++k) (void)t.offer(block(k));
  const std::vector<host_block> first = {block(1)};
  CHECK(t.match(first) == 16);
  (void)t.offer(block(4));
  CHECK(!t.holds(1));  // first in, first out
  CHECK(t.holds(2));
  t.check_invariants();
}

TEST_CASE("host tier: a block larger than the tier is not kept, and an unlimited tier never evicts") {
  host_tier small(48 * 1000, 1000, order("lru"));
  (void)small.offer(block(1));
  CHECK(small.offer({9, 64, 0}) == 0);
  CHECK(small.stats().rejected_tokens == 64);
  CHECK(small.holds(1));  // nothing was evicted for a block that cannot fit
  CHECK(!small.holds(9));
  small.check_invariants();

  host_tier all(host_tier::unlimited, 131072, order("lru"));
  for (std::uint64_t k = 1; k <= 1000; ++k) CHECK(all.offer(block(k)) == 16 * 131072);
  CHECK(all.stats().evicted_tokens == 0);
  CHECK(all.stats().held_tokens == 16000);
  all.check_invariants();
}

TEST_CASE("host tier: a zero rate, a block without a key or tokens, and an unknown order are refused") {
  CHECK_THROWS_AS(host_tier(1000, 0, order("lru")), std::invalid_argument);
  CHECK_THROWS_AS(host_tier(1000, 1, order("belady-ish")), std::invalid_argument);
  host_tier t(1000, 1, order("lru"));
  CHECK_THROWS_AS((void)t.offer({0, 16, 0}), std::invalid_argument);
  CHECK_THROWS_AS((void)t.offer({1, 0, 0}), std::invalid_argument);
}
