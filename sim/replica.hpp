#pragma once
/// A serving replica: continuous batching over a KV policy, timed by the roofline step cost.
///
/// Note [Continuous batching]
/// Requests wait in arrival order (FCFS). Whenever the replica is idle and has work it runs a
/// step, built in this order within a budget of `token_budget` tokens and `max_running`
/// admitted requests:
/// 1. every running request past its prefill decodes one token: its KV grows by one token
///    (grow()); when memory runs out, the most recently admitted running request is preempted
///    (Note [Preemption by recompute]) and the growth retried;
/// 2. running requests with prefill left take prefill tokens, oldest first;
/// 3. waiting requests are admitted from the head of the queue while the budget and the running
///    limit allow: admit() backs the whole prompt at once and reports the prefix-cache hit, whose
///    tokens are not computed; an admission that finds no memory ends admission for this step
///    (the request stays at the head), or, when nothing is running to free memory, rejects it.
/// With chunked prefill a prefill takes whatever budget is left and continues next step;
/// without, a prefill runs whole, over budget only when it is the step's first prefill.
/// At the end of the step every sequence whose prefill completed emits its first token (TTFT)
/// and every decoding one its next; those that reached their output length finish (release()).
///
/// Note [Preemption by recompute]
/// A preempted request releases its memory (its prefix stays cached if the policy keeps it),
/// goes back to the head of the waiting queue and, when admitted again, recomputes its prompt
/// plus the tokens generated so far (minus what the cache still holds) in one prefill that then
/// emits its next token. Its TTFT stays that of its first token. The summary's prefix hit rate
/// is hit tokens at each request's first admission over the prompt tokens of every request of
/// the trace (rejected ones included), so that recomputation cannot inflate it and it compares
/// directly with the infinite-cache bound of `vtensor inspect`.
///
/// Note [VMM time on the critical path]
/// Every VMM call is priced by the latency model (the simulated device's costs, or a calibration
/// file), on every backend: on `cuda` the measured time is reported but never reaches the clock,
/// so that a replay over `cuda` makes the very decisions of one over `sim` and the two compare
/// step by step (`vtensor replay --compare-backends sim,cuda`). A step's duration is its roofline
/// cost plus the VMM time of the step thread (kv_policy::critical_vmm_time()), rounded up to a
/// whole microsecond:
/// - the calls the step thread makes itself: admissions (create: reserve, map, set access),
///   growth (extend) that is not handed to the worker, and releases (finish, preempt: unmap)
///   done at the previous step's end;
/// - plus, with asynchronous lookahead, its modelled waits for the mapping worker (Note [Mapping
///   worker model] in vtensor_policy.hpp): lookahead pages are mapped by the worker while steps
///   run, and a step waits only when a page it needs is not mapped yet by the worker's clock;
/// - with the pipeline (the default of `vtensor replay`, Note [Pipelined admission in the
///   replica]), admissions are mapped by the worker beside the previous step and releases unmap
///   on it: the step adds only the admission's maps not done when it begins, and its own calls'
///   waits behind the worker's call in flight (Note [Driver contention]).
/// Without lookahead and pipeline, or with synchronous lookahead (`--async-lookahead false`),
/// every call is the step thread's: all VMM time is on the critical path. The worker's own time is reported
/// beside (the summary's vmm_model.worker_time_us), off the path.
/// Wall time (the real calls on `cuda`, emulated step compute, measured waits) is reported in
/// the summary's `measured` block and never read by the replica's decisions.
///
/// Note [Pipelined admission in the replica]
/// With `pipeline`, the admissions of a step that follows another are taken as decided while
/// that one ran (vLLM's asynchronous scheduling, SGLang's overlap scheduler: the CPU schedules
/// step N+1 while the GPU computes step N), so that a policy can map their pages beside it (the
/// vtensor policy: Note [Mapping worker model]). The replica keeps its order of work (step N
/// ends, its finished requests release, then step N+1 is built) and restricts what such an
/// admission may know: only requests that arrived by the start of step N are admitted (FCFS: the
/// queue stops at the first later one); those wait one step more. The memory that step N's
/// finished requests free is used, as a scheduler that knows their stop (a length limit; the
/// trace gives every output length) may reuse it: the new request writes only in step N+1. A
/// step after an idle spell (nothing ran) admits as without the pipeline; when nothing is
/// running and only later arrivals wait, the replica idles one microsecond and starts such a step.
///
/// Note [Late admission]
/// Waiting a whole step costs a request that arrives during step N the length of step N+1, which
/// at light load is most of its TTFT's difference from a policy that admits at each boundary
/// (paged). A scheduler thread that looks at the queue again when a request arrives can still
/// decide it for step N+1, provided its pages are mapped by the time step N ends. So a later
/// arrival (FCFS order kept) asks the policy (kv_policy::admits_late()): the vtensor policy
/// answers from its model of the window (Note [Mapping worker model]) whether the admission's
/// step-thread calls, made from the arrival on, and then the worker's maps of its first prefill
/// chunk would end by the boundary, at the price of an upper bound on the pages (those of the
/// whole first chunk, as if nothing were cached) and on the calls (a reserve, and a create for
/// every chunk the free pool lacks). If yes the request is admitted now as decided at its
/// arrival, and whatever the bound missed is still charged as an admission wait; if not it, and
/// everything behind it, waits for the next step as before. `--late-admission false` turns it off.
///
/// Note [Requests longer than the context]
/// A request needs prompt + output tokens of context. Beyond `max_context_tokens`, `reject`
/// counts it rejected and skips it; `truncate` keeps the prompt's first max_context - output
/// tokens (and the block keys covering them), or rejects when the output alone does not fit.

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>
#include <vector>

