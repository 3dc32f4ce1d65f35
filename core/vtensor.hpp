#pragma once
/// A vTensor: one request's KV cache, a contiguous virtual range holding `tensors` tensors of
/// `tensor_span_bytes` each, backed page by page by chunks (Note [Pages] in kv_geometry.hpp).

#include <cstdint>
#include <vector>

#include "backends/vmm_backend.hpp"
#include "core/ids.hpp"
#include "core/kv_geometry.hpp"
#include "core/vset.hpp"

namespace vtensor {

struct radix_node;

/// The scheduler's record of a live request.
/// Its range and page table (`base`, `tensor_span_bytes`, `tensors`, `mapped_pages`, `maps`)
/// are the mapped_range the vSet orders.
struct vtensor_record : mapped_range {
  request_id id;                     ///< the caller's name for it
  std::uint64_t max_tokens = 0;      ///< tokens it may grow to
  std::uint64_t tokens = 0;          ///< tokens holding valid KV
  std::uint32_t shared_pages = 0;    ///< leading pages mapped shared (immutable prefix)
  std::uint32_t ready_pages = 0;     ///< leading pages whose driver mappings are surely done
  std::uint64_t ticket = 0;          ///< the worker's last job for this request (0: none)
  std::vector<token_block> blocks;   ///< prefix identity of its leading tokens
  radix_node* pinned = nullptr;      ///< rTree node it pins (its path's pages back its prefix)
  std::uint32_t recorded_pages = 0;  ///< leading whole pages known to be in the rTree (Note [Incremental publication])
  std::uint64_t hit_tokens = 0;      ///< prompt tokens served from cache at create
  std::uint64_t cow_bytes = 0;       ///< bytes copied at create (partial prefix page)
};

/// What a caller sees of a vTensor: plain device pointers.
struct vtensor_view {
  request_id id;                        ///< the request
  device_addr base = 0;                 ///< start of the vTensor (tensor 0)
  std::uint64_t tensor_span_bytes = 0;  ///< distance between consecutive tensors
  std::uint32_t tensors = 0;            ///< tensors in the vTensor
  std::uint64_t tokens = 0;             ///< tokens holding valid KV
  std::uint64_t mapped_tokens = 0;      ///< tokens the mapped pages can hold (writable without a VMM call)
  std::uint64_t max_tokens = 0;         ///< tokens reserved
  std::uint64_t hit_tokens = 0;         ///< prompt tokens that came from the prefix cache
  /// Base address of tensor `t`.
  [[nodiscard]] device_addr tensor(std::uint32_t t) const { return base + t * tensor_span_bytes; }
};

}  // namespace vtensor
