// The event engine: (time, sequence) order, cancel by flag, run_until, determinism.

#include <doctest/doctest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/event_queue.hpp"

using namespace vtensor::sim;

TEST_CASE("event_queue: events run in time order, ties in scheduling order") {
  event_queue q;
  std::vector<int> order;
  q.schedule_at(30, [&] { order.push_back(3); });
  q.schedule_at(10, [&] { order.push_back(1); });
  q.schedule_at(20, [&] { order.push_back(20); });
  q.schedule_at(20, [&] { order.push_back(21); });
  q.schedule_at(20, [&] { order.push_back(22); });
  CHECK(q.run() == 5);
  CHECK(order == std::vector<int>{1, 20, 21, 22, 3});
  CHECK(q.now() == 30);
  CHECK(q.empty());
}

TEST_CASE("event_queue: handlers schedule more events, including at the current time") {
  event_queue q;
  std::vector<std::pair<time_us, int>> seen;
  q.schedule_at(5, [&] {
    seen.emplace_back(q.now(), 1);
    q.schedule_in(0, [&] { seen.emplace_back(q.now(), 3); });
    q.schedule_in(7, [&] { seen.emplace_back(q.now(), 4); });
  });
  q.schedule_at(5, [&] { seen.emplace_back(q.now(), 2); });
  q.run();
  CHECK(seen == std::vector<std::pair<time_us, int>>{{5, 1}, {5, 2}, {5, 3}, {12, 4}});
  CHECK_THROWS_AS(q.schedule_at(11, [] {}), std::invalid_argument);
}

TEST_CASE("event_queue: cancel by flag drops the event - cancelling twice or after running is a no-op") {
  event_queue q;
  int ran = 0;
  const event_id a = q.schedule_at(1, [&] { ran += 1; });
  const event_id b = q.schedule_at(2, [&] { ran += 10; });
  q.cancel(b);
  q.cancel(b);
  CHECK(q.pending() == 2);
  CHECK(q.run() == 1);
  CHECK(ran == 1);
  CHECK(q.empty());
  q.cancel(a);  // already run
  // The freed slot is reused; the stale id must not cancel the new occupant.
  const event_id c = q.schedule_at(3, [&] { ran += 100; });
  CHECK(c.slot == b.slot);
  q.cancel(b);
  q.run();
  CHECK(ran == 101);
}

TEST_CASE("event_queue: run_until stops at the bound and resumes") {
  event_queue q;
  std::vector<time_us> at;
  for (time_us t : {5u, 10u, 15u, 20u}) q.schedule_at(t, [&, t] { at.push_back(t); });
  CHECK(q.run_until(10) == 2);
  CHECK(q.now() == 10);
  CHECK(q.run_until(12) == 0);
  CHECK(q.run() == 2);
  CHECK(at == std::vector<time_us>{5, 10, 15, 20});
}

TEST_CASE("event_queue: the same schedule replays identically") {
  const auto replay = [] {
    event_queue q;
    std::string log;
    // A little cascade: each event at t schedules two at t + (t % 3) with ties.
    std::function<void(int)> spawn = [&](int depth) {
      log += std::to_string(q.now()) + ":" + std::to_string(depth) + " ";
      if (depth < 6) {
        q.schedule_in(q.now() % 3, [&, depth] { spawn(depth + 1); });
        q.schedule_in(q.now() % 3, [&, depth] { spawn(depth + 2); });
      }
    };
    q.schedule_at(1, [&] { spawn(0); });
    q.schedule_at(1, [&] { spawn(1); });
    q.run();
    return log;
  };
  const std::string first = replay();
  CHECK(first.size() > 100);
  CHECK(replay() == first);
}
