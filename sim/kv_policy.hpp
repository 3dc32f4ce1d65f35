#pragma once
/// The KV policy interface: everything the serving replica asks of memory. One implementation
/// per allocator (vTensor here; paged blocks, max-length preallocation and others beside it),
/// so the replica and its metrics stay the same while the memory manager changes.
///
/// Contract, for every policy:
/// - admit() either takes a request in with its whole prompt backed (`admitted`, with the
///   leading tokens it serves from a prefix cache in `hit_tokens`) or changes nothing; not
///   admitted means "no memory now": the replica keeps the request waiting, or rejects it when
///   nothing else holds memory.
/// - decode() grows a step's decoders by one token each, in order, stopping at the first that
///   needs memory the policy cannot give (the replica then preempts and retries it); the round
///   it returns also leases the rounds that follow (Note [One decode protocol]). grow() backs
///   `tokens` more tokens of one admitted request, or returns false and changes nothing (growth
///   that is not a decode round: tests, speculative tokens).
/// - release() ends an admitted request: `finished` may keep its prefix for reuse, `preempted`
///   drops it (the request comes back later through admit()).
/// - computed() tells the policy, after a step, how many of a request's tokens now have their KV
///   computed (its prefill's progress); a policy that shares a prompt's KV once it is computed
///   (vtensor's eager publication) publishes it then, the others ignore it.
/// - Ids are the caller's and unique among admitted requests. Misuse (unknown id, growth past
///   max_tokens) throws std::invalid_argument.
/// - stats() is cheap (no walk) and may be called after every step; vmm_time() and
///   critical_vmm_time() cheaper still.
/// - Time: the replica tells the policy the simulated time with advance_to() before it calls it;
///   a policy's decisions and its modelled times must not depend on wall time (Note [VMM time on
///   the critical path] in replica.hpp). Times cross this interface typed (`sim_us` for the
///   clock, `sim_ns` for VMM time), never as bare integers.
/// - check_invariants() only reads: it must not wait for background work; settle() does that.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "backends/units.hpp"
#include "backends/vmm_backend.hpp"
#include "core/ids.hpp"
#include "core/kv_geometry.hpp"
#include "core/memory_stats.hpp"
#include "sim/accounting_backend.hpp"

namespace vtensor::sim {

/// A request as memory sees it.
struct kv_request {
  request_id id;                        ///< unique among admitted requests
  std::span<const token_block> blocks;  ///< prefix identity of the prompt's leading tokens (may be empty)
  std::uint64_t prompt_tokens = 0;      ///< tokens to back now, at least 1
  std::uint64_t max_tokens = 0;         ///< tokens it may grow to (prompt + output)
  /// A late admission (Note [Late admission] in sim/replica.hpp): when the request arrived,
  /// after the previous step began; nullopt for every other admission.
  std::optional<sim_us> late_arrival;
};

/// Outcome of admit().
struct [[nodiscard]] kv_admit_result {
  bool admitted = false;         ///< false: no memory, nothing changed
  std::uint64_t hit_tokens = 0;  ///< leading prompt tokens whose KV came from the cache (not computed)
  std::uint64_t cow_bytes = 0;   ///< bytes copied to admit it
};

/// Why a request leaves.
enum class release_reason : std::uint8_t {
  finished,   ///< done; its prefix may be kept for reuse
  preempted,  ///< dropped to free memory; it will be admitted again and recomputed
};

/// Device memory by what it holds, comparable across policies (docs/metrics.md, "Memory
/// breakdown"). The six parts add up to the policy's physical bytes (memory_stats::physical_bytes).
struct memory_breakdown {
  std::uint64_t used = 0;           ///< valid KV of live requests, shared bytes once
  std::uint64_t internal = 0;       ///< unused tails of the blocks, pages or slots live requests hold
  std::uint64_t reserved_idle = 0;  ///< reserved for a live request but backing none of its tokens yet
  std::uint64_t external = 0;       ///< free, but outside the largest free extent (arenas only)
  std::uint64_t cached = 0;         ///< held only for reuse by a prefix cache or an idle slot
  std::uint64_t free = 0;           ///< free and usable by the next request
  /// Page-level view (policies on 2 MiB chunks; 0 elsewhere), not part of the sum:
  std::uint64_t cached_pinning = 0;  ///< cached bytes in chunks that also hold live or other cached data
  std::uint64_t reclaimable = 0;     ///< bytes that evicting every cached entry would give back to the driver

