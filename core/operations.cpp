#include "core/operations.hpp"

#include <iterator>
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

operations::operations(vmm_backend& backend, const kv_geometry& geometry, std::uint64_t vtensor_bytes,
                       std::unique_ptr<eviction_policy> eviction, std::size_t range_cache)
    : backend_(backend),
      geometry_(geometry),
      vtensor_bytes_(vtensor_bytes),
      range_cache_limit_(range_cache),
      tree_(std::move(eviction)),
      capacity_chunks_(backend.capacity_chunks()) {
  if (backend_.granularity_bytes() != geometry_.chunk_bytes()) {
    throw std::invalid_argument(fmt::format("backend '{}' maps in {} byte units; vtensor needs {}", backend_.name(),
                                            backend_.granularity_bytes(), geometry_.chunk_bytes()));
  }
}

operations::~operations() = default;

std::optional<chunk_id> operations::alloc_chunk() {
  adopt_created();
  if (auto c = pset_.take_free()) {
    ++counters_.pool_hits;
    return c;
  }
  // At the device's capacity a create can only fail: the driver is not asked (as on cuda, whose
  // cap is checked before the driver), so that no VMM time is charged for it either.
  if (pset_.live() >= capacity_chunks_) return std::nullopt;
  auto h = vmm([](vmm_backend& b) { return b.create_chunk(); });
  if (!h) return std::nullopt;
  ++counters_.chunks_created;
  return pset_.adopt(*h);
}

std::optional<chunk_id> operations::alloc_chunk_evicting() {
  for (;;) {
    if (auto c = alloc_chunk()) return c;
    if (!evict_one()) return std::nullopt;
  }
}

// Note [Allocating a run of chunks]
// A request's pages come in runs (a prompt, a lookahead batch): the free pool gives what it holds
// of the run in one step, in the order single takes would, and only the rest goes chunk by chunk
// (create, evict). Nothing adds to the pool between two takes of one call (the worker's creations
// are adopted first, an eviction only once the pool is empty), so the chunks and the counts are
// those of a loop of alloc_chunk(). A call that cannot succeed (the pool holds less than the run,
// the device is at its capacity and, when it may evict, nothing is evictable) is common once memory
// is full: every admission tried takes the whole pool and gives it back, which leaves the pool
// reversed and counts its chunks as pool hits. It does just that, without touching each chunk.
// After each chunk that had to be created or evicted for, what the pool holds again is taken in
// one step too.
//
// Evicting for a run the device cannot hold otherwise (the pool short, the device at its
// capacity) is what most admissions tried under memory pressure do, and most of them fail after
// evicting everything evictable (a whole Mooncake replay put back 8.5 million chunks so). The
// loop takes the pool P, then after each eviction the chunks F it freed, one by one, and on
// failure gives all back in the order taken: the pool ends as reverse(P), reverse(F1), ...,
// reverse(Fk). alloc_by_eviction() builds that order in place (P reversed, then each F as its
// eviction frees it) and touches the chunks only when the run succeeds: then it takes the
// reversed part whole and the last eviction's chunks from the pool's end, as the loop would.
// Only with no mapping worker or an inline one: a worker thread may hand in created chunks
// between two evictions, which the loop adopts and takes.
bool operations::alloc_chunks(std::size_t count, bool evict, std::vector<chunk_id>& out) {
  const std::size_t start = out.size();
  adopt_created();
  if (const std::size_t pool = pset_.free_count(); pool < count && pset_.live() >= capacity_chunks_) {
    if (!evict || tree_.evictable_count() == 0) {
      counters_.pool_hits += pool;
      pset_.reverse_free_pool();
      return false;
    }
    if (!mapper_ || mapper_->inline_jobs()) return alloc_by_eviction(count, out);
  }
  out.reserve(start + count);
  counters_.pool_hits += pset_.take_free(count, out);
  while (out.size() - start < count) {
    auto c = evict ? alloc_chunk_evicting() : alloc_chunk();
    if (!c) {
      for (std::size_t j = start; j < out.size(); ++j) unuse(out[j]);
      out.resize(start);
      return false;
    }
    out.push_back(*c);
    // An eviction refills the pool with a whole cached node's chunks: take what the run still
    // needs of them in one step, as the single takes that would follow would.
    adopt_created();
    counters_.pool_hits += pset_.take_free(count - (out.size() - start), out);
  }
  return true;
}