#include "backends/enum_names.hpp"
#include "core/eviction_order.hpp"
#include "sim/compute_calibration.hpp"
#include "sim/event_queue.hpp"
#include "sim/kv_policy.hpp"
#include "sim/metrics.hpp"
#include "sim/presets.hpp"
#include "traces/trace_request.hpp"

namespace vtensor::sim {

/// What to do with a request longer than the context (Note [Requests longer than the context]).
enum class over_context_policy : std::uint8_t { reject, truncate };
/// The policies' names, as users type them.
inline constexpr enum_names<over_context_policy, 2> k_over_context_policy_names{
    {{{over_context_policy::reject, "reject"}, {over_context_policy::truncate, "truncate"}}}};
[[nodiscard]] inline std::string_view to_string(over_context_policy p) { return k_over_context_policy_names.name(p); }
[[nodiscard]] inline std::optional<over_context_policy> over_context_policy_from_string(std::string_view name) {
  return k_over_context_policy_names.parse(name);
}

/// Batching and cost settings of a replica.
struct replica_config {
  std::uint32_t token_budget = 8192;          ///< tokens computed per step at most (decode + prefill)
  std::uint32_t max_running = 256;            ///< admitted requests at most
  bool chunked_prefill = true;                ///< split prefills across steps
  std::uint64_t max_context_tokens = 131072;  ///< prompt + output at most
  over_context_policy over_context = over_context_policy::reject;  ///< longer requests
  double step_overhead_s = k_default_step_overhead_s;              ///< fixed cost per step
  attention_factors kernel_factors;  ///< the policy's attention kernel factors (Note [Kernel factors])
  /// Measured kernel rates (Note [Measured step cost]); null: the roofline alone.
  std::shared_ptr<const compute_calibration> compute;
  time_us sample_interval_us = 1'000'000;  ///< state sample grid (0: none)
  bool check_every_step = false;           ///< check_invariants() after each step
  /// check_invariants() after steps, sampled in proportion to the state (Note [Sampled invariant
  /// checks of a replay] in replica.cpp); debug builds of the replay turn it on.
  bool check_sampled = false;
  /// Pipelined admission (Note [Pipelined admission in the replica]): after a step, admit only
  /// requests that arrived before it began, as if decided while it ran. run_replay() sets it from
  /// the policy (kv_policy::pipelined()).
  bool pipeline = false;
  /// Read the wall clock around each step (counters' step_wall_ns, the summary's measured block).
  /// Off where nothing reports it (`--no-wall`, compare): two clock reads a step were about 5% of
  /// a replay of many small steps (results/README.md, "Replay speed (issue 13)"). Never decides.
  bool measure_wall = true;
  /// The clock the policy's eviction order reads (sim/eviction_feed.hpp), advanced here: seconds
  /// at the start of each step (before the policy's advance_to), the trace index of a request
  /// just before its admission. Null: none.
  eviction_clock* order_clock = nullptr;
};

/// One step, as the observers see it.
struct step_record {
  std::uint64_t index = 0;                                  ///< 0-based
  time_us start = 0;                                        ///< when it began
  time_us duration_us = 0;                                  ///< roofline + overhead + critical VMM time
  std::uint32_t decode_seqs = 0;                            ///< sequences decoding one token
  std::uint32_t prefill_seqs = 0;                           ///< sequences taking prefill tokens
  std::uint64_t prefill_tokens = 0;                         ///< prefill tokens computed
  std::uint32_t admitted = 0;                               ///< requests admitted by this step
  std::uint32_t preempted = 0;                              ///< requests preempted while building it
  double compute_us = 0;                                    ///< roofline compute side (all kernels)
  double memory_us = 0;                                     ///< roofline memory side (all kernels)
  sim_ns vmm_critical{};                                    ///< VMM time added to the step
  sim_ns vmm_total{};                                       ///< VMM time charged while building it (critical or not)
  std::array<std::uint64_t, k_vmm_call_kinds> vmm_calls{};  ///< VMM calls by kind since the previous step was built
  std::uint64_t chunks_created = 0;                         ///< the policy's chunks_created() when it was built
  std::uint32_t running = 0;                                ///< running after admission
  std::uint32_t waiting = 0;                                ///< waiting after admission
};

/// One request leaving the replica (finished or rejected).
struct request_record {
  std::uint64_t id = 0;             ///< ordinal in the trace
  std::uint64_t trace_line = 0;     ///< source line
  time_us arrival = 0;              ///< arrival (scaled)
  time_us first_token = 0;          ///< first output token (finished only)
  time_us finish = 0;               ///< completion or rejection
  std::uint32_t prompt_tokens = 0;  ///< after truncation
  std::uint32_t output_tokens = 0;  ///< generated
  std::uint64_t hit_tokens = 0;     ///< prefix-cache hit at first admission
  std::uint32_t preemptions = 0;    ///< times preempted
  bool truncated = false;           ///< prompt cut to fit the context
  std::string_view rejected;        ///< empty, "context" or "memory"
};

/// One admission: a request's first, or its re-admission after a preemption.
struct admission_record {
  std::uint64_t id = 0;          ///< ordinal in the trace
  time_us at = 0;                ///< when (the start of the step that admits it)
  std::uint64_t hit_tokens = 0;  ///< prefix-cache hit of this admission
  bool first = true;             ///< false: a re-admission after a preemption
};

/// Receives what happens in a replica; all hooks default to nothing.
class replica_observer {
 public:
  virtual ~replica_observer() = default;
  virtual void on_admit(const admission_record&) {}  ///< a request admitted (before its step is built)
  virtual void on_step(const step_record&) {}        ///< after a step is built (before it runs)
  virtual void on_request(const request_record&) {}  ///< a request finished or was rejected
  virtual void on_sample(const replica_state&) {}    ///< the state on the sample grid
};

/// Running totals.
struct replica_counters {
  std::uint64_t submitted = 0;               ///< requests that arrived
  std::uint64_t completed = 0;               ///< finished
  std::uint64_t rejected_context = 0;        ///< longer than the context
  std::uint64_t rejected_memory = 0;         ///< not fitting an otherwise empty memory
  std::uint64_t truncated = 0;               ///< prompts cut to fit the context
  std::uint64_t preemptions = 0;             ///< preemptions by recompute
  std::uint64_t prompt_tokens = 0;           ///< prompt tokens of every request, as in the trace
  std::uint64_t admitted_prompt_tokens = 0;  ///< prompt tokens of admitted requests (after truncation)
  std::uint64_t hit_tokens = 0;              ///< served from the prefix cache (first admissions only)
  std::uint64_t prefill_tokens = 0;          ///< prefill tokens computed (recomputation included)
  std::uint64_t recomputed_tokens = 0;       ///< of which by requests readmitted after a preemption
  std::uint64_t output_tokens = 0;           ///< tokens generated
  std::uint64_t cow_bytes = 0;               ///< bytes copied at admission
  std::uint64_t steps = 0;                   ///< steps run
  std::uint64_t busy_us = 0;                 ///< time spent in steps
  sim_ns vmm_critical{};                     ///< VMM time added to steps
  double compute_bound_steps = 0;            ///< steps bound by compute
  std::uint64_t step_wall_ns = 0;  ///< measured: wall time from building each step to its end (releases included)
  /// Steps whose end ran without an event of its own, inside a stretch (Note [Steps run in a
  /// stretch] in replica.cpp); the replay counts each as the event it stands for.
  std::uint64_t stretch_steps = 0;
};

/// What a router reads of a replica at an arrival (Note [Replica load] in replica.cpp).
struct replica_load {
  std::uint32_t waiting = 0;  ///< arrived, not admitted (preempted ones included)
  std::uint32_t running = 0;  ///< admitted
  std::uint64_t queued_tokens =
      0;  ///< prefill the waiting requests need: prompt + tokens generated before a preemption
  std::uint64_t running_tokens = 0;  ///< context of the running requests: prompt + tokens generated so far
  std::uint64_t prefill_left = 0;    ///< prefill tokens the running requests have still to compute
  /// Requests in the replica, waiting or running.
  [[nodiscard]] std::uint32_t requests() const { return waiting + running; }
  /// Tokens queued and running (least-loaded's measure).
  [[nodiscard]] std::uint64_t tokens() const { return queued_tokens + running_tokens; }
};

/// The replica. Submissions come from outside (the replay's arrival events); steps schedule
/// themselves on `queue`. Does not own the queue, the policy or the observers.
class replica {
 public:
  replica(event_queue& queue, kv_policy& policy, model_compute model, gpu_preset gpu, replica_config config);
  ~replica();
  replica(const replica&) = delete;
  replica& operator=(const replica&) = delete;

