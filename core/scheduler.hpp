#pragma once
/// VTS, the vTensor scheduler: turns request events (create, extend, fork, finish, preempt) into
/// memory operations on the pool, with the policies that decide them: prefix reuse, partial-page
/// handling, lookahead, and what to do when memory runs out (evict cached prefixes first, then
/// tell the caller to preempt). Not thread-safe: the manager serialises.

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backends/enum_names.hpp"
#include "core/kv_geometry.hpp"
#include "core/memory_stats.hpp"
#include "core/operations.hpp"
#include "core/vtensor.hpp"

namespace vtensor {

/// What to do with a cached prefix that ends inside a page (Note [Copy-on-write of a partial
/// prefix page] in operations.cpp).
enum class partial_page_policy : std::uint8_t {
  cow,        ///< copy the valid bytes into a fresh page: the hit keeps every cached token
  recompute,  ///< reuse whole pages only: the partial page's tokens are computed again
};
/// The policies' names, as users type them.
inline constexpr enum_names<partial_page_policy, 2> k_partial_page_policy_names{
    {{{partial_page_policy::cow, "cow"}, {partial_page_policy::recompute, "recompute"}}}};
[[nodiscard]] inline std::string_view to_string(partial_page_policy p) { return k_partial_page_policy_names.name(p); }
[[nodiscard]] inline std::optional<partial_page_policy> partial_page_policy_from_string(std::string_view name) {
  return k_partial_page_policy_names.parse(name);
}

/// Scheduler settings.
struct scheduler_config {
  std::uint64_t max_context_tokens = 131072;  ///< tokens every vTensor range can hold
  std::uint32_t lookahead_pages = 0;          ///< pages mapped ahead of need (k)
  /// Lookahead pages mapped at a time (1 to k): a request is topped up once at least this many
  /// pages are missing ahead, so the driver gets runs of that many chunks per tensor (Note
  /// [Lookahead in runs]). 1: topped up at every page boundary.
  std::uint32_t lookahead_batch = 1;
  partial_page_policy partial = partial_page_policy::cow;  ///< partial prefix page handling
  std::size_t range_cache = 256;                           ///< freed vTensor ranges kept reserved
  bool record_on_preempt = true;                           ///< a preempted request's prefix stays cached
  bool async_lookahead = false;                            ///< lookahead pages mapped by the background worker
  std::uint32_t create_ahead_chunks = 0;                   ///< worker keeps this many chunks free (0: off)
  /// Pipelined admission (Note [Pipelined admission]): create and fork hand all their maps
  /// (shared prefix, prompt and lookahead pages) to the worker, and releases unmap on it.
  bool pipeline = false;
  /// With the pipeline: prompt tokens a step computes at most (the replica's token budget with
  /// chunked prefill; 0: the whole prompt). An admission's first job maps the pages its first
  /// chunk needs, a second job the rest (Note [Pipelined admission]).
  std::uint64_t pipeline_chunk_tokens = 0;
  /// With the pipeline: pages a standby vTensor keeps mapped for the next admission that misses
  /// the prefix cache (Note [Standby vTensor]; 0: none).
  std::uint32_t standby_pages = 0;
  /// With the pipeline: finished requests' vTensors kept mapped over their cached prefix, for a
  /// later request with that prefix to take (Note [Parked vTensors]; 0: none).
  std::uint32_t parked_ranges = 0;
  /// The worker runs each job on the calling thread as it is submitted, not on a thread of its
  /// own: for a simulated device, whose clock does not read wall time (Note [Inline worker] in
  /// async_mapper.hpp). Changes no decision and no simulated figure.
  bool inline_worker = false;

