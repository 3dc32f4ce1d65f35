#include "sim/vtensor_policy.hpp"

#include <algorithm>
#include <limits>

namespace vtensor::sim {
namespace {

std::unique_ptr<vmm_backend> make_accounted(const vtensor_policy_options& o) {
  return std::make_unique<accounting_backend>(make_backend(o.backend, o.device), latency_model_for(o.device));
}

bool runs_worker(const scheduler_config& s) { return s.async_lookahead || s.create_ahead_chunks > 0; }

}  // namespace

vtensor_policy::vtensor_policy(vtensor_policy_options options)
    : options_(std::move(options)),
      backend_owner_(make_accounted(options_)),
      backend_(static_cast<accounting_backend*>(backend_owner_.get())),
      manager_(std::make_unique<manager>(*backend_owner_, options_.manager)) {}

vtensor_policy::~vtensor_policy() = default;

std::uint64_t vtensor_policy::step_model_ns() const {
  const vmm_side& s = backend_->step_side();
  std::uint64_t ns = s.total_model_ns();
  if (options_.manager.scheduler.create_ahead_chunks > 0) ns -= s.model_ns[static_cast<std::size_t>(vmm_call::create)];
  return ns;
}

void vtensor_policy::book_step_calls() {
  const std::uint64_t now = step_model_ns();
  critical_ns_ += now - booked_model_ns_;
  booked_model_ns_ = now;
}

void vtensor_policy::wait_for(const request_model& m, std::uint64_t t) {
  if (m.done_ns <= t) return;
  ++waits_;
  wait_ns_ += m.done_ns - t;
  critical_ns_ += m.done_ns - t;
}

void vtensor_policy::submit(request_model& m, std::uint32_t pages) {
  const std::uint64_t chunks = std::uint64_t{pages} * manager_->geometry().tensors();
  const std::uint64_t price = backend_->price_ns(vmm_call::map, chunks) + backend_->price_ns(vmm_call::set_access, chunks);
  worker_free_ns_ = std::max(worker_free_ns_, now_ns()) + price;
  m.done_ns = worker_free_ns_;
  ++jobs_;
  job_model_ns_ += price;
}

std::uint32_t vtensor_policy::mapped_pages(request_id id) const {
  const auto v = manager_->view(id);
  return v ? static_cast<std::uint32_t>(manager_->geometry().pages_for_tokens(v->mapped_tokens)) : 0;
}

void vtensor_policy::do_advance_to(std::uint64_t now_us) {
  const std::uint64_t ns = now_us * 1000;
  if (ns <= origin_ns_) return;
  origin_ns_ = ns;
  critical_at_origin_ = critical_ns_;
}

kv_admit_result vtensor_policy::do_admit(const kv_request& r) {
  const create_result c = manager_->create(r.id, r.blocks, r.prompt_tokens, r.max_tokens);
  book_step_calls();
  if (!c.ok()) return {};
  if (runs_worker(options_.manager.scheduler)) {
    // The prompt's pages are mapped now; lookahead pages went to the worker.
    request_model m;
    const auto needed = static_cast<std::uint32_t>(manager_->geometry().pages_for_tokens(r.prompt_tokens));
    m.ready_pages = needed;
    m.mapped_pages = mapped_pages(r.id);
    if (m.mapped_pages > needed) submit(m, m.mapped_pages - needed);
    requests_[r.id.value] = m;
  }
  return {true, c.hit_tokens, c.cow_bytes};
}

bool vtensor_policy::do_grow(request_id id, std::uint64_t tokens) {
  const std::uint64_t start_ns = now_ns();
  const std::uint64_t critical_before = critical_ns_;
  const bool ok = manager_->extend(id, tokens) == alloc_status::ok;
  book_step_calls();
  if (!ok || !runs_worker(options_.manager.scheduler)) return ok;
  // The core's extend: pages needed past the queued ones are mapped now; a needed page that is
  // queued but not known to be in place makes it wait for the request's last job; then the
  // lookahead top-up goes to the worker (scheduler::extend).
  request_model& m = requests_.at(id.value);
  const auto v = manager_->view(id);
  const auto needed = static_cast<std::uint32_t>(manager_->geometry().pages_for_tokens(v->tokens));
  const std::uint32_t before = m.mapped_pages;
  const std::uint32_t now_mapped = std::max(before, needed);
  if (m.ready_pages == before) m.ready_pages = now_mapped;
  if (needed > m.ready_pages) {
    // The wait comes before the top-up's chunk allocation, after the pages mapped now (if any).
    wait_for(m, needed > before ? start_ns + (critical_ns_ - critical_before) : start_ns);
    m.ready_pages = now_mapped;
  }
  m.mapped_pages = static_cast<std::uint32_t>(manager_->geometry().pages_for_tokens(v->mapped_tokens));
  if (m.mapped_pages > now_mapped) submit(m, m.mapped_pages - now_mapped);
  return true;
}

void vtensor_policy::do_release(request_id id, release_reason why) {
  if (const auto it = requests_.find(id.value); it != requests_.end()) {
    wait_for(it->second, now_ns());  // the core waits for deferred mappings before it unmaps
    requests_.erase(it);
  }
  if (why == release_reason::finished) {
    manager_->finish(id);
  } else {
    manager_->preempt(id);
  }
  book_step_calls();
}

kv_stats vtensor_policy::do_stats() const {
  const manager_stats m = manager_->stats();
  kv_stats s;
  s.physical_bytes = m.physical_bytes;
  s.mapped_bytes = m.mapped_bytes;
  s.used_bytes = m.used_bytes;
  s.cached_bytes = m.cached_bytes;
  s.logical_bytes = m.logical_bytes;
  s.prompt_tokens = m.prompt_tokens;
  s.prefix_hit_tokens = m.prefix_hit_tokens;
  s.cow_bytes = m.cow_bytes;
  s.evictions = m.evicted_nodes;
  s.free_pool_bytes = m.free_pool_bytes;
  s.chunks_created = m.chunks_created;
  s.vmm = m.vmm;
  return s;
}

std::uint64_t vtensor_policy::do_vmm_time_ns() const { return backend_->step_side().total_model_ns() + job_model_ns_; }

bool vtensor_policy::do_maps_ahead() const { return options_.manager.scheduler.lookahead_pages > 0; }

vtensor_vmm_report vtensor_policy::report() const {
  vtensor_vmm_report r;
  r.step = backend_->step_side();
  r.worker = backend_->worker_side();
  r.critical_model_ns = critical_ns_;
  r.jobs = jobs_;
  r.job_model_ns = job_model_ns_;
  r.modelled_waits = waits_;
  r.modelled_wait_ns = wait_ns_;
  const manager_stats m = manager_->stats();
  r.mapping_waits = m.mapping_waits;
  r.mapping_wait_ns = m.mapping_wait_ns;
  r.async_vmm_ns = m.async_vmm_ns;
  r.chunks_created = m.chunks_created;
  r.chunks_created_ahead = m.chunks_created_ahead;
  return r;
}

nlohmann::ordered_json vtensor_policy::do_describe() const {
  const auto& m = options_.manager;
  const std::uint64_t capacity = options_.device.capacity_bytes;
  return {{"backend", options_.backend},
          {"memory_bytes", capacity == std::numeric_limits<std::uint64_t>::max() ? nlohmann::ordered_json("unlimited")
                                                                                  : nlohmann::ordered_json(capacity)},
          {"calibration", options_.device.zero_latency        ? "zero"
                          : options_.device.calibration_file.empty() ? "built-in h200"
                                                                     : options_.device.calibration_file},
          {"layout", std::string(to_string(m.geometry.layout()))},
          {"tokens_per_chunk", m.geometry.tokens_per_chunk()},
          {"tensors", m.geometry.tensors()},
          {"kv_bytes_per_token", m.geometry.bytes_per_token()},
          {"max_context_tokens", m.scheduler.max_context_tokens},
          {"lookahead_pages", m.scheduler.lookahead_pages},
          {"lookahead_batch", m.scheduler.lookahead_batch},
          {"async_lookahead", runs_worker(m.scheduler)},
          {"create_ahead_chunks", m.scheduler.create_ahead_chunks},
          {"partial", std::string(to_string(m.scheduler.partial))},
          {"eviction", m.eviction},
          {"record_on_preempt", m.scheduler.record_on_preempt}};
}

void vtensor_policy::do_check_invariants() const { manager_->check_invariants(); }

}  // namespace vtensor::sim
