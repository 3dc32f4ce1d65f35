#include "sim/vtensor_policy.hpp"

#include "sim/contention_model.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace vtensor::sim {
namespace {

std::unique_ptr<vmm_backend> make_accounted(const vtensor_policy_options& o) {
  return std::make_unique<accounting_backend>(make_backend(o.backend, o.device), latency_model_for(o.device));
}

double us(sim_ns t) { return static_cast<double>(t.count()) / 1e3; }

// The option table (Note [One home for a policy's options] in sim/policy_options.hpp).
// The command line's standby (Note [Standby vTensor] in core/scheduler.cpp): chosen in issue 33 by
// the Azure conversation trace's TTFT against the worker time it costs (results/compare/standby/).
constexpr std::uint64_t k_standby_tokens_default = 4096;
// The command line's parked vTensors (Note [Parked vTensors] in core/scheduler.cpp).
constexpr std::uint32_t k_parked_default = 64;

std::vector<option_row<vtensor_settings>> vtensor_table() {
  using s = vtensor_settings;
  std::vector<option_row<s>> table = {
      // Token-major by default (Note [Default layout] in sim/vtensor_policy.hpp).
      choice_option("layout", "vtensor layout: " + k_kv_layout_names.list(), &s::layout, kv_layout::token_major,
                    k_kv_layout_names),
      lookahead_option(&s::lookahead_pages),
      count_option<s, std::uint32_t>(
          "lookahead-batch",
          "lookahead pages mapped at a time, 1 to --lookahead (runs per tensor: cheaper for the driver)",
          &s::lookahead_batch, 1),
      async_lookahead_option(&s::async_lookahead),
      count_option<s, std::uint32_t>("create-ahead", "the worker keeps N chunks created in the free pool",
                                     &s::create_ahead_chunks, 0),
      truth_option<s>("pipeline",
                      "pipelined admission: a step's admissions are decided while the previous step runs, the "
                      "policy maps them and unmaps releases on the worker (true/false)",
                      &s::pipeline, true),
      count_option<s, std::uint64_t>(
          "standby-tokens",
          "with the pipeline, tokens of a standby vTensor the worker keeps mapped for the next admission that "
          "misses the prefix cache (0: none)",
          &s::standby_tokens, k_standby_tokens_default),
      count_option<s, std::uint32_t>(
          "parked",
          "with the pipeline, finished requests' vTensors kept mapped over their cached prefix, for a later "
          "request with that prefix to take (0: none)",
          &s::parked, k_parked_default),
      truth_option<s>("late-admission",
                      "with the pipeline, admit a request that arrives during a step for the next one when "
                      "the worker can map its first prefill chunk before that step begins (true/false)",
                      &s::late_admission, true),
  };
  for (auto& row : eviction_options(&s::eviction)) table.push_back(std::move(row));
  table.push_back(choice_option("publish",
                                "when a prompt's computed KV is shared through the prefix cache: release (when the "
                                "request ends) or eager (after each step that computes part of it)",
                                &s::publish, publish_moment::eager, k_publish_moment_names));
  table.push_back(choice_option("partial", "partial prefix page: " + k_partial_page_policy_names.list(" or "),
                                &s::partial, partial_page_policy::cow, k_partial_page_policy_names));
  return table;
}

}  // namespace

