#include "sim/vattention_policy.hpp"

#include <algorithm>
#include <iterator>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "sim/policy_options.hpp"

namespace vtensor::sim {
namespace {

vmm_side minus(const vmm_side& a, const vmm_side& b) {
  vmm_side d;
  for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
    d.calls[k] = a.calls[k] - b.calls[k];
    d.charged_ns[k] = a.charged_ns[k] - b.charged_ns[k];
    d.model_ns[k] = a.model_ns[k] - b.model_ns[k];
  }
  return d;
}

void add_to(vmm_side& into, const vmm_side& d) {
  for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
    into.calls[k] += d.calls[k];
    into.charged_ns[k] += d.charged_ns[k];
    into.model_ns[k] += d.model_ns[k];
  }
}

}  // namespace

vattention_policy_options vattention_options(const kv_policy_options& o, const vattention_settings& s) {
  vattention_policy_options v;
  v.backend = o.backend;
  v.device = device_config(o);
  v.kv = o.kv;
  v.max_context_tokens = o.max_context_tokens;
  v.lookahead_pages = s.lookahead_pages;
  v.async_lookahead = s.async_lookahead;
  v.megacache = s.megacache;
  return v;
}

policy_definition<vattention_settings> vattention_definition() {
  using s = vattention_settings;
  policy_definition<s> d;
  d.options = {lookahead_option(&s::lookahead_pages), async_lookahead_option(&s::async_lookahead),
               truth_option<s>("megacache", "vattention: one buffer for K and one for V over all layers (true/false)",
                               &s::megacache, false)};
  d.make = [](const kv_policy_options& o, const s& v) {
    return std::make_unique<vattention_policy>(vattention_options(o, v));
  };
  d.access = [](const kv_policy_options&, const s&) { return kv_access{}; };  // contiguous per request
  d.sharing = [](const kv_policy_options&, const s&) { return sharing_model{sharing_model::moment::never, 1}; };
  return d;
}

vattention_policy::vattention_policy(vattention_policy_options options)
    : vattention_policy(options, make_backend(options.backend, options.device), latency_model_for(options.device)) {}

vattention_policy::vattention_policy(vattention_policy_options options, std::unique_ptr<vmm_backend> inner,
                                     latency_model model)
    : options_(std::move(options)), backend_(std::make_unique<accounting_backend>(std::move(inner), std::move(model))) {
  const model_spec& kv = options_.kv;
  if (kv.layers == 0 || kv.kv_heads == 0 || kv.head_dim == 0 || kv.dtype_bytes == 0) {
    throw std::invalid_argument(fmt::format(
        "vattention: the model's KV shape (kv) needs layers, kv_heads, head_dim and dtype_bytes above 0 (got {}, {}, "
        "{}, {})",
        kv.layers, kv.kv_heads, kv.head_dim, kv.dtype_bytes));
  }
  if (options_.max_context_tokens == 0) throw std::invalid_argument("vattention: max_context_tokens must be above 0");
  // Note [vAttention slots and buffers]
  buffers_ = options_.megacache ? 2 : 2 * kv.layers;
  buffer_token_bytes_ = kv.kv_bytes_per_token() / buffers_;
  tokens_per_page_ = k_chunk_bytes / buffer_token_bytes_;
  if (tokens_per_page_ == 0) {
    throw std::invalid_argument(
        fmt::format("vattention: one token of one buffer ({} bytes{}) does not fit a {} MiB page", buffer_token_bytes_,
                    options_.megacache ? ", megacache" : "", k_chunk_bytes / k_mib));
  }
  pages_per_buffer_ = ceil_div(options_.max_context_tokens, tokens_per_page_);
  slot_bytes_ = std::uint64_t{buffers_} * pages_per_buffer_ * k_chunk_bytes;
}

vattention_policy::~vattention_policy() {
  try {
    for (const auto& s : slots_) {
      unmap_rows(*s, 0);
      backend_->free_range(s->base);
    }
    for (const chunk_handle h : free_) backend_->release_chunk(h);
  } catch (...) {  // nothing to do in a destructor: the backend reports what it still holds
  }
}

std::uint64_t vattention_policy::rows_for(std::uint64_t tokens) const { return ceil_div(tokens, tokens_per_page_); }

std::uint64_t vattention_policy::lookahead_target(std::uint64_t tokens) const {
  return std::min(pages_per_buffer_, rows_for(tokens) + options_.lookahead_pages);
}

