#include "sim/replica.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace vtensor::sim {

/// A request inside the replica.
struct replica::live_request {
  std::uint64_t id = 0;
  std::uint64_t line = 0;
  time_us arrival = 0;
  time_us first_token = 0;
  std::uint32_t prompt = 0;          // prompt tokens (after truncation)
  std::uint32_t output = 0;          // tokens to generate
  std::vector<token_block> blocks;   // prefix identity
  std::uint32_t generated = 0;       // tokens generated so far
  std::uint64_t kv_tokens = 0;       // tokens whose KV is computed (cache hits included)
  std::uint64_t prefill_target = 0;  // kv_tokens when the current prefill is done
  std::uint64_t first_hit = 0;       // hit at first admission
  std::uint32_t preemptions = 0;
  bool admitted_before = false;
  bool truncated = false;
  bool has_first_token = false;

  [[nodiscard]] bool decoding() const { return kv_tokens >= prefill_target; }
};

replica::replica(event_queue& queue, kv_policy& policy, model_compute model, gpu_preset gpu, replica_config config)
    : queue_(queue),
      policy_(policy),
      model_(std::move(model)),
      gpu_(std::move(gpu)),
      config_(config),
      tracker_(config.sample_interval_us, [this](const replica_state& s) {
        for (auto* o : observers_) o->on_sample(s);
      }) {
  if (config_.token_budget == 0) throw std::invalid_argument("token budget must be at least 1");
  if (config_.max_running == 0) throw std::invalid_argument("max running requests must be at least 1");
}

replica::~replica() = default;

void replica::emit(const request_record& rec) {
  for (auto* o : observers_) o->on_request(rec);
}

// Note [Replica load]
// A router places each arrival by what it reads of the replicas at that instant: requests
// waiting and running, the prefill queued (prompt tokens of the waiting requests, plus the
// tokens a preempted one generated, which it recomputes), the context the running ones hold and
// the prefill they have left. The queued tokens are kept as the queue changes (it can hold many
// thousands of requests when a replica is overloaded), the rest are summed over the running
// requests when asked (at most max_running). A decode stretch (Note [Steps run in a stretch])
// ends before any other event of the queue, arrivals included, and writes its decoders' tokens
// when it ends, so a router never reads a replica in the middle of one.
void replica::queue_changed(std::int64_t tokens) {
  const time_us now = queue_.now();
  queued_integral_ += static_cast<double>(queued_tokens_) * static_cast<double>(now - queued_since_);
  queued_since_ = now;
  queued_tokens_ = static_cast<std::uint64_t>(static_cast<std::int64_t>(queued_tokens_) + tokens);
}

replica_load replica::load() const {
  replica_load l;
  l.waiting = static_cast<std::uint32_t>(waiting_.size());
  l.running = static_cast<std::uint32_t>(running_.size());
  l.queued_tokens = queued_tokens_;
  for (const auto& r : running_) {
    l.running_tokens += std::uint64_t{r->prompt} + r->generated;
    if (!r->decoding()) l.prefill_left += r->prefill_target - r->kv_tokens;
  }
  return l;
}

double replica::mean_queued_tokens() const {
  if (!any_arrival_ || closed_at_ <= first_arrival_) return 0.0;
  const double tail = static_cast<double>(queued_tokens_) * static_cast<double>(closed_at_ - queued_since_);
  return (queued_integral_ + tail) / static_cast<double>(closed_at_ - first_arrival_);
}

void replica::submit(const traces::trace_request& t, std::uint64_t id) {
  if (!any_arrival_) {
    any_arrival_ = true;
    first_arrival_ = queued_since_ = queue_.now();
  }
  ++counters_.submitted;
  counters_.prompt_tokens += t.input_tokens;
  auto r = std::make_unique<live_request>();
  r->id = id;
  r->line = t.line;
  r->arrival = queue_.now();
  r->prompt = t.input_tokens;
  r->output = t.output_tokens;
  if (std::uint64_t{t.input_tokens} + t.output_tokens > config_.max_context_tokens) {
    if (config_.over_context == over_context_policy::reject || t.output_tokens >= config_.max_context_tokens) {
      ++counters_.rejected_context;
      reject(std::move(r), "context");
      return;
    }
    r->prompt = static_cast<std::uint32_t>(config_.max_context_tokens - t.output_tokens);
    r->truncated = true;
    ++counters_.truncated;
  }
  // Block keys covering the (possibly truncated) prompt; the last may be partial.
  std::uint64_t covered = 0;
  r->blocks.reserve(t.block_keys.size());
  for (std::size_t i = 0; i < t.block_keys.size() && covered < r->prompt; ++i) {
    const auto tokens = static_cast<std::uint32_t>(std::min<std::uint64_t>(t.tokens_in_block(i), r->prompt - covered));
    r->blocks.push_back(token_block{t.block_keys[i], tokens});
    covered += tokens;
  }
  queue_changed(r->prompt);
  waiting_.push_back(std::move(r));
}