  /// used + internal + reserved_idle + external + cached + free.
  [[nodiscard]] std::uint64_t total() const { return used + internal + reserved_idle + external + cached + free; }
  friend bool operator==(const memory_breakdown&, const memory_breakdown&) = default;
};

/// How a policy lays KV out for the attention kernels: contiguous per request (vtensor,
/// vattention, static) in one of vtensor's layouts, or behind a block table of
/// `block_tokens`-token blocks (paged, radix). The step cost applies the kernel factor of the
/// access (sim/kernel_factors.hpp; measured, sim/compute_calibration.hpp).
struct kv_access {
  bool paged = false;                      ///< read through a block table
  std::uint32_t block_tokens = 0;          ///< tokens per block when paged
  kv_layout layout = kv_layout::kv_split;  ///< contiguous: where a layer's K and V rows lie
  friend bool operator==(const kv_access&, const kv_access&) = default;
};

/// Where a policy's VMM time went: modelled (drives the clock) and charged (measured on `cuda`).
/// Policies without VMM calls have none.
struct vmm_split_report {
  vmm_side step;                           ///< calls of the step thread
  vmm_side worker;                         ///< calls of the mapping worker
  std::uint64_t critical_model_ns = 0;     ///< modelled step-thread time (calls + waits) on the clock
  std::uint64_t jobs = 0;                  ///< modelled worker jobs (lookahead mappings)
  std::uint64_t job_model_ns = 0;          ///< their modelled price
  std::uint64_t modelled_waits = 0;        ///< modelled waits of the step thread for the worker
  std::uint64_t modelled_wait_ns = 0;      ///< their modelled length
  std::uint64_t mapping_waits = 0;         ///< measured: extends that waited for the worker
  std::uint64_t mapping_wait_ns = 0;       ///< measured: wall time of those waits
  std::uint64_t driver_lock_waits = 0;     ///< measured: step-thread VMM calls behind the worker's call in flight
  std::uint64_t driver_lock_wait_ns = 0;   ///< measured: wall time of those waits
  std::uint64_t async_vmm_ns = 0;          ///< charged by the worker
  std::uint64_t chunks_created = 0;        ///< chunks created in all
  std::uint64_t chunks_created_ahead = 0;  ///< of which by the worker
};

/// Note [One decode protocol]
/// Every step grows each decoding request by one token, and between two events a replica's steps
/// are often alike: every running request decodes, nothing arrives, finishes or waits, and every
/// growth lands in memory the policy already holds (on the 1,000,000-request gen-trace, 52
/// million steps with 7 requests running on average). One entry serves both cases:
/// - decode(ids) is the step's round: grow(id, 1) for each id in turn, stopping at the first
///   that returns false, with the same effects, call for call, as that loop. A policy may answer
///   the common case (growth inside pages it already holds) without a call per request: on a
///   100,000-request gen-trace, a grow() per request (policy, manager lock, driver hand-over,
///   record lookup, effects booked) was 20% of the profile.
/// - The decode_round it returns leases the rounds that follow over the same ids:
///   rounds_in_place() says how many one-token rounds would need nothing but counting (asked of
///   the policy once, 0 unless every id grew), and advance() takes one and returns the memory
///   after it, so a replica runs those steps without the event queue or a lookup per request
///   (Note [Steps run in a stretch] in replica.cpp). A policy that answers n promises that for
///   the next n advance()s (with advance_to() between them and no other call but reads) each is
///   decode(ids) growing every id, with the same effects; and that advance_to() changes no figure
///   that memory_view(), vmm_calls(), vmm_time() or chunks_created() reports.
/// - The lease ends at the policy's next mutating call (admit, grow, decode, release, settle):
///   kv_policy counts them (a generation), and a stale lease answers no rounds and refuses to
///   advance with std::logic_error; so does an advance() past the rounds answered. No policy
///   resets anything by hand for it.
/// A policy that does not override the round hooks answers 0 rounds, and its replays take every
/// step through the event queue.

/// What a replica samples after every step: kv_stats' memory and breakdown alone.
///
/// Note [Per-step reads of a policy]
/// A replica reads the policy's memory twice a step (its time series and peaks), and its VMM call
/// counts and chunk creations once (the step's calls and record; a decode stretch reads neither,
/// Note [Steps run in a stretch]). Reading them through stats() gathered every counter of the
/// policy each time: 19% of the instructions of a 5,000-request
/// gen-trace replay under callgrind went to vtensor's stats(). memory_view(), vmm_calls() and
/// chunks_created() answer those figures alone; a policy that does not override them answers
/// through stats(), so they agree by construction there, and vtensor's overrides read the same
/// sources as its stats().
struct kv_memory_view {
  memory_stats memory;
  memory_breakdown breakdown;
};

/// A policy's memory and its activity so far. Definitions: docs/metrics.md.
struct kv_stats {
  memory_stats memory;                  ///< device memory held, mapped, used, cached, idle; logical bytes
  memory_breakdown breakdown;           ///< the same physical bytes by what they hold
  std::uint64_t prompt_tokens = 0;      ///< prompt tokens admitted (re-admissions included)
  std::uint64_t prefix_hit_tokens = 0;  ///< of which served from the cache
  std::uint64_t cow_bytes = 0;          ///< bytes copied for sharing
  std::uint64_t evictions = 0;          ///< cache entries evicted
  std::uint64_t chunks_created = 0;     ///< chunks created so far (successful creates; 0 if none)
  vmm_counters vmm;                     ///< VMM calls and charged time per kind (zero if none)
};

/// What a run's "vmm_critical_path" says the step waits for, in the words two policies share.
inline constexpr std::string_view k_critical_path_synchronous = "all VMM calls (synchronous mapping)";
inline constexpr std::string_view k_critical_path_lookahead_worker =
    "step-thread calls + modelled waits (lookahead mapped by the worker)";

class kv_policy;

/// A step's decode round and the lease on the rounds after it (Note [One decode protocol]).
/// Returned by kv_policy::decode(); holds a view of the ids it was given, which must outlive it
/// unchanged. Cheap to move; not thread-safe (as its policy).
class [[nodiscard]] decode_round {
 public:
  decode_round() = default;
  /// How many of the ids grew, in order (all of them, or up to the first that found no memory).
  [[nodiscard]] std::size_t grown() const { return grown_; }
  /// Further one-token rounds over the same ids that need nothing but counting: asked of the
  /// policy on the first call; 0 unless every id grew, and 0 once the policy changed since.
  [[nodiscard]] std::uint64_t rounds_in_place();
  /// Takes one of those rounds (every id one more token) and returns the memory after it.
  /// Throws std::logic_error when no round is left or the policy changed since (its next
  /// mutating call ends the lease).
  kv_memory_view advance();