std::uint64_t vattention_policy::row_bytes() const { return std::uint64_t{buffers_} * k_chunk_bytes; }

device_addr vattention_policy::page_addr(const slot& s, std::uint32_t buffer, std::uint64_t row) const {
  return s.base + (std::uint64_t{buffer} * pages_per_buffer_ + row) * k_chunk_bytes;
}

std::uint64_t vattention_policy::rows_of(request_id id) const {
  const auto it = live_.find(id.value);
  if (it == live_.end()) throw std::invalid_argument(fmt::format("vattention: unknown request {}", id.value));
  return it->second->rows;
}

// ---- clock ------------------------------------------------------------------------------------

sim_ns vattention_policy::step_model_ns() const {
  return sim_ns{backend_->step_side().total_model_ns() - worker_.total_model_ns()};
}

void vattention_policy::book_step_calls() { clock_.book_calls(step_model_ns()); }

void vattention_policy::do_advance_to(sim_us at) {
  const auto t = std::chrono::duration_cast<sim_ns>(at);
  if (!clock_.passes(t)) return;
  // Note [vAttention mapping worker model]: the queued jobs were spawned when the step's own work
  // ended; they run at the next call (so that their time falls in the next step's VMM figures).
  if (!pending_.empty() && !spawn_) spawn_ = now();
  clock_.advance_to(t);
}

void vattention_policy::wait_for_rows(slot& s, std::uint64_t below_row) {
  const sim_ns t = now();
  // Jobs end in submission order (one worker), so the last job that mapped a needed row ends last.
  sim_ns done{};
  for (const job& j : s.jobs) {
    if (j.first_row < below_row) done = j.done;
  }
  clock_.wait(t, done);
  const sim_ns after = now();
  std::erase_if(s.jobs, [&](const job& j) { return j.done <= after; });
}

// ---- slots ------------------------------------------------------------------------------------

vattention_policy::slot& vattention_policy::take_slot(std::uint64_t rows_needed) {
  if (!idle_by_rows_.empty()) {
    // Note [vAttention deferred reclamation]: the fewest rows that cover the prompt, else the most.
    auto it = idle_by_rows_.lower_bound({rows_needed, 0});
    if (it == idle_by_rows_.end()) it = idle_by_rows_.lower_bound({std::prev(idle_by_rows_.end())->first, 0});
    slot& s = *slots_[it->second];
    leave_idle(s);
    return s;
  }
  const device_addr base = backend_->reserve(slot_bytes_);
  auto s = std::make_unique<slot>();
  s->base = base;
  s->index = static_cast<std::uint32_t>(slots_.size());
  slots_.push_back(std::move(s));
  return *slots_.back();
}

void vattention_policy::leave_idle(slot& s) {
  idle_by_rows_.erase({s.rows, s.index});
  idle_with_rows_.erase(s.index);
  idle_rows_ -= s.rows;
  live_rows_ += s.rows;
  s.live = true;
}

void vattention_policy::make_idle(slot& s) {
  live_excess_.erase(s.index);
  live_rows_ -= s.rows;
  live_token_rows_ -= rows_for(s.tokens);
  live_tokens_ -= s.tokens;
  s.live = false;
  s.id = 0;
  s.tokens = 0;
  s.max_tokens = 0;
  idle_rows_ += s.rows;
  idle_by_rows_.insert({s.rows, s.index});
  if (s.rows > 0) idle_with_rows_.insert(s.index);
}

// ---- mapping ----------------------------------------------------------------------------------

std::optional<chunk_handle> vattention_policy::obtain_chunk(const slot& s, bool worker, bool ahead) {
  if (!free_.empty()) {
    const chunk_handle h = free_.back();
    free_.pop_back();
    return h;
  }
  for (;;) {
    // At the budget the create would fail: reclaim without asking the driver.
    if (chunks_held_ < backend_->capacity_chunks()) {
      if (const std::optional<chunk_handle> h = backend_->create_chunk()) {
        ++chunks_held_;
        ++chunks_created_;
        if (worker) ++chunks_created_ahead_;
        return h;
      }
    }
    if (!reclaim_one(s, worker, ahead)) return std::nullopt;  // Note [vAttention deferred reclamation]
    if (!free_.empty()) {
      const chunk_handle h = free_.back();
      free_.pop_back();
      return h;
    }
  }
}

