#pragma once
// The eviction analysis of a comparison (docs/compare.md, "Eviction orders"): for arms that run the
// same policy with the same options but for their eviction order, each order's hit rate per cell
// and the share of the gap from LRU to an offline ceiling that it closes. Computed from
// summary.json's points, so that `vtensor compare` (its table and summary.json's "eviction") and
// `vtensor report` (a saved folder) say the same.
//
// Note [Eviction groups]
// An arm's eviction settings are what its points' summaries report: "config"."policy_options"
// keys starting with "eviction" (the order's name, first word: radix says "lru leaves", and the
// settings its order reads); a policy that names no order runs the default, lru (paged leaves it
// out when it uses vLLM's free queue). Two arms belong to one group when their points, cell by cell, have
// the same "config" once those keys are left out: the same policy with the same options, read from
// what the replay resolved rather than from arm names or option texts. A group is reported when it
// has two arms or more with at least two orders between them, one of them `lru` (the default
// order of every policy with a prefix cache): the floor. The ceiling is the group's first
// `offline` arm (Belady on the trace's real next uses, replayed as the others are) when it has
// one, else each cell's offline bound (traces/prefix_bounds.hpp: sequential, whole budget to the
// cache). The share of the gap closed, (hit - floor) / (ceiling - floor), is 0 for the floor, 1
// for a ceiling arm, below 0 for an order worse than LRU, above 1 for one that beats the ceiling;
// it is undefined when the ceiling is not above the floor (no gap to close, e.g. at an unlimited
// budget where nothing is evicted).

#include <nlohmann/json.hpp>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace vtensor::tools {

/// The share of the gap from `floor` to `ceiling` that `hit` closes: (hit - floor) / (ceiling -
/// floor); none when `ceiling` is not above `floor` (Note [Eviction groups]).
[[nodiscard]] std::optional<double> gap_closed(double hit, double floor, double ceiling);

/// One group's figures at one cell.
struct eviction_cell {
  std::string cell;                                  ///< the cell's id
  std::string label;                                 ///< its axes for a column head: "excerpt.jsonl 2GiB"
  std::string memory;                                ///< the budget as typed
  nlohmann::json memory_bytes;                       ///< bytes, or null for unlimited
  nlohmann::json trace, time_scale, kernel_factors;  ///< the cell's other axes, as summary.json has them
  double offline_bound = 0;                          ///< the cell's offline bound (hit rate)
  double infinite_bound = 0;                         ///< the cell's infinite-cache bound (hit rate)
  double floor = 0;                                  ///< the LRU arm's hit rate
  double ceiling = 0;                                ///< the ceiling arm's hit rate, or the offline bound
  std::vector<double> hit_rate;                      ///< per arm of the group, in its order
  std::vector<std::optional<double>> gap;            ///< per arm: gap_closed(), none when undefined
};

/// Arms that differ only in their eviction settings (Note [Eviction groups]).
struct eviction_group {
  std::string policy;                      ///< the registry's name
  std::vector<std::string> arms;           ///< in the order of summary.json's arms
  std::vector<std::string> orders;         ///< each arm's eviction order
  std::string floor_arm;                   ///< the first lru arm
  std::optional<std::string> ceiling_arm;  ///< the first offline arm; none: the cells' offline bound
  std::vector<eviction_cell> cells;        ///< in the order of summary.json's cells
};

/// The eviction groups of `summary` (summary.json's content), in the order of their first arm;
/// empty when no arms differ only in their eviction settings. Throws std::invalid_argument when
/// "arms", "cells" or "points" is missing or a point lacks what the analysis reads.
[[nodiscard]] std::vector<eviction_group> eviction_groups(const nlohmann::json& summary);

/// summary.json's "eviction" (docs/compare-output.md): one object per group.
[[nodiscard]] nlohmann::ordered_json eviction_json(const std::vector<eviction_group>& groups);

/// The terminal table, per group: rows = arms (with their orders), columns = cells, each value the
/// share of the gap closed with the hit rate in brackets; then the bounds. Nothing when `groups`
/// is empty.
void print_eviction_table(std::ostream& out, const std::vector<eviction_group>& groups);

}  // namespace vtensor::tools
