#pragma once
/// The vTensor KV policy: the core manager (one vTensor per request, prefix sharing through the
/// rTree, lazy deallocation) over a VMM backend chosen by name, wrapped in an accounting adaptor
/// that splits the calls between the step thread and the mapping worker and prices them with the
/// latency model. The policy also runs the model of the mapping worker (Note [Mapping worker
/// model]) that puts the simulated waits on the step's critical path.
///
/// Note [Mapping worker model]
/// With asynchronous lookahead or the pipeline the manager hands mappings to a background worker.
/// The simulated clock models that worker; it must not read wall time, so that a replay over `cuda`
/// decides exactly as one over `sim`. The model reads what each manager call did (its
/// op_effects, Note [Effects of a call] in core/scheduler.cpp) and re-derives nothing:
/// - step-thread time: the step's simulated start (advance_to) plus the modelled price of every
///   call the step thread made since, plus the waits below;
/// - a job: the pages a create or extend handed to the worker (`worker_pages`, ticket
///   `worker_job`), priced map + set-access per chunk. The worker clock starts the job at
///   max(worker clock, the end of the step build that handed it out) (Note [Jobs start when the
///   build ends]) and ends it its price later; the request remembers that end with the ticket;
/// - a wait: when a call waited for a job (`waited_job`: an extend that needs a page the worker
///   was given, a release undoing the request's mappings), the step thread waits until that
///   job's modelled end. An extend waits after the pages it mapped itself (`step_pages` > 0),
///   else (and always with the pipeline, `waited_first`) from its start;
/// - pipelined admission (`scheduler_config::pipeline`, with the replica's Note [Pipelined
///   admission in the replica]): at a step boundary with requests live, the step that just ended
///   ran from the step-thread time reached when it was built (the window's start). The admissions
///   of the next step are taken as decided in that window: their own step-thread calls (reserve,
///   create, a copy's scratch map) are made there, off the clock, one after the other, and their
///   jobs follow on the worker from max(window start, worker clock at the boundary); a job is
///   still charged to the worker clock for later jobs. The step then waits for the jobs that the
///   first prefill chunk needs (`first_pages`: the cached prefix's pages and the first chunk's,
///   Note [Pipelined admission] in core/scheduler.cpp) to end, counted as an admission wait. The
///   rest of the prompt (and the lookahead pages) must be mapped when the next step, which
///   computes the second chunk, begins: at the boundary that ends the first chunk's step, the part
///   of those jobs still ahead is booked as a wait at the next step's first call into the policy
///   (a release at the boundary, a growth, an admission; `rest_waits`). An 8192-token chunk
///   computes for about 160 ms on an H200 and its 16 pages map in about 25 ms, so this is rare
///   (whole Mooncake trace: 109 such waits, 6.4 s, at --time-scale 1). Later chunks are not
///   checked apart (the whole rest is due at the second). After an idle spell
///   (no request live at the boundary) nothing ran beside the admission: its calls are on the
///   clock, its jobs start then, and the step waits for the first chunk's jobs at once. An
///   admission that takes the standby vTensor (Note [Standby vTensor] in core/scheduler.cpp) has
///   its first pages mapped by the standby's job, which ran on the worker clock when a previous
///   admission handed it out (after that admission's own jobs): the step waits for the later of
///   that job's end and the jobs of its pages beyond the standby's; one that takes a parked vTensor
///   (Note [Parked vTensors]) for the modelled end of that vTensor's request's last job. Unmaps of standby pages beyond
///   a request's reservation, or of a standby given back to make room, are priced as a release's. In wall time (on
///   `cuda`) the replica still builds a step after the previous one ended, so the real jobs run beside the step that
///   computes them (emulated compute reads no memory); only the model places them beside the previous one;
/// - releases with the pipeline unmap on the worker (Note [Releases on the worker]): priced
///   per chunk, nobody waits; since in the pipelined order they come after the next step's
///   admissions, they are added to the worker clock at the next boundary;
/// - the chunks of lookahead pages are allocated by the step thread (only their mapping is
///   deferred), so their creation stays on the clock unless chunks are created ahead;
/// - driver contention: Note [Driver contention];
/// - not modelled: chunk creation ahead (create_ahead > 0), which is taken as idle-time work: the
///   step thread's creates are then left off the clock, since whether a chunk came from the
///   worker's stock is a matter of wall time; the device copy of a partial page; and a map job
///   that fails on the worker (its retry is on the step thread's clock through its calls only).
/// Without the worker no call hands out a job or waits, and the clock is the step thread's calls
/// alone. The core decides when an extend waits from its own record of which pages are ready;
/// settling the manager marks every page ready, so the policy settles only when the replay is
/// over (kv_policy::settle()), never in between: checking invariants does not settle.
///
/// Note [Driver contention]
/// The driver serialises VMM calls, and so does the core: every call, from either thread, holds
/// the backend lock, and the worker takes it for one backend call at a time (core/async_mapper.cpp),
/// not for a whole job; the step thread takes the driver for a whole manager operation (Note
/// [Driver hand-over] in core/async_mapper.cpp: the worker starts no call while the step thread
/// holds it). So a step-thread operation that makes VMM calls while the worker is busy (by the
/// model's clock: the worker clock is past the step thread's) waits for the rest of the worker's
/// call in flight, once, and the worker's later calls wait behind the whole operation, so its
/// clock moves on by the operation's price (book_step_calls()). The rest of a call in flight is
/// booked as a measured fraction of the call (Note [Rest of a call in flight] in
/// sim/contention_model.hpp: a whole map + set-access, 0.55 of a run's unmap), capped by the
/// time the worker has left. The call is a map + set-access of one chunk (about 46 us in the
/// built-in H200 latency model), or, while the worker unmaps
/// released requests, one backend unmap call, which covers a whole run of chunks (the mean run of
/// those releases: core/async_mapper.cpp unmaps a run in one call, the cuda backend makes one
/// driver call per chunk inside it). Only work handed out before the current step build counts:
/// Note [Jobs start when the build ends]. The figures: `contended_bookings` and `contention_us` in
/// the summary's vmm_model, beside the measured `driver_lock_waits` (checked on the H200:
/// results/gpu/).
///
/// Note [Jobs start when the build ends]
/// A job handed to the worker during a step build (a lookahead top-up, a prompt's deferred pages
/// without the pipeline) does not start at once in wall time: the worker is woken through a
/// condition variable while the step thread goes on building the step and takes the driver again
/// for its next manager operation, so the worker gets the driver when the build ends. Measured on
/// the H200 (results/gpu/2026-12-03-h200-issue11-model-check/): a model that started each job at
/// its hand-out booked 36-61 contended operations per run inside step builds where the GPU showed
/// none. So the model queues a build's jobs and puts them on the worker clock, in order, at the
/// build's end (the next advance_to), or earlier when the step thread waits for one of them (it
/// lets the driver go while it waits). Admissions after an idle spell are not deferred: the step
/// waits for their first pages at once (Note [Mapping worker model]).

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/registry.hpp"
#include "core/manager.hpp"
#include "sim/accounting_backend.hpp"
#include "sim/kv_policy.hpp"
#include "sim/policy_options.hpp"
#include "sim/worker_clock.hpp"