std::uint64_t vattention_policy::available_chunks(const slot& s, bool ahead) const {
  const std::uint64_t capacity = backend_->capacity_chunks();
  std::uint64_t n = free_.size() + (capacity > chunks_held_ ? capacity - chunks_held_ : 0);
  n = std::min(n + idle_rows_ * buffers_, std::numeric_limits<std::uint64_t>::max() / 2);
  if (!ahead) n += (live_rows_ - live_token_rows_ - (s.rows - rows_for(s.tokens))) * buffers_;
  return n;
}

bool vattention_policy::map_rows(slot& s, std::uint64_t rows, bool worker, bool ahead) {
  // As the engine checks kvblocks_available() before it maps: no call is made for rows that
  // cannot all be had (a create may still fail, on a real device or under fault injection).
  if (rows > s.rows && (rows - s.rows) * buffers_ > available_chunks(s, ahead)) return false;
  const auto undo_partial_row = [&] {
    const std::uint64_t row = s.rows;
    while (s.chunks.size() > row * buffers_) {
      const auto b = static_cast<std::uint32_t>(s.chunks.size() - row * buffers_ - 1);
      backend_->unmap(page_addr(s, b, row), k_chunk_bytes);
      free_.push_back(s.chunks.back());
      s.chunks.pop_back();
    }
  };
  while (s.rows < rows) {
    if (free_.size() >= buffers_) {  // Note [A row from the free list in one call]
      map_row_from_free(s);
      ++s.rows;
      (s.live ? live_rows_ : idle_rows_) += 1;
      continue;
    }
    for (std::uint32_t b = 0; b < buffers_; ++b) {
      const std::optional<chunk_handle> h = obtain_chunk(s, worker, ahead);
      if (!h) {
        undo_partial_row();
        return false;
      }
      try {
        backend_->map_with_access(page_addr(s, b, s.rows), *h);
      } catch (...) {
        free_.push_back(*h);  // not mapped: back to the pool
        undo_partial_row();
        throw;
      }
      s.chunks.push_back(*h);
    }
    ++s.rows;
    (s.live ? live_rows_ : idle_rows_) += 1;
  }
  return true;
}

// Note [A row from the free list in one call]
// A row is a chunk in each buffer, taken one by one (the free list's last first) and mapped as
// it is taken. When the free list holds the whole row, taking it makes no VMM call, so the row's
// maps go to the backend in one map_runs_with_access call (Note [Runs of maps] in
// backends/vmm_backend.cpp): the same calls in the same order, counted, charged and booked
// alike, but through the accounting adaptor's layers once a row instead of once a chunk. The
// chunks leave the free list only once all are mapped. A failing map ends as the chunk-by-chunk
// loop ends: the chunks mapped before it are unmapped last first, and the free list is as it was
// (the loop gave back the failing chunk, then the mapped ones last first, which restores it).
void vattention_policy::map_row_from_free(slot& s) {
  row_maps_.clear();
  for (std::uint32_t b = 0; b < buffers_; ++b)
    row_maps_.push_back({page_addr(s, b, s.rows), free_[free_.size() - 1 - b]});
  std::size_t done = 0;
  try {
    backend_->map_runs_with_access(row_maps_, done);
  } catch (...) {
    while (done > 0) {
      --done;
      backend_->unmap(row_maps_[done].va, k_chunk_bytes);
    }
    throw;
  }
  for (const mapping_entry& m : row_maps_) s.chunks.push_back(m.handle);
  free_.resize(free_.size() - buffers_);
}

void vattention_policy::unmap_rows(slot& s, std::uint64_t keep_rows) {
  if (s.rows <= keep_rows) return;
  const std::uint64_t n = s.rows - keep_rows;
  for (std::uint32_t b = 0; b < buffers_; ++b) backend_->unmap(page_addr(s, b, keep_rows), n * k_chunk_bytes);
  free_.insert(free_.end(), s.chunks.begin() + static_cast<std::ptrdiff_t>(keep_rows * buffers_), s.chunks.end());
  s.chunks.resize(keep_rows * buffers_);
  (s.live ? live_rows_ : idle_rows_) -= n;
  s.rows = keep_rows;
  std::erase_if(s.jobs, [&](const job& j) { return j.first_row >= keep_rows; });
}

