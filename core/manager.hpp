#pragma once
/// VTM, the vTensor manager: the public API. Request ids in, device pointers out (with what
/// each call did: Note [Effects of a call] in scheduler.cpp), a stats snapshot, and the
/// invariant check. Every method is safe to call from several threads (one
/// mutex serialises them, as the driver serialises VMM calls anyway; the clang build checks it:
/// core/thread_annotations.hpp).

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "backends/vmm_backend.hpp"
#include "core/kv_geometry.hpp"
#include "core/memory_stats.hpp"
#include "core/mutex.hpp"
#include "core/scheduler.hpp"
#include "core/vtensor.hpp"

namespace vtensor {

/// Everything a manager is built from.
struct manager_config {
  kv_geometry geometry{*model_preset("llama-3-8b"), kv_layout::kv_split};  ///< model x layout
  scheduler_config scheduler;                                              ///< scheduling policies
  eviction_config eviction;                                                ///< rTree eviction order and its settings
};

/// A consistent snapshot of memory and activity. Definitions: docs/metrics.md.
struct manager_stats {
  memory_stats memory;                     ///< bytes held, mapped, used, cached, idle, logical
  std::uint64_t live_requests = 0;         ///< requests created and not finished or preempted
  std::uint64_t prompt_tokens = 0;         ///< prompt tokens of created requests
  std::uint64_t prefix_hit_tokens = 0;     ///< of which served from the prefix cache
  std::uint64_t recomputed_tokens = 0;     ///< cached tokens recomputed by the partial-page policy
  std::uint64_t cow_bytes = 0;             ///< bytes copied by copy-on-write
  std::uint64_t evicted_nodes = 0;         ///< prefix-cache leaves evicted
  std::uint64_t preemption_signals = 0;    ///< calls answered needs_preemption
  std::uint64_t preempted = 0;             ///< requests preempted
  std::uint64_t standby_adoptions = 0;     ///< creates that took the standby vTensor (Note [Standby vTensor])
  std::uint64_t standby_builds = 0;        ///< standby vTensors mapped
  std::uint64_t standby_drops = 0;         ///< standby vTensors given back to make room
  std::uint64_t standby_failures = 0;      ///< standby vTensors the driver refused a range
  std::uint64_t parked = 0;                ///< releases that parked their vTensor (Note [Parked vTensors])
  std::uint64_t parked_reuses = 0;         ///< creates that took a parked vTensor
  std::uint64_t parked_drops = 0;          ///< parked vTensors unmapped unused
  std::uint64_t tree_nodes = 0;            ///< rTree nodes
  std::uint64_t tree_pages = 0;            ///< page versions cached in the rTree
  vmm_counters vmm;                        ///< VMM calls and charged time per kind
  std::uint64_t async_vmm_ns = 0;          ///< of vmm's time, what the mapping worker charged (off the step)
  std::uint64_t async_mapped_chunks = 0;   ///< chunks mapped by the worker
  std::uint64_t chunks_created_ahead = 0;  ///< chunks the worker created ahead of need
  std::uint64_t chunks_created = 0;        ///< chunks created in all (after warm-up, ideally no more)
  std::uint64_t mapping_waits = 0;         ///< extends that waited for a worker mapping
  std::uint64_t mapping_wait_ns = 0;       ///< wall time of those waits
  std::uint64_t driver_lock_waits = 0;     ///< step-thread VMM calls that waited for the worker's call in flight
  std::uint64_t driver_lock_wait_ns = 0;   ///< wall time of those waits

  /// prefix hit tokens / prompt tokens.
  [[nodiscard]] double prefix_hit_rate() const { return vtensor::prefix_hit_rate(prefix_hit_tokens, prompt_tokens); }
};

/// Note [Decode rounds of the manager]
/// Between two events a replay's decode steps are alike: every running request grows by one
/// token inside pages it holds (Note [One decode protocol] in sim/kv_policy.hpp). lease_rounds()
/// asks the scheduler how many such rounds every one of the ids has room for, and the scheduler
/// remembers their records; grow_round() takes one round without a lookup per request. The lease
/// is opaque: it carries the manager's generation, which every operation that can change a
/// request (create, extend, extend_in_place, fork, finish, preempt: each ends in after_op())
/// advances, and grow_round() refuses a lease of another generation or with no round left. No
/// record leaves the scheduler. settle(), trim() and shutdown() need no generation: settle only
/// makes more pages ready (the rounds counted stay safe), trim touches no request, and the
/// scheduler forgets its round when a remembered request ends.
class [[nodiscard]] round_lease {
 public:
  /// Rounds left.
  [[nodiscard]] std::uint64_t rounds() const { return rounds_; }

 private:
  friend class manager;
  std::uint64_t generation_ = 0;  // the manager's generation when leased
  std::uint64_t rounds_ = 0;      // rounds left
};

/// The manager. Does not own the backend, which must outlive it.
class manager {
 public:
  /// The step thread's calls go to `backends.step`, the mapping worker's to `backends.worker` (a
  /// plain backend is both). Throws std::invalid_argument for an unknown eviction policy or a
  /// backend whose granularity is not the chunk size.
  manager(backend_views backends, manager_config config);
  /// Shuts down (see shutdown()); errors there are swallowed, call shutdown() to see them.
  ~manager();
  manager(const manager&) = delete;
  manager& operator=(const manager&) = delete;
  /// scheduler::cached_tokens(): what create() would serve from the prefix cache now.
  [[nodiscard]] std::uint64_t cached_tokens(std::span<const token_block> blocks, std::uint64_t prompt_tokens) const
      EXCLUDES(mutex_);