  /// Whether the mapping worker runs: for asynchronous lookahead, creating chunks ahead or the
  /// pipeline. While it runs, every lookahead mapping is handed to it (Note [Deferred mappings]).
  [[nodiscard]] bool runs_worker() const { return async_lookahead || create_ahead_chunks > 0 || pipeline; }
};

/// Outcome of a call that may need memory.
enum class alloc_status : std::uint8_t {
  ok,                ///< done
  needs_preemption,  ///< out of memory with nothing left to evict: nothing changed; preempt and retry
};

/// What one scheduler call did to memory and to the mapping worker (Note [Effects of a call]).
struct op_effects {
  std::uint32_t step_pages = 0;        ///< pages mapped on the calling thread (shared ones included)
  std::uint32_t worker_pages = 0;      ///< pages whose mapping went to the worker, in one job
  std::uint64_t worker_job = 0;        ///< that job's ticket (0: none)
  std::uint64_t waited_job = 0;        ///< the worker job the call waited for before going on (0: none)
  bool waited_first = false;           ///< the wait came before the call's own maps (pipeline)
  std::uint32_t worker_unmaps = 0;     ///< chunk mappings whose unmap went to the worker (a release)
  std::uint32_t unmap_runs = 0;        ///< in that many unmap calls
  std::uint32_t worker_frees = 0;      ///< ranges the worker frees after those unmaps
  std::uint32_t retried_jobs = 0;      ///< failed worker map jobs the call mapped again itself
  std::uint32_t first_pages = 0;       ///< pipeline: of worker_pages, those of the jobs the first chunk needs
  std::uint64_t first_job = 0;         ///< pipeline: the last of those jobs (0: none)
  std::uint32_t adopted_pages = 0;     ///< pages a create took mapped from the standby (Note [Standby vTensor])
  std::uint64_t adopted_job = 0;       ///< the standby's map job those pages came with (0: none)
  std::uint32_t standby_pages = 0;     ///< pages of a new standby, mapped by the worker in one job
  std::uint64_t standby_job = 0;       ///< that job's ticket (0: none), after the call's own jobs
  std::uint32_t dropped_standby = 0;   ///< standby pages given back to make room (their unmaps in worker_unmaps)
  std::uint32_t reused_pages = 0;      ///< pages a create took mapped from a parked vTensor (Note [Parked vTensors])
  std::uint64_t reused_job = 0;        ///< the last map job of that vTensor's request (0: none)
  std::uint32_t kept_pages = 0;        ///< pages a release kept mapped in a parked vTensor
  std::uint64_t kept_job = 0;          ///< its request's last map job (0: none)
  std::uint64_t chunks_created = 0;    ///< chunks created through the backend by the calling thread
  std::uint64_t pool_chunks = 0;       ///< chunks taken from the free pool
  std::uint64_t evicted_nodes = 0;     ///< cached prefixes evicted to make room
  std::uint32_t lookahead_misses = 0;  ///< lookahead pages left unmapped for lack of memory
  friend bool operator==(const op_effects&, const op_effects&) = default;
};

/// Result of create and fork.
struct [[nodiscard]] create_result {
  alloc_status status = alloc_status::ok;  ///< ok, or nothing was created
  std::uint64_t hit_tokens = 0;            ///< leading tokens whose KV came from cache (or the parent)
  std::uint64_t cow_bytes = 0;             ///< bytes copied for a partial page
  std::uint32_t shared_pages = 0;          ///< pages mapped shared
  op_effects effects;                      ///< what it did (nothing on needs_preemption)
  [[nodiscard]] bool ok() const { return status == alloc_status::ok; }
};

/// Result of extend.
struct [[nodiscard]] extend_result {
  alloc_status status = alloc_status::ok;  ///< ok, or nothing changed
  op_effects effects;                      ///< what it did (nothing on needs_preemption)
  [[nodiscard]] bool ok() const { return status == alloc_status::ok; }
};

/// Scheduler-level counters.
struct scheduler_counters {
  std::uint64_t preempted = 0;           ///< requests preempted
  std::uint64_t preemption_signals = 0;  ///< calls answered needs_preemption
  std::uint64_t prompt_tokens = 0;       ///< prompt tokens of created requests (forks excluded)
  std::uint64_t hit_tokens = 0;          ///< of which served from cache
  std::uint64_t recomputed_tokens = 0;   ///< cached tokens not reused because of the recompute policy
  std::uint64_t standby_adoptions = 0;   ///< creates that took the standby's pages (Note [Standby vTensor])
  std::uint64_t standby_builds = 0;      ///< standbys mapped
  std::uint64_t standby_drops = 0;       ///< standbys given back to make room
  std::uint64_t standby_failures = 0;    ///< standbys not mapped: the driver refused their range
  std::uint64_t parked = 0;              ///< releases that parked their vTensor (Note [Parked vTensors])
  std::uint64_t parked_reuses = 0;       ///< creates that took a parked vTensor
  std::uint64_t parked_drops = 0;        ///< parked vTensors unmapped unused (make room, expiry, the cap)
};

/// The scheduler.
class scheduler {
 public:
  scheduler(backend_views backends, kv_geometry geometry, scheduler_config config,
            std::unique_ptr<eviction_order> eviction);
  ~scheduler();