void vattention_policy::refile(slot& s) {
  if (s.live && s.tokens > 0 && s.rows > rows_for(s.tokens)) {
    live_excess_.insert(s.index);
  } else {
    live_excess_.erase(s.index);
  }
}

bool vattention_policy::reclaim_one(const slot& for_slot, bool worker, bool ahead) {
  // Idle slots first, then (for a need, not a lookahead) live slots' rows beyond their tokens; the
  // highest index first in each.
  slot* v = nullptr;
  if (!idle_with_rows_.empty()) {
    v = slots_[*idle_with_rows_.rbegin()].get();
  } else if (!ahead) {  // a lookahead takes no other request's rows
    for (auto it = live_excess_.rbegin(); it != live_excess_.rend(); ++it) {
      if (*it != for_slot.index) {
        v = slots_[*it].get();
        break;
      }
    }
  }
  if (v == nullptr) return false;
  const std::uint64_t keep = v->live ? rows_for(v->tokens) : 0;
  if (!worker) wait_for_rows(*v, v->rows);  // the worker maps in order: its earlier jobs are done
  if (v->live) {
    unmap_rows(*v, keep);
    refile(*v);
    ++trimmed_slots_;
  } else {
    idle_by_rows_.erase({v->rows, v->index});
    idle_with_rows_.erase(v->index);
    unmap_rows(*v, 0);
    idle_by_rows_.insert({0, v->index});
    ++reclaimed_slots_;
  }
  return true;
}

void vattention_policy::want_lookahead(slot& s) {
  refile(s);
  if (!options_.async_lookahead || options_.lookahead_pages == 0) {
    lookahead(s, now());
    return;
  }
  if (s.pending) return;
  s.pending = true;
  pending_.push_back(s.index);
}

void vattention_policy::flush() {
  if (!spawn_) return;
  const sim_ns spawn = *spawn_;
  spawn_.reset();
  run_pending(spawn);
}

void vattention_policy::run_pending(sim_ns spawn) {
  for (const std::uint32_t i : pending_) {
    slot& s = *slots_[i];
    s.pending = false;
    if (s.live) lookahead(s, spawn);
  }
  pending_.clear();
}

void vattention_policy::lookahead(slot& s, sim_ns spawn) {
  const std::uint64_t target = std::min(lookahead_target(s.tokens), s.rows + available_chunks(s, true) / buffers_);
  if (s.rows >= target) {
    refile(s);
    return;
  }
  const bool worker = options_.async_lookahead;
  const vmm_side before = backend_->step_side();
  const std::uint64_t first = s.rows;
  try {
    (void)map_rows(s, target, worker, true);  // short of chunks: the next grow maps what it needs
  } catch (const vmm_error&) {
    ++lookahead_failures_;  // Note [vAttention mapping worker model]: the job ends here
  }
  refile(s);
  if (!worker) {
    book_step_calls();
    return;
  }
  const vmm_side delta = minus(backend_->step_side(), before);
  add_to(worker_, delta);
  const sim_ns price{delta.total_model_ns()};
  const sim_ns done = clock_.run_job(spawn, price);
  if (s.rows > first) s.jobs.push_back({first, done});
}

// ---- the interface ----------------------------------------------------------------------------

kv_admit_result vattention_policy::do_admit(const kv_request& r) {
  if (live_.contains(r.id.value)) {
    throw std::invalid_argument(fmt::format("vattention: request {} is already admitted", r.id.value));
  }
  if (r.prompt_tokens == 0 || r.prompt_tokens > r.max_tokens) {
    throw std::invalid_argument(fmt::format("vattention: request {} has prompt {} and max_tokens {}", r.id.value,
                                            r.prompt_tokens, r.max_tokens));
  }
  if (r.max_tokens > options_.max_context_tokens) {
    throw std::invalid_argument(fmt::format("vattention: request {} may grow to {} tokens, past max_context_tokens {}",
                                            r.id.value, r.max_tokens, options_.max_context_tokens));
  }
  flush();  // misuse above changes nothing; from here the queued jobs run first
  const std::uint64_t need = rows_for(r.prompt_tokens);
  slot& s = take_slot(need);
  if (!s.live) {  // a new slot: live with no rows
    s.live = true;
  }
  s.id = r.id.value;
  wait_for_rows(s, std::min(need, s.rows));  // rows a job of the previous owner may still be mapping
  const std::uint64_t kept = s.rows;
  bool ok = false;
  try {
    ok = map_rows(s, need, false, false);
  } catch (...) {
    unmap_rows(s, kept);
    make_idle(s);
    book_step_calls();
    throw;
  }
  if (!ok) {
    unmap_rows(s, kept);
    make_idle(s);
    book_step_calls();
    return {};
  }
  s.tokens = r.prompt_tokens;
  s.max_tokens = r.max_tokens;
  live_tokens_ += s.tokens;
  live_token_rows_ += need;
  live_.emplace(r.id.value, &s);
  prompt_tokens_ += r.prompt_tokens;
  book_step_calls();
  want_lookahead(s);
  return {true, 0, 0};
}

