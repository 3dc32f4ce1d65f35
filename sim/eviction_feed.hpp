#pragma once
/// What a replay lets the eviction orders of its policy see (core/eviction_order.hpp): the clock,
/// which the replica advances (simulated seconds at each step, the trace index of each request
/// it admits), and, only when an order asks for it (offline), the trace's next uses, read from
/// the trace once. One feed per replay run: two runs of a comparison have two clocks.

#include <cstdint>
#include <functional>
#include <memory>

#include "core/eviction_order.hpp"
#include "sim/policy_options.hpp"
#include "sim/replay.hpp"
#include "traces/next_use_index.hpp"

namespace vtensor::sim {

/// The trace's next uses, built on first use by `fill` (which adds every request the replay
/// will read, in file order) and shared by every feed that holds it.
class shared_foresight {
 public:
  explicit shared_foresight(std::function<void(traces::next_use_index&)> fill) : fill_(std::move(fill)) {}
  /// The index, built now if it was not.
  [[nodiscard]] const next_use_oracle* get();

 private:
  std::function<void(traces::next_use_index&)> fill_;
  std::unique_ptr<traces::next_use_index> index_;
};

/// A replay run's clock and foresight.
class eviction_feed {
 public:
  /// `foresight` may be null (the offline order then refuses to be built); it must outlive the feed.
  explicit eviction_feed(shared_foresight* foresight) : foresight_(foresight) {}
  eviction_feed(const eviction_feed&) = delete;
  eviction_feed& operator=(const eviction_feed&) = delete;
  /// Points a policy's options at this feed's clock and foresight (before the policy is built).
  void attach(kv_policy_options& options);
  /// Points a replay at this feed's clock, which its replica advances.
  void attach(replay_config& config) { config.replica.order_clock = &clock_; }

 private:
  eviction_clock clock_;
  shared_foresight* foresight_;
};

}  // namespace vtensor::sim
