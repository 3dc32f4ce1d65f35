#pragma once
/// The vAttention KV policy (arXiv 2405.04437; microsoft/vattention, `vattention/vattention.cu`):
/// every request gets a virtual slot able to hold the whole context, contiguous per buffer, and
/// 2 MiB pages are mapped into it on demand through the VMM backend (the same backend and
/// accounting adaptor as the vtensor policy, so it runs on `sim` and `cuda`). The prompt's pages
/// are mapped synchronously at admission; decode pages are mapped ahead by a background worker
/// (eager lookahead); a finished slot keeps its pages for the next request (deferred
/// reclamation), and pages are unmapped (into the policy's pool of chunks) only when a page is
/// needed and no chunk is left. No prefix sharing. Page: docs/policies/vattention.md.
///
/// Note [vAttention slots and buffers]
/// vAttention (`init_kvcache_virtual`, `alloc_virtual_tensor`) reserves, per layer, one virtual
/// tensor for K and one for V, each [max_batch_size, max_context, kv_heads, head_dim]; a request
/// owns one batch index (its slot) and so one max_context-long stripe in each of the 2 x layers
/// tensors. A page holds page_size / (kv_heads x head_dim x dtype) tokens of ONE buffer
/// (`init_kv_block_size`), and backing N tokens needs ceil(N / tokens_per_page) pages in EVERY
/// buffer (`grow_kvcache_phys` maps one page per K and V tensor of each layer). With `megacache`
/// one buffer holds all layers' K (and one all layers' V): 2 buffers, tokens_per_page divided by
/// the layer count.
/// Here the slot, not the buffer, owns the address range: one reserve per slot of
/// buffers x stride bytes, buffer b at offset b x stride, stride = ceil(max_context /
/// tokens_per_page) pages of 2 MiB (each buffer starts on a page boundary). The engine's layout
/// (one range per buffer, slots at fixed offsets inside it) puts the same pages at other
/// addresses; which one is chosen changes the number of reserve calls (one per slot here, made
/// when a slot is first needed, against 2 x layers at start-up there), nothing else.
/// A slot's buffers always have the same number of pages mapped (a "row" of pages: one page in
/// every buffer), as in the engine, where `mapped_pages[reqId]` is one count for all tensors.
///
/// Note [vAttention mapping worker model]
/// vAttention's `step_async` maps the prefill pages synchronously (`prepare_prefill_kvcache`) and
/// then starts a background thread (`spawn_kvcache_manager` -> `do_kvcache_memory_management`)
/// that maps the pages the next decode steps need (eagerly, a little ahead). Here:
/// - admit() maps ceil(prompt / tokens_per_page) rows on the step thread; grow() maps on the step
///   thread only the rows its tokens need that are not mapped yet (a lookahead that fell short);
/// - after each admit() and grow() the slot is queued for a lookahead job (options.lookahead_pages
///   rows beyond the row of the last token, capped by the slot). The queued jobs run once the
///   step is over (at the first call after the next advance_to, or in settle()), in the order
///   they were queued, spawned at the time the step thread's own VMM work of that step ended:
///   as in the engine, where the background thread is spawned after the step's prefill pages
///   are mapped, a step's admissions see only the lookahead of earlier steps (mapping a row
///   ahead and taking it back for an admission of the same step would only thrash). A
///   lookahead takes chunks from the pool, the budget or idle slots, never from another live
///   request;
/// - a job's calls are made at once, on the thread that called the policy (the simplest correct
///   choice: the backend, `cuda` included, is driven from one thread, so a replay on `cuda` makes
///   the same calls in the same order as on `sim`), and moved from the step side to the worker
///   side of the report by taking the accounting adaptor's step-side figures before and after
///   the job;
/// - the job is priced by the latency model (every call it made: creates, maps, set-access, and
///   the unmaps of any idle slot it emptied) and runs on a modelled worker clock: it starts at
///   max(worker clock, spawn time) and ends its price later, as in the vtensor policy's
///   Note [Mapping worker model];
/// - a step-thread operation that needs a row mapped by a job ending after the step-thread time
///   (a grow reaching the lookahead row, an admission reusing an idle slot whose rows a job still
///   maps, a reclamation unmapping them) waits for that job's end: the wait is on the critical
///   path (critical_vmm_time), the job itself is not. The engine's `step_async` waits for the
///   whole background pass before each step (`wait_kvcache_manager_sync`); here only a need waits;
/// - with async_lookahead false the lookahead is mapped on the step thread at once, on the clock.
/// Decisions never read wall time. A driver error inside a lookahead job (an injected map
/// failure) undoes the job's partial row and ends the job: the lookahead is an optimisation, and
/// the next grow maps what it needs itself (counted in lookahead_failures()).
///
/// Note [vAttention deferred reclamation]
/// A finished or preempted request's slot keeps its pages (vAttention's `deferred_reclaim`,
/// default true: `free_batch_idx` only zeroes the sequence length). A new request takes an idle
/// slot (`alloc_new_batch_idx`, "best fit"): here the idle slot with the fewest mapped rows that
/// still covers the prompt, else the one with the most rows (ties: the lowest slot index). The
/// engine's loop starts from the first idle index and only moves to a slot with enough pages and
/// fewer than the current pick, so it can keep a slot without enough pages when one with enough
/// exists; the rule here is the one its comment states. A new slot is reserved only when no slot
/// is idle; slots are never given back before the policy ends, so their number is the largest
/// number of requests live at once (vAttention fixes max_batch_size at start; here the replica's
/// batching bounds it, and a slot costs address space only).
/// Physical pages: the engine maps from a pool of pages created at start-up
/// (`reserve_physical_pages`) and unmapping returns a page to it. Here chunks are created on
/// demand up to the budget (the backend's capacity) and then kept: an unmapped chunk goes to the
/// policy's pool (free bytes) and is mapped again from there; none is released before the end.
/// Pages are reclaimed only when a chunk is needed, the pool is empty and the budget is reached
/// (or a create fails): `reclaim_kvblocks_on_demand` walks reqIds downwards releasing each
/// request's pages down to its need (all of an idle one's). Here every row of the idle slot with
/// the highest index goes to the pool, one slot at a time; when no idle slot has rows, a need (not
/// a lookahead) trims the live slot with the highest index that maps rows beyond its tokens down
/// to them. As the engine checks `kvblocks_available()` before it maps, no call is made for rows
/// that cannot all be had from those sources.

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/registry.hpp"
#include "core/model_presets.hpp"
#include "sim/accounting_backend.hpp"
#include "sim/kv_policy.hpp"
#include "sim/policy_options.hpp"
#include "sim/worker_clock.hpp"