  /// New request with `prompt_tokens` tokens whose leading tokens are named by `blocks`. Reuses
  /// the longest cached prefix. Throws std::invalid_argument for a live id, an empty prompt,
  /// blocks longer than the prompt, or `max_tokens` beyond the context.
  /// The leading tokens of a prompt of `prompt_tokens` named by `blocks` that create() would serve
  /// from the cache now (under the partial-page policy); changes nothing, touches no recency.
  [[nodiscard]] std::uint64_t cached_tokens(std::span<const token_block> blocks, std::uint64_t prompt_tokens) const;
  create_result create(request_id id, std::span<const token_block> blocks, std::uint64_t prompt_tokens,
                       std::uint64_t max_tokens);
  /// Grows request `id` by `tokens`; its pointer never moves. Throws std::invalid_argument for an
  /// unknown id or growth past its max tokens.
  extend_result extend(request_id id, std::uint64_t tokens);
  /// extend(id, tokens) when that needs nothing but counting: the request is live, stays within
  /// its max, and the tokens land in pages its tokens already use, all mapped and ready (the
  /// in-place case of extend(), Note [Growth in place]). Returns false and changes nothing
  /// otherwise: then call extend().
  [[nodiscard]] bool grow_in_place(request_id id, std::uint64_t tokens);
  /// How many grow_in_place(id, 1) calls in a row would succeed for every one of `ids` (0 when
  /// one of them is not live or `ids` is empty). Remembers the requests for grow_round(): the
  /// round lasts until the next operation of the scheduler (the manager enforces it, Note
  /// [Decode rounds of the manager] in manager.hpp), or until a remembered request ends.
  [[nodiscard]] std::uint64_t in_place_rounds(std::span<const request_id> ids);
  /// grow_in_place(id, 1) for each request of the last in_place_rounds(), without a lookup.
  /// Throws std::logic_error when it answered no more rounds than were taken since (or none).
  void grow_round();
  /// New request `child` holding `parent`'s tokens: whole pages shared, the partial one copied
  /// (or recomputed, by policy).
  create_result fork(request_id parent, request_id child);
  /// Records the request's prefix in the rTree and returns its memory (lazily). `extra_blocks`
  /// name tokens after its create-time blocks (an answer whose keys are known).
  op_effects finish(request_id id, std::span<const token_block> extra_blocks = {});
  /// Drops a live request to free memory (its prefix stays cached if the config says so).
  op_effects preempt(request_id id);
  /// Hangs the pages of the first `tokens` tokens of live request `id` (their KV computed) on the
  /// rTree, and moves its pin to the deepest node of that path (Note [Eager publication]).
  void publish(request_id id, std::uint64_t tokens);

  [[nodiscard]] const vtensor_record* find(request_id id) const;
  [[nodiscard]] vtensor_view view(const vtensor_record& r) const;
  [[nodiscard]] std::size_t live_requests() const { return live_.size(); }
  /// Sum over live requests of tokens x bytes per token.
  [[nodiscard]] std::uint64_t logical_bytes() const { return logical_tokens_ * geometry_.bytes_per_token(); }
  [[nodiscard]] const scheduler_counters& counters() const { return counters_; }
  [[nodiscard]] const kv_geometry& geometry() const { return geometry_; }
  [[nodiscard]] const scheduler_config& config() const { return config_; }
  /// The operations and their pool, to read counters from.
  [[nodiscard]] const operations& ops() const { return ops_; }
  /// Memory now, in bytes.
  [[nodiscard]] memory_stats memory() const;
  /// Bytes mapped beyond the page that holds each live request's last token (lookahead pages):
  /// reserved for a request, backing none of its tokens yet.
  [[nodiscard]] std::uint64_t ahead_bytes() const {
    return (mapped_pages_ - token_pages_) * std::uint64_t{geometry_.tensors()} * geometry_.chunk_bytes();
  }
  /// Pages the standby vTensor holds mapped now (0: none; Note [Standby vTensor]).
  [[nodiscard]] std::uint32_t standby_pages() const { return standby_ ? standby_->mapped_pages : 0; }
  /// Parked vTensors now (Note [Parked vTensors]).
  [[nodiscard]] std::size_t parked_count() const { return parked_.size(); }