bool vattention_policy::do_grow(request_id id, std::uint64_t tokens) {
  const auto it = live_.find(id.value);
  if (it == live_.end()) throw std::invalid_argument(fmt::format("vattention: unknown request {}", id.value));
  slot& s = *it->second;
  if (tokens > s.max_tokens - s.tokens) {
    throw std::invalid_argument(fmt::format("vattention: request {} grows past its max_tokens {} ({} + {})", id.value,
                                            s.max_tokens, s.tokens, tokens));
  }
  flush();
  const std::uint64_t need = rows_for(s.tokens + tokens);
  const std::uint64_t kept = s.rows;
  if (need > s.rows) {  // the lookahead fell short: the step thread maps
    bool ok = false;
    try {
      ok = map_rows(s, need, false, false);
    } catch (...) {
      unmap_rows(s, kept);
      book_step_calls();
      throw;
    }
    if (!ok) {
      unmap_rows(s, kept);
      book_step_calls();
      return false;
    }
  }
  book_step_calls();
  wait_for_rows(s, need);  // a row the worker maps must be ready before the step writes it
  live_token_rows_ += need - rows_for(s.tokens);
  live_tokens_ += tokens;
  s.tokens += tokens;
  want_lookahead(s);
  return true;
}

void vattention_policy::do_release(request_id id, release_reason /*why*/) {
  const auto it = live_.find(id.value);
  if (it == live_.end()) throw std::invalid_argument(fmt::format("vattention: unknown request {}", id.value));
  flush();
  slot& s = *it->second;
  live_.erase(it);
  make_idle(s);  // Note [vAttention deferred reclamation]: the pages stay mapped
}

// Note [vAttention memory breakdown]
// Every chunk held is mapped in exactly one slot or sits unmapped in the pool (free): physical =
// rows mapped x buffers x 2 MiB + pooled chunks. In a live slot the rows up to the
// one holding the last token hold `used` (tokens x bytes per token) and the unused tail of each
// buffer's last page (internal, with the bytes a page cannot use when a token does not divide
// it); the rows beyond it are lookahead (reserved idle). Idle slots' rows are cached, and all of
// it is reclaimable: a page belongs to one slot, so emptying every idle slot gives back every
// cached chunk (cached pinning 0). Nothing is external: any pooled chunk backs any page.
kv_stats vattention_policy::do_stats() const {
  kv_stats s;
  const std::uint64_t rb = row_bytes();
  s.memory.physical_bytes = chunks_held_ * k_chunk_bytes;
  s.memory.mapped_bytes = live_rows_ * rb;
  s.memory.used_bytes = live_tokens_ * options_.kv.kv_bytes_per_token();
  s.memory.cached_bytes = idle_rows_ * rb;
  s.memory.free_pool_bytes = free_.size() * k_chunk_bytes;
  s.memory.logical_bytes = s.memory.used_bytes;
  s.breakdown.used = s.memory.used_bytes;
  s.breakdown.internal = live_token_rows_ * rb - s.memory.used_bytes;
  s.breakdown.reserved_idle = (live_rows_ - live_token_rows_) * rb;
  s.breakdown.cached = s.memory.cached_bytes;
  s.breakdown.free = s.memory.free_pool_bytes;
  s.breakdown.reclaimable = s.memory.cached_bytes;
  s.prompt_tokens = prompt_tokens_;
  s.evictions = reclaimed_slots_;
  s.chunks_created = chunks_created_;
  s.vmm = backend_->counters();
  return s;
}

sim_ns vattention_policy::do_vmm_time() const { return step_model_ns() + clock_.job_time; }

