#include "core/chunk_pool.hpp"

#include "core/prefix_cache.hpp"

namespace vtensor {

std::optional<chunk_id> chunk_pool::alloc() {
  adopt_created();
  if (auto c = pset_.take_free()) {
    ++pool_hits_;
    return c;
  }
  // At the device's capacity a create can only fail: the driver is not asked (as on cuda, whose
  // cap is checked before the driver), so that no VMM time is charged for it either.
  if (pset_.live() >= capacity_chunks_) return std::nullopt;
  auto h = gate_.vmm([](vmm_backend& b) { return b.create_chunk(); });
  if (!h) return std::nullopt;
  ++chunks_created_;
  return pset_.adopt(*h);
}

std::optional<chunk_id> chunk_pool::alloc_evicting(prefix_cache& cache) {
  for (;;) {
    if (auto c = alloc()) return c;
    if (!cache.evict_one()) return std::nullopt;
  }
}

// Note [Allocating a run of chunks]
// A request's pages come in runs (a prompt, a lookahead batch): the free pool gives what it holds
// of the run in one step, in the order single takes would, and only the rest goes chunk by chunk
// (create, evict). Nothing adds to the pool between two takes of one call (the worker's creations
// are adopted first, an eviction only once the pool is empty), so the chunks and the counts are
// those of a loop of alloc(). A call that cannot succeed (the pool holds less than the run, the
// device is at its capacity and, when it may evict, nothing is evictable) is common once memory
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
bool chunk_pool::alloc_run(std::size_t count, prefix_cache* evict_from, std::vector<chunk_id>& out) {
  const std::size_t start = out.size();
  adopt_created();
  if (const std::size_t pool = pset_.free_count(); pool < count && pset_.live() >= capacity_chunks_) {
    if (evict_from == nullptr || evict_from->tree().evictable_count() == 0) {
      pool_hits_ += pool;
      pset_.reverse_free_pool();
      return false;
    }
    if (const async_mapper* w = gate_.worker(); !w || w->inline_jobs())
      return alloc_by_eviction(count, *evict_from, out);
  }
  out.reserve(start + count);
  pool_hits_ += pset_.take_free(count, out);
  while (out.size() - start < count) {
    auto c = evict_from != nullptr ? alloc_evicting(*evict_from) : alloc();
    if (!c) {
      for (std::size_t j = start; j < out.size(); ++j) unuse(out[j]);
      out.resize(start);
      return false;
    }
    out.push_back(*c);
    // An eviction refills the pool with a whole cached node's chunks: take what the run still
    // needs of them in one step, as the single takes that would follow would.
    adopt_created();
    pool_hits_ += pset_.take_free(count - (out.size() - start), out);
  }
  return true;
}

bool chunk_pool::take_pooled(std::size_t count, std::vector<chunk_id>& out) {
  adopt_created();
  if (pset_.free_count() < count) return false;
  pool_hits_ += pset_.take_free(count, out);
  return true;
}

bool chunk_pool::alloc_by_eviction(std::size_t count, prefix_cache& cache, std::vector<chunk_id>& out) {
  std::size_t have = pset_.free_count();  // chunks the loop would hold: the pool's oldest `have`
  pool_hits_ += have;
  pset_.reverse_free_pool();
  while (have < count) {
    const std::size_t before = pset_.free_count();
    if (!cache.evict_one()) return false;  // the pool is as the loop leaves it
    const std::size_t freed = pset_.free_count() - before;
    if (have + freed >= count) {
      out.reserve(out.size() + count);
      pset_.take_oldest_free(have, out);
      pool_hits_ += pset_.take_free(count - have, out);
      return true;
    }
    pset_.reverse_free_pool_from(before);
    have += freed;
    pool_hits_ += freed;
  }
  return true;  // not reached: the pool held less than `count`
}

void chunk_pool::adopt_created() {
  async_mapper* w = gate_.worker();
  if (w == nullptr) return;
  for (chunk_handle h : w->take_created()) {
    ++chunks_created_;
    ++created_ahead_;
    pset_.put_free(pset_.adopt(h));
  }
}

void chunk_pool::create_ahead(std::uint32_t low_watermark) {
  async_mapper* w = gate_.worker();
  if (w == nullptr || low_watermark == 0 || !w->done(ahead_ticket_)) return;
  adopt_created();
  if (pset_.free_count() >= low_watermark) return;
  mapping_job job;
  job.create_chunks = low_watermark - static_cast<std::uint32_t>(pset_.free_count());
  ahead_ticket_ = w->submit(std::move(job));
}

std::size_t chunk_pool::release_free(vmm_backend& backend) {
  std::size_t released = 0;
  while (auto c = pset_.take_free()) {
    backend.release_chunk(pset_.forget(*c));
    ++released;
  }
  return released;
}

}  // namespace vtensor
