#include "core/manager.hpp"

#include <algorithm>

#include <stdexcept>

#include <fmt/format.h>

namespace vtensor {

manager::manager(backend_views backends, manager_config config)
    : geometry_(config.geometry),
      scheduler_(backends, config.geometry, config.scheduler, make_eviction_order(config.eviction)) {}

manager::~manager() {
  try {
    shutdown();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
  }
}

// Note [Sampled expensive checks]
// In a build with expensive checks operations are followed by the whole invariant walk, whose cost
// grows with the state it walks (mappings, rTree nodes). Walking after every operation made a
// replay of a few hundred requests quadratic (a sanitizer run of the replay tests took over
// 1,500 s each). So the walk runs after every operation while the state is small (at most
// k_check_budget mappings and nodes), and after one operation in ceil(size / k_check_budget)
// beyond: the amortised cost per operation stays about k_check_budget, and every broken
// invariant that lasts is still found, at most a period late. Shutdown and explicit
// check_invariants() calls always walk. The walk does not settle first: it must not change what
// the worker does (Note [Checking with jobs in flight] in operations.cpp).
void manager::after_op() {
  ++generation_;
  check_sampled();
}

void manager::check_sampled() const {
#ifdef VTENSOR_EXPENSIVE_CHECKS
  constexpr std::uint64_t k_check_budget = 1024;  // 4,096 left the sanitizer replays at 25 min each
  const std::uint64_t size = scheduler_.ops().maps().records().size() + scheduler_.ops().cache().tree().node_count();
  const std::uint64_t period = std::max<std::uint64_t>(1, (size + k_check_budget - 1) / k_check_budget);
  if (++ops_since_check_ < period) return;
  ops_since_check_ = 0;
  scheduler_.check_invariants();
#endif
}

std::uint64_t manager::cached_tokens(std::span<const token_block> blocks, std::uint64_t prompt_tokens) const {
  const mutex_lock lock(mutex_);
  return scheduler_.cached_tokens(blocks, prompt_tokens);
}

create_result manager::create(request_id id, std::span<const token_block> blocks, std::uint64_t prompt_tokens,
                              std::uint64_t max_tokens) {
  const mutex_lock lock(mutex_);
  const vmm_gate::driver_scope driver(scheduler_.ops().gate());  // Note [Driver hand-over]
  auto r = scheduler_.create(id, blocks, prompt_tokens, max_tokens);
  after_op();
  return r;
}

extend_result manager::extend(request_id id, std::uint64_t tokens) {
  const mutex_lock lock(mutex_);
  const vmm_gate::driver_scope driver(scheduler_.ops().gate());  // Note [Driver hand-over]
  auto r = scheduler_.extend(id, tokens);
  after_op();
  return r;
}

std::size_t manager::extend_in_place(std::span<const request_id> ids, std::uint64_t tokens) {
  const mutex_lock lock(mutex_);  // no driver call: no driver hand-over (Note [Driver hand-over])
  std::size_t n = 0;
  while (n < ids.size() && scheduler_.grow_in_place(ids[n], tokens)) ++n;
  if (n > 0) after_op();
  return n;
}

round_lease manager::lease_rounds(std::span<const request_id> ids) {
  const mutex_lock lock(mutex_);
  round_lease lease;
  lease.generation_ = generation_;
  lease.rounds_ = scheduler_.in_place_rounds(ids);
  return lease;
}

memory_stats manager::grow_round(round_lease& lease, std::uint64_t* ahead_bytes) {
  const mutex_lock lock(mutex_);
  if (lease.generation_ != generation_ || lease.rounds_ == 0) {
    throw std::logic_error("manager::grow_round: the lease has no round left, or an operation came since");
  }
  --lease.rounds_;
  scheduler_.grow_round();
  check_sampled();
  if (ahead_bytes != nullptr) *ahead_bytes = scheduler_.ahead_bytes();
  return scheduler_.memory();
}

create_result manager::fork(request_id parent, request_id child) {
  const mutex_lock lock(mutex_);
  const vmm_gate::driver_scope driver(scheduler_.ops().gate());  // Note [Driver hand-over]
  auto r = scheduler_.fork(parent, child);
  after_op();
  return r;
}

op_effects manager::finish(request_id id, std::span<const token_block> extra_blocks) {
  const mutex_lock lock(mutex_);
  const vmm_gate::driver_scope driver(scheduler_.ops().gate());  // Note [Driver hand-over]
  const op_effects fx = scheduler_.finish(id, extra_blocks);
  after_op();
  return fx;
}

void manager::publish(request_id id, std::uint64_t tokens) {
  const mutex_lock lock(mutex_);
  scheduler_.publish(id, tokens);
  after_op();
}

op_effects manager::preempt(request_id id) {
  const mutex_lock lock(mutex_);
  const vmm_gate::driver_scope driver(scheduler_.ops().gate());  // Note [Driver hand-over]
  const op_effects fx = scheduler_.preempt(id);
  after_op();
  return fx;
}

std::optional<vtensor_view> manager::view(request_id id) const {
  const mutex_lock lock(mutex_);
  const vtensor_record* r = scheduler_.find(id);
  if (r == nullptr) return std::nullopt;
  return scheduler_.view(*r);
}

layer_addressing manager::layer(request_id id, std::uint32_t layer) const {
  const mutex_lock lock(mutex_);
  const vtensor_record* r = scheduler_.find(id);
  if (r == nullptr) throw std::invalid_argument(fmt::format("request {} is not live", id.value));
  layer_addressing a = geometry_.layer(layer, r->tensor_span_bytes);
  a.k_offset_bytes += r->base;
  a.v_offset_bytes += r->base;
  return a;
}

std::uint64_t manager::ahead_bytes() const {
  const mutex_lock lock(mutex_);
  return scheduler_.ahead_bytes();
}

std::uint32_t manager::standby_pages() const {
  const mutex_lock lock(mutex_);
  return scheduler_.standby_pages();
}

std::size_t manager::parked_count() const {
  const mutex_lock lock(mutex_);
  return scheduler_.parked_count();
}

manager_stats manager::stats() const {
  const mutex_lock lock(mutex_);
  const operations& ops = scheduler_.ops();
  manager_stats s;
  s.memory = scheduler_.memory();
  s.live_requests = scheduler_.live_requests();
  const scheduler_counters& sc = scheduler_.counters();
  s.prompt_tokens = sc.prompt_tokens;
  s.prefix_hit_tokens = sc.hit_tokens;
  s.recomputed_tokens = sc.recomputed_tokens;
  s.preemption_signals = sc.preemption_signals;
  s.preempted = sc.preempted;
  s.standby_adoptions = sc.standby_adoptions;
  s.standby_builds = sc.standby_builds;
  s.standby_drops = sc.standby_drops;
  s.standby_failures = sc.standby_failures;
  s.parked = sc.parked;
  s.parked_reuses = sc.parked_reuses;
  s.parked_drops = sc.parked_drops;
  const operation_counters c = ops.counters();
  s.cow_bytes = c.cow_bytes;
  s.evicted_nodes = c.evicted_nodes;
  s.tree_nodes = ops.cache().tree().node_count();
  s.tree_pages = ops.cache().tree().page_count();
  s.vmm = ops.gate().vmm_stats();
  const async_counters a = ops.gate().async_stats();
  s.async_vmm_ns = a.worker_vmm_ns;
  s.async_mapped_chunks = a.mapped_chunks;
  s.chunks_created_ahead = c.created_ahead;
  s.chunks_created = c.chunks_created;
  s.mapping_waits = a.waits;
  s.mapping_wait_ns = a.wait_ns;
  s.driver_lock_waits = c.lock_waits;
  s.driver_lock_wait_ns = c.lock_wait_ns;
  return s;
}

memory_stats manager::memory() const {
  const mutex_lock lock(mutex_);
  return scheduler_.memory();
}

vmm_counters manager::vmm() const {
  const mutex_lock lock(mutex_);
  return scheduler_.ops().gate().vmm_stats();
}

std::uint64_t manager::chunks_created() const {
  const mutex_lock lock(mutex_);
  return scheduler_.ops().pool().chunks_created();
}

std::size_t manager::trim() {
  const mutex_lock lock(mutex_);
  const vmm_gate::driver_scope driver(scheduler_.ops().gate());  // Note [Driver hand-over]
  return scheduler_.trim();
}

void manager::shutdown() {
  const mutex_lock lock(mutex_);
  const vmm_gate::driver_scope driver(scheduler_.ops().gate());  // Note [Driver hand-over]
  scheduler_.shutdown();
}

void manager::settle() {
  const mutex_lock lock(mutex_);
  scheduler_.settle();
}

void manager::check_invariants() const {
  const mutex_lock lock(mutex_);
  scheduler_.check_invariants();
}

void manager::set_device_copy(device_copy_fn fn) {
  const mutex_lock lock(mutex_);
  scheduler_.set_device_copy(std::move(fn));
}

}  // namespace vtensor