 private:
  friend class kv_policy;
  kv_policy* policy_ = nullptr;
  std::span<const request_id> ids_;
  std::size_t grown_ = 0;
  std::uint64_t generation_ = 0;  // the policy's generation when the round ended
  std::uint64_t rounds_ = 0;      // rounds left, once asked
  bool asked_ = false;            // rounds_in_place() asked the policy
};

/// The interface. Public non-virtual entry points over private hooks.
class kv_policy {
 public:
  virtual ~kv_policy() = default;
  kv_policy() = default;
  kv_policy(const kv_policy&) = delete;
  kv_policy& operator=(const kv_policy&) = delete;

  /// Admits `r` or changes nothing (see the contract above).
  [[nodiscard]] kv_admit_result admit(const kv_request& r) {
    ++generation_;
    return do_admit(r);
  }
  /// Backs `tokens` more tokens of `id`; false: no memory, nothing changed. A step's decode
  /// growth goes through decode().
  [[nodiscard]] bool grow(request_id id, std::uint64_t tokens) {
    ++generation_;
    return do_grow(id, tokens);
  }
  /// A step's decode round: grow(id, 1) for each of `ids` in turn, stopping at the first that
  /// returns false, with the same effects; the result says how many grew and leases the rounds
  /// that follow (Note [One decode protocol]). `ids` must outlive the result unchanged.
  [[nodiscard]] decode_round decode(std::span<const request_id> ids) {
    ++generation_;
    decode_round r;
    r.policy_ = this;
    r.ids_ = ids;
    r.grown_ = do_decode(ids);
    r.generation_ = generation_;
    return r;
  }
  /// After a step: the first `tokens` tokens of live request `id` have their KV computed.
  void computed(request_id id, std::uint64_t tokens) {
    ++generation_;
    do_computed(id, tokens);
  }
  /// Ends `id`.
  void release(request_id id, release_reason why) {
    ++generation_;
    do_release(id, why);
  }
  /// The leading prompt tokens of `r` that admit() would serve from the prefix cache now, read
  /// without changing anything (no recency touched): what a router that reads each replica's
  /// cache sees (prefix-precise, sim/router.hpp). 0 for a policy without a prefix cache.
  [[nodiscard]] std::uint64_t cached_tokens(const kv_request& r) const { return do_cached_tokens(r); }
  /// Memory now.
  [[nodiscard]] kv_stats stats() const { return do_stats(); }
  /// stats().memory and stats().breakdown: what the replica reads after every step, which a
  /// policy may answer without gathering its counters (Note [Per-step reads of a policy]).
  [[nodiscard]] kv_memory_view memory_view() const { return do_memory_view(); }
  /// stats().vmm.calls: the VMM calls so far by kind.
  [[nodiscard]] std::array<std::uint64_t, k_vmm_call_kinds> vmm_calls() const { return do_vmm_calls(); }
  /// stats().chunks_created.
  [[nodiscard]] std::uint64_t chunks_created() const { return do_chunks_created(); }
  /// Modelled VMM time of every call issued so far (the step's and the worker's); zero for
  /// policies without VMM calls.
  [[nodiscard]] sim_ns vmm_time() const { return do_vmm_time(); }
  /// Of vmm_time(), what the step thread spent: its own calls plus its modelled waits for the
  /// mapping worker (Note [VMM time on the critical path] in replica.hpp).
  [[nodiscard]] sim_ns critical_vmm_time() const { return do_critical_vmm_time(); }
  /// The simulated time is now `now` (never decreasing).
  void advance_to(sim_us now) { do_advance_to(now); }
  /// How the attention kernels read this policy's KV.
  [[nodiscard]] kv_access access() const { return do_access(); }
  /// Where the VMM time went; nullopt for a policy without VMM calls. Call settle() first for
  /// final worker figures.
  [[nodiscard]] std::optional<vmm_split_report> vmm_report() const { return do_vmm_report(); }
  /// Registry name, e.g. "vtensor".
  [[nodiscard]] std::string name() const { return do_name(); }
  /// The options in effect, for the replay's "config".
  [[nodiscard]] nlohmann::ordered_json describe() const { return do_describe(); }
  /// Waits for background work (a mapping worker) and takes in its results: call before
  /// reading figures that must be final, and before a check that wants a quiet state.
  void settle() {
    ++generation_;
    do_settle();
  }
  /// Throws std::logic_error when the policy's structures disagree. Only reads: work still in
  /// flight in the background is neither waited for nor checked against.
  void check_invariants() const { do_check_invariants(); }
  /// Whether the replica admits pipelined (Note [Pipelined admission in the replica] in
  /// replica.hpp): a step's admissions decided while the step before it runs. run_replay() sets
  /// replica_config::pipeline from it.
  [[nodiscard]] bool pipelined() const { return do_pipelined(); }
  /// With the pipeline, whether `r`, which arrived at `arrival` after the previous step began,
  /// can be admitted for the step that begins now as though decided on its arrival, its first
  /// prefill chunk's pages mapped before the step begins (Note [Late admission] in
  /// replica.hpp). Only asks: admit() with r.late_arrival set does it. False by default.
  [[nodiscard]] bool admits_late(const kv_request& r, sim_us arrival) const { return do_admits_late(r, arrival); }
  /// Adds the policy's part of a run's "config": "pipeline" (pipelined()) and
  /// "vmm_critical_path", which VMM time the step waits for (docs/metrics.md).
  void add_run_config(nlohmann::ordered_json& config) const {
    config["pipeline"] = pipelined();
    config["vmm_critical_path"] = std::string(do_vmm_critical_path());
  }
  /// Adds the figures of the policy's own model to a summary's "vmm_model" (written for
  /// policies with a vmm_report()); none by default.
  void extra_figures(nlohmann::ordered_json& vmm_model) const { do_extra_figures(vmm_model); }
  /// Whether the size of the free pool follows wall time (chunks created ahead by a worker), so
  /// that two backends' runs compare their physical memory net of it (--compare-backends).
  [[nodiscard]] bool free_pool_on_wall_time() const { return do_free_pool_on_wall_time(); }