bool operations::alloc_by_eviction(std::size_t count, std::vector<chunk_id>& out) {
  std::size_t have = pset_.free_count();  // chunks the loop would hold: the pool's oldest `have`
  counters_.pool_hits += have;
  pset_.reverse_free_pool();
  while (have < count) {
    const std::size_t before = pset_.free_count();
    if (!evict_one()) return false;  // the pool is as the loop leaves it
    const std::size_t freed = pset_.free_count() - before;
    if (have + freed >= count) {
      out.reserve(out.size() + count);
      pset_.take_oldest_free(have, out);
      counters_.pool_hits += pset_.take_free(count - have, out);
      return true;
    }
    pset_.reverse_free_pool_from(before);
    have += freed;
    counters_.pool_hits += freed;
  }
  return true;  // not reached: the pool held less than `count`
}

void operations::unuse(chunk_id c) {
  const chunk_record& r = pset_[c];
  if (r.ref_count == 0 && !r.in_free_pool) pset_.put_free(c);
}

void operations::drop_pages(std::vector<page_version>& pages) {
  for (auto& v : pages) {
    for (chunk_id c : v.chunks) pset_.prefetch(c);  // Note [Dense chunk records]
    for (chunk_id c : v.chunks) {
      --pset_[c].tree_refs;
      pset_.drop_ref(c);
    }
  }
}

bool operations::evict_one() {
  auto pages = tree_.evict_one();
  if (!pages) return false;
  ++counters_.evicted_nodes;
  drop_pages(*pages);
  return true;
}

device_addr operations::alloc_range() {
  if (!range_cache_.empty()) {
    device_addr base = range_cache_.back();
    range_cache_.pop_back();
    return base;
  }
  return vmm([&](vmm_backend& b) { return b.reserve(vtensor_bytes_); });
}

void operations::free_range(device_addr base) {
  if (range_cache_.size() < range_cache_limit_) {
    range_cache_.push_back(base);
  } else {
    vmm([&](vmm_backend& b) { b.free_range(base); });
  }
}

mapping& operations::map_deferred(device_addr va, chunk_id c, request_id owner, bool shared, mapping_job& job) {
  return map_deferred_into(va, c, owner, shared, job.maps.emplace_back());
}

mapping& operations::map_deferred_into(device_addr va, chunk_id c, request_id owner, bool shared,
                                       mapping_entry& entry) {
  entry = {va, pset_[c].handle};
  return record_mapping(va, c, owner, shared);
}

void operations::run_now(const mapping_job& job) {
  vmm([&](vmm_backend& b) { run_mapping_job(b, job); });
}

void operations::unrecord(mapping& m) {
  chunk_record& r = pset_[m.chunk];
  if (m.shared && --r.shared_mappings == 0) --shared_chunks_;
  if (--r.mappings == 0) --mapped_chunks_;
  const chunk_id c = m.chunk;
  vset_.recycle(m);
  pset_.drop_ref(c);
}

mapping& operations::record_mapping(device_addr va, chunk_id c, request_id owner, bool shared) {
  chunk_record& r = pset_[c];
  mapping& m = vset_.make(va, c, owner, shared);
  if (r.mappings++ == 0) ++mapped_chunks_;
  pset_.add_ref(c);
  if (shared && r.shared_mappings++ == 0) ++shared_chunks_;
  return m;
}

void operations::make_shared(mapping& m) {
  if (m.shared) return;
  m.shared = true;
  if (pset_[m.chunk].shared_mappings++ == 0) ++shared_chunks_;
}

void operations::unrecord_run(std::span<mapping* const> maps) {
  constexpr std::size_t k_ahead = 4;  // Note [Dense chunk records]
  for (std::size_t i = 0; i < maps.size() && i < k_ahead; ++i) pset_.prefetch(maps[i]->chunk);
  for (std::size_t i = 0; i < maps.size(); ++i) {
    if (i + k_ahead < maps.size()) pset_.prefetch(maps[i + k_ahead]->chunk);
    unrecord(*maps[i]);
  }
}

void operations::unmap_run(std::span<mapping* const> maps) {
  if (maps.empty()) return;
  vmm([&](vmm_backend& b) { b.unmap(maps.front()->va, maps.size() * geometry_.chunk_bytes()); });
  unrecord_run(maps);
}

