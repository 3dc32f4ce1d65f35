#pragma once
/// KV policies chosen at run time by name, from one set of options that each policy reads what
/// it understands of (as backends/registry does for backends).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backends/enum_names.hpp"
#include "core/kv_geometry.hpp"
#include "core/scheduler.hpp"
#include "sim/kv_policy.hpp"
#include "sim/vtensor_policy.hpp"

namespace vtensor::sim {

/// What a `static` request reserves (Orca / FasterTransformer style).
enum class static_reserve : std::uint8_t {
  max,    ///< the maximum context
  pow2,   ///< the next power of two of prompt + max output
  exact,  ///< prompt + output exactly (the vLLM paper's "oracle")
};
inline constexpr enum_names<static_reserve, 3> k_static_reserve_names{
    {{{static_reserve::max, "max"}, {static_reserve::pow2, "pow2"}, {static_reserve::exact, "exact"}}}};

/// The allocator of the `static` arena.
enum class arena_fit : std::uint8_t {
  first_fit,  ///< lowest-addressed free extent that fits
  buddy,      ///< binary buddy system over power-of-two blocks
};
inline constexpr enum_names<arena_fit, 2> k_arena_fit_names{
    {{{arena_fit::first_fit, "first-fit"}, {arena_fit::buddy, "buddy"}}}};

/// Everything any policy may need. Each policy reads what it understands.
struct kv_policy_options {
  model_spec kv;                              ///< KV shape on one GPU (kv heads divided by tp)
  std::uint64_t memory_bytes = 0;             ///< KV memory budget; UINT64_MAX for unlimited
  std::uint64_t max_context_tokens = 131072;  ///< longest request
  std::string backend = "sim";                ///< VMM backend name (vtensor)
  std::string calibration_file;               ///< sim backend latencies; empty: built-in H200
  bool zero_latency = false;                  ///< sim backend charges nothing
  kv_layout layout = kv_layout::kv_fused;     ///< vtensor tensor layout
  std::uint32_t lookahead_pages = 0;          ///< vtensor pages mapped ahead
  std::uint32_t lookahead_batch = 1;          ///< vtensor lookahead pages mapped at a time
  bool async_lookahead = true;            ///< vtensor: lookahead mapped by the worker thread (when lookahead_pages > 0)
  std::uint32_t create_ahead_chunks = 0;  ///< vtensor: the worker keeps this many chunks created (0: off)
  int device_index = 0;                   ///< cuda backend: which GPU
  std::string eviction = "lru";           ///< vtensor prefix-cache eviction policy
  partial_page_policy partial = partial_page_policy::cow;  ///< vtensor partial prefix page
  // Baseline policies (docs/policies.md).
  std::uint32_t block_tokens = 16;               ///< paged: tokens per KV block (vLLM's block_size)
  bool prefix_caching = true;                    ///< paged, radix: keep and share prefixes
  std::uint32_t page_tokens = 1;                 ///< radix: tokens per page of the token pool (SGLang's page_size)
  static_reserve reserve = static_reserve::max;  ///< static: what a request reserves
  arena_fit arena = arena_fit::first_fit;        ///< static: the arena's allocator
  bool megacache = false;                        ///< vattention: one buffer per K and V (all layers)
  /// Around every backend a policy builds (backend_config::wrap): tests inject faults with it.
  std::function<std::unique_ptr<vmm_backend>(std::unique_ptr<vmm_backend>)> wrap_backend;
};

/// The backend settings every policy builds its VMM backend with: capacity = the budget,
/// calibration, latency, device, the wrap.
[[nodiscard]] backend_config device_config(const kv_policy_options& options);

/// The vtensor policy's options for `options` (what make_kv_policy("vtensor", ...) builds).
[[nodiscard]] vtensor_policy_options vtensor_options(const kv_policy_options& options);

/// Builds policy `name`. Throws std::invalid_argument for an unknown name (the message lists
/// the known ones) or what the policy's constructor throws.
[[nodiscard]] std::unique_ptr<kv_policy> make_kv_policy(std::string_view name, const kv_policy_options& options);
/// Names of the policies, "vtensor" first.
[[nodiscard]] std::vector<std::string> kv_policy_names();

}  // namespace vtensor::sim