vmm_split_report vattention_policy::report() const {
  vmm_split_report r;
  r.step = minus(backend_->step_side(), worker_);
  r.worker = worker_;
  clock_.report(r);
  r.async_vmm_ns = worker_.total_charged_ns();
  r.chunks_created = chunks_created_;
  r.chunks_created_ahead = chunks_created_ahead_;
  return r;
}

nlohmann::ordered_json vattention_policy::do_describe() const {
  nlohmann::ordered_json j = describe_device(options_.backend, options_.device);
  const nlohmann::ordered_json own = {
      {"megacache", options_.megacache},
      {"buffers_per_slot", buffers_},
      {"buffer_bytes_per_token", buffer_token_bytes_},
      {"tokens_per_page", tokens_per_page_},
      {"pages_per_buffer", pages_per_buffer_},
      {"slot_bytes", slot_bytes_},
      {"kv_bytes_per_token", options_.kv.kv_bytes_per_token()},
      {"max_context_tokens", options_.max_context_tokens},
      {"lookahead_pages", options_.lookahead_pages},
      {"async_lookahead", options_.async_lookahead},
      {"slot_choice", "best fit (fewest rows covering the prompt, else most)"},
      {"reclamation", "deferred: idle slots emptied only when a chunk cannot be created"}};
  for (const auto& [key, value] : own.items()) j[key] = value;
  return j;
}

void vattention_policy::do_check_invariants() const {
  const auto fail = [](const std::string& why) { throw std::logic_error("vattention policy: " + why); };
  std::uint64_t live_rows = 0, token_rows = 0, idle_rows = 0, tokens = 0, chunks = 0, live = 0;
  for (const auto& p : slots_) {
    const slot& s = *p;
    if (s.rows > pages_per_buffer_) fail(fmt::format("slot {} maps {} rows of {}", s.index, s.rows, pages_per_buffer_));
    if (s.chunks.size() != s.rows * buffers_) {
      fail(fmt::format("slot {} holds {} chunks for {} rows", s.index, s.chunks.size(), s.rows));
    }
    chunks += s.chunks.size();
    if (s.live) {
      ++live;
      const auto it = live_.find(s.id);
      if (it == live_.end() || it->second != &s) fail(fmt::format("live slot {} not indexed by its request", s.index));
      if (s.tokens == 0 || s.tokens > s.max_tokens) fail(fmt::format("slot {} holds {} tokens", s.index, s.tokens));
      if (rows_for(s.tokens) > s.rows) fail(fmt::format("slot {}: {} tokens in {} rows", s.index, s.tokens, s.rows));
      live_rows += s.rows;
      token_rows += rows_for(s.tokens);
      tokens += s.tokens;
      if (idle_by_rows_.contains({s.rows, s.index})) fail(fmt::format("live slot {} listed idle", s.index));
      if (live_excess_.contains(s.index) != (s.rows > rows_for(s.tokens))) {
        fail(fmt::format("live slot {} misfiled for trimming", s.index));
      }
    } else {
      idle_rows += s.rows;
      if (!idle_by_rows_.contains({s.rows, s.index})) fail(fmt::format("idle slot {} not listed", s.index));
      if (idle_with_rows_.contains(s.index) != (s.rows > 0)) fail(fmt::format("idle slot {} misfiled", s.index));
      if (live_excess_.contains(s.index)) fail(fmt::format("idle slot {} filed for trimming", s.index));
    }
  }
  if (live != live_.size() || idle_by_rows_.size() != slots_.size() - live) fail("slot counts disagree");
  if (live_rows != live_rows_ || token_rows != live_token_rows_ || idle_rows != idle_rows_ || tokens != live_tokens_ ||
      chunks + free_.size() != chunks_held_) {
    fail(fmt::format("figures disagree: rows {}/{}, token rows {}/{}, idle rows {}/{}, tokens {}/{}, chunks {}/{}",
                     live_rows, live_rows_, token_rows, live_token_rows_, idle_rows, idle_rows_, tokens, live_tokens_,
                     chunks + free_.size(), chunks_held_));
  }
  const vmm_live held = backend_->live();
  if (held.chunks != chunks_held_ || held.mappings != chunks || held.ranges != slots_.size()) {
    fail(fmt::format("backend holds {} chunks, {} mappings, {} ranges; the policy {} chunks ({} mapped), {} slots",
                     held.chunks, held.mappings, held.ranges, chunks_held_, chunks, slots_.size()));
  }
}

}  // namespace vtensor::sim