namespace vtensor::sim {

/// Options of the vAttention policy.
struct vattention_policy_options {
  std::string backend = "sim";                ///< backend registry name
  backend_config device;                      ///< capacity (the KV budget; UINT64_MAX unlimited), calibration
  model_spec kv;                              ///< KV shape on one GPU
  std::uint64_t max_context_tokens = 131072;  ///< tokens a slot can hold
  std::uint32_t lookahead_pages = 1;          ///< rows kept mapped beyond the row of the last token
  bool async_lookahead = true;                ///< lookahead mapped by the modelled worker (else on the step thread)
  bool megacache = false;                     ///< one buffer for all layers' K and one for V
};

/// The vAttention policy's own settings (its option table: vattention_definition()). The
/// defaults are the library's; the command line's are the table's (lookahead 1).
struct vattention_settings {
  static constexpr std::string_view policy_name = "vattention";  ///< its registry name
  std::uint32_t lookahead_pages = 0;                             ///< rows kept mapped beyond the last token's
  bool async_lookahead = true;                                   ///< lookahead mapped by the modelled worker
  bool megacache = false;                                        ///< one buffer for all layers' K and one for V
};

/// The vAttention options for the shared `options` and its own `settings`: budget, backend,
/// model, context, lookahead (pages and async) and megacache.
[[nodiscard]] vattention_policy_options vattention_options(const kv_policy_options& options,
                                                           const vattention_settings& settings = {});

/// The vAttention policy's registration: its option table and its answers (sim/policy_registry.cpp).
[[nodiscard]] policy_definition<vattention_settings> vattention_definition();

/// The policy. Owns its backend (under an accounting adaptor), its slots and their chunks.
class vattention_policy final : public kv_policy {
 public:
  /// Builds the backend `options.backend`. Throws unknown_backend_error, calibration_error, or
  /// std::invalid_argument naming a bad option (no layers, a token larger than a page, no
  /// context).
  explicit vattention_policy(vattention_policy_options options);
  /// The same over a backend built by the caller (tests inject faults this way); `model` prices
  /// the calls. options.backend and options.device are then only reported.
  vattention_policy(vattention_policy_options options, std::unique_ptr<vmm_backend> inner, latency_model model);
  /// Unmaps and releases every page and frees every slot's range.
  ~vattention_policy() override;

