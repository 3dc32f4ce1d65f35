#include "core/operations.hpp"

#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>

namespace vtensor {

// Note [Copy-on-write of a partial prefix page]
// A cached prefix may end inside a page: the page's chunks are valid only up to some byte. A new
// request that reuses that prefix cannot map those chunks, because it would write its own tokens
// after the valid bytes, into memory that the cache (and maybe other requests) still read. It
// either recomputes the partial page's tokens (policy `recompute`: the hit stops at the last
// whole shared page) or takes fresh chunks and copies the valid bytes into them (policy `cow`).
// The source chunk of a copy may be mapped nowhere (a cached page): on a GPU it must be mapped to
// be read, so the copy maps it at a scratch address, sets access, copies and unmaps. Those VMM
// calls are charged on the simulated device too, so that simulated time shows what a copy costs.

operations::operations(backend_views backends, const kv_geometry& geometry, std::uint64_t vtensor_bytes,
                       std::unique_ptr<eviction_order> eviction, std::size_t range_cache)
    : gate_(backends),
      geometry_(geometry),
      pool_(gate_, backends.step.capacity_chunks()),
      ranges_(gate_, vtensor_bytes, geometry_.chunk_bytes(), range_cache),
      maps_(gate_, pool_.records(), geometry_.chunk_bytes()),
      cache_(pool_.records(), std::move(eviction)) {
  const vmm_backend& backend = backends.step;
  if (backend.granularity_bytes() != geometry_.chunk_bytes()) {
    throw std::invalid_argument(fmt::format("backend '{}' maps in {} byte units; vtensor needs {}", backend.name(),
                                            backend.granularity_bytes(), geometry_.chunk_bytes()));
  }
}

operations::~operations() = default;

void operations::copy_prefix(device_addr dst, chunk_id src, std::uint64_t bytes) {
  cow_bytes_ += bytes;
  const chunk_record& r = pool_.records()[src];
  if (r.mappings != 0) {  // another request maps it: copy from there (Note [Mappings counted, not listed])
    if (copy_) {
      const mapping* from = maps_.records().any_mapping_of(src);
      if (from == nullptr) throw std::logic_error(fmt::format("chunk {} counts mappings the vSet lacks", src.value));
      copy_(dst, from->va, bytes);
    }
    return;
  }
  gate_.locked([&](vmm_backend& b) {
    const device_addr scratch = ranges_.scratch(b);
    b.map_with_access(scratch, r.handle);
    try {
      if (copy_) copy_(dst, scratch, bytes);
    } catch (...) {
      b.unmap(scratch, geometry_.chunk_bytes());
      throw;
    }
    b.unmap(scratch, geometry_.chunk_bytes());
  });
}

std::size_t operations::trim() {
  gate_.drain();
  pool_.adopt_created();
  return gate_.locked([&](vmm_backend& b) {
    const std::size_t released = pool_.release_free(b);
    ranges_.release(b);
    return released;
  });
}

void operations::drop_cache_and_trim() {
  cache_.clear();
  trim();
}

namespace {
[[noreturn]] void fail(const std::string& why) { throw std::logic_error("pool invariant: " + why); }
}  // namespace

void operations::check_invariants() const {
  const radix_tree& tree = cache_.tree();
  const pset& chunk_set = pool_.records();
  const vset& map_set = maps_.records();
  tree.check_invariants();
  std::unordered_map<std::uint32_t, std::uint32_t> tree_refs;
  tree.for_each_page([&](const radix_node&, const page_version& v) {
    if (v.chunks.size() != geometry_.tensors()) fail(fmt::format("page {} has {} chunks", v.page, v.chunks.size()));
    for (chunk_id c : v.chunks) ++tree_refs[c.value];
  });
  // Each chunk's mappings, recounted from the vSet (Note [Mappings counted, not listed]).
  struct listed {
    std::uint32_t all = 0, shared = 0;
    const mapping* writer = nullptr;  // a mapping that is not shared
  };
  std::unordered_map<std::uint32_t, listed> by_chunk;
  map_set.for_each([&](const mapping& m) {
    listed& l = by_chunk[m.chunk.value];
    ++l.all;
    if (m.shared) {
      ++l.shared;
    } else {
      l.writer = &m;
    }
  });
  std::uint64_t mapped = 0, shared = 0, in_free = 0, mappings = 0, listed_chunks = 0;
  chunk_set.for_each([&](chunk_id id, const chunk_record& r) {
    const auto it = tree_refs.find(id.value);
    const std::uint32_t t = it == tree_refs.end() ? 0 : it->second;
    if (r.tree_refs != t)
      fail(fmt::format("chunk {}: {} tree refs recorded, {} in the tree", id.value, r.tree_refs, t));
    if (r.ref_count != r.mappings + r.tree_refs) {
      fail(fmt::format("chunk {}: reference count {} != {} mappings + {} tree refs", id.value, r.ref_count, r.mappings,
                       r.tree_refs));
    }
    if (r.in_free_pool != (r.ref_count == 0)) {
      fail(fmt::format("chunk {}: {} references but {} the free pool", id.value, r.ref_count,
                       r.in_free_pool ? "in" : "not in"));
    }
    const auto l = by_chunk.find(id.value);
    const listed found = l == by_chunk.end() ? listed{} : l->second;
    listed_chunks += l == by_chunk.end() ? 0 : 1;
    if (found.all != r.mappings) {
      fail(fmt::format("chunk {}: {} mappings counted, {} in the vSet", id.value, r.mappings, found.all));
    }
    // A written chunk is mapped by its writer alone; the rTree may hold a copy-on-write source
    // version of it (its valid bytes, which the writer no longer changes: Note [Eager publication]
    // in core/scheduler.cpp), which a reader copies and never maps.
    if (found.writer != nullptr && r.mappings != 1) {
      fail(fmt::format("chunk {} is written through {:#x} by request {} but mapped {} times", id.value,
                       found.writer->va, found.writer->owner.value, r.mappings));
    }
    if (found.shared != r.shared_mappings) fail(fmt::format("chunk {}: shared mapping count drifted", id.value));
    mapped += r.mappings == 0 ? 0 : 1;
    shared += found.shared > 0 ? 1 : 0;
    in_free += r.in_free_pool ? 1 : 0;
    mappings += r.mappings;
  });
  if (listed_chunks != by_chunk.size()) fail("the vSet maps a chunk the pSet does not hold");
  if (in_free != chunk_set.free_count()) fail("free pool size disagrees with the chunk records");
  if (mapped != maps_.mapped_chunks()) fail(fmt::format("{} chunks mapped, {} counted", mapped, maps_.mapped_chunks()));
  if (shared != maps_.shared_chunks()) fail(fmt::format("{} chunks shared, {} counted", shared, maps_.shared_chunks()));
  if (mappings != map_set.size()) fail(fmt::format("{} chunk mappings, {} in vSet", mappings, map_set.size()));
  check_backend();
}

// Note [Checking with jobs in flight]
// check_invariants() only reads, so that checking (after every operation in a dev build, after
// every step of a test replay) does not change what the worker does or when. The pool's own
// records (pSet, vSet, rTree) belong to the step thread and are checked whole. The backend's
// counts are compared only when the worker is idle (vmm_gate::backend_if_idle), read holding the backend lock (the
// worker does all its driver calls under it): then every submitted job is in the backend, and the chunks the worker
// created and nobody adopted yet are known. While a job is queued or running the backend's mappings and chunks are in
// between and are not compared, and the backend lock is not even taken; a caller that wants the full check settles
// first. The worker takes the backend lock for one driver call at a time, so a check may also find it between two calls
// of a job: then the job is in flight and nothing is compared. Only the step thread submits jobs, and it is the one
// checking: a worker found idle stays idle until the check is over.
void operations::check_backend() const {
  const pset& chunk_set = pool_.records();
  const vset& map_set = maps_.records();
  const auto idle = gate_.backend_if_idle();
  if (!idle) return;
  const vmm_live& live = idle->live;
  if (live.chunks != chunk_set.live() + idle->unadopted_chunks) {
    fail(fmt::format("backend holds {} chunks, pSet {} and {} created ahead (created = free + in use)", live.chunks,
                     chunk_set.live(), idle->unadopted_chunks));
  }
  if (live.mappings + idle->unmapped_failed != map_set.size()) {
    fail(fmt::format("backend holds {} mappings and {} failed on the worker, vSet {}", live.mappings,
                     idle->unmapped_failed, map_set.size()));
  }
}

}  // namespace vtensor
