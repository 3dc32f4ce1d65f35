#include "sim/policy_registry.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "sim/paged_policy.hpp"
#include "sim/radix_policy.hpp"
#include "sim/static_policy.hpp"
#include "sim/vattention_policy.hpp"
#include "sim/vtensor_policy.hpp"

namespace vtensor::sim {

backend_config device_config(const kv_policy_options& o) {
  backend_config c;
  c.capacity_bytes = o.memory_bytes;
  c.calibration_file = o.calibration_file;
  c.zero_latency = o.zero_latency;
  c.device_index = o.device_index;
  c.wrap = o.wrap_backend;
  return c;
}

vtensor_policy_options vtensor_options(const kv_policy_options& o) {
  vtensor_policy_options v;
  v.backend = o.backend;
  v.device = device_config(o);
  v.manager.geometry = kv_geometry(o.kv, o.layout);
  v.manager.scheduler.max_context_tokens = o.max_context_tokens;
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
  if (name == "radix") return std::make_unique<radix_policy>(o);
  if (name == "static") return std::make_unique<static_policy>(o);
  if (name == "vattention") return std::make_unique<vattention_policy>(vattention_options(o));
  throw std::invalid_argument(fmt::format("unknown policy '{}' (known: {})", name, fmt::join(kv_policy_names(), ", ")));
}

std::vector<std::string> kv_policy_names() { return {"vtensor", "paged", "radix", "static", "vattention"}; }

}  // namespace vtensor::sim
