#pragma once
/// A cluster: identical replicas, each its own policy instance, memory and step loop, on one
/// event queue, with a router placing each arrival (sim/router.hpp). One replica is the replay
/// of sim/replay.hpp (run_replay() is run_cluster() with one replica and no router).
///
/// Note [Cluster figures]
/// The cluster's summary (`total`) has the keys of a replica's (summary_json()), so that every
/// reader of a replay reads a cluster's: counters and token totals are sums over the replicas;
/// latency quantiles are over every request of the cluster; time-weighted means (memory,
/// running, waiting) and peaks are sums of the replicas' own, each replica being its own GPU (a
/// sum of peaks is what the replicas' memories must hold together, not a simultaneous peak); the
/// simulated time is the cluster's. Beside it, per replica: its summary, its time-averaged
/// queued tokens and the infinite-cache bound of the requests routed to it. Load imbalance is
/// max / mean over the replicas of busy step time and of time-averaged queued tokens (1: even).
/// Two prefix bounds show what splitting the cache costs: the global bound (one infinite cache
/// seeing the whole trace in arrival order: the trace's bound of `vtensor inspect`) and the split
/// bound (one infinite cache per replica, each seeing what the router sent it).

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/replay.hpp"
#include "sim/router.hpp"

namespace vtensor::sim {

/// One replica of a cluster's replay.
struct replica_figures {
  replay_summary summary;              ///< as run_replay() reports a replica (events: the cluster's)
  double mean_queued_tokens = 0;       ///< replica::mean_queued_tokens()
  std::uint64_t bound_hit_tokens = 0;  ///< infinite-cache hits of the requests routed to it
};

/// A cluster's replay (Note [Cluster figures]).
struct cluster_summary {
  replay_summary total;                   ///< the cluster as one (for one replica: that replica's)
  std::vector<replica_figures> replicas;  ///< in index order
  std::string router;                     ///< its name; empty for one replica
  nlohmann::ordered_json router_options;  ///< router::describe()
  std::vector<std::pair<std::string, std::uint64_t>> decisions;  ///< by reason, in the router's order
  std::uint64_t global_bound_hit_tokens = 0;  ///< one infinite cache over the trace (more than one replica)

  /// Infinite-cache hits with the cache split as routed (the sum over the replicas).
  [[nodiscard]] std::uint64_t split_bound_hit_tokens() const;
  /// Max / mean over the replicas of busy step time, and of time-averaged queued tokens (1 when
  /// even or idle).
  [[nodiscard]] double busy_imbalance() const;
  [[nodiscard]] double queued_imbalance() const;
};

/// Replays `reader` into one replica per policy of `policies`, each arrival placed by `router`
/// (may be null for one replica), and checks every policy's invariants at the end. `observers`
/// is empty or one list per replica. Throws as run_replay(), and std::invalid_argument for no
/// policy, more than one without a router, or observers not one list per replica.
[[nodiscard]] cluster_summary run_cluster(traces::trace_reader& reader, std::span<kv_policy* const> policies,
                                          const replay_config& config, router* route,
                                          std::span<const std::vector<replica_observer*>> observers = {});

/// The cluster's part of a summary JSON: replicas, router, decisions, imbalance, bounds and one
/// compact entry per replica (docs/metrics.md, "Cluster").
[[nodiscard]] nlohmann::ordered_json cluster_json(const cluster_summary& c);

}  // namespace vtensor::sim
