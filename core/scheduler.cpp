#include "core/scheduler.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace vtensor {

namespace {
// The standby vTensor's owner in the vSet (Note [Standby vTensor]); no caller may use it.
constexpr request_id k_standby_id{std::numeric_limits<std::uint64_t>::max()};
// The parked vTensors' owner (Note [Parked vTensors]); no caller may use it either.
constexpr request_id k_parked_id{std::numeric_limits<std::uint64_t>::max() - 1};
}  // namespace

scheduler::scheduler(backend_views backends, kv_geometry geometry, scheduler_config config,
                     std::unique_ptr<eviction_order> eviction)
    : geometry_(std::move(geometry)),
      config_(config),
      vtensor_bytes_(geometry_.vtensor_bytes(config.max_context_tokens)),
      tensor_span_(geometry_.tensor_span_bytes(config.max_context_tokens)),
      ops_(backends, geometry_, vtensor_bytes_, std::move(eviction), config.range_cache) {
  if (config_.max_context_tokens == 0) throw std::invalid_argument("scheduler: max context tokens must be positive");
  if (config_.lookahead_batch == 0 || config_.lookahead_batch > std::max<std::uint32_t>(1, config_.lookahead_pages)) {
    throw std::invalid_argument(fmt::format("scheduler: lookahead batch {} must be between 1 and the lookahead ({})",
                                            config_.lookahead_batch, config_.lookahead_pages));
  }
  if (config_.standby_pages > 0 && !config_.pipeline) {
    throw std::invalid_argument("scheduler: a standby vTensor needs the pipeline (its pages are the worker's maps)");
  }
  if (config_.parked_ranges > 0 && !config_.pipeline) {
    throw std::invalid_argument("scheduler: parked vTensors need the pipeline (their unmaps are the worker's)");
  }
  if (config_.standby_pages > geometry_.pages_for_tokens(config_.max_context_tokens)) {
    throw std::invalid_argument(fmt::format("scheduler: a standby of {} pages exceeds the context of {} tokens",
                                            config_.standby_pages, config_.max_context_tokens));
  }
  if (config_.runs_worker()) ops_.gate().enable_async(config_.inline_worker);
  if (config_.parked_ranges > 0) {  // Note [Parked vTensors]: an evicted page unmaps the vTensors parked over it
    ops_.cache().on_parked_orphan([this](chunk_id c) {
      op_effects ignored;
      op_effects& fx = evict_fx_ != nullptr ? *evict_fx_ : ignored;
      for (std::size_t i = parked_.size(); i-- > 0;) {
        const auto& maps = parked_[i]->maps;
        if (std::any_of(maps.begin(), maps.end(), [c](const mapping* m) { return m->chunk == c; })) drop_parked(i, fx);
      }
    });
  }
}

scheduler::~scheduler() { ops_.maps().untrack_all(); }  // live records unlink before they are destroyed

vtensor_record& scheduler::get(request_id id) {
  auto it = live_.find(id);
  if (it == live_.end()) throw std::invalid_argument(fmt::format("request {} is not live", id.value));
  return *it->second;
}

const vtensor_record* scheduler::find(request_id id) const {
  auto it = live_.find(id);
  return it == live_.end() ? nullptr : it->second.get();
}

std::uint32_t scheduler::max_pages(const vtensor_record& r) const {
  return static_cast<std::uint32_t>(geometry_.pages_for_tokens(r.max_tokens));
}

std::uint64_t scheduler::own_bytes(const vtensor_record& r) const {
  return geometry_.tensors() *
         (r.tokens * geometry_.bytes_per_token_per_tensor() - std::uint64_t{r.shared_pages} * geometry_.chunk_bytes());
}

void scheduler::account(const vtensor_record& r, int sign) {
  if (sign > 0) {
    own_valid_bytes_ += own_bytes(r);
    logical_tokens_ += r.tokens;
    token_pages_ += geometry_.pages_for_tokens(r.tokens);
  } else {
    own_valid_bytes_ -= own_bytes(r);
    logical_tokens_ -= r.tokens;
    token_pages_ -= geometry_.pages_for_tokens(r.tokens);
  }
}

std::unique_ptr<vtensor_record> scheduler::new_record(request_id id, std::uint64_t max_tokens) {
  if (live_.contains(id)) throw std::invalid_argument(fmt::format("request {} is already live", id.value));
  if (id == k_standby_id || id == k_parked_id)
    throw std::invalid_argument(fmt::format("request id {} is reserved", id.value));
  if (max_tokens == 0) max_tokens = config_.max_context_tokens;
  if (max_tokens > config_.max_context_tokens) {
    throw std::invalid_argument(fmt::format("request {}: max tokens {} exceed the context of {} tokens", id.value,
                                            max_tokens, config_.max_context_tokens));
  }
  auto r = std::make_unique<vtensor_record>();
  r->id = id;
  r->tensor_span_bytes = tensor_span_;
  r->tensors = geometry_.tensors();
  r->max_tokens = max_tokens;
  return r;
}

// Maps `chunks` (page-major: page i's chunk of tensor t is chunks[i * tensors + t]) as the pages
// following the request's mapped ones, the first `shared_count` of them shared. The bookkeeping
// is done first and the driver calls then run back to back, a map and a set-access per chunk
// (Note [One set-access per chunk]): at once, or on the worker when `deferred` (Note [Deferred
// mappings]). Strong guarantee: on a failure nothing of it stays mapped or recorded.
void scheduler::map_pages(vtensor_record& r, std::span<const chunk_id> chunks, std::uint32_t shared_count,
                          bool deferred, op_effects& fx) {
  const std::uint32_t tensors = geometry_.tensors();
  const std::uint64_t chunk = geometry_.chunk_bytes();
  const std::uint32_t first = r.mapped_pages;
  const auto pages = static_cast<std::uint32_t>(chunks.size() / tensors);
  if (pages == 0) return;
  r.maps.resize(std::size_t{first + pages} * tensors, nullptr);
  mapping_job job;
  job.maps.resize(chunks.size());
  // The driver's calls go in ascending addresses, tensor by tensor (job.maps[t * pages + i]); the
  // records are made page by page, in the order of `chunks`, prefetched a few chunks ahead (Note
  // [Dense chunk records] in pset.hpp): tensor by tensor, each record's miss came alone.
  constexpr std::size_t k_ahead = 8;
  for (std::size_t k = 0; k < chunks.size() && k < k_ahead; ++k) ops_.maps().prefetch_record(chunks[k]);
  for (std::uint32_t i = 0; i < pages; ++i) {
    const std::uint32_t p = first + i;
    for (std::uint32_t t = 0; t < tensors; ++t) {
      const std::size_t k = std::size_t{i} * tensors + t;
      if (k + k_ahead < chunks.size()) ops_.maps().prefetch_record(chunks[k + k_ahead]);
      r.maps[std::size_t{p} * tensors + t] = &ops_.maps().map_deferred_into(
          r.page_addr(t, p, chunk), chunks[k], r.id, i < shared_count, job.maps[std::size_t{t} * pages + i]);
    }
  }
  if (deferred) {
    r.ticket = ops_.gate().submit(std::move(job));
    fx.worker_pages += pages;
    fx.worker_job = r.ticket;
  } else {
    try {
      ops_.gate().run_now(job);
    } catch (...) {
      for (std::size_t k = std::size_t{first} * tensors; k < r.maps.size(); ++k) ops_.maps().unrecord(*r.maps[k]);
      r.maps.resize(std::size_t{first} * tensors);
      throw;
    }
    if (r.ready_pages == first) r.ready_pages = first + pages;
    fx.step_pages += pages;
  }
  r.mapped_pages = first + pages;
  mapped_pages_ += pages;
}

