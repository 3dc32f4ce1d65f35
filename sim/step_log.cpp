#include "sim/step_log.hpp"

#include <fmt/format.h>

#include <cmath>

namespace vtensor::sim {

void step_log::on_step(const step_record& s) {
  const kv_stats m = policy_.stats();
  ++step_count_;
  if (m.chunks_created != (creations_.empty() ? 0 : creations_.back().created)) {
    creations_.push_back({s.index, m.chunks_created});
  }
  if (!keep_steps_) return;
  step_entry e;
  e.index = s.index;
  e.start = s.start;
  e.duration_us = s.duration_us;
  e.decode_seqs = s.decode_seqs;
  e.prefill_seqs = s.prefill_seqs;
  e.prefill_tokens = s.prefill_tokens;
  e.admitted = s.admitted;
  e.preempted = s.preempted;
  e.running = s.running;
  e.waiting = s.waiting;
  e.physical_chunks = m.physical_bytes / k_chunk_bytes;
  e.mapped_chunks = m.mapped_bytes / k_chunk_bytes;
  e.cached_chunks = m.cached_bytes / k_chunk_bytes;
  e.free_pool_chunks = m.free_pool_bytes / k_chunk_bytes;
  e.used_bytes = m.used_bytes;
  e.logical_bytes = m.logical_bytes;
  e.internal_fragmentation = m.internal_fragmentation();
  e.chunks_created = m.chunks_created;
  e.vmm_critical_ns = s.vmm_critical_ns;
  steps_.push_back(e);
}

std::optional<std::string> compare_step_logs(const std::vector<step_entry>& a, const std::vector<step_entry>& b,
                                             bool with_free_pool) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const step_entry& x = a[i];
    const step_entry& y = b[i];
    const auto differ = [&](std::string_view field, auto u, auto v) -> std::optional<std::string> {
      if (u == v) return std::nullopt;
      return fmt::format("step {} (simulated {} us): {} {} vs {}", x.index, x.start, field, u, v);
    };
#define VTENSOR_COMPARE(field) \
  if (auto d = differ(#field, x.field, y.field)) return d;
    VTENSOR_COMPARE(start)
    VTENSOR_COMPARE(duration_us)
    VTENSOR_COMPARE(decode_seqs)
    VTENSOR_COMPARE(prefill_seqs)
    VTENSOR_COMPARE(prefill_tokens)
    VTENSOR_COMPARE(admitted)
    VTENSOR_COMPARE(preempted)
    VTENSOR_COMPARE(running)
    VTENSOR_COMPARE(waiting)
    VTENSOR_COMPARE(mapped_chunks)
    VTENSOR_COMPARE(cached_chunks)
    VTENSOR_COMPARE(used_bytes)
    VTENSOR_COMPARE(logical_bytes)
    VTENSOR_COMPARE(internal_fragmentation)
    VTENSOR_COMPARE(vmm_critical_ns)
    if (with_free_pool) {
      VTENSOR_COMPARE(physical_chunks)
      VTENSOR_COMPARE(free_pool_chunks)
      VTENSOR_COMPARE(chunks_created)
    } else if (auto d = differ("physical_chunks net of the free pool", x.physical_chunks - x.free_pool_chunks,
                               y.physical_chunks - y.free_pool_chunks)) {
      return d;
    }
#undef VTENSOR_COMPARE
  }
  if (a.size() != b.size()) return fmt::format("step counts differ: {} vs {}", a.size(), b.size());
  return std::nullopt;
}

creation_after_warmup step_log::creation(double warmup_fraction) const {
  creation_after_warmup c;
  c.steps = step_count_;
  if (step_count_ == 0) return c;
  c.warmup_steps = std::min<std::uint64_t>(
      c.steps, static_cast<std::uint64_t>(std::ceil(std::max(0.0, warmup_fraction) * static_cast<double>(c.steps))));
  c.creates_total = creations_.empty() ? 0 : creations_.back().created;
  std::uint64_t at_warmup = 0;  // created by the end of the warm-up's last step
  for (const creation_point& p : creations_) {
    if (p.step >= c.warmup_steps) break;
    at_warmup = p.created;
  }
  c.creates_after = c.creates_total - at_warmup;
  c.last_create_step = creations_.empty() ? 0 : creations_.back().step;
  return c;
}

}  // namespace vtensor::sim