vtensor_policy_options vtensor_options(const kv_policy_options& o, const vtensor_settings& s) {
  vtensor_policy_options v;
  v.backend = o.backend;
  v.device = device_config(o);
  v.manager.geometry = kv_geometry(o.kv, s.layout);
  scheduler_config& c = v.manager.scheduler;
  c.max_context_tokens = o.max_context_tokens;
  c.lookahead_pages = s.lookahead_pages;
  c.lookahead_batch = s.lookahead_batch;
  c.async_lookahead = s.lookahead_pages > 0 && s.async_lookahead;
  c.create_ahead_chunks = s.create_ahead_chunks;
  c.partial = s.partial;
  c.pipeline = s.pipeline;
  // The step that computes a prompt's first chunk needs only that chunk's pages (and the cached prefix's).
  c.pipeline_chunk_tokens = o.prefill_chunk_tokens;
  // Over a simulated device the worker's jobs run inline (Note [Inline worker] in
  // core/async_mapper.hpp): the same decisions and simulated figures, without a thread hand-off
  // per job. A real device keeps the thread.
  c.inline_worker =
      s.worker == worker_mode::inline_jobs || (s.worker == worker_mode::automatic && backend_is_simulated(o.backend));
  v.manager.eviction = eviction_for(o, s.eviction);
  v.publish = s.publish;
  v.late_admission = s.pipeline && s.late_admission;
  if (s.pipeline && s.standby_tokens > 0) {
    if (s.standby_tokens > o.max_context_tokens) {
      throw option_error(
          fmt::format("--standby-tokens {} exceeds the context of {} tokens", s.standby_tokens, o.max_context_tokens));
    }
    c.standby_pages = static_cast<std::uint32_t>(v.manager.geometry.pages_for_tokens(s.standby_tokens));
  }
  if (s.pipeline) c.parked_ranges = s.parked;
  return v;
}

policy_definition<vtensor_settings> vtensor_definition() {
  policy_definition<vtensor_settings> d;
  d.options = vtensor_table();
  d.about =
      "vtensor runs pipelined by default (--pipeline): a step's admissions are decided while the\n"
      "previous step computes, their pages are mapped by the worker beside it (the first prefill\n"
      "chunk's first), releases unmap on the worker, and a step waits only for what is not done;\n"
      "--pipeline false --lookahead 0 is the former default (every admission and release on the step).";
  d.check = [](const vtensor_settings& s) {
    if (s.lookahead_batch == 0 || s.lookahead_batch > std::max<std::uint32_t>(1, s.lookahead_pages)) {
      throw option_error(fmt::format("--lookahead-batch must be between 1 and --lookahead ({})", s.lookahead_pages));
    }
    check_eviction(s.eviction);
  };
  d.make = [](const kv_policy_options& o, const vtensor_settings& s) {
    return std::make_unique<vtensor_policy>(vtensor_options(o, s));
  };
  d.access = [](const kv_policy_options&, const vtensor_settings& v) { return kv_access{false, 0, v.layout}; };
  // With --partial recompute only whole pages are reused (Note [Copy-on-write of a partial
  // prefix page] in core/operations.cpp); with cow every cached token is.
  d.sharing = [](const kv_policy_options& o, const vtensor_settings& s) {
    const std::uint64_t unit =
        s.partial == partial_page_policy::cow ? 1 : kv_geometry(o.kv, s.layout).tokens_per_chunk();
    return sharing_model{
        s.publish == publish_moment::eager ? sharing_model::moment::computed : sharing_model::moment::release,
        std::max<std::uint32_t>(static_cast<std::uint32_t>(unit), 1)};
  };
  return d;
}

vtensor_policy::vtensor_policy(vtensor_policy_options options)
    : options_(std::move(options)),
      backend_owner_(make_accounted(options_)),
      backend_(static_cast<accounting_backend*>(backend_owner_.get())),
      manager_(std::make_unique<manager>(backend_->views(), options_.manager)),  // Note [Whose call is it]
      worker_call_ns_(backend_->price_ns(vmm_call::map) + backend_->price_ns(vmm_call::set_access)) {}

vtensor_policy::~vtensor_policy() = default;

sim_ns vtensor_policy::step_model_time() const {
  const vmm_side& s = backend_->step_side();
  std::uint64_t ns = s.total_model_ns();
  if (options_.manager.scheduler.create_ahead_chunks > 0) ns -= s.model_ns[static_cast<std::size_t>(vmm_call::create)];
  return sim_ns{ns};
}