// Note [Lookahead in runs]
// The driver charges more for a map + set-access whose address is far from the previous call's,
// the more the farther, while short runs of contiguous chunks cost no more than contiguous
// single chunks (figures and their run: results/README.md, "Figures behind the notes of core/
// and sim/"). Growing a kv-split request by one page maps one chunk in each tensor span, a span
// apart (16 MiB at an 8k context, 256 MiB at 128k for Llama-3-8B): the dearest pattern. With lookahead_batch b, a
// request is topped up only once b pages are missing ahead (or the rest of its range is shorter), so each top-up maps
// runs of b chunks per tensor. The mean lookahead held is then about k - b/2 pages instead of k.

// Keeps up to `lookahead_pages` pages mapped past the `needed` ones, best effort (no eviction for
// speculation), in runs of `lookahead_batch` pages; through the worker when asynchronous.
void scheduler::top_up(vtensor_record& r, std::uint32_t needed, op_effects& fx) {
  const std::uint32_t target = lookahead_target(r, needed);
  if (r.mapped_pages >= target) return;
  if (target - r.mapped_pages < config_.lookahead_batch && target < max_pages(r)) return;
  std::vector<chunk_id> chunks;
  alloc_ahead(target - r.mapped_pages, chunks, fx);
  try {
    map_pages(r, chunks, 0, ops_.gate().async(), fx);
  } catch (...) {
    for (chunk_id c : chunks) ops_.pool().unuse(c);
    throw;
  }
}

std::uint32_t scheduler::lookahead_target(const vtensor_record& r, std::uint32_t needed) const {
  return std::min(needed + config_.lookahead_pages, std::max(needed, max_pages(r)));
}

void scheduler::alloc_ahead(std::uint32_t pages, std::vector<chunk_id>& chunks, op_effects& fx) {
  for (std::uint32_t i = 0; i < pages; ++i) {
    if (!ops_.pool().alloc_run(geometry_.tensors(), nullptr, chunks)) {
      fx.lookahead_misses += pages - i;
      return;
    }
  }
}

void scheduler::pool_effects(const operation_counters& before, op_effects& fx) const {
  const operation_counters& now = ops_.counters();
  // The worker's chunks are counted in chunks_created when adopted: not this thread's creates.
  fx.chunks_created = (now.chunks_created - now.created_ahead) - (before.chunks_created - before.created_ahead);
  fx.pool_chunks = now.pool_hits - before.pool_hits;
  fx.evicted_nodes = now.evicted_nodes - before.evicted_nodes;
}

std::uint64_t scheduler::unmap_all(vtensor_record& r, op_effects* fx) {
  const std::uint64_t waited = fx != nullptr ? 0 : r.ticket;
  const std::uint32_t tensors = geometry_.tensors();
  mapping_job job;
  std::vector<device_addr> never_mapped;  // failed on the worker, not retried: nothing to unmap
  if (fx == nullptr) {
    ops_.gate().wait(r.ticket, false);  // deferred mappings must be in place before they are undone
    if (r.base != 0) never_mapped = ops_.gate().forget_failed(r.base, r.base + vtensor_bytes_);
  }
  r.ticket = 0;
  for (std::uint32_t t = 0; t < tensors; ++t) {
    run_.clear();
    for (std::uint32_t p = 0; p < r.mapped_pages; ++p) run_.push_back(r.maps[std::size_t{p} * tensors + t]);
    if (fx == nullptr) {
      std::size_t from = 0;  // unmap the runs between pages that were never mapped
      for (std::size_t i = 0; i <= run_.size(); ++i) {
        if (i < run_.size() && !std::binary_search(never_mapped.begin(), never_mapped.end(), run_[i]->va)) continue;
        ops_.maps().unmap_run(std::span<mapping* const>(run_).subspan(from, i - from));
        if (i < run_.size()) ops_.maps().unrecord(*run_[i]);
        from = i + 1;
      }
    } else if (!run_.empty()) {
      ops_.maps().unmap_run_deferred(run_, job);
      fx->worker_unmaps += static_cast<std::uint32_t>(run_.size());
      ++fx->unmap_runs;
    }
  }
  r.maps.clear();
  mapped_pages_ -= r.mapped_pages;
  r.mapped_pages = 0;
  r.ready_pages = 0;
  if (fx != nullptr) {
    ops_.maps().untrack(r);
    ops_.ranges().free_deferred(r.base, job);
    fx->worker_frees += static_cast<std::uint32_t>(job.free_ranges.size());
    ops_.gate().submit(std::move(job));
  }
  return waited;
}

void scheduler::wait_ready(vtensor_record& r, op_effects& fx) {
  fx.waited_job = r.ticket;
  ops_.gate().wait(r.ticket, true);
  fx.retried_jobs += static_cast<std::uint32_t>(ops_.gate().retry_failed());
  r.ready_pages = r.mapped_pages;
}

// Note [Releases on the worker]
// With the pipeline, a release (finish, preempt) does its bookkeeping at once (the chunks go back
// to the free pool, the range to the range cache) and hands the driver's unmaps, and the freeing
// of a range the cache does not keep, to the worker in one job that nobody waits for. The worker
// runs jobs in order, so the job waits for the request's own maps, and any later map at the
// same addresses (a new request in the cached range) comes after the unmaps. A freed chunk may be
// mapped anew before its old mapping is undone: the driver allows a chunk at two addresses, and
// the old one is never touched again. A synchronous map of a request (extend) first waits for
// the request's last job, which comes after any unmap of its range.

// Undoes a create or fork that failed after taking memory: unpins, returns the chunks that were
// not mapped, and the range.
void scheduler::discard(vtensor_record& r, std::span<const chunk_id> chunks) {
  (void)unmap_all(r);
  for (chunk_id c : chunks) ops_.pool().unuse(c);
  if (r.base != 0) {
    ops_.maps().untrack(r);
    ops_.ranges().free(r.base);
  }
  if (r.pinned != nullptr) ops_.cache().tree().unpin(*r.pinned);
  r.pinned = nullptr;
}

// Gives a new record its memory: `chunks` holds its `shared` pages' chunks (page-major); takes
// own chunks for pages [shared, needed) (evicting cached prefixes if need be) and lookahead ones,
// reserves the range, maps it all, and copies `partial_bytes` of `partial_src` (a chunk per
// tensor) into page `shared`. False when out of memory: then nothing is held. A driver failure
// undoes everything and rethrows.
bool scheduler::build(vtensor_record& rec, std::vector<chunk_id>& chunks, std::uint32_t shared, std::uint32_t needed,
                      std::span<const chunk_id> partial_src, std::uint64_t partial_bytes, op_effects& fx) {
  const std::uint32_t tensors = geometry_.tensors();
  const std::uint32_t adopted = rec.mapped_pages;  // taken mapped from the standby or a parked vTensor
  const std::uint32_t held = std::max(shared, adopted);
  const std::size_t own_count = std::size_t{needed > held ? needed - held : 0} * tensors;
  yield_standby(own_count, fx);
  if (!ops_.pool().alloc_run(own_count, &ops_.cache(), chunks)) {
    // Out of memory: pages taken from a parked vTensor go back to one (Note [Parked vTensors]),
    // so that a request retried at every step neither unmaps them on this thread nor loses them.
    if (fx.reused_pages > 0) repark(rec, fx);
    discard(rec, {});
    ++counters_.preemption_signals;
    return false;
  }
  // Lookahead pages join the same mapping run, or go to the worker when asynchronous.
  const std::size_t required = chunks.size();
  const std::uint32_t target = lookahead_target(rec, needed);
  alloc_ahead(target > std::max(needed, held) ? target - std::max(needed, held) : 0, chunks, fx);
  // `chunks` starts at page `adopted`: the shared pages not adopted, then the request's own.
  const std::span<const chunk_id> own(
      chunks.begin() + std::ptrdiff_t{shared > adopted ? shared - adopted : 0} * tensors, chunks.end());
  if (config_.pipeline) {
    try {
      build_pipelined(rec, chunks, shared, needed, partial_src, partial_bytes, fx);
    } catch (...) {
      discard(rec, own);
      throw;
    }
    return true;
  }
  const std::span<const chunk_id> now(chunks.begin(), ops_.gate().async() ? required : chunks.size());
  try {
    rec.base = ops_.ranges().alloc();
    ops_.maps().track(rec);
    map_pages(rec, now, shared, false, fx);
    for (std::uint32_t t = 0; t < tensors && partial_bytes > 0; ++t) {
      ops_.copy_prefix(rec.page_addr(t, shared, geometry_.chunk_bytes()), partial_src[t], partial_bytes);
    }
    map_pages(rec, std::span<const chunk_id>(chunks).subspan(now.size()), 0, true, fx);
  } catch (...) {
    discard(rec, own);
    throw;
  }
  ops_.pool().create_ahead(config_.create_ahead_chunks);
  return true;
}