  /// Creates request `id` with `prompt_tokens` tokens named (leading part) by `blocks`, reusing
  /// the longest cached prefix; `max_tokens` 0 means the configured context. On
  /// needs_preemption nothing changed. Throws std::invalid_argument on bad arguments, vmm_error
  /// on a driver failure (nothing is left behind).
  create_result create(request_id id, std::span<const token_block> blocks, std::uint64_t prompt_tokens,
                       std::uint64_t max_tokens = 0) EXCLUDES(mutex_);
  /// Grows request `id` by `tokens`; the pointer never moves. On needs_preemption nothing
  /// changed (but cached prefixes may have been evicted).
  extend_result extend(request_id id, std::uint64_t tokens) EXCLUDES(mutex_);
  /// extend(id, tokens) for each of `ids` in turn while it needs nothing but counting
  /// (scheduler::grow_in_place()), under one lock; returns how many grew. The first id not grown
  /// (if any) is untouched: call extend() for it.
  std::size_t extend_in_place(std::span<const request_id> ids, std::uint64_t tokens) EXCLUDES(mutex_);
  /// A lease on the rounds of extend_in_place(ids, 1) that would grow every one of `ids` in place
  /// (none when one is not live): Note [Decode rounds of the manager].
  [[nodiscard]] round_lease lease_rounds(std::span<const request_id> ids) EXCLUDES(mutex_);
  /// One round of `lease`: extend_in_place(ids, 1) for its ids, without looking them up. Returns
  /// memory() after the round, read under the same lock (a replay reads it after every step), and
  /// ahead_bytes() into `*ahead_bytes` when given (one lock a round, not two).
  /// Throws std::logic_error when the lease has no round left or another operation came since.
  memory_stats grow_round(round_lease& lease, std::uint64_t* ahead_bytes = nullptr) EXCLUDES(mutex_);
  /// Forks live request `parent` into new request `child` sharing its whole pages.
  create_result fork(request_id parent, request_id child) EXCLUDES(mutex_);
  /// Ends request `id`: its prefix is recorded for reuse, its memory returns to the pool.
  op_effects finish(request_id id, std::span<const token_block> extra_blocks = {}) EXCLUDES(mutex_);
  /// Drops request `id` to free memory.
  op_effects preempt(request_id id) EXCLUDES(mutex_);
  /// Shares the first `tokens` tokens of live request `id`, whose KV is computed, through the
  /// rTree now (Note [Eager publication] in core/scheduler.cpp). No VMM call.
  void publish(request_id id, std::uint64_t tokens) EXCLUDES(mutex_);

  /// Pointers and sizes of a live request, or nullopt.
  [[nodiscard]] std::optional<vtensor_view> view(request_id id) const EXCLUDES(mutex_);
  /// Device address of layer `layer`'s K (or V) for request `id`, with its token stride.
  [[nodiscard]] layer_addressing layer(request_id id, std::uint32_t layer) const EXCLUDES(mutex_);
  /// Memory and activity now.
  [[nodiscard]] manager_stats stats() const EXCLUDES(mutex_);
  /// stats().memory alone (cheaper: a replay reads it after every step).
  [[nodiscard]] memory_stats memory() const EXCLUDES(mutex_);
  /// stats().vmm alone.
  [[nodiscard]] vmm_counters vmm() const EXCLUDES(mutex_);
  /// stats().chunks_created alone.
  [[nodiscard]] std::uint64_t chunks_created() const EXCLUDES(mutex_);
  /// Bytes mapped ahead of live requests' tokens (scheduler::ahead_bytes()).
  [[nodiscard]] std::uint64_t ahead_bytes() const EXCLUDES(mutex_);
  /// Pages the standby vTensor holds mapped now (scheduler::standby_pages()).
  [[nodiscard]] std::uint32_t standby_pages() const EXCLUDES(mutex_);
  /// Parked vTensors now (scheduler::parked_count()).
  [[nodiscard]] std::size_t parked_count() const EXCLUDES(mutex_);
  /// Releases free-pool chunks and cached ranges to the driver; returns chunks released.
  std::size_t trim() EXCLUDES(mutex_);
  /// Drops all live requests and the prefix cache and releases everything to the driver. The
  /// manager stays usable.
  void shutdown() EXCLUDES(mutex_);
  /// Waits for the mapping worker's jobs and takes in the chunks it created (see
  /// scheduler::settle()). Call it before a check or a reading that must see a quiet state.
  void settle() EXCLUDES(mutex_);
  /// Checks every invariant of docs/invariants.md; throws std::logic_error naming the first
  /// broken. Only reads: jobs of the mapping worker in flight are not waited for, and what they
  /// leave undecided is not compared (Note [Checking with jobs in flight] in operations.cpp).
  void check_invariants() const EXCLUDES(mutex_);

  [[nodiscard]] const kv_geometry& geometry() const { return geometry_; }
  /// Installs the device copy for copy-on-write (GPU backends).
  void set_device_copy(device_copy_fn fn) EXCLUDES(mutex_);

 private:
  /// After an operation that can change a request: a new generation, and the sampled checks.
  void after_op() REQUIRES(mutex_);
  void check_sampled() const REQUIRES(mutex_);

  const kv_geometry geometry_;  // read without the lock
  mutable mutex mutex_;
  std::uint64_t generation_ GUARDED_BY(mutex_) = 0;               // Note [Decode rounds of the manager]
  mutable std::uint64_t ops_since_check_ GUARDED_BY(mutex_) = 0;  // Note [Sampled expensive checks]
  scheduler scheduler_ GUARDED_BY(mutex_);
};

}  // namespace vtensor
