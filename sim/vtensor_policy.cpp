#include "sim/vtensor_policy.hpp"

#include <limits>

namespace vtensor::sim {

vtensor_policy::vtensor_policy(vtensor_policy_options options)
    : options_(std::move(options)),
      backend_(make_backend(options_.backend, options_.device)),
      manager_(std::make_unique<manager>(*backend_, options_.manager)) {}

vtensor_policy::~vtensor_policy() = default;

kv_admit_result vtensor_policy::do_admit(const kv_request& r) {
  const create_result c = manager_->create(r.id, r.blocks, r.prompt_tokens, r.max_tokens);
  if (!c.ok()) return {};
  return {true, c.hit_tokens, c.cow_bytes};
}

bool vtensor_policy::do_grow(request_id id, std::uint64_t tokens) {
  return manager_->extend(id, tokens) == alloc_status::ok;
}

void vtensor_policy::do_release(request_id id, release_reason why) {
  if (why == release_reason::finished) {
    manager_->finish(id);
  } else {
    manager_->preempt(id);
  }
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
  s.vmm = m.vmm;
  return s;
}

std::uint64_t vtensor_policy::do_vmm_time_ns() const { return backend_->counters().total_time_ns(); }

bool vtensor_policy::do_maps_ahead() const { return options_.manager.scheduler.lookahead_pages > 0; }

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
          {"partial", std::string(to_string(m.scheduler.partial))},
          {"eviction", m.eviction},
          {"record_on_preempt", m.scheduler.record_on_preempt}};
}

void vtensor_policy::do_check_invariants() const { manager_->check_invariants(); }

}  // namespace vtensor::sim