  /// Releases free-pool chunks and cached ranges to the driver; returns chunks released.
  std::size_t trim() { return ops_.trim(); }
  /// Installs the device copy for copy-on-write.
  void set_device_copy(device_copy_fn fn) { ops_.set_device_copy(std::move(fn)); }
  /// Drops every live request (no prefix record), the cache, and gives all memory back.
  void shutdown();
  /// Waits for the worker's deferred mappings and takes the chunks it created: afterwards every
  /// mapped page is ready and no extend waits until new work is handed to the worker.
  void settle();
  /// Checks every request against the pool, then the pool itself; throws std::logic_error. Only
  /// reads: worker jobs in flight are not waited for (Note [Checking with jobs in flight] in
  /// operations.cpp).
  void check_invariants() const;

 private:
  /// A prefix-cache match for a new prompt (Note [Page versions]).
  struct prefix_match {
    radix_path path;                        // the matched rTree path
    std::vector<const page_version*> best;  // the fullest cached version of each page along it
    std::uint64_t hit_max = 0;              // tokens the cache could serve
    std::uint64_t hit = 0;                  // tokens it serves under the partial-page policy
    std::uint32_t shared = 0;               // whole pages mapped shared
    std::uint64_t partial_bytes = 0;        // bytes per tensor copied into the partial page
  };