namespace vtensor::sim {

/// Where the mapping worker runs its jobs.
enum class worker_mode : std::uint8_t {
  automatic,    ///< inline over a simulated backend (backend_is_simulated()), else a thread
  inline_jobs,  ///< on the calling thread as they are handed out (Note [Inline worker] in core/async_mapper.hpp)
  thread,       ///< on a thread of its own
};

/// When a request's computed KV becomes shareable through the rTree (Note [Eager publication] in
/// core/scheduler.cpp).
enum class publish_moment : std::uint8_t {
  release,  ///< when it finishes or is preempted (the seed's design)
  eager,    ///< after each step that computes part of its prompt
};
inline constexpr enum_names<publish_moment, 2> k_publish_moment_names{
    {{{publish_moment::release, "release"}, {publish_moment::eager, "eager"}}}};

/// Note [Default layout]
/// The command line's layout is token-major (issue 33). The decode kernel runs at the same speed
/// over all three layouts' addressing (`calibrate --compute`, docs/kernel-factors.md: kv-fused
/// 0.971 and token-major 0.973 of kv-split's time on an H100), so the choice rests on what the
/// page size does: a token-major page is 16 tokens of every layer (paged's block), a kv-fused one
/// 512 tokens of one layer in each of 32 tensors. On the whole Mooncake trace and a gen-trace
/// multi-turn trace, at four budgets (results/compare/layouts/), token-major had the highest or a
/// tied hit rate in every cell, about 3% of kv-fused's internal slack, the lowest TTFT p50 (tied in
/// one cell) and an equal or higher throughput; it lost TPOT p50 by 3% on Mooncake (larger
/// batches: more requests fit) and had more preemptions than kv-fused at 16 GiB on Mooncake (225
/// against 71; paged 367). Its replays cost the simulator about 2.1x kv-fused's wall time (32x
/// the pages), 1.6 s for the whole Mooncake trace. The library's default (vtensor_settings) stays
/// kv-fused, as its tests are written against it.

/// The vtensor policy's own settings (its option table: vtensor_definition()). The defaults are
/// the library's; the command line's are the table's (lookahead 1, pipeline on, late admission
/// on, token-major: Note [Default layout]).
struct vtensor_settings {
  static constexpr std::string_view policy_name = "vtensor";  ///< its registry name
  kv_layout layout = kv_layout::kv_fused;                     ///< tensor layout (command line: token-major)
  std::uint32_t lookahead_pages = 0;                          ///< pages mapped ahead of need
  std::uint32_t lookahead_batch = 1;                          ///< lookahead pages mapped at a time
  bool async_lookahead = true;            ///< lookahead mapped by the worker (when lookahead_pages > 0)
  std::uint32_t create_ahead_chunks = 0;  ///< the worker keeps this many chunks created (0: off)
  bool pipeline = false;                  ///< pipelined admission (Note [Pipelined admission] in core/scheduler.cpp)
  bool late_admission = false;            ///< with the pipeline: Note [Late admission] in sim/replica.hpp
  /// With the pipeline: tokens a standby vTensor keeps mapped for the next admission that misses
  /// the prefix cache (Note [Standby vTensor] in core/scheduler.cpp; 0: none).
  std::uint64_t standby_tokens = 0;
  /// With the pipeline: finished requests' vTensors kept mapped over their cached prefix (Note
  /// [Parked vTensors] in core/scheduler.cpp; 0: none).
  std::uint32_t parked = 0;
  eviction_config eviction;                                ///< prefix-cache eviction order (without clock and oracle)
  publish_moment publish = publish_moment::eager;          ///< when computed KV is shared
  partial_page_policy partial = partial_page_policy::cow;  ///< partial prefix page
  worker_mode worker = worker_mode::automatic;             ///< where the worker runs its jobs
};

/// Options of the vTensor policy.
struct vtensor_policy_options {
  std::string backend = "sim";  ///< backend registry name
  backend_config device;        ///< capacity (the KV memory budget), calibration, latency
  manager_config
      manager;  ///< geometry (model x layout), scheduler (context, lookahead, async, cow|recompute), eviction
  publish_moment publish = publish_moment::release;  ///< when computed KV is shared
  bool late_admission = false;  ///< with the pipeline, admit later arrivals that fit the window (Note [Late admission])
};

/// The policy's options for the shared `options` and its own `settings`.
[[nodiscard]] vtensor_policy_options vtensor_options(const kv_policy_options& options,
                                                     const vtensor_settings& settings = {});

/// The vtensor policy's registration: its option table and its answers (sim/policy_registry.cpp).
[[nodiscard]] policy_definition<vtensor_settings> vtensor_definition();

/// Where the VMM time went (the vtensor policy's name for the shared report).
using vtensor_vmm_report = vmm_split_report;

/// The policy. Owns its backend and manager.
class vtensor_policy final : public kv_policy {
 public:
  /// Throws unknown_backend_error, calibration_error, or std::invalid_argument (unknown eviction
  /// policy).
  explicit vtensor_policy(vtensor_policy_options options);
  ~vtensor_policy() override;