std::uint64_t vtensor_policy::step_calls() const {
  std::uint64_t n = 0;
  for (std::uint64_t c : backend_->step_side().calls) n += c;
  return n;
}

// Note [Driver contention]: a step-thread operation that finds the worker busy with work handed
// out before this step build (by the model's clock) waits for the rest of the worker's call in
// flight, and the worker's later calls wait behind the whole operation.
void vtensor_policy::book_step_calls() {
  const std::uint64_t calls = step_calls();
  if (calls == booked_calls_) return;  // no call since the last booking: no time either (a decode's growth)
  const sim_ns t = step_model_time();
  const sim_ns d = t - clock_.booked;
  const std::uint64_t new_calls = calls - booked_calls_;
  clock_.booked = t;
  booked_calls_ = calls;
  if (d <= sim_ns{0}) return;
  const sim_ns at = now();
  if (clock_.worker_free > at && new_calls > 0) {
    // The rest of the worker's call in flight (Note [Rest of a call in flight] in
    // sim/contention_model.hpp), at most until the worker is free. In a release's unmaps the call
    // is a whole run (one backend call), else one map + set-access.
    const bool in_unmaps = at >= unmap_span_.first && at < unmap_span_.second;
    const double rest = in_unmaps ? k_rest_of_unmap_call * static_cast<double>(unmap_call_.count())
                                  : k_rest_of_map_call * static_cast<double>(worker_call_ns_);
    const sim_ns behind = std::min(clock_.worker_free - at, sim_ns{static_cast<std::uint64_t>(rest)});
    contention_ += behind;
    ++contended_;
    clock_.critical += behind;
    clock_.worker_free += d;
    if (in_unmaps) unmap_span_.second += d;
  }
  clock_.critical += d;
}

// Note [Jobs start when the build ends]: the jobs handed out during a step build join the worker's
// queue when the build ends (or when the step thread waits for one of them, letting the driver go),
// in the order they were handed out.
void vtensor_policy::start_build_jobs(sim_ns at) {
  sim_ns t = std::max(clock_.worker_free, at);
  for (const build_job& j : build_jobs_) {
    t += j.price;
    const auto it = last_job_.find(j.request);
    if (it != last_job_.end() && it->second.ticket == j.ticket) it->second.done = t;
  }
  clock_.worker_free = t;
  build_jobs_.clear();
}

void vtensor_policy::do_release_model(const op_effects& fx) {
  // Note [Mapping worker model]: a release's unmaps are the worker's, after the admissions that
  // the pipeline decided while the step that ends here ran; they are booked at the next boundary.
  count_worker(vmm_call::unmap, fx.unmap_runs);
  count_worker(vmm_call::free_range, fx.worker_frees);
  if (fx.worker_unmaps == 0) return;
  const sim_ns price{backend_->price_ns(vmm_call::unmap, fx.worker_unmaps)};
  if (release_backlog_ == sim_ns{0}) release_at_ = now();
  release_backlog_ += price;
  release_runs_ += fx.unmap_runs;
  release_time_ += price;
}

void vtensor_policy::wait_for(request_id id, std::uint64_t ticket, sim_ns from) {
  if (ticket == 0) return;
  const auto it = last_job_.find(id.value);
  if (it == last_job_.end() || it->second.ticket != ticket) {
    throw std::logic_error(
        fmt::format("vtensor policy: request {} waited for job {}, not its last modelled job", id.value, ticket));
  }
  if (it->second.done == k_not_started) start_build_jobs(from);  // the step thread lets the driver go
  const sim_ns done = it->second.done;
  clock_.wait(from, done);
}

sim_ns vtensor_policy::map_price(std::uint64_t pages) const {
  const std::uint64_t chunks = pages * manager_->geometry().tensors();
  return sim_ns{backend_->price_ns(vmm_call::map, chunks) + backend_->price_ns(vmm_call::set_access, chunks)};
}