// Note [Pipelined admission]
// With the pipeline, an admission records its pages at once and hands every map (shared prefix
// pages, prompt pages, lookahead pages) to the worker in one job, so that the caller can decide
// the next step's admissions while the current step computes and the driver maps beside it (the
// simulated clock's side: Note [Mapping worker model] in sim/vtensor_policy.hpp). The job follows,
// in the worker's order, the unmaps of whatever request held the range before (Note [Releases on
// the worker]), so a reused range is never mapped twice. The request's pages are not ready until
// the caller waits for the job: its next extend does (wait_ready(), before any map of its own), as
// does an unmap. A partial prefix page is the exception: its copy needs the pages mapped, so the
// job up to that page is waited for before the copy, and the rest goes in later jobs.
// With chunked prefill (`pipeline_chunk_tokens`) the step that computes the first chunk needs
// only the pages of the cached prefix and of that chunk: they go in the first job(s), the rest of
// the prompt and the lookahead pages in the last, mapped while the first chunks compute
// (`first_pages`, `first_job` in op_effects).
void scheduler::build_pipelined(vtensor_record& rec, const std::vector<chunk_id>& chunks, std::uint32_t shared,
                                std::uint32_t needed, std::span<const chunk_id> partial_src,
                                std::uint64_t partial_bytes, op_effects& fx) {
  const std::uint32_t tensors = geometry_.tensors();
  const std::uint32_t held = rec.mapped_pages;  // adopted from the standby (then shared is 0)
  const auto total = held + static_cast<std::uint32_t>(chunks.size() / tensors);
  if (rec.base == 0) {
    rec.base = ops_.ranges().alloc();
    ops_.maps().track(rec);
  }
  // Jobs end at these pages: the partial page (waited for, then copied into), the first chunk's
  // pages, the rest of the prompt and the lookahead pages.
  std::uint32_t first = needed;
  if (config_.pipeline_chunk_tokens > 0) {
    const std::uint64_t hit =
        (std::uint64_t{shared} * geometry_.chunk_bytes() + partial_bytes) / geometry_.bytes_per_token_per_tensor();
    first = std::min<std::uint32_t>(
        needed, static_cast<std::uint32_t>(geometry_.pages_for_tokens(hit + config_.pipeline_chunk_tokens)));
  }
  std::uint32_t cuts[3] = {partial_bytes > 0 ? shared + 1 : 0, first, total};
  std::uint32_t from = held;
  for (std::uint32_t cut : cuts) {
    if (cut <= from) continue;
    map_pages(rec,
              std::span<const chunk_id>(chunks).subspan(std::size_t{from - held} * tensors,
                                                        std::size_t{cut - from} * tensors),
              from < shared ? shared - from : 0, true, fx);
    if (cut <= first) {  // the first chunk needs this job
      fx.first_pages = fx.worker_pages;
      fx.first_job = rec.ticket;
    }
    if (partial_bytes > 0 && cut == shared + 1) {
      wait_ready(rec, fx);
      for (std::uint32_t t = 0; t < tensors; ++t) {
        ops_.copy_prefix(rec.page_addr(t, shared, geometry_.chunk_bytes()), partial_src[t], partial_bytes);
      }
    }
    from = cut;
  }
}

// Note [Standby vTensor]
// With the pipeline an admission's pages are the worker's maps, done beside the step before, so
// they cost nothing on the step's clock while steps run back to back. After an idle spell no step
// runs beside them: the admission's step waits for the maps of its first prefill chunk (a
// 1,000-token prompt in the token-major layout: 63 chunks, a map and a set-access each, about
// 2.9 ms on an H200), which a policy whose blocks stay mapped (paged, vAttention's reused slots)
// never pays. So, with `standby_pages` set, the scheduler keeps one vTensor mapped ahead of any
// request: a range with its first `standby_pages` pages backed by free-pool chunks, mapped by the
// worker in a job of its own. What decides its use:
// - a create that misses the prefix cache (hit 0: no shared page, no partial copy) takes it when
//   the pages it needs beyond it come without eviction: the standby's range becomes the
//   request's, its mapped pages the request's first pages (at most its reservation's: the rest
//   are unmapped on the worker at once), and only the pages beyond them are mapped, as any
//   admission's. A create that hits the cache needs its cached pages at the range's start, so it
//   never takes it;
// - a create that misses the cache and succeeds, when there is no standby and the free pool holds
//   at least twice its chunks, maps a new one from the pool, after its own jobs (never a create,
//   never an eviction: twice, so that the next allocation still finds the pool and the standby is
//   not given back at once). Only misses build one: a workload whose admissions hit the cache
//   (most of Mooncake's) would map standbys that no admission takes;
// - an allocation that may evict and that the free pool and the device's capacity cannot serve
//   first gives the standby's pages back (unmapped on the worker, as a release's), before any
//   cached prefix is evicted: the standby is the first memory reclaimed.
// Its pages count as mapped and reserved-idle (ahead_bytes()). The choice is the core's, made from
// its own state, so sim and cuda take the same decisions; on cuda the request's pointer is the
// standby's range, whose pages the worker mapped. Only creates use it (a fork shares its parent's
// pages). The simulated clock's side: Note [Mapping worker model] in sim/vtensor_policy.hpp.
void scheduler::adopt_standby(vtensor_record& rec, op_effects& fx) {
  vtensor_record& s = *standby_;
  const std::uint32_t keep = std::min(s.mapped_pages, max_pages(rec));
  if (keep < s.mapped_pages) unmap_tail(s, keep, fx);
  ops_.maps().untrack(s);
  rec.base = s.base;
  rec.maps = std::move(s.maps);
  rec.mapped_pages = s.mapped_pages;
  rec.ready_pages = s.ready_pages;
  rec.ticket = s.ticket;
  for (mapping* m : rec.maps) m->owner = rec.id;
  ops_.maps().track(rec);
  fx.adopted_pages = keep;
  fx.adopted_job = s.ticket;
  standby_.reset();
  ++counters_.standby_adoptions;
}

