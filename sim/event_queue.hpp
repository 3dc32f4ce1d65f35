#pragma once
/// The discrete-event engine: an integer clock in microseconds and a queue of events ordered by
/// (time, sequence number), so events scheduled for the same instant run in the order they were
/// scheduled and a replay is identical run after run. Cancelling sets a flag; the event is
/// dropped when it reaches the head. Policy lives in the handlers, not here (ns-3's
/// DefaultSimulatorImpl, much reduced).

#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <vector>

namespace vtensor::sim {

/// Simulated time, microseconds from the start of the replay.
using time_us = std::uint64_t;

/// Names a scheduled event, for cancel().
struct event_id {
  std::uint64_t seq = 0;   ///< sequence number given at schedule time (0 = none)
  std::uint32_t slot = 0;  ///< where its handler and flag live while it is queued
  friend auto operator<=>(event_id, event_id) = default;
};

/// The event queue and the clock. Not thread-safe. Each queued event costs a 24-byte heap entry
/// and a slot holding its std::function and cancelled flag (slots are reused); schedule and the
/// pop in run_until() are O(log n), cancel is O(1).
class event_queue {
 public:
  using handler = std::function<void()>;

  /// Current simulated time: the time of the event being run, or of the last one run.
  [[nodiscard]] time_us now() const { return now_; }

  /// Schedules `fn` at absolute time `at` (>= now()). Throws std::invalid_argument for a time
  /// in the past.
  event_id schedule_at(time_us at, handler fn);
  /// Schedules `fn` `delay` microseconds from now().
  event_id schedule_in(time_us delay, handler fn) { return schedule_at(now_ + delay, std::move(fn)); }

  /// Marks event `id` cancelled; a no-op for an event already run, cancelled or unknown.
  void cancel(event_id id);

  /// Runs events in (time, sequence) order while the next one is at or before `until`, at most
  /// `max_events` of them; the clock stays at the last event run. Returns the events run.
  std::uint64_t run_until(time_us until, std::uint64_t max_events = std::numeric_limits<std::uint64_t>::max());
  /// Runs every event, including those scheduled by handlers, until the queue is empty.
  std::uint64_t run() { return run_until(std::numeric_limits<time_us>::max()); }

  /// When the next queued event is due (a cancelled one included); the largest time when none is.
  [[nodiscard]] time_us next_at() const { return heap_.empty() ? std::numeric_limits<time_us>::max() : heap_.top().at; }
  /// Events queued, cancelled ones included until they reach the head and are dropped.
  [[nodiscard]] std::size_t pending() const { return heap_.size(); }
  /// True when no uncancelled event is queued.
  [[nodiscard]] bool empty() const { return heap_.size() == cancelled_queued_; }

 private:
  struct entry {
    time_us at;          ///< when
    std::uint64_t seq;   ///< tie-breaker, increasing with each schedule
    std::uint32_t slot;  ///< index into slots_
  };
  struct later {
    bool operator()(const entry& a, const entry& b) const { return a.at != b.at ? a.at > b.at : a.seq > b.seq; }
  };
  struct slot {
    handler fn;              ///< what to run
    std::uint64_t seq = 0;   ///< the event occupying the slot (0 = free)
    bool cancelled = false;  ///< the flag cancel() sets
  };

  std::priority_queue<entry, std::vector<entry>, later> heap_;
  std::vector<slot> slots_;
  std::vector<std::uint32_t> free_slots_;
  std::size_t cancelled_queued_ = 0;
  time_us now_ = 0;
  std::uint64_t next_seq_ = 1;
};

}  // namespace vtensor::sim