void vtensor_policy::submit(request_id id, const op_effects& fx) {
  if (fx.worker_job == 0) return;
  const std::uint64_t chunks = std::uint64_t{fx.worker_pages} * manager_->geometry().tensors();
  const sim_ns price = map_price(fx.worker_pages);
  build_jobs_.push_back({id.value, fx.worker_job, price});  // Note [Jobs start when the build ends]
  last_job_[id.value] = {fx.worker_job, k_not_started};
  count_worker(vmm_call::map, chunks);
  count_worker(vmm_call::set_access, chunks);
  clock_.count_job(price);
}

void vtensor_policy::do_advance_to(sim_us at) {
  const auto t = std::chrono::duration_cast<sim_ns>(at);
  if (!clock_.passes(t)) return;
  start_build_jobs(now());  // the step build that ran from clock_.origin ended at now()
  if (pipeline()) {
    // The step that ends at t computed the first chunks of the prompts admitted for it; the next
    // one computes their second chunks, which need the rest of their pages.
    for (const sim_ns due : rest_due_) {
      if (due > t) carry_ = std::max(carry_, due - t);
    }
    rest_due_.clear();
    if (release_backlog_ > sim_ns{0}) {
      const sim_ns from = std::max(clock_.worker_free, release_at_);
      clock_.worker_free = from + release_backlog_;
      unmap_span_ = {from, clock_.worker_free};
      unmap_call_ = release_backlog_ / std::max<std::uint64_t>(release_runs_, 1);
      release_backlog_ = sim_ns{0};
      release_runs_ = 0;
    }
    // Note [Mapping worker model], pipelined admission: with requests live a step just ran from
    // the step thread's clock now; the admissions decided next were decided while it ran.
    pipelined_window_ = live_ > 0;
    window_start_ = now();
    window_cpu_ = window_start_;
    window_worker_ = clock_.worker_free;
  }
  clock_.advance_to(t);
}

// An admission with the pipeline (Note [Mapping worker model]). Decided while the previous step
// ran (`pipelined`): its step-thread calls were made then, off the clock, its jobs went to the
// worker from there. After an idle spell: its calls are on the clock and its jobs start now.
// Either way the step that computes its first chunk waits for the jobs that chunk needs.
void vtensor_policy::model_pipeline_admit(request_id id, const op_effects& fx, bool pipelined,
                                          std::optional<sim_ns> decided) {
  sim_ns start{};
  if (pipelined) {
    if (decided) window_cpu_ = std::max(window_cpu_, *decided);  // Note [Late admission]
    const sim_ns calls = step_model_time() - clock_.booked;
    clock_.booked += calls;
    booked_calls_ = step_calls();
    hidden_ += calls;
    window_cpu_ += calls;
    start = std::max(window_worker_, window_cpu_);
  } else {
    book_step_calls();
    start = std::max(clock_.worker_free, now());
  }
  const std::uint64_t tensors = manager_->geometry().tensors();
  count_worker(vmm_call::map, fx.worker_pages * tensors);
  count_worker(vmm_call::set_access, fx.worker_pages * tensors);
  // Pages taken from the standby were mapped by its job (Note [Standby vTensor] in core/scheduler.cpp).
  // Pages taken from a parked vTensor were mapped by its request's jobs (Note [Parked vTensors]).
  sim_ns adopted_done = fx.adopted_pages > 0 ? standby_done_ : sim_ns{0};
  if (fx.reused_pages > 0) {
    if (const auto it = parked_done_.find(fx.reused_job); it != parked_done_.end()) {
      adopted_done = std::max(adopted_done, it->second);
      parked_done_.erase(it);
    }
  }
  const bool adopted = fx.adopted_pages > 0 || fx.reused_pages > 0;
  const sim_ns first_done = fx.first_pages > 0 ? std::max(adopted_done, start + map_price(fx.first_pages))
                            : adopted          ? adopted_done
                                               : start;
  const sim_ns all = map_price(fx.worker_pages);
  sim_ns done = start + all;
  if (adopted && fx.worker_job == 0)
    last_job_[id.value] = {fx.adopted_pages > 0 ? fx.adopted_job : fx.reused_job, adopted_done};
  if (fx.worker_job != 0) last_job_[id.value] = {fx.worker_job, done};
  if (fx.worker_pages > fx.first_pages) rest_due_.push_back(done);
  clock_.jobs += fx.worker_job != 0 ? 1 : 0;
  clock_.job_time += all;
  sim_ns standby_price{};
  if (fx.standby_job != 0) {  // a new standby, mapped after the admission's own jobs
    standby_price = map_price(fx.standby_pages);
    count_worker(vmm_call::map, fx.standby_pages * tensors);
    count_worker(vmm_call::set_access, fx.standby_pages * tensors);
    done += standby_price;
    standby_done_ = done;
    ++clock_.jobs;
    clock_.job_time += standby_price;
  }
  if (pipelined) window_worker_ = done;
  clock_.worker_free = pipelined ? std::max(clock_.worker_free + all + standby_price, done) : done;
  do_release_model(fx);  // unmaps of standby pages (beyond the reservation, or given back to make room)
  if (first_done > now()) {
    ++admission_waits_;
    admission_wait_time_ += first_done - now();
    clock_.critical += first_done - now();
  }
}