void operations::unmap_run_deferred(std::span<mapping* const> maps, mapping_job& job) {
  if (maps.empty()) return;
  job.unmaps.push_back({maps.front()->va, maps.size() * geometry_.chunk_bytes()});
  unrecord_run(maps);
}

void operations::free_range_deferred(device_addr base, mapping_job& job) {
  if (range_cache_.size() < range_cache_limit_) {
    range_cache_.push_back(base);  // reused by a later request: its maps queue behind the unmaps
  } else {
    job.free_ranges.push_back(base);
  }
}

std::size_t operations::retry_failed() {
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

void operations::record_page(radix_node& node, page_version version) {
  for (chunk_id c : version.chunks) pset_.prefetch(c);  // Note [Dense chunk records]
  for (chunk_id c : version.chunks) {
    ++pset_[c].tree_refs;
    pset_.add_ref(c);
  }
  if (auto back = tree_.attach(node, std::move(version))) {
    std::vector<page_version> dropped;
    dropped.push_back(std::move(*back));
    drop_pages(dropped);
  }
}

void operations::copy_prefix(device_addr dst, chunk_id src, std::uint64_t bytes) {
  counters_.cow_bytes += bytes;
  const chunk_record& r = pset_[src];
  if (r.mappings != 0) {  // another request maps it: copy from there (Note [Mappings counted, not listed])
    if (copy_) {
      const mapping* from = vset_.any_mapping_of(src);
      if (from == nullptr) throw std::logic_error(fmt::format("chunk {} counts mappings the vSet lacks", src.value));
      copy_(dst, from->va, bytes);
    }
    return;
  }
  const mutex_lock lock(backend_mutex_);
  if (scratch_ == 0) scratch_ = backend_.reserve(geometry_.chunk_bytes());
  backend_.map_with_access(scratch_, r.handle);
  try {
    if (copy_) copy_(dst, scratch_, bytes);
  } catch (...) {
    backend_.unmap(scratch_, geometry_.chunk_bytes());
    throw;
  }
  backend_.unmap(scratch_, geometry_.chunk_bytes());
}

std::size_t operations::trim() {
  drain();
  adopt_created();
  const mutex_lock lock(backend_mutex_);
  std::size_t released = 0;
  while (auto c = pset_.take_free()) {
    backend_.release_chunk(pset_.forget(*c));
    ++released;
  }
  for (device_addr base : range_cache_) backend_.free_range(base);
  range_cache_.clear();
  if (scratch_ != 0) {
    backend_.free_range(scratch_);
    scratch_ = 0;
  }
  return released;
}

void operations::enable_async(bool inline_jobs) {
  if (mapper_) return;
  const mutex_lock lock(backend_mutex_);  // passing the backend on counts as using it (free: no worker yet)
  mapper_ = std::make_unique<async_mapper>(backend_, backend_mutex_, inline_jobs);
}

std::uint64_t operations::submit(mapping_job job) {
  if (job.empty()) return 0;
  if (!mapper_) throw std::logic_error("operations: deferred mapping without the async worker");
  return mapper_->submit(std::move(job));
}

void operations::wait(std::uint64_t ticket, bool step_wait) {
  if (mapper_ && ticket != 0) mapper_->wait(ticket, step_wait);
}

void operations::drain() const {
  if (mapper_) mapper_->drain();
}

void operations::adopt_created() {
  if (!mapper_) return;
  for (chunk_handle h : mapper_->take_created()) {
    ++counters_.chunks_created;
    ++counters_.created_ahead;
    pset_.put_free(pset_.adopt(h));
  }
}

void operations::create_ahead(std::uint32_t low_watermark) {
  if (!mapper_ || low_watermark == 0 || !mapper_->done(ahead_ticket_)) return;
  adopt_created();
  if (pset_.free_count() >= low_watermark) return;
  mapping_job job;
  job.create_chunks = low_watermark - static_cast<std::uint32_t>(pset_.free_count());
  ahead_ticket_ = mapper_->submit(std::move(job));
}

async_counters operations::async_stats() const { return mapper_ ? mapper_->counters() : async_counters{}; }

vmm_counters operations::vmm_stats() const {
  const mutex_lock lock(backend_mutex_);
  return backend_.counters();
}

void operations::drop_cache_and_trim() {
  auto pages = tree_.clear();
  drop_pages(pages);
  trim();
}

namespace {
[[noreturn]] void fail(const std::string& why) { throw std::logic_error("pool invariant: " + why); }
}  // namespace

void operations::check_invariants() const {
  tree_.check_invariants();
  std::unordered_map<std::uint32_t, std::uint32_t> tree_refs;
  tree_.for_each_page([&](const radix_node&, const page_version& v) {
    if (v.chunks.size() != geometry_.tensors()) fail(fmt::format("page {} has {} chunks", v.page, v.chunks.size()));
    for (chunk_id c : v.chunks) ++tree_refs[c.value];
  });
  // Each chunk's mappings, recounted from the vSet (Note [Mappings counted, not listed]).
  struct listed {
    std::uint32_t all = 0, shared = 0;
    const mapping* writer = nullptr;  // a mapping that is not shared
  };
  std::unordered_map<std::uint32_t, listed> by_chunk;
  vset_.for_each([&](const mapping& m) {
    listed& l = by_chunk[m.chunk.value];
    ++l.all;
    if (m.shared) {
      ++l.shared;
    } else {
      l.writer = &m;
    }
  });
  std::uint64_t mapped = 0, shared = 0, in_free = 0, mappings = 0, listed_chunks = 0;
  pset_.for_each([&](chunk_id id, const chunk_record& r) {
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
    if (found.writer != nullptr && r.ref_count != 1) {
      fail(fmt::format("chunk {} is written through {:#x} by request {} but has {} references", id.value,
                       found.writer->va, found.writer->owner.value, r.ref_count));
    }
    if (found.shared != r.shared_mappings) fail(fmt::format("chunk {}: shared mapping count drifted", id.value));
    mapped += r.mappings == 0 ? 0 : 1;
    shared += found.shared > 0 ? 1 : 0;
    in_free += r.in_free_pool ? 1 : 0;
    mappings += r.mappings;
  });
  if (listed_chunks != by_chunk.size()) fail("the vSet maps a chunk the pSet does not hold");
  if (in_free != pset_.free_count()) fail("free pool size disagrees with the chunk records");
  if (mapped != mapped_chunks_) fail(fmt::format("{} chunks mapped, {} counted", mapped, mapped_chunks_));
  if (shared != shared_chunks_) fail(fmt::format("{} chunks shared, {} counted", shared, shared_chunks_));
  if (mappings != vset_.size()) fail(fmt::format("{} chunk mappings, {} in vSet", mappings, vset_.size()));
  check_backend();
}

// Note [Checking with jobs in flight]
// check_invariants() only reads, so that checking (after every operation in a dev build, after
// every step of a test replay) does not change what the worker does or when. The pool's own
// records (pSet, vSet, rTree) belong to the step thread and are checked whole. The backend's
// counts are compared only when the worker is idle, read holding the backend lock (the worker
// does all its driver calls under it): then every submitted job is in the backend, and the
// chunks the worker created and nobody adopted yet are known. While a job is queued or running
// the backend's mappings and chunks are in between and are not compared, and the backend lock
// is not even taken; a caller that wants the full check
// settles first. The worker takes the backend lock for one driver call at a time, so a check may
// also find it between two calls of a job: then the job is in flight and nothing is compared.
// Only the step thread submits jobs, and it is the one checking: a worker found
// idle stays idle until the check is over.
std::optional<operations::idle_backend> operations::backend_if_idle() const {
  if (mapper_ && !mapper_->idle_created()) return std::nullopt;  // a job in flight: do not wait for the lock
  const mutex_lock lock(backend_mutex_);
  const std::size_t unadopted = mapper_ ? mapper_->idle_created().value_or(0) : 0;
  return idle_backend{backend_.live(), unadopted, mapper_ ? mapper_->unmapped_failed() : 0};
}

void operations::check_backend() const {
  const auto idle = backend_if_idle();
  if (!idle) return;
  const vmm_live& live = idle->live;
  if (live.chunks != pset_.live() + idle->unadopted_chunks) {
    fail(fmt::format("backend holds {} chunks, pSet {} and {} created ahead (created = free + in use)", live.chunks,
                     pset_.live(), idle->unadopted_chunks));
  }
  if (live.mappings + idle->unmapped_failed != vset_.size()) {
    fail(fmt::format("backend holds {} mappings and {} failed on the worker, vSet {}", live.mappings,
                     idle->unmapped_failed, vset_.size()));
  }
}

}  // namespace vtensor