void scheduler::build_standby(op_effects& fx) {
  const std::uint32_t pages = config_.standby_pages;
  if (pages == 0 || standby_) return;
  const std::size_t count = std::size_t{pages} * geometry_.tensors();
  if (ops_.pool().records().free_count() < 2 * count) return;
  std::vector<chunk_id> chunks;
  if (!ops_.pool().take_pooled(count, chunks)) return;
  auto s = std::make_unique<vtensor_record>();
  s->id = k_standby_id;
  s->tensor_span_bytes = tensor_span_;
  s->tensors = geometry_.tensors();
  s->max_tokens = config_.max_context_tokens;
  op_effects own;
  try {
    s->base = ops_.ranges().alloc();
    ops_.maps().track(*s);
    map_pages(*s, chunks, 0, true, own);  // the pipeline's maps are deferred: only the reserve can fail here
  } catch (const vmm_error&) {
    // Speculative, as lookahead is: the create it follows has succeeded and stands; the next one
    // tries again. The failure is counted, not hidden.
    discard(*s, chunks);
    ++counters_.standby_failures;
    return;
  }
  fx.standby_pages = own.worker_pages;
  fx.standby_job = own.worker_job;
  standby_ = std::move(s);
  ++counters_.standby_builds;
}

void scheduler::yield_standby(std::size_t chunks, op_effects& fx) {
  if (!standby_ || ops_.pool().holds_without_eviction(chunks)) return;
  fx.dropped_standby += standby_->mapped_pages;
  (void)unmap_all(*standby_, &fx);  // the pipeline's release: unmaps and the range's free on the worker
  standby_.reset();
  ++counters_.standby_drops;
}

// Note [Parked vTensors]
// A standby serves admissions that miss the cache; one that hits must have its cached pages at
// the start of its range, and with the pipeline those maps (a map and a set-access per chunk:
// a 4,000-token cached prefix in token-major is 250 chunks, about 11 ms on an H200) are the
// admission's wait after an idle spell, which a policy of block tables never pays. But a
// finished request's leading pages are, once recorded, exactly such a cached prefix, already
// mapped at the start of its range; in a conversation the next turn's prompt begins with them.
// So, with `parked_ranges` set, a release with the pipeline keeps its vTensor mapped over its
// leading pages that the rTree holds (whole pages on its pinned path whose chunks have tree
// references), marks them shared (immutable: their owner is gone), unmaps the rest on the worker
// as any release, and parks the range, pinning its path so that no eviction takes what it maps.
// A create whose match shares whole pages takes the parked vTensor whose leading pages are the
// most of those pages, chunk for chunk (the newest on a tie): the range becomes the request's,
// those pages its first shared pages, mapped already; pages of the parked vTensor beyond them are
// unmapped on the worker, and the request maps the rest of its shared prefix and its own pages as
// any admission. What a parked vTensor changes is which maps are made, never a hit: its pages are
// cached whether or not it holds them mapped, a chunk mapped only by parked vTensors counts as
// cached in the memory figures (mapping_table::parked_only_chunks()), and before any eviction
// (an allocation the pool and the device cannot serve) and before an expiring order (ttl) drops
// what is due, every parked vTensor is unmapped and unpinned, so the eviction chooses as it would
// without them. At most `parked_ranges` are kept; a new one unmaps the oldest. Its mappings are
// owned by a reserved id (a new request may take the old one's); sim and cuda take the same
// decisions, and on cuda the request's pointer is the parked range. The clock's side: Note
// [Mapping worker model] in sim/vtensor_policy.hpp.
bool scheduler::park(vtensor_record& r, op_effects& fx) {
  const std::uint32_t tensors = geometry_.tensors();
  const std::uint32_t limit = std::min(r.recorded_pages, r.mapped_pages);
  std::uint32_t keep = 0;
  for (; keep < limit; ++keep) {
    bool cached = true;
    for (std::uint32_t t = 0; t < tensors && cached; ++t)
      cached = ops_.pool().records()[r.maps[std::size_t{keep} * tensors + t]->chunk].tree_refs > 0;
    if (!cached) break;
  }
  if (keep == 0) return false;
  if (parked_.size() >= config_.parked_ranges) drop_parked(0, fx);
  fx.kept_job = r.ticket;
  if (keep < r.mapped_pages) unmap_tail(r, keep, fx);
  for (std::uint32_t p = 0; p < keep; ++p) {
    for (std::uint32_t t = 0; t < tensors; ++t) {
      mapping& m = *r.maps[std::size_t{p} * tensors + t];
      ops_.maps().make_shared(m);
      ops_.maps().park(m, k_parked_id);
    }
  }
  mapped_pages_ -= keep;  // cached pages, not a live request's: no part of ahead_bytes()
  r.id = k_parked_id;
  r.shared_pages = keep;
  r.tokens = std::uint64_t{keep} * geometry_.chunk_bytes() / geometry_.bytes_per_token_per_tensor();
  r.ready_pages = std::min(r.ready_pages, keep);
  fx.kept_pages = keep;
  ++counters_.parked;
  return true;
}

std::uint32_t scheduler::adopt_parked(vtensor_record& rec, const prefix_match& m, op_effects& fx) {
  const std::uint32_t tensors = geometry_.tensors();
  std::size_t best = 0;
  std::uint32_t best_pages = 0;
  for (std::size_t i = parked_.size(); i-- > 0;) {  // newest first
    const vtensor_record& p = *parked_[i];
    const std::uint32_t limit = std::min(p.mapped_pages, m.shared);
    std::uint32_t same = 0;
    for (; same < limit; ++same) {
      bool equal = true;
      for (std::uint32_t t = 0; t < tensors && equal; ++t)
        equal = p.maps[std::size_t{same} * tensors + t]->chunk == m.best[same]->chunks[t];
      if (!equal) break;
    }
    if (same > best_pages) {
      best = i;
      best_pages = same;
    }
  }
  if (best_pages == 0) return 0;
  vtensor_record& p = *parked_[best];
  if (best_pages < p.mapped_pages) {
    mapped_pages_ += p.mapped_pages - best_pages;  // unmap_tail subtracts them: a parked vTensor's were not counted
    unmap_tail(p, best_pages, fx);
  }
  ops_.maps().untrack(p);
  rec.base = p.base;
  rec.maps = std::move(p.maps);
  rec.mapped_pages = best_pages;
  rec.ready_pages = std::min(p.ready_pages, best_pages);
  rec.ticket = p.ticket;
  for (mapping* mp : rec.maps) ops_.maps().unpark(*mp, rec.id);
  ops_.maps().track(rec);
  mapped_pages_ += best_pages;
  fx.reused_pages = best_pages;
  fx.reused_job = p.ticket;
  parked_.erase(parked_.begin() + static_cast<std::ptrdiff_t>(best));
  ++counters_.parked_reuses;
  return best_pages;
}

void scheduler::repark(vtensor_record& rec, op_effects& fx) {
  auto p = std::make_unique<vtensor_record>();
  p->id = k_parked_id;
  p->tensor_span_bytes = rec.tensor_span_bytes;
  p->tensors = rec.tensors;
  p->max_tokens = rec.max_tokens;
  ops_.maps().untrack(rec);
  p->base = std::exchange(rec.base, 0);
  p->maps = std::move(rec.maps);
  rec.maps.clear();
  p->mapped_pages = std::exchange(rec.mapped_pages, 0);
  p->ready_pages = std::exchange(rec.ready_pages, 0);
  p->ticket = std::exchange(rec.ticket, 0);
  for (mapping* m : p->maps) ops_.maps().park(*m, k_parked_id);
  mapped_pages_ -= p->mapped_pages;
  p->shared_pages = p->mapped_pages;
  p->tokens = std::uint64_t{p->mapped_pages} * geometry_.chunk_bytes() / geometry_.bytes_per_token_per_tensor();
  ops_.maps().track(*p);
  parked_.push_back(std::move(p));
  fx.reused_pages = 0;
  fx.reused_job = 0;
  --counters_.parked_reuses;
}