  vtensor_record& get(request_id id);
  void validate_prompt(const vtensor_record& rec, std::span<const token_block> blocks,
                       std::uint64_t prompt_tokens) const;
  /// Non-const: a match touches the matched nodes (eviction order).
  [[nodiscard]] prefix_match match_prefix(std::span<const token_block> blocks, std::uint64_t prompt_tokens);
  // The hit of a matched `path` for a prompt of `prompt_tokens` (match_prefix() after its walk).
  [[nodiscard]] prefix_match resolve_match(radix_path path, std::uint64_t prompt_tokens) const;
  std::uint32_t max_pages(const vtensor_record& r) const;
  void map_pages(vtensor_record& r, std::span<const chunk_id> chunks, std::uint32_t shared_count, bool deferred,
                 op_effects& fx);
  [[nodiscard]] bool map_needed(vtensor_record& r, std::uint32_t needed, op_effects& fx);
  /// Counts `tokens` more tokens in `r`, whose pages are mapped and ready.
  void grow(vtensor_record& r, std::uint64_t tokens);
  /// Bytes per tensor that `r` can hold in place: its pages that its tokens use, mapped and
  /// ready (Note [Growth in place]).
  [[nodiscard]] std::uint64_t in_place_bytes(const vtensor_record& r) const;
  /// Whether `r` can hold `total` tokens in place: within its max and in_place_bytes().
  [[nodiscard]] bool fits_in_place(const vtensor_record& r, std::uint64_t total) const {
    return total <= r.max_tokens && total * geometry_.bytes_per_token_per_tensor() <= in_place_bytes(r);
  }
  /// Note [Standby vTensor]: hands the standby's range and mapped pages to `rec` (a create that
  /// misses the cache), unmapping on the worker those beyond its reservation.
  void adopt_standby(vtensor_record& rec, op_effects& fx);
  /// Maps a new standby from the free pool when there is none and the pool holds its pages.
  void build_standby(op_effects& fx);
  /// Gives the standby's pages back (unmapped on the worker), and unmaps every parked vTensor,
  /// when an allocation of `chunks` that may evict would have to.
  void yield_standby(std::size_t chunks, op_effects& fx);
  /// Note [Parked vTensors]: keeps `r` (released, its prefix recorded) mapped over its leading
  /// cached pages; false when it has none (then release it as usual).
  [[nodiscard]] bool park(vtensor_record& r, op_effects& fx);
  /// Hands `rec` the parked vTensor whose leading pages are the most of `m`'s shared ones; returns
  /// how many (0: none taken).
  std::uint32_t adopt_parked(vtensor_record& rec, const prefix_match& m, op_effects& fx);
  /// Ends live request `id` after its release: parked when the release kept its pages (`fx`).
  void retire(request_id id, const op_effects& fx);
  /// Gives the pages `rec` took from a parked vTensor back to a parked vTensor (`rec`'s create
  /// failed for memory), as they were but for those unmapped already.
  void repark(vtensor_record& rec, op_effects& fx);
  /// Unmaps parked vTensor `i` on the worker.
  void drop_parked(std::size_t i, op_effects& fx);
  /// Unmaps `r`'s pages from `keep` on (on the worker, recorded in `fx`).
  void unmap_tail(vtensor_record& r, std::uint32_t keep, op_effects& fx);
  /// Ends request `id`'s record (and a growth round that holds it).
  void erase_live(request_id id);
  void top_up(vtensor_record& r, std::uint32_t needed, op_effects& fx);
  /// Pages to have mapped when `needed` are: k more, within the request's reservation.
  [[nodiscard]] std::uint32_t lookahead_target(const vtensor_record& r, std::uint32_t needed) const;
  /// Takes chunks for up to `pages` lookahead pages, best effort (no eviction for speculation).
  void alloc_ahead(std::uint32_t pages, std::vector<chunk_id>& chunks, op_effects& fx);
  /// Fills in the pool's part of `fx`: what changed in the operations' counters since `before`.
  void pool_effects(const operation_counters& before, op_effects& fx) const;
  /// Unpins and unmaps `r` (with the pipeline, on the worker); parks it when `may_park` allows and
  /// it has cached pages (Note [Parked vTensors]: the caller moves it to the parked ones).
  void release(vtensor_record& r, op_effects& fx, bool may_park = false);
  /// Unmaps every page after waiting for the request's last worker job; returns that job's ticket.
  /// With the pipeline the unmaps go to the worker instead (no wait), recorded in `fx`, and the
  /// range is freed after them.
  std::uint64_t unmap_all(vtensor_record& r, op_effects* fx = nullptr);
  /// Waits for `r`'s last worker job, retries failed maps, marks its pages ready.
  void wait_ready(vtensor_record& r, op_effects& fx);
  void check_record(const vtensor_record& r) const;
  void check_pins() const;
  /// Records `r`'s pages over its blocks (then `extra`) up to `limit` tokens; returns the deepest
  /// node of the path recorded (nullptr: none).
  radix_node* record_prefix(vtensor_record& r, std::span<const token_block> extra, std::uint64_t limit);
  std::uint64_t own_bytes(const vtensor_record& r) const;
  void account(const vtensor_record& r, int sign);
  std::unique_ptr<vtensor_record> new_record(request_id id, std::uint64_t max_tokens);
  void discard(vtensor_record& r, std::span<const chunk_id> chunks);
  create_result go_live(std::unique_ptr<vtensor_record> rec, std::uint64_t tokens, std::uint32_t shared,
                        std::uint64_t hit, std::uint64_t partial_bytes, op_effects fx);
  void build_pipelined(vtensor_record& rec, const std::vector<chunk_id>& chunks, std::uint32_t shared,
                       std::uint32_t needed, std::span<const chunk_id> partial_src, std::uint64_t partial_bytes,
                       op_effects& fx);
  bool build(vtensor_record& rec, std::vector<chunk_id>& chunks, std::uint32_t shared, std::uint32_t needed,
             std::span<const chunk_id> partial_src, std::uint64_t partial_bytes, op_effects& fx);
  std::unique_ptr<vtensor_record> standby_;              // Note [Standby vTensor]
  std::vector<std::unique_ptr<vtensor_record>> parked_;  // Note [Parked vTensors], oldest first
  op_effects* evict_fx_ = nullptr;  // the effects of the call that may evict now (parked vTensors' unmaps)
  /// Names the effects of the call under way for the eviction hook, and forgets them after.
  struct evict_scope {
    op_effects*& slot;
    evict_scope(op_effects*& s, op_effects& fx) : slot(s) { slot = &fx; }
    ~evict_scope() { slot = nullptr; }
    evict_scope(const evict_scope&) = delete;
    evict_scope& operator=(const evict_scope&) = delete;
  };
  std::vector<mapping*> run_;  // scratch for unmap runs

  kv_geometry geometry_;
  scheduler_config config_;
  std::uint64_t vtensor_bytes_;
  std::uint64_t tensor_span_;
  operations ops_;
  std::unordered_map<request_id, std::unique_ptr<vtensor_record>> live_;
  std::uint64_t own_valid_bytes_ = 0;
  std::uint64_t logical_tokens_ = 0;
  std::uint64_t mapped_pages_ = 0;      // sum of mapped_pages over records
  std::uint64_t token_pages_ = 0;       // sum over live records of the pages their tokens fill
  std::vector<vtensor_record*> round_;  // the requests of the last in_place_rounds()
  std::uint64_t round_left_ = 0;        // rounds it answered, less those taken
  scheduler_counters counters_;
};

}  // namespace vtensor