void replica::reject(std::unique_ptr<live_request> r, std::string_view why) {
  if (why == "memory") ++counters_.rejected_memory;
  request_record rec;
  rec.id = r->id;
  rec.trace_line = r->line;
  rec.arrival = r->arrival;
  rec.finish = queue_.now();
  rec.prompt_tokens = r->prompt;
  rec.truncated = r->truncated;
  rec.rejected = why;
  emit(rec);
}

void replica::kick() {
  if (!in_step_ && (!running_.empty() || !waiting_.empty())) start_step();
}

bool replica::drained() const { return !in_step_ && running_.empty() && waiting_.empty(); }

void replica::observe(time_us at) { observe(at, policy_.memory_view()); }

void replica::observe(time_us at, const kv_memory_view& s) {
  replica_state st;
  st.at = at;
  st.memory = s.memory;
  st.breakdown = s.breakdown;
  st.running = static_cast<std::uint32_t>(running_.size());
  st.waiting = static_cast<std::uint32_t>(waiting_.size());
  tracker_.observe(st);
}

void replica::close() {
  closed_at_ = queue_.now();
  tracker_.close(closed_at_);
}

void replica::preempt(live_request& r) {
  policy_.release(request_id{r.id}, release_reason::preempted);
  ++r.preemptions;
  ++counters_.preemptions;
  ++step_preempted_;
  // Resume: recompute prompt + generated tokens (the last generated one is the next input).
  r.kv_tokens = 0;
  r.prefill_target = 0;
}

// Grows running_[index] by one token, whose first attempt (in a decode round) failed, preempting
// from the back until it fits. Returns false when running_[index] itself was preempted (it was
// the most recent).
bool replica::decode_grow(std::size_t index) {
  live_request& r = *running_[index];
  const request_id id{r.id};
  bool first = true;
  while (first || policy_.decode(std::span<const request_id>(&id, 1)).grown() == 0) {
    first = false;
    std::unique_ptr<live_request> victim = std::move(running_.back());
    running_.pop_back();
    preempt(*victim);
    const bool self = victim.get() == &r;
    queue_changed(std::int64_t{victim->prompt} + victim->generated);
    waiting_.push_front(std::move(victim));
    if (self) return false;
  }
  return true;
}

void replica::take_prefill(live_request& r, std::uint32_t& budget, bool& any_prefill) {
  const std::uint64_t left = r.prefill_target - r.kv_tokens;
  if (left == 0 || budget == 0) return;
  std::uint64_t take = 0;
  if (config_.chunked_prefill) {
    take = std::min<std::uint64_t>(left, budget);
  } else if (left <= budget || !any_prefill) {
    take = left;
  } else {
    return;
  }
  budget -= static_cast<std::uint32_t>(std::min<std::uint64_t>(take, budget));
  any_prefill = true;
  batch_.push_back({&r, take, false});
}