  /// Buffers per slot: 2 x layers, or 2 with megacache.
  [[nodiscard]] std::uint32_t buffers() const { return buffers_; }
  /// Tokens one 2 MiB page holds of one buffer.
  [[nodiscard]] std::uint64_t tokens_per_page() const { return tokens_per_page_; }
  /// Rows (pages per buffer) a slot can hold.
  [[nodiscard]] std::uint64_t pages_per_buffer() const { return pages_per_buffer_; }
  /// Slots reserved so far (live and idle).
  [[nodiscard]] std::size_t slots() const { return slots_.size(); }
  /// Slots idle now.
  [[nodiscard]] std::size_t idle_slots() const { return idle_by_rows_.size(); }
  /// Rows mapped in the slot of live request `id` (std::invalid_argument for an unknown id).
  [[nodiscard]] std::uint64_t rows_of(request_id id) const;
  /// Idle slots whose pages were reclaimed under pressure.
  [[nodiscard]] std::uint64_t reclaimed_slots() const { return reclaimed_slots_; }
  /// Live slots whose rows beyond their tokens were unmapped under pressure.
  [[nodiscard]] std::uint64_t trimmed_slots() const { return trimmed_slots_; }
  /// Lookahead jobs ended early by a driver error.
  [[nodiscard]] std::uint64_t lookahead_failures() const { return lookahead_failures_; }
  /// The accounting adaptor over the backend.
  [[nodiscard]] const accounting_backend& backend() const { return *backend_; }
  /// Where the VMM time went.
  [[nodiscard]] vmm_split_report report() const;

 private:
  struct job {
    std::uint64_t first_row = 0;  // the job mapped rows from here (up to the next job's first row)
    sim_ns done{};                // its modelled end
  };
  struct slot {
    device_addr base = 0;
    std::uint32_t index = 0;
    std::uint64_t rows = 0;            // rows mapped (pages per buffer)
    std::vector<chunk_handle> chunks;  // row-major: chunks[row * buffers + buffer]
    std::vector<job> jobs;             // worker jobs that mapped some of its rows, oldest first
    bool live = false;
    bool pending = false;          // queued for a lookahead job
    std::uint64_t id = 0;          // live request
    std::uint64_t tokens = 0;      // live request's tokens
    std::uint64_t max_tokens = 0;  // live request's limit
  };

  kv_admit_result do_admit(const kv_request& r) override;
  bool do_grow(request_id id, std::uint64_t tokens) override;
  void do_release(request_id id, release_reason why) override;
  [[nodiscard]] kv_stats do_stats() const override;
  [[nodiscard]] sim_ns do_vmm_time() const override;
  [[nodiscard]] sim_ns do_critical_vmm_time() const override { return clock_.critical; }
  void do_advance_to(sim_us now) override;
  void do_settle() override {
    flush();
    run_pending(now());
  }
  [[nodiscard]] std::optional<vmm_split_report> do_vmm_report() const override { return report(); }
  [[nodiscard]] std::string do_name() const override { return "vattention"; }
  [[nodiscard]] nlohmann::ordered_json do_describe() const override;
  void do_check_invariants() const override;
  [[nodiscard]] std::string_view do_vmm_critical_path() const override {
    return options_.async_lookahead && options_.lookahead_pages > 0 ? k_critical_path_lookahead_worker
                                                                    : k_critical_path_synchronous;
  }

  [[nodiscard]] std::uint64_t rows_for(std::uint64_t tokens) const;
  [[nodiscard]] std::uint64_t lookahead_target(std::uint64_t tokens) const;
  [[nodiscard]] device_addr page_addr(const slot& s, std::uint32_t buffer, std::uint64_t row) const;
  /// Maps row s.rows with the free list's last buffers_ chunks (Note [A row from the free list in one call]).
  void map_row_from_free(slot& s);
  [[nodiscard]] std::uint64_t row_bytes() const;
  [[nodiscard]] sim_ns now() const { return clock_.now(); }
  [[nodiscard]] sim_ns step_model_ns() const;  // step-side model time, worker jobs' calls excluded
  void book_step_calls();                      // puts the step thread's new calls on the clock

