#pragma once
/// A per-step record of the replica's batch and the policy's memory, for comparing two replays
/// of one trace step by step (`vtensor replay --compare-backends sim,cuda`) and for counting
/// chunk creation after warm-up.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/kv_policy.hpp"
#include "sim/replica.hpp"

namespace vtensor::sim {

/// One step: the batch and the memory right after it was built.
struct step_entry {
  std::uint64_t index = 0;           ///< 0-based
  time_us start = 0;                 ///< simulated start
  time_us duration_us = 0;           ///< simulated duration
  std::uint32_t decode_seqs = 0;     ///< sequences decoding
  std::uint32_t prefill_seqs = 0;    ///< sequences prefilling
  std::uint64_t prefill_tokens = 0;  ///< prefill tokens
  std::uint32_t admitted = 0;        ///< admitted by the step
  std::uint32_t preempted = 0;       ///< preempted building it
  std::uint32_t running = 0;         ///< running after admission
  std::uint32_t waiting = 0;         ///< waiting after admission
  memory_stats memory;               ///< the policy's memory
  std::uint64_t chunks_created = 0;  ///< chunks created so far (successful cuMemCreate; the worker's once adopted)
  sim_ns vmm_critical{};             ///< modelled VMM time on the step
};

/// Chunk creation after warm-up: warm-up is the first `warmup_steps` steps.
struct creation_after_warmup {
  std::uint64_t warmup_steps = 0;      ///< steps counted as warm-up
  std::uint64_t steps = 0;             ///< steps in all
  std::uint64_t creates_total = 0;     ///< chunks created in all (at the last step's build)
  std::uint64_t creates_after = 0;     ///< of which after warm-up
  std::uint64_t last_create_step = 0;  ///< index of the last step whose build saw a create (0: none)
};

/// The recording observer; takes each step's chunk creations from its record, and the policy's
/// memory when it keeps steps, right after the step is built. It always keeps the steps at which
/// chunk creation moved (few: creation stops after warm-up); it keeps every step only when asked
/// to (`keep_steps`, for a comparison): a replay of a million requests runs tens of millions of
/// steps.
class step_log final : public replica_observer {
 public:
  step_log(const kv_policy& policy, bool keep_steps) : policy_(policy), keep_steps_(keep_steps) {}
  void on_step(const step_record& s) override;
  /// Every step, when kept.
  [[nodiscard]] const std::vector<step_entry>& steps() const { return steps_; }
  /// Creates after the first ceil(`warmup_fraction` x steps) steps.
  [[nodiscard]] creation_after_warmup creation(double warmup_fraction) const;

 private:
  struct creation_point {
    std::uint64_t step = 0;     // index of the step whose build saw chunks created
    std::uint64_t created = 0;  // chunks created so far at that step
  };
  const kv_policy& policy_;
  bool keep_steps_;
  std::uint64_t step_count_ = 0;
  std::vector<creation_point> creations_;
  std::vector<step_entry> steps_;
};

/// Compares two logs step by step: batch, timing, chunk counts (bytes / 2 MiB), bytes and
/// fragmentation must be identical. With `with_free_pool` false, the free pool (filled by the worker at wall-clock
/// times when creating ahead) is left out: physical chunks are compared net of it. Returns the
/// first mismatch ("step 12: mapped_chunks 40 vs 41"), or nullopt when identical.
[[nodiscard]] std::optional<std::string> compare_step_logs(const std::vector<step_entry>& a,
                                                           const std::vector<step_entry>& b, bool with_free_pool);

}  // namespace vtensor::sim