void replica::admit_waiting(std::uint32_t& budget) {
  bool any_prefill = std::any_of(batch_.begin(), batch_.end(), [](const batch_entry& e) { return !e.decode; });
  while (!waiting_.empty() && running_.size() < config_.max_running && budget > 0) {
    live_request& r = *waiting_.front();
    const std::uint64_t target = std::uint64_t{r.prompt} + r.generated;
    const std::uint64_t max_tokens = std::max(target, std::uint64_t{r.prompt} + r.output);
    kv_request req{request_id{r.id}, r.blocks, target, max_tokens, std::nullopt};
    if (pipelined_ && r.arrival > last_step_start_) {           // Note [Pipelined admission in the replica]
      if (!policy_.admits_late(req, sim_us{r.arrival})) break;  // Note [Late admission]
      req.late_arrival = sim_us{r.arrival};
    }
    if (config_.order_clock != nullptr) config_.order_clock->next_request = clock_.next_request = r.id;
    const kv_admit_result a = policy_.admit(req);
    if (!a.admitted) {
      if (running_.empty()) {
        auto rejected = std::move(waiting_.front());
        waiting_.pop_front();
        queue_changed(-static_cast<std::int64_t>(target));
        reject(std::move(rejected), "memory");
        continue;
      }
      break;
    }
    for (auto* o : observers_) o->on_admit({r.id, queue_.now(), a.hit_tokens, !r.admitted_before});
    if (!r.admitted_before) {
      r.admitted_before = true;
      r.first_hit = a.hit_tokens;
      queue_us_.push_back(queue_.now() - r.arrival);
      counters_.admitted_prompt_tokens += r.prompt;
      counters_.hit_tokens += a.hit_tokens;
    }
    counters_.cow_bytes += a.cow_bytes;
    r.kv_tokens = std::min(a.hit_tokens, target - 1);  // at least one token is computed
    r.prefill_target = target;
    queue_changed(-static_cast<std::int64_t>(target));
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    const std::size_t before = batch_.size();
    take_prefill(*running_.back(), budget, any_prefill);
    if (batch_.size() == before) break;  // an unchunked prefill that does not fit: next step
  }
}

// The start of every step, and of each step of a stretch (which continues one).
void replica::open_step(time_us at, bool continuing) {
  if (config_.measure_wall) step_wall_start_ = std::chrono::steady_clock::now();
  clock_.seconds = static_cast<double>(at) / 1e6;
  if (config_.order_clock != nullptr) config_.order_clock->seconds = clock_.seconds;
  policy_.advance_to(sim_us{at});
  pipelined_ = config_.pipeline && continuing;
}

// Decode: one token for each running request past its prefill, oldest first (the first `budget`
// of them), in one decode round (Note [One decode protocol] in kv_policy.hpp); where a growth
// fails, preempt from the back and retry it (decode_grow), then go on after it. The first round
// is kept: when it grew every decoder and the step is alike the next ones, its lease runs the
// stretch (Note [Steps run in a stretch]).
void replica::grow_decoders() {
  const std::uint32_t budget = config_.token_budget;
  decode_index_.clear();
  decode_ids_.clear();
  for (std::size_t i = 0; i < running_.size() && decode_index_.size() < budget; ++i) {
    if (!running_[i]->decoding()) continue;
    decode_index_.push_back(i);
    decode_ids_.push_back(request_id{running_[i]->id});
  }
  round_ = decode_round{};
  std::size_t next = 0;
  while (next < decode_ids_.size()) {
    round_ = policy_.decode(std::span<const request_id>(decode_ids_).subspan(next));
    next += round_.grown();
    if (next == decode_ids_.size()) break;
    if (!decode_grow(decode_index_[next])) {  // it was the newest: nothing after it is left
      decode_index_.resize(next);
      break;
    }
    ++next;
    // Preemptions took requests from the back: those were not grown yet, and are gone.
    std::size_t left = next;
    while (left < decode_index_.size() && decode_index_[left] < running_.size()) ++left;
    decode_index_.resize(left);
    decode_ids_.resize(left);
  }
  for (const std::size_t i : decode_index_) batch_.push_back({running_[i].get(), 1, true});
}

void replica::start_step() {
  open_step(queue_.now(), continuing_);
  in_step_ = true;
  batch_.clear();
  step_preempted_ = 0;
  const sim_ns vmm_start = policy_.vmm_time();
  const sim_ns critical_start = policy_.critical_vmm_time();
  std::uint32_t budget = config_.token_budget;

  // 1. Decode.
  grow_decoders();
  budget -= static_cast<std::uint32_t>(decode_index_.size());
  // 2. Prefill left over from earlier steps.
  bool any_prefill = false;
  for (auto& r : running_) {
    if (!r->decoding()) take_prefill(*r, budget, any_prefill);
  }
  // 3. Admission.
  const std::size_t running_before = running_.size();
  admit_waiting(budget);
  const auto admitted = static_cast<std::uint32_t>(running_.size() - running_before);

  if (batch_.empty()) {  // nothing could run (everything waiting was rejected, or arrived too late)
    in_step_ = false;
    observe(queue_.now());
    if (pipelined_ && !waiting_.empty()) queue_.schedule_in(1, [this] { kick(); });
    return;
  }
  // Note [VMM time on the critical path].
  step_record rec;
  rec.admitted = admitted;
  rec.vmm_critical = policy_.critical_vmm_time() - critical_start + pending_release_critical_;
  rec.vmm_total = policy_.vmm_time() - vmm_start + pending_release_vmm_;
  run_step(rec);
}