void scheduler::drop_parked(std::size_t i, op_effects& fx) {
  vtensor_record& p = *parked_[i];
  // unmap_all subtracts the pages from mapped_pages_, which a parked vTensor left already.
  mapped_pages_ += p.mapped_pages;
  (void)unmap_all(p, &fx);
  parked_.erase(parked_.begin() + static_cast<std::ptrdiff_t>(i));
  ++counters_.parked_drops;
}

void scheduler::unmap_tail(vtensor_record& r, std::uint32_t keep, op_effects& fx) {
  const std::uint32_t tensors = geometry_.tensors();
  mapping_job job;
  for (std::uint32_t t = 0; t < tensors; ++t) {
    run_.clear();
    for (std::uint32_t p = keep; p < r.mapped_pages; ++p) run_.push_back(r.maps[std::size_t{p} * tensors + t]);
    ops_.maps().unmap_run_deferred(run_, job);
    fx.worker_unmaps += static_cast<std::uint32_t>(run_.size());
    ++fx.unmap_runs;
  }
  r.maps.resize(std::size_t{keep} * tensors);
  mapped_pages_ -= r.mapped_pages - keep;
  r.mapped_pages = keep;
  r.ready_pages = std::min(r.ready_pages, keep);
  ops_.gate().submit(std::move(job));
}

// The last step of create and fork: the record, now backed, joins the live requests.
create_result scheduler::go_live(std::unique_ptr<vtensor_record> rec, std::uint64_t tokens, std::uint32_t shared,
                                 std::uint64_t hit, std::uint64_t partial_bytes, op_effects fx) {
  rec->tokens = tokens;
  rec->shared_pages = shared;
  rec->hit_tokens = hit;
  rec->cow_bytes = partial_bytes * geometry_.tensors();
  account(*rec, +1);
  create_result result{alloc_status::ok, hit, rec->cow_bytes, shared, fx};
  const request_id id = rec->id;
  live_.emplace(id, std::move(rec));
  return result;
}

// Note [Effects of a call]
// create, extend, fork, finish and preempt each return what they did: the pages mapped on the
// calling thread, the pages handed to the mapping worker in one job (with its ticket), the job
// the call waited for, and the pool's part (chunks created, taken from the free pool, prefixes
// evicted, lookahead pages missed). A model of the worker (the simulator's clock, Note [Mapping
// worker model] in sim/vtensor_policy.hpp) consumes this record instead of re-deriving the
// scheduler's decisions from the outside. `waited_job` names the job the call had to see done
// (the request's last one), whether or not it had finished in wall time: that is what a model
// needs, and it does not depend on timing. A call answered needs_preemption reports only the
// pool's part (what eviction and creation did before memory ran out); the request is unchanged.

void scheduler::validate_prompt(const vtensor_record& rec, std::span<const token_block> blocks,
                                std::uint64_t prompt_tokens) const {
  const request_id id = rec.id;
  if (prompt_tokens == 0) throw std::invalid_argument(fmt::format("request {}: empty prompt", id.value));
  if (prompt_tokens > rec.max_tokens) {
    throw std::invalid_argument(
        fmt::format("request {}: prompt of {} tokens exceeds its max of {}", id.value, prompt_tokens, rec.max_tokens));
  }
  std::uint64_t block_tokens = 0;
  for (const auto& b : blocks) {
    if (b.tokens == 0) throw std::invalid_argument(fmt::format("request {}: a block of zero tokens", id.value));
    block_tokens += b.tokens;
  }
  if (block_tokens > prompt_tokens) {
    throw std::invalid_argument(
        fmt::format("request {}: blocks name {} tokens but the prompt has {}", id.value, block_tokens, prompt_tokens));
  }
}

// The longest cached prefix of `blocks` usable by a prompt of `prompt_tokens`, and the fullest
// version of each page along it (Note [Page versions]).
scheduler::prefix_match scheduler::match_prefix(std::span<const token_block> blocks, std::uint64_t prompt_tokens) {
  return resolve_match(ops_.cache().tree().match(blocks), prompt_tokens);
}

std::uint64_t scheduler::cached_tokens(std::span<const token_block> blocks, std::uint64_t prompt_tokens) const {
  if (prompt_tokens == 0) return 0;
  return resolve_match(ops_.cache().tree().peek(blocks), prompt_tokens).hit;
}

scheduler::prefix_match scheduler::resolve_match(radix_path path, std::uint64_t prompt_tokens) const {
  const std::uint64_t chunk = geometry_.chunk_bytes();
  const std::uint64_t bpt = geometry_.bytes_per_token_per_tensor();
  prefix_match m;
  m.path = std::move(path);
  const std::uint64_t matched = std::min(m.path.tokens, prompt_tokens - 1);  // one token is always computed
  if (matched > 0) {
    for (const radix_node* n : m.path.nodes) {
      for (const page_version& v : n->pages) {
        if (v.page >= m.best.size()) m.best.resize(v.page + 1, nullptr);
        if (m.best[v.page] == nullptr || v.valid_bytes > m.best[v.page]->valid_bytes) m.best[v.page] = &v;
      }
    }
  }
  std::uint64_t covered_bytes = 0;
  for (std::size_t p = 0; p < m.best.size() && m.best[p] != nullptr; ++p) {
    covered_bytes = p * chunk + m.best[p]->valid_bytes;
    if (m.best[p]->valid_bytes < chunk) break;
  }
  m.hit_max = std::min(matched, covered_bytes / bpt);
  m.shared = static_cast<std::uint32_t>(m.hit_max * bpt / chunk);
  m.hit =
      config_.partial == partial_page_policy::recompute ? ceil_div(std::uint64_t{m.shared} * chunk, bpt) : m.hit_max;
  m.partial_bytes = m.hit * bpt - std::uint64_t{m.shared} * chunk;  // per tensor, copied
  return m;
}

// Note [Expiry at admission]
// An eviction order with a time to live (ttl) drops cached prefixes whose time is up. A prefix
// is only ever reused by an admission's match, so expiring them at the start of each admission
// (and not as the clock moves) reuses exactly what an eager expiry would; what differs is when
// the memory comes back, which is at the next admission instead of the moment of expiry: the
// cached bytes of the memory figures stay up to then (and a decode stretch, which promises that
// the clock alone changes no figure, keeps its promise). Other orders expire nothing.
create_result scheduler::create(request_id id, std::span<const token_block> blocks, std::uint64_t prompt_tokens,
                                std::uint64_t max_tokens) {
  auto rec = new_record(id, max_tokens);
  validate_prompt(*rec, blocks, prompt_tokens);
  const operation_counters before = ops_.counters();
  op_effects fx;
  const evict_scope scope(evict_fx_, fx);  // an eviction's unmaps of parked vTensors are this call's
  ops_.cache().drop_expired();             // Note [Expiry at admission]
  const prefix_match m = match_prefix(blocks, prompt_tokens);
  const auto needed = static_cast<std::uint32_t>(geometry_.pages_for_tokens(prompt_tokens));

  rec->blocks.assign(blocks.begin(), blocks.end());
  if (m.hit > 0) {
    rec->pinned = m.path.deepest();
    ops_.cache().tree().pin(*rec->pinned);
  }
  static const std::vector<chunk_id> k_none;
  const std::uint32_t reused = m.shared > 0 && !parked_.empty() ? adopt_parked(*rec, m, fx) : 0;
  std::vector<chunk_id> chunks;
  chunks.reserve(std::size_t{needed + config_.lookahead_pages} * geometry_.tensors());
  for (std::uint32_t p = reused; p < m.shared; ++p) {
    chunks.insert(chunks.end(), m.best[p]->chunks.begin(), m.best[p]->chunks.end());
  }
  if (standby_ && m.hit == 0) {  // Note [Standby vTensor]
    const std::uint32_t kept = std::min(standby_->mapped_pages, max_pages(*rec));
    if (ops_.pool().holds_without_eviction(std::size_t{needed > kept ? needed - kept : 0} * geometry_.tensors())) {
      adopt_standby(*rec, fx);
    }
  }
  const bool built = build(*rec, chunks, m.shared, needed, m.partial_bytes > 0 ? m.best[m.shared]->chunks : k_none,
                           m.partial_bytes, fx);
  if (built && m.hit == 0) build_standby(fx);
  pool_effects(before, fx);
  if (!built) return {alloc_status::needs_preemption, 0, 0, 0, fx};
  counters_.prompt_tokens += prompt_tokens;
  counters_.hit_tokens += m.hit;
  counters_.recomputed_tokens += m.hit_max - m.hit;
  rec->recorded_pages = m.shared;  // whole pages from the tree, on the pinned path (Note [Incremental publication])
  return go_live(std::move(rec), prompt_tokens, m.shared, m.hit, m.partial_bytes, fx);
}