  /// Adds an observer (kept by pointer).
  void add_observer(replica_observer& o) { observers_.push_back(&o); }

  /// A request arrives now (its arrival is queue.now()); `id` must be unique. Starts a step if
  /// the replica was idle. Requests arriving at the same instant should be submitted together
  /// before the queue runs on, so that they can share a step.
  void submit(const traces::trace_request& r, std::uint64_t id);
  /// Starts a step if idle and there is work (call after a batch of submit()s).
  void kick();

  /// True when nothing is running, waiting or in flight.
  [[nodiscard]] bool drained() const;
  [[nodiscard]] const replica_counters& counters() const { return counters_; }
  [[nodiscard]] const state_tracker& tracker() const { return tracker_; }
  [[nodiscard]] const replica_config& config() const { return config_; }
  /// Latencies of finished requests, microseconds (TPOT only for outputs of 2 tokens or more).
  [[nodiscard]] std::vector<std::uint64_t>& ttft_us() { return ttft_us_; }
  [[nodiscard]] std::vector<std::uint64_t>& tpot_us() { return tpot_us_; }
  [[nodiscard]] std::vector<std::uint64_t>& e2e_us() { return e2e_us_; }
  /// Queueing delays: from arrival to first admission, microseconds (admitted requests).
  [[nodiscard]] std::vector<std::uint64_t>& queue_us() { return queue_us_; }
  /// Closes the state tracker at queue.now().
  void close();
  /// Makes `*next_arrival` (the time of the next event that may change this replica or read it,
  /// kept by the caller) the end of a stretch of decode steps, in place of the queue's next event:
  /// a cluster's other replicas' steps do not stop this one's (Note [Replicas between arrivals]
  /// in cluster.cpp). Null: the queue's next event.
  void set_horizon(const time_us* next_arrival) { horizon_ = next_arrival; }
  /// What a router reads now (a walk of the running requests, at most max_running).
  [[nodiscard]] replica_load load() const;
  /// Queued tokens (replica_load::queued_tokens) averaged over time, from the first arrival to
  /// close() (0 before).
  [[nodiscard]] double mean_queued_tokens() const;