// Prices the batch just built (rec holds its admissions and VMM time), tells the observers and
// schedules the step's end, after the steps of a stretch if one follows.
void replica::run_step(step_record& rec) {
  const step_work work = batch_work();
  const step_cost cost = cost_of(work);
  const batch_counts counts = count_batch();
  take_step_calls(rec);
  price_step(rec, queue_.now(), cost, counts);
  observe(queue_.now());
  const time_us end = run_stretch(rec.start + rec.duration_us, work, cost, counts);
  queue_.schedule_at(end, [this] { end_step(); });
}

step_work replica::batch_work() const {
  step_work work;
  for (const batch_entry& e : batch_) work.add_sequence(e.r->kv_tokens, e.tokens, e.decode);
  return work;
}

replica::batch_counts replica::count_batch() const {
  batch_counts c;
  for (const batch_entry& e : batch_) {
    if (e.decode) {
      ++c.decode_seqs;
    } else {
      ++c.prefill_seqs;
      c.prefill_tokens += e.tokens;
    }
  }
  return c;
}

step_cost replica::cost_of(const step_work& work) const {
  return config_.compute
             ? measured_step_cost(model_, gpu_, work, config_.step_overhead_s, config_.kernel_factors, *config_.compute)
             : roofline(model_, gpu_, work, config_.step_overhead_s, config_.kernel_factors);
}

void replica::take_step_calls(step_record& rec) {
  const auto calls_now = policy_.vmm_calls();
  for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) rec.vmm_calls[k] = calls_now[k] - last_step_calls_[k];
  last_step_calls_ = calls_now;
  last_chunks_created_ = policy_.chunks_created();
  rec.chunks_created = last_chunks_created_;
}

void replica::price_step(step_record& rec, time_us at, const step_cost& cost, const batch_counts& counts) {
  rec.decode_seqs = counts.decode_seqs;
  rec.prefill_seqs = counts.prefill_seqs;
  rec.prefill_tokens = counts.prefill_tokens;
  const auto duration =
      static_cast<time_us>(std::ceil(cost.total_s() * 1e6)) + std::chrono::ceil<sim_us>(rec.vmm_critical).count();

  rec.index = counters_.steps;
  rec.start = at;
  last_step_start_ = rec.start;
  rec.duration_us = std::max<time_us>(duration, 1);
  rec.preempted = step_preempted_;
  rec.compute_us = cost.compute_s() * 1e6;
  rec.memory_us = cost.memory_s() * 1e6;
  rec.running = static_cast<std::uint32_t>(running_.size());
  rec.waiting = static_cast<std::uint32_t>(waiting_.size());
  pending_release_critical_ = sim_ns{0};
  pending_release_vmm_ = sim_ns{0};

  ++counters_.steps;
  counters_.busy_us += rec.duration_us;
  counters_.vmm_critical += rec.vmm_critical;
  if (cost.compute_bound()) counters_.compute_bound_steps += 1;
  counters_.prefill_tokens += rec.prefill_tokens;
  for (auto* o : observers_) o->on_step(rec);
}

