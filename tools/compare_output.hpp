#pragma once
// The outputs of `vtensor compare`, rendered from the typed results of its points (the contract:
// docs/compare-output.md): the table on the terminal, summary.json, arms.csv, and the folder
// of --out, written whole or not at all.

#include <nlohmann/json.hpp>

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "tools/compare_experiment.hpp"
#include "tools/compare_run.hpp"

namespace vtensor::tools {

/// How the run went, beside what it computed (summary.json's top level).
struct compare_run_facts {
  std::string command;      ///< the command line, shell-quoted
  bool with_wall = true;    ///< wall_seconds and jobs reported (left out by --no-wall)
  bool timeseries = false;  ///< each point's time series written (--out)
  double wall_seconds = 0;  ///< the points' replays
  unsigned jobs = 1;        ///< threads
  double tie = 0.01;        ///< the verdicts' tie tolerance, a fraction (--tie)
};

/// The table: per cell, each arm's metrics with the ratio to the baseline ('*': best of the
/// cell), the bounds, the misses by cause and each arm's verdict (`verdicts`: summary.json's
/// "verdicts", so that both say the same).
void print_table(std::ostream& out, const experiment& x, const compare_grid& g, const nlohmann::ordered_json& verdicts);

/// summary.json (docs/compare-output.md), its "verdicts" judged at facts.tie
/// (tools/compare_verdict.hpp), and "eviction" (tools/compare_eviction.hpp) only when some arms
/// differ only in their eviction order; written as dump(2) and a newline.
[[nodiscard]] nlohmann::ordered_json summary_json(const experiment& x, const compare_grid& g,
                                                  const compare_traces& traces, const compare_run_facts& facts);

/// arms.csv: a row per point.
[[nodiscard]] std::string arms_csv(const experiment& x, const compare_grid& g);

/// Whether every point's hits stay within the infinite-cache bound (otherwise a simulator bug).
[[nodiscard]] bool all_within_bound(const compare_grid& g);

/// Whole or not at all: a temporary folder beside DIR, renamed into place (an existing DIR is
/// swapped out only once the new one is complete, then removed). Throws usage_error for a DIR
/// that cannot be one, std::system_error when the file system refuses.
class output_folder {
 public:
  explicit output_folder(const std::string& target);
  ~output_folder();
  output_folder(const output_folder&) = delete;
  output_folder& operator=(const output_folder&) = delete;

  /// The temporary folder, with timeseries/ in it.
  [[nodiscard]] const std::filesystem::path& temp() const { return temp_; }
  /// Puts the temporary folder in DIR's place.
  void commit();

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
};

/// Writes `bytes` to `path` whole or not at all.
void write_file(const std::filesystem::path& path, const std::string& bytes);

}  // namespace vtensor::tools