// Maps the pages up to `needed` that are not even queued, on the calling thread, with the
// lookahead ones when there is no worker. False when out of memory (nothing changed but evictions).
bool scheduler::map_needed(vtensor_record& r, std::uint32_t needed, op_effects& fx) {
  std::vector<chunk_id> chunks;
  const std::size_t count = std::size_t{needed - r.mapped_pages} * geometry_.tensors();
  yield_standby(count, fx);
  if (!ops_.pool().alloc_run(count, &ops_.cache(), chunks)) return false;
  if (!ops_.gate().async()) alloc_ahead(lookahead_target(r, needed) - needed, chunks, fx);
  try {
    map_pages(r, chunks, 0, false, fx);
  } catch (...) {
    for (chunk_id c : chunks) ops_.pool().unuse(c);
    throw;
  }
  return true;
}

extend_result scheduler::extend(request_id id, std::uint64_t tokens) {
  vtensor_record& r = get(id);
  const std::uint64_t total = r.tokens + tokens;
  if (total > r.max_tokens) {
    throw std::invalid_argument(
        fmt::format("request {}: extending to {} tokens exceeds its max of {}", id.value, total, r.max_tokens));
  }
  extend_result result;
  if (fits_in_place(r, total)) {
    grow(r, tokens);  // within its pages, all in place: nothing to map, wait for or top up
    return result;
  }
  const auto needed = static_cast<std::uint32_t>(geometry_.pages_for_tokens(total));
  const operation_counters before = ops_.counters();
  op_effects& fx = result.effects;
  const evict_scope scope(evict_fx_, fx);
  if (config_.pipeline && needed > r.ready_pages) {  // its jobs first: the range may have been unmapped by one
    wait_ready(r, fx);
    fx.waited_first = true;
  }
  if (needed > r.mapped_pages && !map_needed(r, needed, fx)) {
    ++counters_.preemption_signals;
    pool_effects(before, fx);
    result.status = alloc_status::needs_preemption;
    return result;
  }
  if (needed > r.ready_pages) wait_ready(r, fx);  // a page it needs was mapped by the worker: wait until done
  if (config_.lookahead_pages > 0 && needed > geometry_.pages_for_tokens(r.tokens)) {
    top_up(r, needed, fx);
    ops_.pool().create_ahead(config_.create_ahead_chunks);
  }
  grow(r, tokens);
  pool_effects(before, fx);
  return result;
}

// Note [Growth in place]
// A request grows in place while its tokens stay within its max and within the pages its tokens
// already use that are mapped and ready: nothing to map, wait for or top up, only counting. The
// pages are min(ready_pages, pages_for_tokens(tokens)); `total` tokens fit them exactly when
// their bytes per tensor do (a token's bytes may straddle two pages). Neither bound moves while a
// request grows in place, so in_place_rounds() can count the growths ahead: the fewest tokens any
// of the requests has left in place.
std::uint64_t scheduler::in_place_bytes(const vtensor_record& r) const {
  const std::uint64_t pages = std::min<std::uint64_t>(r.ready_pages, geometry_.pages_for_tokens(r.tokens));
  return pages * geometry_.chunk_bytes();
}

bool scheduler::grow_in_place(request_id id, std::uint64_t tokens) {
  const auto it = live_.find(id);
  if (it == live_.end()) return false;
  vtensor_record& r = *it->second;
  if (!fits_in_place(r, r.tokens + tokens)) return false;
  own_valid_bytes_ += tokens * geometry_.bytes_per_token();
  logical_tokens_ += tokens;
  r.tokens += tokens;  // the same pages: token_pages_ does not change
  return true;
}

std::uint64_t scheduler::in_place_rounds(std::span<const request_id> ids) {
  round_.clear();
  round_left_ = 0;
  std::uint64_t rounds = std::numeric_limits<std::uint64_t>::max();
  for (const request_id id : ids) {
    const auto it = live_.find(id);
    if (it == live_.end()) return 0;
    const vtensor_record& r = *it->second;
    const std::uint64_t fit = std::min(r.max_tokens, in_place_bytes(r) / geometry_.bytes_per_token_per_tensor());
    rounds = std::min(rounds, fit > r.tokens ? fit - r.tokens : 0);
    round_.push_back(it->second.get());
  }
  round_left_ = ids.empty() ? 0 : rounds;
  return round_left_;
}

void scheduler::grow_round() {
  if (round_left_ == 0) throw std::logic_error("scheduler::grow_round: no round left of the last in_place_rounds()");
  --round_left_;
  for (vtensor_record* r : round_) ++r->tokens;  // the same pages: token_pages_ does not change
  own_valid_bytes_ += round_.size() * geometry_.bytes_per_token();
  logical_tokens_ += round_.size();
}

void scheduler::erase_live(request_id id) {
  round_.clear();
  round_left_ = 0;
  live_.erase(id);
}

void scheduler::grow(vtensor_record& r, std::uint64_t tokens) {
  own_valid_bytes_ += tokens * geometry_.bytes_per_token();
  logical_tokens_ += tokens;
  token_pages_ += geometry_.pages_for_tokens(r.tokens + tokens) - geometry_.pages_for_tokens(r.tokens);
  r.tokens += tokens;
}

create_result scheduler::fork(request_id parent_id, request_id child_id) {
  vtensor_record& parent = get(parent_id);
  auto rec = new_record(child_id, parent.max_tokens);
  const std::uint64_t chunk = geometry_.chunk_bytes();
  const std::uint64_t bpt = geometry_.bytes_per_token_per_tensor();
  const std::uint32_t tensors = geometry_.tensors();
  const operation_counters before = ops_.counters();

  const auto shared = static_cast<std::uint32_t>(parent.tokens * bpt / chunk);
  const std::uint64_t hit =
      config_.partial == partial_page_policy::recompute ? ceil_div(std::uint64_t{shared} * chunk, bpt) : parent.tokens;
  const std::uint64_t partial_bytes = hit * bpt - std::uint64_t{shared} * chunk;
  // The parent's whole pages become an immutable shared prefix (it never writes them again).
  account(parent, -1);
  for (std::uint32_t p = parent.shared_pages; p < shared; ++p) {
    for (std::uint32_t t = 0; t < tensors; ++t) ops_.maps().make_shared(*parent.maps[std::size_t{p} * tensors + t]);
  }
  parent.shared_pages = std::max(parent.shared_pages, shared);
  account(parent, +1);

  rec->blocks = parent.blocks;
  const auto needed = static_cast<std::uint32_t>(std::max<std::uint64_t>(geometry_.pages_for_tokens(hit), shared));
  if (parent.pinned != nullptr) {
    rec->pinned = parent.pinned;
    ops_.cache().tree().pin(*rec->pinned);
  }
  std::vector<chunk_id> chunks;
  for (std::uint32_t p = 0; p < shared; ++p) {
    for (std::uint32_t t = 0; t < tensors; ++t) chunks.push_back(parent.maps[std::size_t{p} * tensors + t]->chunk);
  }
  std::vector<chunk_id> partial_src;
  for (std::uint32_t t = 0; t < tensors && partial_bytes > 0; ++t) {
    partial_src.push_back(parent.maps[std::size_t{shared} * tensors + t]->chunk);
  }
  op_effects fx;
  const evict_scope scope(evict_fx_, fx);
  const bool built = build(*rec, chunks, shared, needed, partial_src, partial_bytes, fx);
  pool_effects(before, fx);
  if (!built) return {alloc_status::needs_preemption, 0, 0, 0, fx};
  return go_live(std::move(rec), hit, shared, hit, partial_bytes, fx);
}

