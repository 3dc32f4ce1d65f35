#include "sim/metrics.hpp"

#include <algorithm>
#include <cmath>

namespace vtensor::sim {

latency_summary summarize_latencies(std::vector<std::uint64_t>& values_us) {
  latency_summary s;
  s.count = values_us.size();
  if (values_us.empty()) return s;
  std::sort(values_us.begin(), values_us.end());
  const auto rank = [&](double p) {
    const auto n = static_cast<double>(values_us.size());
    auto index = static_cast<std::size_t>(std::ceil(p * n));
    index = std::clamp<std::size_t>(index, 1, values_us.size());
    return static_cast<double>(values_us[index - 1]) / 1000.0;
  };
  s.p50 = rank(0.50);
  s.p90 = rank(0.90);
  s.p99 = rank(0.99);
  double sum = 0;
  for (const std::uint64_t v : values_us) sum += static_cast<double>(v);
  s.mean = sum / static_cast<double>(values_us.size()) / 1000.0;
  return s;
}

state_tracker::state_tracker(time_us interval, std::function<void(const replica_state&)> on_sample)
    : interval_(interval), on_sample_(std::move(on_sample)) {}

void state_tracker::integrate(time_us until) {
  if (!have_last_ || until <= last_.at) return;
  // Grid samples in [last_.at, until) see the last state.
  if (interval_ > 0) {
    while (next_sample_ < until) {
      if (next_sample_ >= last_.at && on_sample_) {
        replica_state s = last_;
        s.at = next_sample_;
        on_sample_(s);
      }
      next_sample_ += interval_;
    }
  }
  const auto dt = static_cast<double>(until - last_.at);
  total_us_ += dt;
  if (last_.mapped_bytes > 0) {
    mapped_us_ += dt;
    frag_ += dt * last_.internal_fragmentation;
  }
  if (last_.logical_bytes > 0) {
    live_us_ += dt;
    sharing_ += dt * last_.sharing_saving;
  }
  physical_ += dt * static_cast<double>(last_.physical_bytes);
  mapped_ += dt * static_cast<double>(last_.mapped_bytes);
  used_ += dt * static_cast<double>(last_.used_bytes);
  running_ += dt * last_.running;
  waiting_ += dt * last_.waiting;
}

void state_tracker::observe(const replica_state& s) {
  if (!have_last_) next_sample_ = s.at;
  integrate(s.at);
  last_ = s;
  have_last_ = true;
  peak_.at = std::max(peak_.at, s.at);
  peak_.physical_bytes = std::max(peak_.physical_bytes, s.physical_bytes);
  peak_.mapped_bytes = std::max(peak_.mapped_bytes, s.mapped_bytes);
  peak_.used_bytes = std::max(peak_.used_bytes, s.used_bytes);
  peak_.cached_bytes = std::max(peak_.cached_bytes, s.cached_bytes);
  peak_.logical_bytes = std::max(peak_.logical_bytes, s.logical_bytes);
  peak_.internal_fragmentation = std::max(peak_.internal_fragmentation, s.internal_fragmentation);
  peak_.sharing_saving = std::max(peak_.sharing_saving, s.sharing_saving);
  peak_.running = std::max(peak_.running, s.running);
  peak_.waiting = std::max(peak_.waiting, s.waiting);
}

void state_tracker::close(time_us end) {
  integrate(end);
  if (have_last_ && interval_ > 0 && on_sample_ && next_sample_ == end) {
    replica_state s = last_;
    s.at = end;
    on_sample_(s);
  }
  interval_ = 0;
  if (have_last_ && end > last_.at) last_.at = end;
}

namespace {
double ratio(double a, double b) { return b <= 0 ? 0.0 : a / b; }
}  // namespace

double state_tracker::mean_internal_fragmentation() const { return ratio(frag_, mapped_us_); }
double state_tracker::mean_sharing_saving() const { return ratio(sharing_, live_us_); }
double state_tracker::mean_physical_bytes() const { return ratio(physical_, total_us_); }
double state_tracker::mean_mapped_bytes() const { return ratio(mapped_, total_us_); }
double state_tracker::mean_used_bytes() const { return ratio(used_, total_us_); }
double state_tracker::mean_running() const { return ratio(running_, total_us_); }
double state_tracker::mean_waiting() const { return ratio(waiting_, total_us_); }

}  // namespace vtensor::sim