void vtensor_policy::take_carry() {
  if (carry_ <= sim_ns{0}) return;
  ++rest_waits_;
  rest_wait_time_ += carry_;
  clock_.critical += carry_;
  carry_ = sim_ns{0};
}

// Note [Late admission] in sim/replica.hpp: the window's clocks, an upper bound on the step
// thread's calls (a reserve, a create per chunk the free pool lacks) and on the worker's maps
// (every page of the first prefill chunk, as if nothing were cached).
bool vtensor_policy::do_admits_late(const kv_request& r, sim_us arrival) const {
  if (!options_.late_admission || !pipelined_window_) return false;
  const kv_geometry& g = manager_->geometry();
  const std::uint64_t chunk = options_.manager.scheduler.pipeline_chunk_tokens;
  const std::uint64_t first_tokens = chunk > 0 ? std::min(r.prompt_tokens, chunk) : r.prompt_tokens;
  std::uint64_t pages = g.pages_for_tokens(first_tokens);
  sim_ns ready{};
  // A prompt without block keys misses the cache for sure, so it takes the standby if there is one.
  if (const std::uint64_t standby = manager_->standby_pages(); standby > 0 && r.blocks.empty()) {
    pages -= std::min(pages, standby);
    ready = standby_done_;
  }
  const std::uint64_t chunks = pages * g.tensors();
  const std::uint64_t pooled = manager_->memory().free_pool_bytes / g.chunk_bytes();
  std::uint64_t calls_ns = backend_->price_ns(vmm_call::reserve);
  if (chunks > pooled) calls_ns += backend_->price_ns(vmm_call::create, chunks - pooled);
  const sim_ns cpu = std::max(window_cpu_, std::chrono::duration_cast<sim_ns>(arrival)) + sim_ns{calls_ns};
  return ready <= now() && std::max(window_worker_, cpu) + map_price(pages) <= now();
}