// Hangs the request's pages on the rTree path of its blocks: whole pages, and the last partial
// page with its valid bytes. Only tokens named by whole blocks, up to `limit`, are recorded.
radix_node* scheduler::record_prefix(vtensor_record& r, std::span<const token_block> extra, std::uint64_t limit) {
  std::vector<token_block> key;
  key.reserve(r.blocks.size() + extra.size());
  std::uint64_t key_tokens = 0;
  limit = std::min(limit, r.tokens);
  for (auto part : {std::span<const token_block>(r.blocks), extra}) {
    for (const auto& b : part) {
      if (key_tokens + b.tokens > limit) break;
      key.push_back(b);
      key_tokens += b.tokens;
    }
    if (key.size() < r.blocks.size()) break;
  }
  if (key_tokens == 0) return nullptr;
  radix_path path = ops_.cache().tree().insert(key);
  const std::uint64_t recorded = path.tokens;
  const std::uint64_t chunk = geometry_.chunk_bytes();
  const std::uint64_t bpt = geometry_.bytes_per_token_per_tensor();
  const std::uint32_t tensors = geometry_.tensors();
  const auto pages = static_cast<std::uint32_t>(geometry_.pages_for_tokens(recorded));
  std::size_t n = 0;
  // Note [Incremental publication]: the leading whole pages an earlier call found or put in the
  // tree are still there, on this path, under the request's pin.
  for (std::uint32_t p = std::min(r.recorded_pages, pages); p < pages; ++p) {
    page_version v;
    v.page = p;
    v.valid_bytes = std::min(chunk, recorded * bpt - std::uint64_t{p} * chunk);
    v.last_token = (std::uint64_t{p} * chunk + v.valid_bytes - 1) / bpt;
    while (path.nodes[n]->end_tokens() <= v.last_token) ++n;
    // A page the tree already holds with as many valid bytes (mostly the cached prefix this request
    // reused) would come straight back from attach(): its references would be taken and dropped
    // again, and the chunks, mapped by this request, cannot reach the free pool in between. Skipped.
    if (radix_tree::covers(*path.nodes[n], p, v.valid_bytes)) continue;
    v.chunks.reserve(tensors);
    for (std::uint32_t t = 0; t < tensors; ++t) v.chunks.push_back(r.maps[std::size_t{p} * tensors + t]->chunk);
    ops_.cache().record_page(*path.nodes[n], std::move(v));
  }
  r.recorded_pages = std::max(r.recorded_pages, static_cast<std::uint32_t>(recorded * bpt / chunk));
  return path.deepest();
}

// Note [Incremental publication]
// With eager publication record_prefix runs after every step that computes part of a prompt, and
// walking every page of the prompt each time made it 8.8% of a replay's instructions in kv-fused
// and 30% of its time in token-major (16 tokens a page: a 10,000-token prompt has 625). Each
// request remembers how many leading whole pages are known to be in the tree (`recorded_pages`:
// its cache hit's whole pages at create, then those a call found there or recorded) and the next
// call starts after them. They cannot have left the tree in between: they lie on the path to the
// deepest node the request published, which it pins (with its ancestors) until it is released,
// and a whole page is never replaced by a fuller version. Outputs are byte-identical to the full walk (the identity
// set).

// Note [Eager publication]
// The seed records a request's prefix in the rTree when it finishes (or is preempted), so a
// request that arrives while another with the same prefix still runs computes it again (the
// `unpublished` misses of compare). Nothing in vTensor's design asks for that: a page whose KV is
// computed can be mapped into another vTensor at once. With eager publication (vtensor's
// --publish eager) the replica tells the policy after each step how far each prompt's prefill
// has come (kv_policy::computed), and the pages of those tokens enter the tree then: the whole
// pages, and the last partial one as a copy-on-write source (a reader copies its valid bytes;
// the owner goes on writing after them, so its chunk is mapped by it alone: the pool's invariants
// allow a written chunk tree references, never another mapping). Its whole computed pages are
// marked shared (immutable) as a fork's parent's are, since another request may now map them.
// The request then pins the deepest node of what it
// published instead of its hit path (a descendant of it), so that eviction never takes a node
// whose chunks a live request still maps: evicting it would free nothing. At finish the rest
// (decode tokens with known keys) is recorded as before; pages already in the tree with as many
// valid bytes are skipped. A request whose prefix another is still computing hits what that one
// has published so far and computes the rest itself (the `in flight` misses of compare). No VMM
// call is made: only tree references are taken, so the sim and cuda backends stay step-identical.
void scheduler::publish(request_id id, std::uint64_t tokens) {
  vtensor_record& r = get(id);
  tokens = std::min(tokens, r.tokens);
  // Its whole computed pages become an immutable shared prefix, as a fork's parent's do: it never
  // writes them again, and another request may now map them.
  const std::uint32_t tensors = geometry_.tensors();
  const auto whole =
      std::min(static_cast<std::uint32_t>(tokens * geometry_.bytes_per_token_per_tensor() / geometry_.chunk_bytes()),
               r.mapped_pages);
  if (whole > r.shared_pages) {
    account(r, -1);
    for (std::uint32_t p = r.shared_pages; p < whole; ++p) {
      for (std::uint32_t t = 0; t < tensors; ++t) ops_.maps().make_shared(*r.maps[std::size_t{p} * tensors + t]);
    }
    r.shared_pages = whole;
    account(r, +1);
  }
  radix_node* deepest = record_prefix(r, {}, tokens);
  if (deepest == nullptr || deepest == r.pinned) return;
  ops_.cache().tree().pin(*deepest);
  if (r.pinned != nullptr) ops_.cache().tree().unpin(*r.pinned);
  r.pinned = deepest;
}

void scheduler::release(vtensor_record& r, op_effects& fx, bool may_park) {
  account(r, -1);
  if (r.pinned != nullptr) ops_.cache().tree().unpin(*r.pinned);
  r.pinned = nullptr;
  if (may_park && config_.parked_ranges > 0 && park(r, fx)) return;  // Note [Parked vTensors]: the caller parks it
  if (config_.pipeline) {                                            // Note [Releases on the worker]
    (void)unmap_all(r, &fx);
    return;
  }
  fx.waited_job = unmap_all(r);
  ops_.maps().untrack(r);
  ops_.ranges().free(r.base);
}

op_effects scheduler::finish(request_id id, std::span<const token_block> extra_blocks) {
  vtensor_record& r = get(id);
  op_effects fx;
  (void)record_prefix(r, extra_blocks, r.tokens);
  release(r, fx, true);
  retire(id, fx);
  return fx;
}