 private:
  virtual kv_admit_result do_admit(const kv_request& r) = 0;
  virtual bool do_grow(request_id id, std::uint64_t tokens) = 0;
  /// decode(): the loop of do_grow(id, 1)s unless a policy answers it faster.
  virtual std::size_t do_decode(std::span<const request_id> ids) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (!do_grow(ids[i], 1)) return i;
    }
    return ids.size();
  }
  /// decode_round::rounds_in_place() for the `ids` of the decode() just made (nothing changed
  /// since): 0 unless the policy keeps the promise of Note [One decode protocol].
  [[nodiscard]] virtual std::uint64_t do_decode_rounds(std::span<const request_id> /*ids*/) { return 0; }
  /// decode_round::advance(): one round of those, and the memory after it.
  virtual kv_memory_view do_advance_round(std::span<const request_id> ids) {
    if (do_decode(ids) != ids.size()) throw std::logic_error("kv_policy: a growth round did not grow every request");
    return do_memory_view();
  }
  virtual void do_release(request_id id, release_reason why) = 0;
  virtual void do_computed(request_id /*id*/, std::uint64_t /*tokens*/) {}
  [[nodiscard]] virtual std::uint64_t do_cached_tokens(const kv_request& /*r*/) const { return 0; }
  [[nodiscard]] virtual kv_stats do_stats() const = 0;
  [[nodiscard]] virtual kv_memory_view do_memory_view() const {
    const kv_stats s = do_stats();
    return {s.memory, s.breakdown};
  }
  [[nodiscard]] virtual std::array<std::uint64_t, k_vmm_call_kinds> do_vmm_calls() const {
    return do_stats().vmm.calls;
  }
  [[nodiscard]] virtual std::uint64_t do_chunks_created() const { return do_stats().chunks_created; }
  [[nodiscard]] virtual sim_ns do_vmm_time() const { return sim_ns{0}; }
  [[nodiscard]] virtual sim_ns do_critical_vmm_time() const { return do_vmm_time(); }
  virtual void do_advance_to(sim_us /*now*/) {}
  virtual void do_settle() {}
  [[nodiscard]] virtual kv_access do_access() const { return {}; }
  [[nodiscard]] virtual std::optional<vmm_split_report> do_vmm_report() const { return std::nullopt; }
  [[nodiscard]] virtual std::string do_name() const = 0;
  [[nodiscard]] virtual nlohmann::ordered_json do_describe() const = 0;
  virtual void do_check_invariants() const {}
  [[nodiscard]] virtual bool do_pipelined() const { return false; }
  [[nodiscard]] virtual bool do_admits_late(const kv_request& /*r*/, sim_us /*arrival*/) const { return false; }
  /// What replays have always reported for a policy without a mapping worker of its own (paged,
  /// radix, static): the words of the default vtensor settings, kept so that outputs stay the same.
  [[nodiscard]] virtual std::string_view do_vmm_critical_path() const { return k_critical_path_lookahead_worker; }
  virtual void do_extra_figures(nlohmann::ordered_json& /*vmm_model*/) const {}
  [[nodiscard]] virtual bool do_free_pool_on_wall_time() const { return false; }

  friend class decode_round;
  std::uint64_t generation_ = 0;  // mutating calls so far: a decode_round's lease ends at the next
};

inline std::uint64_t decode_round::rounds_in_place() {
  if (!asked_) {
    asked_ = true;
    const bool all = policy_ != nullptr && grown_ == ids_.size() && !ids_.empty();
    rounds_ = all && policy_->generation_ == generation_ ? policy_->do_decode_rounds(ids_) : 0;
  }
  return policy_ != nullptr && policy_->generation_ == generation_ ? rounds_ : 0;
}

inline kv_memory_view decode_round::advance() {
  if (policy_ == nullptr || policy_->generation_ != generation_) {
    throw std::logic_error("decode_round: the policy changed since this round (Note [One decode protocol])");
  }
  if (rounds_in_place() == 0) throw std::logic_error("decode_round: no round in place is left");
  --rounds_;
  return policy_->do_advance_round(ids_);
}

}  // namespace vtensor::sim