  /// The manager, for inspection.
  [[nodiscard]] const manager& kv_manager() const { return *manager_; }
  /// The accounting adaptor over the backend.
  [[nodiscard]] const accounting_backend& backend() const { return *backend_; }
  /// Where the VMM time went (call after the replay for settled worker figures).
  [[nodiscard]] vtensor_vmm_report report() const;
  /// The pipeline's part of the model (Note [Mapping worker model]).
  struct pipeline_report {
    std::uint64_t hidden_ns = 0;          ///< step-thread calls of pipelined admissions, made beside a step
    std::uint64_t admission_waits = 0;    ///< admissions whose maps were not done when their step began
    std::uint64_t admission_wait_ns = 0;  ///< the step time those waits added
    std::uint64_t release_ns = 0;         ///< unmaps of releases, on the worker
    std::uint64_t contended_calls = 0;    ///< step-thread bookings that found the worker busy
    std::uint64_t contention_ns = 0;      ///< the time they waited behind the worker's call
    std::uint64_t rest_waits = 0;         ///< steps that waited for the rest of a prompt's pages
    std::uint64_t rest_wait_ns = 0;       ///< the time they waited
    std::uint64_t late_admissions = 0;    ///< admissions decided on a later arrival (Note [Late admission])
  };
  /// The pipeline's figures.
  [[nodiscard]] pipeline_report pipeline_figures() const {
    return {static_cast<std::uint64_t>(hidden_.count()),
            admission_waits_,
            static_cast<std::uint64_t>(admission_wait_time_.count()),
            static_cast<std::uint64_t>(release_time_.count()),
            contended_,
            static_cast<std::uint64_t>(contention_.count()),
            rest_waits_,
            static_cast<std::uint64_t>(rest_wait_time_.count()),
            late_admissions_};
  }