kv_admit_result vtensor_policy::do_admit(const kv_request& r) {
  take_carry();
  const create_result c = manager_->create(r.id, r.blocks, r.prompt_tokens, r.max_tokens);
  if (pipeline()) {
    if (!c.ok()) do_release_model(c.effects);  // a standby given back to make room (Note [Standby vTensor])
    if (!pipelined_window_) {
      if (!c.ok()) {
        book_step_calls();
        return {};
      }
      ++live_;
      model_pipeline_admit(r.id, c.effects, false, std::nullopt);
      return {true, c.hit_tokens, c.cow_bytes};
    }
    if (!c.ok()) {  // decided while the previous step ran too: its calls (eviction, creates) were off the clock
      hidden_ += step_model_time() - clock_.booked;
      window_cpu_ += step_model_time() - clock_.booked;
      clock_.booked = step_model_time();
      booked_calls_ = step_calls();
      return {};
    }
    ++live_;
    std::optional<sim_ns> decided;
    if (r.late_arrival) {
      decided = std::chrono::duration_cast<sim_ns>(*r.late_arrival);
      ++late_admissions_;
    }
    model_pipeline_admit(r.id, c.effects, true, decided);
    return {true, c.hit_tokens, c.cow_bytes};
  }
  book_step_calls();
  if (!c.ok()) return {};
  ++live_;
  submit(r.id, c.effects);  // the prompt's pages are mapped now; lookahead pages may go to the worker
  return {true, c.hit_tokens, c.cow_bytes};
}

bool vtensor_policy::do_grow(request_id id, std::uint64_t tokens) {
  take_carry();
  const sim_ns start = now();
  const extend_result e = manager_->extend(id, tokens);
  do_release_model(e.effects);  // a standby given back to make room (Note [Standby vTensor])
  if (!e.ok()) {
    book_step_calls();
    return false;
  }
  // The wait comes after the pages mapped now (if any), before the top-up's calls and its job;
  // with the pipeline it comes first (Note [Pipelined admission] in core/scheduler.cpp).
  if (e.effects.step_pages > 0 && !e.effects.waited_first) {
    book_step_calls();
    wait_for(id, e.effects.waited_job, now());
  } else {
    wait_for(id, e.effects.waited_job, start);
    book_step_calls();
  }
  submit(id, e.effects);
  return true;
}

// Note [One decode protocol] in sim/kv_policy.hpp. The in-place growths make no call, wait for
// no job and hand none out, so do_grow() for them would only take the carry (the first does) and
// book calls made before it (none are left unbooked: every operation books its own); taking and
// booking once before a run of them is the same.
std::size_t vtensor_policy::do_decode(std::span<const request_id> ids) {
  std::size_t done = 0;
  while (done < ids.size()) {
    take_carry();
    book_step_calls();
    done += manager_->extend_in_place(ids.subspan(done), 1);
    if (done == ids.size()) break;
    if (!do_grow(ids[done], 1)) break;
    ++done;
  }
  return done;
}

// A round in place is do_decode() with every growth in place: it takes the carry and books the
// calls before it (neither is left after the first round), then counts; advance_to() moves the
// model clocks only.
std::uint64_t vtensor_policy::do_decode_rounds(std::span<const request_id> ids) {
  lease_ = manager_->lease_rounds(ids);
  return lease_.rounds();
}

// Note [The memory after a growth round]
// The replica reads the memory after every step: in a run of rounds in place, some 50 million
// times on the 1,000,000-request gen-trace. The manager answers grow_round() with its memory
// after the round, under the same lock, so the round returns it without a second lock. Over
// the simulated device only: there the worker runs inline, so nothing changes the manager
// between the round and the replica's reading; a real worker thread could, so the cuda backend
// reads the memory anew, as memory_view() does.
kv_memory_view vtensor_policy::do_advance_round(std::span<const request_id> /*ids*/) {
  take_carry();
  book_step_calls();
  std::uint64_t ahead = 0;
  const memory_stats m = manager_->grow_round(lease_, &ahead);
  if (!options_.manager.scheduler.inline_worker) return do_memory_view();
  return {m, breakdown(m, ahead)};
}