op_effects scheduler::preempt(request_id id) {
  vtensor_record& r = get(id);
  op_effects fx;
  if (config_.record_on_preempt) (void)record_prefix(r, {}, r.tokens);
  release(r, fx, true);
  retire(id, fx);
  ++counters_.preempted;
  return fx;
}

void scheduler::retire(request_id id, const op_effects& fx) {
  if (fx.kept_pages > 0) parked_.push_back(std::move(live_.find(id)->second));  // Note [Parked vTensors]
  erase_live(id);
}

vtensor_view scheduler::view(const vtensor_record& r) const {
  return vtensor_view{r.id,
                      r.base,
                      r.tensor_span_bytes,
                      geometry_.tensors(),
                      r.tokens,
                      std::min(r.max_tokens, std::uint64_t{r.mapped_pages} * geometry_.chunk_bytes() /
                                                 geometry_.bytes_per_token_per_tensor()),
                      r.max_tokens,
                      r.hit_tokens};
}

memory_stats scheduler::memory() const {
  const std::uint64_t chunk = geometry_.chunk_bytes();
  memory_stats m;
  m.physical_bytes = ops_.pool().records().live() * chunk;
  // A chunk mapped by parked vTensors alone is a cached prefix's (Note [Parked vTensors]).
  const std::uint64_t parked_only = ops_.maps().parked_only_chunks();
  m.mapped_bytes = (ops_.maps().mapped_chunks() - parked_only) * chunk;
  m.used_bytes = own_valid_bytes_ + (ops_.maps().shared_chunks() - parked_only) * chunk;
  m.free_pool_bytes = ops_.pool().records().free_count() * chunk;
  m.cached_bytes = m.physical_bytes - m.mapped_bytes - m.free_pool_bytes;
  m.logical_bytes = logical_bytes();
  return m;
}

void scheduler::settle() {
  ops_.settle();
  for (auto& [id, r] : live_) r->ready_pages = r->mapped_pages;
  if (standby_) standby_->ready_pages = standby_->mapped_pages;
  for (auto& p : parked_) p->ready_pages = p->mapped_pages;
}

void scheduler::shutdown() {
  ops_.gate().drain();
  op_effects ignored;
  for (auto& [id, r] : live_) release(*r, ignored);
  if (standby_) (void)unmap_all(*standby_, &ignored);  // only with the pipeline: as its releases
  standby_.reset();
  while (!parked_.empty()) drop_parked(parked_.size() - 1, ignored);
  round_.clear();
  round_left_ = 0;
  live_.clear();
  ops_.drop_cache_and_trim();
}

namespace {
[[noreturn]] void fail(const std::string& why) { throw std::logic_error("scheduler invariant: " + why); }
}  // namespace

// One live request against the pool: its page table, its reservation, its shared pages.
void scheduler::check_record(const vtensor_record& r) const {
  const std::uint32_t tensors = geometry_.tensors();
  const std::uint64_t chunk = geometry_.chunk_bytes();
  const request_id id = r.id;
  if (r.maps.size() != std::size_t{r.mapped_pages} * tensors)
    fail(fmt::format("request {}: page table size", id.value));
  if (r.mapped_pages < geometry_.pages_for_tokens(r.tokens))
    fail(fmt::format("request {}: tokens not mapped", id.value));
  if (r.mapped_pages > max_pages(r)) fail(fmt::format("request {}: mapped past its reservation", id.value));
  if (r.ready_pages > r.mapped_pages) fail(fmt::format("request {}: more pages ready than mapped", id.value));
  if (r.tokens > r.max_tokens) fail(fmt::format("request {}: tokens past max", id.value));
  if (std::uint64_t{r.shared_pages} * chunk > r.tokens * geometry_.bytes_per_token_per_tensor()) {
    fail(fmt::format("request {}: a shared page is not fully valid", id.value));
  }
  for (std::uint32_t p = 0; p < r.mapped_pages; ++p) {
    for (std::uint32_t t = 0; t < tensors; ++t) {
      const mapping* m = r.maps[std::size_t{p} * tensors + t];
      if (m == nullptr || ops_.maps().records().find(r.page_addr(t, p, chunk)) != m) {
        fail(fmt::format("request {}: page {} of tensor {} is not the vSet's mapping", id.value, p, t));
      }
      if (m->owner != r.id) fail(fmt::format("request {}: mapping owned by {}", id.value, m->owner.value));
      if (m->shared != (p < r.shared_pages)) {
        fail(fmt::format("request {}: page {} shared flag {} but {} shared pages", id.value, p, m->shared,
                         r.shared_pages));
      }
    }
  }
}

// Each rTree node's pin count = live requests pinning it or a node below it.
void scheduler::check_pins() const {
  std::unordered_map<const radix_node*, std::uint32_t> pins;
  for (const auto& [id, r] : live_) {
    if (r->pinned != nullptr) ++pins[r->pinned];
  }

  auto expect = [&](auto&& self, const radix_node& n) -> std::uint32_t {
    std::uint32_t sum = 0;
    auto it = pins.find(&n);
    if (it != pins.end()) sum += it->second;
    for (const auto& c : n.children) sum += self(self, *c);
    if (&n != &ops_.cache().tree().root() && n.pins != sum) {
      fail(fmt::format("rtree node pinned {} times, {} live requests use it", n.pins, sum));
    }
    return sum;
  };
  expect(expect, ops_.cache().tree().root());
}

void scheduler::check_invariants() const {
  ops_.check_invariants();
  std::uint64_t own = 0, logical = 0, mappings = 0, mapped_pages = 0, token_pages = 0;
  for (const auto& [id, r] : live_) {
    check_record(*r);
    own += own_bytes(*r);
    logical += r->tokens;
    mappings += r->maps.size();
    mapped_pages += r->mapped_pages;
    token_pages += geometry_.pages_for_tokens(r->tokens);
  }
  if (standby_) {  // Note [Standby vTensor]: private pages, no token, no pin
    check_record(*standby_);
    if (standby_->tokens != 0 || standby_->pinned != nullptr) fail("the standby vTensor holds tokens or a pin");
    mappings += standby_->maps.size();
    mapped_pages += standby_->mapped_pages;
  }
  for (const auto& p : parked_) {  // Note [Parked vTensors]: shared cached pages, a pin, no page counted
    check_record(*p);
    if (p->pinned != nullptr) fail("a parked vTensor pins a node");
    for (const mapping* m : p->maps) {
      if (!m->parked || ops_.pool().records()[m->chunk].tree_refs == 0)
        fail(fmt::format("a parked vTensor maps chunk {} that is not a parked cached page", m->chunk.value));
    }
    mappings += p->maps.size();
  }
  if (mapped_pages != mapped_pages_ || token_pages != token_pages_) {
    fail(fmt::format("pages mapped {} (counted {}), filled by tokens {} (counted {})", mapped_pages, mapped_pages_,
                     token_pages, token_pages_));
  }
  if (own != own_valid_bytes_) fail(fmt::format("own valid bytes {} counted {}", own, own_valid_bytes_));
  if (logical != logical_tokens_) fail("logical tokens drifted");
  if (mappings != ops_.maps().records().size()) fail("a mapping belongs to no live request");
  check_pins();
  const std::uint64_t ranges = live_.size() + (standby_ ? 1 : 0) + parked_.size() + ops_.ranges().cached() +
                               (ops_.ranges().has_scratch() ? 1 : 0);
  if (const auto idle = ops_.gate().backend_if_idle(); idle && idle->live.ranges != ranges) {
    fail(fmt::format("backend holds {} ranges, expected {}", idle->live.ranges, ranges));
  }
}

}  // namespace vtensor