 private:
  struct worker_job {
    std::uint64_t ticket = 0;  // the core's ticket
    sim_ns done{};             // its modelled end
  };

  kv_admit_result do_admit(const kv_request& r) override;
  [[nodiscard]] std::uint64_t do_cached_tokens(const kv_request& r) const override {
    return manager_->cached_tokens(r.blocks, r.prompt_tokens);
  }
  bool do_grow(request_id id, std::uint64_t tokens) override;
  std::size_t do_decode(std::span<const request_id> ids) override;
  [[nodiscard]] std::uint64_t do_decode_rounds(std::span<const request_id> ids) override;
  kv_memory_view do_advance_round(std::span<const request_id> ids) override;
  void do_release(request_id id, release_reason why) override;
  void do_computed(request_id id, std::uint64_t tokens) override;
  [[nodiscard]] kv_stats do_stats() const override;
  [[nodiscard]] kv_memory_view do_memory_view() const override;
  [[nodiscard]] std::array<std::uint64_t, k_vmm_call_kinds> do_vmm_calls() const override;
  [[nodiscard]] std::uint64_t do_chunks_created() const override { return manager_->chunks_created(); }
  [[nodiscard]] sim_ns do_vmm_time() const override;
  [[nodiscard]] sim_ns do_critical_vmm_time() const override { return clock_.critical; }
  void do_advance_to(sim_us now) override;
  void do_settle() override { manager_->settle(); }
  [[nodiscard]] std::optional<vmm_split_report> do_vmm_report() const override { return report(); }
  [[nodiscard]] std::string do_name() const override { return "vtensor"; }
  [[nodiscard]] kv_access do_access() const override { return {false, 0, manager_->geometry().layout()}; }
  [[nodiscard]] nlohmann::ordered_json do_describe() const override;
  void do_check_invariants() const override { manager_->check_invariants(); }
  [[nodiscard]] bool do_pipelined() const override { return pipeline(); }
  [[nodiscard]] bool do_admits_late(const kv_request& r, sim_us arrival) const override;
  [[nodiscard]] std::string_view do_vmm_critical_path() const override;
  void do_extra_figures(nlohmann::ordered_json& vmm_model) const override;
  [[nodiscard]] bool do_free_pool_on_wall_time() const override {
    return options_.manager.scheduler.create_ahead_chunks > 0;
  }