  // Slots.
  [[nodiscard]] slot& take_slot(std::uint64_t rows_needed);  // best-fitting idle slot, else a new one
  void make_idle(slot& s);
  void leave_idle(slot& s);
  void wait_for_rows(slot& s, std::uint64_t below_row);  // step thread waits for jobs mapping rows < below_row
  // Mapping. map_rows: rows up to `rows`, reclaiming idle slots when a create fails; false when
  // no chunk can be had (the partial row undone, complete rows kept). Throws vmm_error.
  // `worker`: calls of a worker job (no modelled waits); `ahead`: a lookahead, which takes no
  // other live request's rows.
  [[nodiscard]] bool map_rows(slot& s, std::uint64_t rows, bool worker, bool ahead);
  // Chunks `s` could get now: the pool's, the budget's headroom, idle slots' rows and (step thread)
  // other live slots' rows beyond their tokens.
  [[nodiscard]] std::uint64_t available_chunks(const slot& s, bool ahead) const;
  // A chunk for `s`: the pool's, else a new one, else one reclaimed from another slot.
  [[nodiscard]] std::optional<chunk_handle> obtain_chunk(const slot& s, bool worker, bool ahead);
  void unmap_rows(slot& s, std::uint64_t keep_rows);  // unmaps rows >= keep_rows into the pool
  // Empties one idle slot, else (not `ahead`) trims one live slot other than `for_slot` to its
  // tokens; false if neither has rows to give.
  [[nodiscard]] bool reclaim_one(const slot& for_slot, bool worker, bool ahead);
  void refile(slot& s);                   // files a live slot for trimming when it maps rows beyond its tokens
  void want_lookahead(slot& s);           // after an op: the lookahead now (synchronous) or queued
  void run_pending(sim_ns spawn);         // the queued lookahead jobs, spawned at `spawn`
  void flush();                           // runs the jobs queued before the last advance_to
  void lookahead(slot& s, sim_ns spawn);  // one lookahead: a worker job from `spawn`, or step-thread mapping

  vattention_policy_options options_;
  std::unique_ptr<accounting_backend> backend_;
  std::uint32_t buffers_ = 0;
  std::uint64_t buffer_token_bytes_ = 0;  // bytes of one token in one buffer
  std::uint64_t tokens_per_page_ = 0;
  std::uint64_t pages_per_buffer_ = 0;
  std::uint64_t slot_bytes_ = 0;

  std::vector<std::unique_ptr<slot>> slots_;
  std::unordered_map<std::uint64_t, slot*> live_;                   // request id -> its slot
  std::set<std::pair<std::uint64_t, std::uint32_t>> idle_by_rows_;  // (rows, index) of idle slots
  std::set<std::uint32_t> idle_with_rows_;                          // indices of idle slots with rows > 0
  std::set<std::uint32_t> live_excess_;  // indices of live slots with rows beyond their tokens
  std::vector<chunk_handle> free_;       // chunks created and unmapped (the page pool)
  std::vector<mapping_entry> row_maps_;  // map_row_from_free's calls, kept between rows
  std::optional<sim_ns> spawn_;          // when the queued jobs were spawned (set by advance_to)
  std::vector<std::uint32_t> pending_;   // slots queued for a lookahead job, in order

  // Figures, kept as operations go (stats() walks nothing).
  std::uint64_t chunks_held_ = 0;
  std::uint64_t live_rows_ = 0;        // rows mapped in live slots
  std::uint64_t live_token_rows_ = 0;  // of which holding tokens (ceil(tokens / tokens_per_page) a slot)
  std::uint64_t idle_rows_ = 0;        // rows mapped in idle slots
  std::uint64_t live_tokens_ = 0;
  std::uint64_t prompt_tokens_ = 0;
  std::uint64_t chunks_created_ = 0, chunks_created_ahead_ = 0;
  std::uint64_t reclaimed_slots_ = 0, trimmed_slots_ = 0, lookahead_failures_ = 0;

  // Clock (Note [vAttention mapping worker model]).
  vmm_side worker_;     // calls moved from the step side to the worker side
  worker_clock clock_;  // Note [The modelled worker clock]
};

}  // namespace vtensor::sim
