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

void state_tracker::sample_until(time_us until) {
  if (!have_last_ || until <= last_.at || interval_ == 0) return;
  // Grid samples in [last_.at, until) see the last state.
  while (next_sample_ < until) {
    if (next_sample_ >= last_.at && on_sample_) {
      replica_state s = last_;
      s.at = next_sample_;
      on_sample_(s);
    }
    next_sample_ += interval_;
  }
}

void state_tracker::integrate(time_us until) {
  if (!have_last_ || until <= last_.at) return;
  sample_until(until);
  const auto dt = static_cast<double>(until - last_.at);
  total_us_ += dt;
  const memory_stats& m = last_.memory;
  if (m.mapped_bytes > 0) {
    mapped_us_ += dt;
    frag_ += dt * last_fragmentation_;
  }
  if (m.logical_bytes > 0) {
    live_us_ += dt;
    sharing_ += dt * last_sharing_;
  }
  physical_ += dt * static_cast<double>(m.physical_bytes);
  mapped_ += dt * static_cast<double>(m.mapped_bytes);
  used_ += dt * static_cast<double>(m.used_bytes);
  const memory_breakdown& b = last_.breakdown;
  breakdown_.used += dt * static_cast<double>(b.used);
  breakdown_.internal += dt * static_cast<double>(b.internal);
  breakdown_.reserved_idle += dt * static_cast<double>(b.reserved_idle);
  breakdown_.external += dt * static_cast<double>(b.external);
  breakdown_.cached += dt * static_cast<double>(b.cached);
  breakdown_.free += dt * static_cast<double>(b.free);
  breakdown_.cached_pinning += dt * static_cast<double>(b.cached_pinning);
  breakdown_.reclaimable += dt * static_cast<double>(b.reclaimable);
  running_ += dt * last_.running;
  waiting_ += dt * last_.waiting;
}

void state_tracker::observe(const replica_state& s) {
  if (!have_last_) next_sample_ = s.at;
  integrate(s.at);
  last_ = s;
  have_last_ = true;
  peak_.at = std::max(peak_.at, s.at);
  memory_stats& p = peak_.memory;
  const memory_stats& m = s.memory;
  p.physical_bytes = std::max(p.physical_bytes, m.physical_bytes);
  p.mapped_bytes = std::max(p.mapped_bytes, m.mapped_bytes);
  p.used_bytes = std::max(p.used_bytes, m.used_bytes);
  p.cached_bytes = std::max(p.cached_bytes, m.cached_bytes);
  p.free_pool_bytes = std::max(p.free_pool_bytes, m.free_pool_bytes);
  p.logical_bytes = std::max(p.logical_bytes, m.logical_bytes);
  last_fragmentation_ = m.internal_fragmentation();
  last_sharing_ = m.sharing_saving();
  peak_.internal_fragmentation = std::max(peak_.internal_fragmentation, last_fragmentation_);
  peak_.sharing_saving = std::max(peak_.sharing_saving, last_sharing_);
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

double state_tracker::mean_internal_fragmentation() const { return ratio_or_zero(frag_, mapped_us_); }
double state_tracker::mean_sharing_saving() const { return ratio_or_zero(sharing_, live_us_); }
double state_tracker::mean_physical_bytes() const { return ratio_or_zero(physical_, total_us_); }
double state_tracker::mean_mapped_bytes() const { return ratio_or_zero(mapped_, total_us_); }
double state_tracker::mean_used_bytes() const { return ratio_or_zero(used_, total_us_); }
double state_tracker::mean_running() const { return ratio_or_zero(running_, total_us_); }
double state_tracker::mean_waiting() const { return ratio_or_zero(waiting_, total_us_); }

memory_breakdown_means state_tracker::mean_breakdown() const {
  memory_breakdown_means m;
  m.used = ratio_or_zero(breakdown_.used, total_us_);
  m.internal = ratio_or_zero(breakdown_.internal, total_us_);
  m.reserved_idle = ratio_or_zero(breakdown_.reserved_idle, total_us_);
  m.external = ratio_or_zero(breakdown_.external, total_us_);
  m.cached = ratio_or_zero(breakdown_.cached, total_us_);
  m.free = ratio_or_zero(breakdown_.free, total_us_);
  m.cached_pinning = ratio_or_zero(breakdown_.cached_pinning, total_us_);
  m.reclaimable = ratio_or_zero(breakdown_.reclaimable, total_us_);
  return m;
}

}  // namespace vtensor::sim
