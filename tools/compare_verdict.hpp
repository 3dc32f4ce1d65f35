#pragma once
// The verdicts of a comparison: per arm and cell, where the arm wins against the baseline and by
// how much, where it loses, and where the two tie. One wording, made here, for the terminal table
// of `vtensor compare`, the "verdicts" field of summary.json and the HTML report (docs/compare.md,
// "Verdicts").
//
// Note [Verdicts weigh differences]
// A metric's ratio r = arm / baseline (both in the same cell) is a tie when |r - 1| <= the tie
// tolerance (--tie, default 1%); otherwise a win when it moves the better way (higher for the hit
// rate and the throughput, lower for TTFT, TPOT and preemptions), a loss when not. Wins are listed
// first, then losses, each the largest first (by |ln r|: 2x and 0.5x weigh the same), then the
// ties. Peak physical memory is not judged: a cache that fills its budget does its job, so neither
// direction is better. A baseline of 0 with the arm at 0 is a tie; with the arm above 0 the
// difference is the largest there is (a ratio would be infinite).
// Every point is one replay, and a replay is deterministic (same inputs, same result), so there is
// no run-to-run spread to weigh: the tolerance says which differences matter, not which are noise.
// Verdicts are computed from summary.json's points, so that `vtensor report` renders the same
// wording from a saved folder as `vtensor compare` printed.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vtensor::tools {

/// The default tie tolerance (a fraction: 0.01 = 1%).
inline constexpr double k_default_tie = 0.01;

/// How a value of a metric is written (quantity_text()).
enum class quantity_unit {
  fraction,      ///< a hit rate: 0.0337
  count,         ///< preemptions: 12
  tokens_per_s,  ///< tok/s, k tok/s, M tok/s
  ms,            ///< a latency given in ms: us, ms, s, h
  bytes,         ///< MiB, GiB, TiB
};

/// A metric of the verdicts and of the table.
struct verdict_metric {
  std::string_view key;                       ///< summary.json's key of the ratios ("ttft_p50_ms")
  std::string_view label;                     ///< in words ("TTFT p50")
  std::vector<std::string_view> path;         ///< where a point of summary.json holds it
  std::optional<bool> higher_better;          ///< none: shown, not judged (peak memory)
  quantity_unit unit = quantity_unit::count;  ///< how its values are written
};

/// The metrics, in table order.
[[nodiscard]] const std::vector<verdict_metric>& verdict_metrics();

/// One judged metric of an arm against the baseline.
struct metric_difference {
  std::string key;              ///< verdict_metric::key
  std::string label;            ///< verdict_metric::label
  double value = 0;             ///< the arm's
  double baseline = 0;          ///< the baseline's
  std::optional<double> ratio;  ///< value / baseline; none when the baseline is 0
  bool higher = false;          ///< the arm's value is the higher one
};

/// The verdict of one arm in one cell.
struct verdict {
  std::string arm;                        ///< its name
  std::string cell;                       ///< the cell's id
  std::vector<metric_difference> wins;    ///< better beyond the tolerance, the largest first
  std::vector<metric_difference> losses;  ///< worse beyond the tolerance, the largest first
  std::vector<std::string> ties;          ///< labels of the metrics within the tolerance, in table order
  std::vector<std::string> unknown;       ///< labels of the metrics missing from either point
};

/// Reads --tie FRACTION ("0.01", or "1%"): a number in [0, 1). Throws usage_error naming `option`.
[[nodiscard]] double parse_tie(const std::string& text, std::string_view option = "--tie");

/// The verdicts of every non-baseline point of `summary` (summary.json's content: "baseline",
/// "points" with "arm", "cell" and the metrics), in the order of its points; a cell without the
/// baseline gives none. Throws std::invalid_argument when "baseline" or "points" is missing.
[[nodiscard]] std::vector<verdict> judge(const nlohmann::json& summary, double tie);

/// The one wording of a verdict (Note [Verdicts weigh differences]), e.g.
/// "wins: TTFT p50 17.0% lower (0.830x), hit rate 5.20% higher (1.05x); loses: TPOT p99 1.40% higher
/// (1.01x); tie: throughput, TTFT p99, TPOT p50, preemptions".
[[nodiscard]] std::string verdict_text(const verdict& v);

/// summary.json's "verdicts": the tolerance, the metric directions and each verdict with its text.
[[nodiscard]] nlohmann::ordered_json verdicts_json(const std::vector<verdict>& verdicts, double tie);

/// A ratio at three significant digits: "1.00x", "0.830x", "12.3x", "123x".
[[nodiscard]] std::string ratio_text(double ratio);

/// A value with a unit that keeps it to four digits or fewer, at three significant digits:
/// "0.0337" (fraction), "12" (count), "3.21k tok/s", "412 ms", "1.23 s", "8.00 GiB".
[[nodiscard]] std::string quantity_text(double value, quantity_unit unit);

/// `value` at three significant digits (more only for integer digits: "1234"), trailing zeros kept.
[[nodiscard]] std::string significant3(double value);

}  // namespace vtensor::tools