  [[nodiscard]] memory_breakdown breakdown(const memory_stats& m) const;  // Note [vtensor memory breakdown]
  // The same, with the manager's ahead_bytes() read already.
  [[nodiscard]] static memory_breakdown breakdown(const memory_stats& m, std::uint64_t ahead_bytes);
  /// Whether the call counts are the ones handed out (the worker's as submitted), see handed_calls().
  [[nodiscard]] bool counts_handed_calls() const;
  [[nodiscard]] std::array<std::uint64_t, k_vmm_call_kinds> handed_calls() const;
  [[nodiscard]] sim_ns step_model_time() const;  // step thread's priced calls (creates excluded with create-ahead)
  [[nodiscard]] sim_ns now() const { return clock_.now(); }
  [[nodiscard]] sim_ns map_price(std::uint64_t pages) const;  // the worker's map + set-access of `pages` pages
  void book_step_calls();  // adds the step thread's new calls to the clock (Note [Driver contention])
  [[nodiscard]] std::uint64_t step_calls() const;  // step-thread calls so far
  [[nodiscard]] bool pipeline() const { return options_.manager.scheduler.pipeline; }
  // Note [Mapping worker model]; `decided`: a late admission's arrival (Note [Late admission])
  void model_pipeline_admit(request_id id, const op_effects& fx, bool pipelined, std::optional<sim_ns> decided);
  void do_release_model(const op_effects& fx);  // a release's unmaps on the worker
  void take_carry();  // books a wait for the rest of a prompt's pages (Note [Mapping worker model])
  void wait_for(request_id id, std::uint64_t ticket, sim_ns from);  // a modelled wait, from `from`, for job `ticket`
  void submit(request_id id, const op_effects& fx);                 // the job a call handed to the worker
  void start_build_jobs(
      sim_ns at);  // the step build's jobs join the worker clock (Note [Jobs start when the build ends])

  struct build_job {
    std::uint64_t request = 0, ticket = 0;
    sim_ns price{};
  };
  static constexpr sim_ns k_not_started = sim_ns::max();  // a build's job, not on the worker clock yet

  vtensor_policy_options options_;
  std::unique_ptr<vmm_backend> backend_owner_;  // outlives manager_ (declared first)
  accounting_backend* backend_;                 // backend_owner_, as its type
  std::unique_ptr<manager> manager_;
  std::unordered_map<std::uint64_t, worker_job> last_job_;  // request id -> its last job
  worker_clock clock_;                // Note [The modelled worker clock]; `booked` is step_model_time() on the clock
  std::uint64_t live_ = 0;            // requests admitted and not released
  std::uint64_t booked_calls_ = 0;    // step-thread calls already on the clock
  std::uint64_t worker_call_ns_ = 0;  // one map + set-access of the worker
  bool pipelined_window_ = false;     // the admissions now were decided during a step
  sim_ns window_start_{};             // when that step's compute began
  sim_ns window_cpu_{};               // the step thread's clock in the window
  sim_ns window_worker_{};            // the worker's clock for the window's admissions
  sim_ns release_backlog_{}, release_at_{};  // releases' unmaps not on the worker clock yet
  std::uint64_t release_runs_ = 0;           // in that many backend calls (runs)
  std::pair<sim_ns, sim_ns> unmap_span_{};   // the worker clock's last stretch of releases' unmaps
  sim_ns unmap_call_{};                      // the mean backend call (one run's unmap) in it
  std::vector<build_job> build_jobs_;        // jobs handed out in this step build, in order
  sim_ns hidden_{}, admission_wait_time_{}, release_time_{}, contention_{};
  std::uint64_t admission_waits_ = 0, contended_ = 0, rest_waits_ = 0, late_admissions_ = 0;
  std::vector<sim_ns> rest_due_;  // ends of the jobs with the rest of the prompts admitted this step
  sim_ns carry_{};                // the next step's wait for them, booked at its first call
  sim_ns rest_wait_time_{};
  sim_ns standby_done_{};  // the modelled end of the standby's map job (Note [Standby vTensor] in core/scheduler.cpp)
  std::unordered_map<std::uint64_t, sim_ns> parked_done_;       // a parked vTensor's last map job -> its modelled end
  std::array<std::uint64_t, k_vmm_call_kinds> worker_calls_{};  // calls handed to the worker, by kind
  round_lease lease_;                                           // the manager's rounds of the last decode round
  void count_worker(vmm_call c, std::uint64_t n) { worker_calls_[static_cast<std::size_t>(c)] += n; }
};

}  // namespace vtensor::sim
