#pragma once
// `vtensor capacity` (issue 34, "capacity at an SLO"): the largest load at which each arm meets a
// latency objective, found by replaying the trace with its arrivals compressed (Note [Capacity
// search] in capacity.cpp). The objective's grammar and the search are here, apart from the
// command, so that tests drive them without a replay.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/replay.hpp"

namespace vtensor::tools {

/// One clause of an objective: a latency quantile at most a limit.
struct slo_clause {
  std::string metric;    ///< ttft, tpot or e2e
  std::string quantile;  ///< p50, p90 or p99
  double limit_ms = 0;   ///< milliseconds
  std::string text;      ///< as typed
};

/// An objective: every clause must hold.
struct slo {
  std::vector<slo_clause> clauses;
  /// The clause's value in `s` (milliseconds).
  [[nodiscard]] static double value(const slo_clause& c, const sim::replay_summary& s);
  /// Whether every clause holds in `s`.
  [[nodiscard]] bool met(const sim::replay_summary& s) const;
};

/// Parses 'ttft_p90<=5s,tpot_p99<=100ms' (metrics ttft, tpot, e2e; quantiles p50, p90, p99; units
/// s, ms, us; `<=` or `<`, both read as at most). Throws usage_error naming the clause.
[[nodiscard]] slo parse_slo(const std::string& text);

/// The bracket the search keeps, as load multipliers of the trace's own arrival rate.
struct capacity_search {
  double tolerance = 0.05;       ///< stop when the failing load is within this of the met one
  double min_load = 1.0 / 64;    ///< the lightest load tried
  double max_load = 64;          ///< the heaviest
  std::optional<double> met;     ///< the heaviest load that met the objective so far
  std::optional<double> failed;  ///< the lightest load that failed it so far
  std::size_t replays = 0;       ///< loads tried
  /// The next load to try, or nullopt when the search is over.
  [[nodiscard]] std::optional<double> next() const;
  /// Records the outcome at `load`.
  void record(double load, bool meets);
  /// "found", "none" (not even min_load meets it) or "at least" (max_load meets it).
  [[nodiscard]] std::string status() const;
};

/// The fewest replicas that meet an objective at the trace's own rate (Note [Fewest replicas] in
/// capacity.cpp): 1, 2, 4, ... up to max_replicas, then bisection between the most that failed
/// and the fewest that met.
struct replica_search {
  std::uint32_t max_replicas = 8;       ///< the most tried
  std::optional<std::uint32_t> met;     ///< the fewest that met the objective so far
  std::optional<std::uint32_t> failed;  ///< the most that failed it so far
  std::size_t replays = 0;              ///< counts tried
  /// The next count to try, or nullopt when the search is over.
  [[nodiscard]] std::optional<std::uint32_t> next() const;
  /// Records the outcome with `replicas`.
  void record(std::uint32_t replicas, bool meets);
  /// "found" or "none" (not even max_replicas meets it).
  [[nodiscard]] std::string status() const { return met ? "found" : "none"; }
};

}  // namespace vtensor::tools