// Note [Steps run in a stretch]
// After a step whose batch is every running request decoding one token, with nothing to admit
// (the queue is empty, or the running limit is reached), the steps that follow are alike until
// an event: an arrival (or any queued event), a request reaching its output length, or a growth
// that needs more than counting (the lease of the step's decode round, Note [One decode
// protocol] in kv_policy.hpp). run_stretch() runs them here, without the event queue, from the
// helpers end_step() and start_step() are made of:
// - the end of step j - 1 at `end`: each request gets its token, and close_step() runs the checks
//   and the wall clock as in end_step(). Its observe() is left out: it would record, at `end`,
//   the state observed when step j - 1 was built (nothing changed since: no release, no arrival,
//   and advance_to() changes no figure), and the observe() of step j, at the same instant,
//   integrates that state over step j - 1 all the same (state_tracker: the previous state holds
//   until the next observation). The grid samples before `end` are emitted where that observe()
//   would have emitted them (sample_until), before step j's record, so an observer of both (the
//   Chrome trace) sees them in the same order;
// - step j, opened at `end` (open_step(): the policy's clock moves): the same decoders in the same
//   order grow by one token (the lease's advance(), which returns the memory that step j's
//   observe() records), and price_step() prices, counts and emits it. What start_step() would
//   read is known here: by the policy's promise a round and advance_to() move no VMM time, call
//   count or chunk creation, so the step's VMM time is the releases' since the last step (none:
//   nothing finishes in a stretch), its calls are zero (take_step_calls() is not needed) and its
//   chunks created are step j - 1's; its work is step j - 1's with every context one token longer
//   (one more attended pair and one more token read per decoder, integers, so exactly the sum
//   batch_work() would make). The promise is checked once a stretch: the VMM time, calls and
//   chunks created after it must be those before it, or the replay stops with a logic_error.
// It stops before step j when j would pass the first finish or the lease's rounds, or when the
// queue holds an event due at or before `end` (an arrival at `end` may come before the step in
// the queue's order); run_step() then schedules the last step's end, which end_step() runs as
// usual. Every figure, step record and output is the same as without stretches (the identity
// replays in results/README.md, "Session 13"); a replay counts each stretch step as the event it
// replaces. Two shortcuts give the same figures: the decoders' own token counts are written once,
// after the last step of the stretch (nothing in it reads them), and a roofline step reprices
// only its decode attention (the linear and prefill parts are the step before's: the same
// operations on the same numbers).
time_us replica::run_stretch(time_us end, step_work work, step_cost cost, const batch_counts& counts) {
  if (step_preempted_ != 0 || batch_.size() != running_.size() || batch_.size() != decode_ids_.size() ||
      (!waiting_.empty() && running_.size() < config_.max_running)) {
    return end;
  }
  std::uint64_t to_first_finish = std::numeric_limits<std::uint64_t>::max();
  for (const batch_entry& e : batch_) {
    if (!e.decode || !e.r->has_first_token) return end;
    to_first_finish = std::min<std::uint64_t>(to_first_finish, e.r->output - e.r->generated);
  }
  if (to_first_finish < 2 || horizon() <= end) return end;
  const std::uint64_t rounds = round_.rounds_in_place();
  if (rounds == 0) return end;
  const sim_ns vmm_before = policy_.vmm_time();
  const sim_ns critical_before = policy_.critical_vmm_time();
  const std::uint64_t decoders = batch_.size();
  // Only the decode attention changes from step to step: the linear and prefill parts of the
  // roofline stay the step before's (the same figures from the same operations).
  const bool reprice_decode_only = !config_.compute;
  std::uint32_t steps = 0;
  step_record rec;  // what price_step() leaves alone is the same in every step of a stretch
  rec.chunks_created = last_chunks_created_;
  for (std::uint64_t j = 1; j < to_first_finish && j <= rounds && horizon() > end; ++j) {
    // The end of step j - 1, as end_step() runs it when no request finishes.
    ++steps;
    counters_.output_tokens += decoders;
    close_step();
    tracker_.sample_until(end);  // the grid samples end_step()'s observe() emits, in its place
    ++counters_.stretch_steps;
    // Step j, as start_step() builds it: the same decoders, nothing to prefill or admit.
    open_step(end, true);
    const kv_memory_view memory = round_.advance();
    rec.vmm_critical = pending_release_critical_;
    rec.vmm_total = pending_release_vmm_;
    work.decode.attended_pairs += decoders;
    work.decode.kv_read_tokens += decoders;
    if (reprice_decode_only) {
      cost.decode_attention = attention_roofline(model_, gpu_, work.decode);
    } else {
      cost = cost_of(work);
    }
    price_step(rec, end, cost, counts);
    observe(end, memory);
    end = rec.start + rec.duration_us;
  }
  for (const batch_entry& e : batch_) {
    e.r->kv_tokens += steps;
    e.r->generated += steps;
  }
  if (policy_.vmm_time() != vmm_before || policy_.critical_vmm_time() != critical_before ||
      policy_.vmm_calls() != last_step_calls_ || policy_.chunks_created() != last_chunks_created_) {
    throw std::logic_error(
        "replica: the policy's VMM time, calls or chunks created moved in a decode stretch (Note [One "
        "decode protocol] in kv_policy.hpp)");
  }
  return end;
}

