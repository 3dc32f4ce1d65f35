#include "core/vmm_gate.hpp"

#include <iterator>
#include <stdexcept>

namespace vtensor {

vmm_gate::~vmm_gate() = default;

void vmm_gate::enable_async(bool inline_jobs) {
  if (mapper_) return;
  const mutex_lock lock(backend_mutex_);  // passing the backend on counts as using it (free: no worker yet)
  mapper_ = std::make_unique<async_mapper>(worker_backend_, backend_mutex_, inline_jobs);
}

std::uint64_t vmm_gate::submit(mapping_job job) {
  if (job.empty()) return 0;
  if (!mapper_) throw std::logic_error("operations: deferred mapping without the async worker");
  return mapper_->submit(std::move(job));
}

void vmm_gate::wait(std::uint64_t ticket, bool step_wait) {
  if (mapper_ && ticket != 0) mapper_->wait(ticket, step_wait);
}

void vmm_gate::drain() const {
  if (mapper_) mapper_->drain();
}

void vmm_gate::run_now(const mapping_job& job) {
  vmm([&](vmm_backend& b) { run_mapping_job(b, job); });
}

std::size_t vmm_gate::retry_failed() {
  if (!mapper_) return 0;
  std::vector<failed_job> failed = mapper_->take_failed();
  for (std::size_t i = 0; i < failed.size(); ++i) {
    try {
      run_now(failed[i].job);
    } catch (...) {
      mapper_->restore_failed(std::vector<failed_job>(std::make_move_iterator(failed.begin() + std::ptrdiff_t(i)),
                                                      std::make_move_iterator(failed.end())));
      throw;
    }
  }
  return failed.size();
}

async_counters vmm_gate::async_stats() const { return mapper_ ? mapper_->counters() : async_counters{}; }

vmm_counters vmm_gate::vmm_stats() const {
  const mutex_lock lock(backend_mutex_);
  vmm_counters c = backend_.counters();
  if (one_view_) return c;
  const vmm_counters& w = worker_backend_.counters();
  for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
    c.calls[k] += w.calls[k];
    c.time_ns[k] += w.time_ns[k];
  }
  return c;
}

std::optional<vmm_gate::idle_backend> vmm_gate::backend_if_idle() const {
  if (mapper_ && !mapper_->idle_created()) return std::nullopt;  // a job in flight: do not wait for the lock
  const mutex_lock lock(backend_mutex_);
  const std::size_t unadopted = mapper_ ? mapper_->idle_created().value_or(0) : 0;
  return idle_backend{backend_.live(), unadopted, mapper_ ? mapper_->unmapped_failed() : 0};
}

}  // namespace vtensor
