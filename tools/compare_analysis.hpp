#pragma once
// What `vtensor compare` computes for each point after its replay (docs/compare.md): why each
// missed prompt token missed, the reuse distance of hits and the lifetime of cached blocks, and
// latency quantiles; from the replica's per-request records and the trace's prefix index.

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "sim/policy_registry.hpp"
#include "sim/replica.hpp"
#include "traces/memory_trace.hpp"
#include "traces/prefix_bounds.hpp"

namespace vtensor::tools {

/// When a policy lets other requests share a prompt's KV: the registry's answer
/// (sim::policy_sharing()).
using sharing_model = sim::sharing_model;

inline constexpr sim::time_us k_never = std::numeric_limits<sim::time_us>::max();

/// The replica's record of one request, as the compare analysis needs it.
struct request_times {
  sim::time_us arrival = 0;            ///< arrival (scaled)
  sim::time_us admitted = k_never;     ///< first admission
  sim::time_us first_token = k_never;  ///< its prefill completed (first output token)
  sim::time_us finish = k_never;       ///< completion or rejection
  std::uint64_t hit_tokens = 0;        ///< hit at first admission
  std::uint32_t output_tokens = 0;     ///< generated
  bool rejected = false;               ///< never admitted
};

/// Records every request's admission, first token and finish during a replay.
class point_recorder final : public sim::replica_observer {
 public:
  explicit point_recorder(std::size_t requests) : requests_(requests) {}
  [[nodiscard]] const std::vector<request_times>& requests() const { return requests_; }

 private:
  void on_admit(const sim::admission_record& a) override;
  void on_request(const sim::request_record& r) override;
  std::vector<request_times> requests_;
};

/// A histogram over log-spaced bins: 4 per decade from 1 ms to 1e5 s; a value below the first
/// edge counts in the first bin, above the last in the last.
struct log_histogram {
  std::vector<double> edges;          ///< bins + 1 values, seconds
  std::vector<std::uint64_t> counts;  ///< per bin
  log_histogram();
  void add(double seconds, std::uint64_t weight = 1);
};

/// Missed prompt tokens by cause (docs/compare.md, "Why a token missed").
struct miss_causes {
  std::uint64_t cold = 0, evicted = 0, granularity = 0, preempted = 0, in_flight = 0, unpublished = 0;
  std::uint64_t no_cache = 0;  ///< the infinite cache's hits of a policy without a prefix cache
  std::uint64_t total = 0;     ///< prompt - hit + recomputed
  [[nodiscard]] std::uint64_t sum() const {
    return cold + evicted + granularity + preempted + in_flight + unpublished + no_cache;
  }
};

/// Everything computed for one point after its replay.
struct point_analysis {
  miss_causes misses;
  log_histogram reuse_distance;           ///< hit tokens by seconds since their block was last used
  log_histogram cached_lifetime;          ///< blocks hit at least once, by first use to last hit, seconds
  std::vector<double> ttft_ms, tpot_ms;   ///< 101 quantiles (q = 0, 0.01, ..., 1), nearest rank
  std::uint64_t over_bound_requests = 0;  ///< requests whose hit exceeds their infinite-cache hit (a bug if not 0)
};

/// The analysis of one point: `times` from its point_recorder, `counters` from its replay.
[[nodiscard]] point_analysis analyse_point(const traces::loaded_trace& trace, const traces::prefix_index& index,
                                           const std::vector<request_times>& times, const sharing_model& sharing,
                                           const sim::replica_counters& counters);

/// The q = 0, 0.01, ..., 1 nearest-rank quantiles of `values_us` (sorted in place), in ms;
/// empty input gives 101 zeros.
[[nodiscard]] std::vector<double> quantiles_ms(std::vector<std::uint64_t>& values_us);

}  // namespace vtensor::tools
