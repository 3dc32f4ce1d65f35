#include "sim/event_queue.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace vtensor::sim {

event_id event_queue::schedule_at(time_us at, handler fn) {
  if (at < now_) {
    throw std::invalid_argument(fmt::format("event scheduled at {} us, before the current time {} us", at, now_));
  }
  std::uint32_t index = 0;
  if (free_slots_.empty()) {
    index = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    index = free_slots_.back();
    free_slots_.pop_back();
  }
  const std::uint64_t seq = next_seq_++;
  slot& s = slots_[index];
  s.fn = std::move(fn);
  s.seq = seq;
  s.cancelled = false;
  heap_.push(entry{at, seq, index});
  return event_id{seq, index};
}

void event_queue::cancel(event_id id) {
  if (id.seq == 0 || id.slot >= slots_.size()) return;
  slot& s = slots_[id.slot];
  if (s.seq != id.seq || s.cancelled) return;
  s.cancelled = true;
  ++cancelled_queued_;
}

std::uint64_t event_queue::run_until(time_us until, std::uint64_t max_events) {
  std::uint64_t ran = 0;
  while (ran < max_events && !heap_.empty() && heap_.top().at <= until) {
    const entry e = heap_.top();
    heap_.pop();
    slot& s = slots_[e.slot];
    handler fn = std::move(s.fn);
    const bool cancelled = s.cancelled;
    s.fn = nullptr;
    s.seq = 0;
    s.cancelled = false;
    free_slots_.push_back(e.slot);
    if (cancelled) {
      --cancelled_queued_;
      continue;
    }
    now_ = e.at;
    ++ran;
    fn();
  }
  return ran;
}

}  // namespace vtensor::sim
