#include "sim/pool_policy.hpp"

#include <utility>

namespace vtensor::sim {

pool_policy::pool_policy(std::unique_ptr<device_pool> pool) : pool_(std::move(pool)) {}

pool_policy::~pool_policy() = default;

kv_stats pool_policy::unit_stats(const unit_memory& u) const {
  kv_stats s;
  memory_stats& m = s.memory;
  m.physical_bytes = pool_->physical_bytes();
  m.mapped_bytes = u.held * u.unit_bytes;
  m.used_bytes = u.used_bytes;
  m.cached_bytes = u.cached * u.unit_bytes;
  m.free_pool_bytes = u.free * u.unit_bytes;
  m.logical_bytes = u.logical_bytes;
  memory_breakdown& b = s.breakdown;
  b.used = m.used_bytes;
  b.internal = m.mapped_bytes - m.used_bytes;
  b.reserved_idle = m.physical_bytes - u.units * u.unit_bytes;
  b.cached = m.cached_bytes;
  b.free = m.free_pool_bytes;
  add_pool_figures(s);
  return s;
}

void pool_policy::add_pool_figures(kv_stats& s) const {
  s.memory.physical_bytes = pool_->physical_bytes();
  s.prompt_tokens = prompt_tokens_;
  s.prefix_hit_tokens = hit_tokens_;
  s.evictions = evictions_;
  s.chunks_created = do_chunks_created();
  s.vmm = pool_->backend().counters();
}

std::uint64_t pool_policy::do_chunks_created() const { return pool_->physical_bytes() / k_chunk_bytes; }

sim_ns pool_policy::do_vmm_time() const {
  return sim_ns{pool_->backend().step_side().total_model_ns() - pool_->startup_vmm_ns()};
}

std::optional<vmm_split_report> pool_policy::do_vmm_report() const {
  vmm_split_report r;
  r.step = pool_->backend().step_side();
  r.worker = pool_->backend().worker_side();
  r.critical_model_ns = do_vmm_time().count();
  r.chunks_created = do_chunks_created();
  return r;
}

}  // namespace vtensor::sim