void vtensor_policy::do_release(request_id id, release_reason why) {
  take_carry();
  const sim_ns start = now();
  const op_effects fx = why == release_reason::finished ? manager_->finish(id) : manager_->preempt(id);
  --live_;
  wait_for(id, fx.waited_job, start);           // the core waits for deferred mappings before it unmaps
  if (fx.kept_pages > 0 && fx.kept_job != 0) {  // parked: its pages' maps end when its last job does
    const auto it = last_job_.find(id.value);
    const bool known = it != last_job_.end() && it->second.ticket == fx.kept_job && it->second.done != k_not_started;
    parked_done_[fx.kept_job] = known ? it->second.done : now();
  }
  last_job_.erase(id.value);
  book_step_calls();
  do_release_model(fx);
}

// Note [Eager publication] in core/scheduler.cpp: tree references only, no VMM call, nothing to price.
void vtensor_policy::do_computed(request_id id, std::uint64_t tokens) {
  if (options_.publish == publish_moment::eager) manager_->publish(id, tokens);
}

// Note [vtensor memory breakdown]
// Chunks held are mapped in live requests, cached (held by the rTree only) or idle in the free
// pool. Of the mapped bytes, `used` hold valid KV; the pages mapped beyond the page of each
// request's last token (lookahead) are reserved-idle; the rest is the unused tail of the pages
// that hold tokens (internal). The pool's idle chunks are free; nothing is external (any chunk
// backs any page). Cached chunks hold one page of one prefix each, so a cached chunk pins no
// live data: evicting every cached entry would return all of them to the pool (reclaimable), and
// the pool gives chunks back to the driver when trimmed.
memory_breakdown vtensor_policy::breakdown(const memory_stats& m) const {
  return breakdown(m, manager_->ahead_bytes());
}

memory_breakdown vtensor_policy::breakdown(const memory_stats& m, std::uint64_t ahead_bytes) {
  memory_breakdown b;
  b.used = m.used_bytes;
  b.reserved_idle = std::min(m.mapped_bytes - m.used_bytes, ahead_bytes);
  b.internal = m.mapped_bytes - m.used_bytes - b.reserved_idle;
  b.cached = m.cached_bytes;
  b.free = m.free_pool_bytes;
  b.reclaimable = m.cached_bytes;
  return b;
}

kv_stats vtensor_policy::do_stats() const {
  const manager_stats m = manager_->stats();
  kv_stats s;
  s.memory = m.memory;
  s.breakdown = breakdown(m.memory);
  s.prompt_tokens = m.prompt_tokens;
  s.prefix_hit_tokens = m.prefix_hit_tokens;
  s.cow_bytes = m.cow_bytes;
  s.evictions = m.evicted_nodes;
  s.chunks_created = m.chunks_created;
  s.vmm = m.vmm;
  if (counts_handed_calls()) s.vmm.calls = handed_calls();
  return s;
}

kv_memory_view vtensor_policy::do_memory_view() const {
  const memory_stats m = manager_->memory();
  return {m, breakdown(m)};
}

std::array<std::uint64_t, k_vmm_call_kinds> vtensor_policy::do_vmm_calls() const {
  return counts_handed_calls() ? handed_calls() : manager_->vmm().calls;
}

bool vtensor_policy::counts_handed_calls() const {
  return options_.manager.scheduler.runs_worker() && options_.manager.scheduler.create_ahead_chunks == 0;
}

// The worker's calls as handed to it, not as done by now: per-step counts must not depend on
// wall time (identical replays, --compare-backends). Equal to the backend's once settled.
std::array<std::uint64_t, k_vmm_call_kinds> vtensor_policy::handed_calls() const {
  const vmm_side& step = backend_->step_side();
  std::array<std::uint64_t, k_vmm_call_kinds> calls{};
  for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) calls[k] = step.calls[k] + worker_calls_[k];
  return calls;
}

sim_ns vtensor_policy::do_vmm_time() const { return sim_ns{backend_->step_side().total_model_ns()} + clock_.job_time; }