 private:
  struct live_request;
  struct batch_entry {
    live_request* r;
    std::uint64_t tokens;  // computed this step
    bool decode;
  };

  void start_step();
  // The sequences of batch_ by kind, as a step record counts them.
  struct batch_counts {
    std::uint32_t decode_seqs = 0;
    std::uint32_t prefill_seqs = 0;
    std::uint64_t prefill_tokens = 0;
  };

  void open_step(time_us at, bool continuing);  // the start of every step: wall clock, policy clock, pipelining
  void grow_decoders();                         // the step's decode round (Note [One decode protocol])
  void run_step(step_record& rec);
  void take_step_calls(step_record& rec);          // the VMM calls and chunk creations since the previous step
  [[nodiscard]] step_work batch_work() const;      // the work of batch_
  [[nodiscard]] batch_counts count_batch() const;  // and its sequences
  [[nodiscard]] step_cost cost_of(const step_work& work) const;  // roofline, or the measured rates
  // Prices, counts and emits a step of cost `cost` built at `at` (its calls already in `rec`).
  void price_step(step_record& rec, time_us at, const step_cost& cost, const batch_counts& counts);
  // Note [Steps run in a stretch]; returns the last end. `work`, `cost` and `counts`: the step
  // just priced.
  time_us run_stretch(time_us end, step_work work, step_cost cost, const batch_counts& counts);
  void end_step();
  void admit_waiting(std::uint32_t& budget);
  bool decode_grow(std::size_t index);
  void preempt(live_request& r);
  void finish(live_request& r);
  void reject(std::unique_ptr<live_request> r, std::string_view why);
  void take_prefill(live_request& r, std::uint32_t& budget, bool& any_prefill);
  void observe(time_us at);                                // with the policy's memory now
  void observe(time_us at, const kv_memory_view& memory);  // with `memory`
  void check_sampled();                                    // Note [Sampled invariant checks of a replay] in replica.cpp
  void close_step();  // checks and wall time at the end of a step (end_step(), run_stretch())
  void emit(const request_record& rec);
  void queue_changed(std::int64_t tokens);  // waiting_ gained (or lost) `tokens` queued tokens now
  // Where a stretch must stop (set_horizon()).
  [[nodiscard]] time_us horizon() const { return horizon_ != nullptr ? *horizon_ : queue_.next_at(); }

