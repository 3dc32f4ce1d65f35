#include "sim/step_log.hpp"

#include <fmt/format.h>

#include <cmath>

namespace vtensor::sim {

void step_log::on_step(const step_record& s) {
  const std::uint64_t created = s.chunks_created;
  ++step_count_;
  if (created != (creations_.empty() ? 0 : creations_.back().created)) creations_.push_back({s.index, created});
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
  e.memory = policy_.memory_view().memory;
  e.chunks_created = created;
  e.vmm_critical = s.vmm_critical;
  steps_.push_back(e);
}

namespace {

std::uint64_t chunks(std::uint64_t bytes) { return bytes / k_chunk_bytes; }

/// The first field of `y` that differs from `x`'s, as "step 12 (simulated 3400 us): mapped_chunks 40 vs 41".
std::optional<std::string> first_difference(const step_entry& x, const step_entry& y, bool with_free_pool) {
  const auto differ = [&](std::string_view field, auto u, auto v) -> std::optional<std::string> {
    if (u == v) return std::nullopt;
    return fmt::format("step {} (simulated {} us): {} {} vs {}", x.index, x.start, field, u, v);
  };
  const memory_stats& a = x.memory;
  const memory_stats& b = y.memory;
#define VTENSOR_COMPARE(name, u, v) \
  if (auto d = differ(name, u, v)) return d;
  VTENSOR_COMPARE("start", x.start, y.start)
  VTENSOR_COMPARE("duration_us", x.duration_us, y.duration_us)
  VTENSOR_COMPARE("decode_seqs", x.decode_seqs, y.decode_seqs)
  VTENSOR_COMPARE("prefill_seqs", x.prefill_seqs, y.prefill_seqs)
  VTENSOR_COMPARE("prefill_tokens", x.prefill_tokens, y.prefill_tokens)
  VTENSOR_COMPARE("admitted", x.admitted, y.admitted)
  VTENSOR_COMPARE("preempted", x.preempted, y.preempted)
  VTENSOR_COMPARE("running", x.running, y.running)
  VTENSOR_COMPARE("waiting", x.waiting, y.waiting)
  VTENSOR_COMPARE("mapped_chunks", chunks(a.mapped_bytes), chunks(b.mapped_bytes))
  VTENSOR_COMPARE("cached_chunks", chunks(a.cached_bytes), chunks(b.cached_bytes))
  VTENSOR_COMPARE("used_bytes", a.used_bytes, b.used_bytes)
  VTENSOR_COMPARE("logical_bytes", a.logical_bytes, b.logical_bytes)
  VTENSOR_COMPARE("internal_fragmentation", a.internal_fragmentation(), b.internal_fragmentation())
  VTENSOR_COMPARE("vmm_critical_ns", x.vmm_critical.count(), y.vmm_critical.count())
  if (with_free_pool) {
    VTENSOR_COMPARE("physical_chunks", chunks(a.physical_bytes), chunks(b.physical_bytes))
    VTENSOR_COMPARE("free_pool_chunks", chunks(a.free_pool_bytes), chunks(b.free_pool_bytes))
    VTENSOR_COMPARE("chunks_created", x.chunks_created, y.chunks_created)
  } else {
    VTENSOR_COMPARE("physical_chunks net of the free pool", chunks(a.physical_bytes) - chunks(a.free_pool_bytes),
                    chunks(b.physical_bytes) - chunks(b.free_pool_bytes))
  }
#undef VTENSOR_COMPARE
  return std::nullopt;
}

}  // namespace

std::optional<std::string> compare_step_logs(const std::vector<step_entry>& a, const std::vector<step_entry>& b,
                                             bool with_free_pool) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (auto d = first_difference(a[i], b[i], with_free_pool)) return d;
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