vtensor_vmm_report vtensor_policy::report() const {
  vtensor_vmm_report r;
  r.step = backend_->step_side();
  r.worker = backend_->worker_side();
  clock_.report(r);
  const manager_stats m = manager_->stats();
  r.mapping_waits = m.mapping_waits;
  r.mapping_wait_ns = m.mapping_wait_ns;
  r.driver_lock_waits = m.driver_lock_waits;
  r.driver_lock_wait_ns = m.driver_lock_wait_ns;
  r.async_vmm_ns = m.async_vmm_ns;
  r.chunks_created = m.chunks_created;
  r.chunks_created_ahead = m.chunks_created_ahead;
  return r;
}

nlohmann::ordered_json vtensor_policy::do_describe() const {
  const auto& m = options_.manager;
  nlohmann::ordered_json j = describe_device(options_.backend, options_.device);
  const nlohmann::ordered_json own = {{"layout", std::string(to_string(m.geometry.layout()))},
                                      {"tokens_per_chunk", m.geometry.tokens_per_chunk()},
                                      {"tensors", m.geometry.tensors()},
                                      {"kv_bytes_per_token", m.geometry.bytes_per_token()},
                                      {"max_context_tokens", m.scheduler.max_context_tokens},
                                      {"lookahead_pages", m.scheduler.lookahead_pages},
                                      {"lookahead_batch", m.scheduler.lookahead_batch},
                                      {"async_lookahead", m.scheduler.runs_worker()},
                                      {"pipeline", m.scheduler.pipeline},
                                      {"create_ahead_chunks", m.scheduler.create_ahead_chunks},
                                      {"partial", std::string(to_string(m.scheduler.partial))},
                                      {"eviction", m.eviction.name}};
  for (const auto& [key, value] : own.items()) j[key] = value;
  describe_eviction_settings(j, m.eviction);
  j["publish"] = std::string(k_publish_moment_names.name(options_.publish));
  j["record_on_preempt"] = m.scheduler.record_on_preempt;
  j["late_admission"] = options_.late_admission;
  j["standby_pages"] = m.scheduler.standby_pages;
  j["parked_ranges"] = m.scheduler.parked_ranges;
  return j;
}

std::string_view vtensor_policy::do_vmm_critical_path() const {
  const scheduler_config& c = options_.manager.scheduler;
  if (c.pipeline)
    return "step-thread calls but pipelined admissions + modelled waits (admissions mapped beside the previous "
           "step, lookahead and releases on the worker) + waits behind the worker's call in flight";
  if (!c.runs_worker()) return k_critical_path_synchronous;
  if (c.create_ahead_chunks == 0) return k_critical_path_lookahead_worker;
  return "step-thread calls but chunk creation + modelled waits (lookahead mapped and chunks created ahead by the "
         "worker)";
}

// The pipeline's part of the model (Note [Mapping worker model]).
void vtensor_policy::do_extra_figures(nlohmann::ordered_json& m) const {
  m["pipelined_admission_calls_us"] = us(hidden_);
  m["admission_waits"] = admission_waits_;
  m["admission_wait_us"] = us(admission_wait_time_);
  m["release_unmaps_on_worker_us"] = us(release_time_);
  m["contended_bookings"] = contended_;
  m["contention_us"] = us(contention_);
  m["prompt_rest_waits"] = rest_waits_;
  m["prompt_rest_wait_us"] = us(rest_wait_time_);
  m["late_admissions"] = late_admissions_;
  const manager_stats s = manager_->stats();  // Note [Standby vTensor] in core/scheduler.cpp
  m["standby_adoptions"] = s.standby_adoptions;
  m["standby_builds"] = s.standby_builds;
  m["standby_drops"] = s.standby_drops;
  m["standby_failures"] = s.standby_failures;
  m["parked"] = s.parked;  // Note [Parked vTensors] in core/scheduler.cpp
  m["parked_reuses"] = s.parked_reuses;
  m["parked_drops"] = s.parked_drops;
}

}  // namespace vtensor::sim
