#include "sim/policy_registry.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "sim/paged_policy.hpp"
#include "sim/vtensor_policy.hpp"

namespace vtensor::sim {

vtensor_policy_options vtensor_options(const kv_policy_options& o) {
  vtensor_policy_options v;
  v.backend = o.backend;
  v.device.capacity_bytes = o.memory_bytes;
  v.device.calibration_file = o.calibration_file;
  v.device.zero_latency = o.zero_latency;
  v.manager.geometry = kv_geometry(o.kv, o.layout);
  v.manager.scheduler.max_context_tokens = o.max_context_tokens;
  v.device.device_index = o.device_index;
  v.manager.scheduler.lookahead_pages = o.lookahead_pages;
  v.manager.scheduler.lookahead_batch = o.lookahead_batch;
  v.manager.scheduler.async_lookahead = o.lookahead_pages > 0 && o.async_lookahead;
  v.manager.scheduler.create_ahead_chunks = o.create_ahead_chunks;
  v.manager.scheduler.partial = o.partial;
  v.manager.eviction = o.eviction;
  return v;
}

std::unique_ptr<kv_policy> make_kv_policy(std::string_view name, const kv_policy_options& o) {
  if (name == "vtensor") return std::make_unique<vtensor_policy>(vtensor_options(o));
  if (name == "paged") return std::make_unique<paged_policy>(o);
  throw std::invalid_argument(fmt::format("unknown policy '{}' (known: {})", name, fmt::join(kv_policy_names(), ", ")));
}

std::vector<std::string> kv_policy_names() { return {"vtensor", "paged"}; }

}  // namespace vtensor::sim