void replica::finish(live_request& r) {
  const sim_ns critical_before = policy_.critical_vmm_time();
  const sim_ns vmm_before = policy_.vmm_time();
  policy_.release(request_id{r.id}, release_reason::finished);
  pending_release_critical_ += policy_.critical_vmm_time() - critical_before;
  pending_release_vmm_ += policy_.vmm_time() - vmm_before;
  ++counters_.completed;
  const time_us now = queue_.now();
  ttft_us_.push_back(r.first_token - r.arrival);
  e2e_us_.push_back(now - r.arrival);
  if (r.output >= 2) tpot_us_.push_back((now - r.first_token) / (r.output - 1));
  request_record rec;
  rec.id = r.id;
  rec.trace_line = r.line;
  rec.arrival = r.arrival;
  rec.first_token = r.first_token;
  rec.finish = now;
  rec.prompt_tokens = r.prompt;
  rec.output_tokens = r.generated;
  rec.hit_tokens = r.first_hit;
  rec.preemptions = r.preemptions;
  rec.truncated = r.truncated;
  emit(rec);
}

void replica::end_step() {
  const time_us now = queue_.now();
  // The clock as this replica's last step left it (a cluster's replicas share one: Note [Replicas
  // between arrivals] in cluster.cpp).
  if (config_.order_clock != nullptr) *config_.order_clock = clock_;
  policy_.advance_to(sim_us{now});
  bool any_done = false;
  for (const batch_entry& e : batch_) {
    live_request& r = *e.r;
    if (!e.decode && r.preemptions > 0) counters_.recomputed_tokens += e.tokens;
    r.kv_tokens += e.tokens;
    if (!e.decode) policy_.computed(request_id{r.id}, r.kv_tokens);  // the prefill's progress
    if (!r.decoding()) continue;                                     // prefill continues next step
    if (r.generated < r.output) {
      ++r.generated;
      ++counters_.output_tokens;
    }
    if (!r.has_first_token) {
      r.has_first_token = true;
      r.first_token = now;
    }
    if (r.generated >= r.output) any_done = true;
  }
  if (any_done) {
    // Finish in admission order; keep the others' order.
    std::size_t kept = 0;
    for (std::size_t i = 0; i < running_.size(); ++i) {
      live_request& r = *running_[i];
      if (r.has_first_token && r.decoding() && r.generated >= r.output) {
        finish(r);
        continue;
      }
      if (kept != i) running_[kept] = std::move(running_[i]);
      ++kept;
    }
    running_.resize(kept);
  }
  batch_.clear();
  close_step();
  in_step_ = false;
  observe(queue_.now());
  continuing_ = true;
  kick();
  continuing_ = false;
}

// The end of every step, after its requests are done with: the invariant checks asked for, and
// the step's wall time.
void replica::close_step() {
  if (config_.check_every_step) {
    policy_.check_invariants();
  } else if (config_.check_sampled) {
    check_sampled();
  }
  if (config_.measure_wall) {
    counters_.step_wall_ns += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - step_wall_start_)
            .count());
  }
}

// Note [Sampled invariant checks of a replay]
// A policy's check_invariants() walks its whole state (every chunk, block or slot, the prefix
// tree), so checking after every step makes a replay quadratic: a sanitizer build of the
// 2,000-request replay tests ran for more than 25 minutes each. Debug builds of the replay
// therefore check after every step while the state is small and after one step in
// ceil(chunks / k_check_budget) beyond, where chunks = physical bytes / 2 MiB measures the state the
// walk visits: the amortised cost per step stays about k_check_budget items, and a broken
// invariant that lasts is still found, at most a period late. The end of every replay always
// checks (run_replay); tests that want every step set check_every_step.
void replica::check_sampled() {
  constexpr std::uint64_t k_check_budget = 256;
  constexpr std::uint64_t k_chunk_bytes = std::uint64_t{2} << 20;
  const std::uint64_t chunks = policy_.memory_view().memory.physical_bytes / k_chunk_bytes;
  const std::uint64_t period = std::max<std::uint64_t>(1, (chunks + k_check_budget - 1) / k_check_budget);
  if (++steps_since_check_ < period) return;
  steps_since_check_ = 0;
  policy_.check_invariants();
}

}  // namespace vtensor::sim