  event_queue& queue_;
  kv_policy& policy_;
  model_compute model_;
  gpu_preset gpu_;
  replica_config config_;
  std::vector<replica_observer*> observers_;
  std::deque<std::unique_ptr<live_request>> waiting_;
  std::vector<std::unique_ptr<live_request>> running_;  // admission order
  std::vector<batch_entry> batch_;
  bool in_step_ = false;
  std::vector<std::size_t> decode_index_;  // this step's decoders: their places in running_
  std::vector<request_id> decode_ids_;     // and their ids (the decode round's)
  decode_round round_;                     // this step's first decode round: its lease serves a stretch
  std::uint64_t steps_since_check_ = 0;    // Note [Sampled invariant checks of a replay]
  sim_ns pending_release_critical_{};      // critical VMM time of releases since the last step was built
  sim_ns pending_release_vmm_{};           // all VMM time of those releases
  std::array<std::uint64_t, k_vmm_call_kinds> last_step_calls_{};  // VMM calls when the previous step was built
  std::uint64_t last_chunks_created_ = 0;                          // chunks created by then
  std::uint32_t step_preempted_ = 0;
  bool continuing_ = false;                                // start_step() called at the end of a step
  bool pipelined_ = false;                                 // this step's admissions are pipelined
  time_us last_step_start_ = 0;                            // when the previous step began
  std::chrono::steady_clock::time_point step_wall_start_;  // measured only, never decides
  const time_us* horizon_ = nullptr;                       // set_horizon()
  eviction_clock clock_;                                   // what this replica last wrote to config_.order_clock
  replica_counters counters_;
  state_tracker tracker_;
  std::vector<std::uint64_t> ttft_us_, tpot_us_, e2e_us_, queue_us_;
  std::uint64_t queued_tokens_ = 0;  // replica_load::queued_tokens
  double queued_integral_ = 0;       // of queued_tokens_ over time, token-microseconds
  time_us queued_since_ = 0;         // the last change of queued_tokens_
  time_us first_arrival_ = 0;        // of this replica
  time_us closed_at_ = 0;            // close()
  bool any_arrival_ = false;
};

}  // namespace vtensor::sim
