#pragma once
// The report of a `vtensor compare` folder: report.html and figures/, drawn by the matplotlib
// script tools/compare_report.py, run with a Python that has matplotlib. `vtensor report DIR` and
// `vtensor compare --report` both come here.
//
// Note [Finding the report script]
// Like bundled traces (Note [Finding bundled data] in tools/bundled_data.hpp), the script is looked
// for without a flag, first match wins:
//   1. <exe dir>/../share/vtensor/compare_report.py  an installed binary (cmake --install);
//   2. <source dir>/tools/compare_report.py          the source tree this build was configured from;
//   3. <exe dir>/../../tools/compare_report.py       a build folder inside a source tree moved since;
//   4. ./tools/compare_report.py                     the working directory, a source tree's root.
// The interpreter: /usr/bin/python3 first (Debian's, where python3-matplotlib installs), then
// python3 on PATH (a virtual environment, pyenv); the first for which `-c 'import matplotlib'`
// succeeds runs the script. Both are started with posix_spawn, no shell, stdin from /dev/null; what
// they print is passed on to the error stream.
//
// The verdicts (tools/compare_verdict.hpp) are judged here from DIR/summary.json and handed to the
// script in a temporary file (--verdicts), so that the page says what the terminal table and
// summary.json say, in the same words, and a folder saved before verdicts existed renders with them.
// The eviction analysis (tools/compare_eviction.hpp) is computed here the same way and handed over
// in --eviction FILE (an empty list when no arms differ only in their eviction order).
//
// The report is written whole or not at all: the script renders into a temporary folder inside DIR
// and moves figures/ and report.html in only once everything is drawn (Note [Report written whole
// or not at all] in tools/compare_report.py).

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tools/cli.hpp"

namespace vtensor::tools {

/// What the report draws.
struct report_options {
  /// The cell (an id of summary.json's "cells") of the figures drawn at one cell; none: the first.
  std::optional<std::string> cell;
  /// The verdicts' tie tolerance (tools/compare_verdict.hpp); none: the one summary.json's
  /// "verdicts" was judged at, or 1% when it has none.
  std::optional<double> tie;
};

/// Where the script and the interpreter are looked for (tests replace them).
struct report_environment {
  std::vector<std::filesystem::path> scripts;  ///< candidate script paths, in order
  std::vector<std::string> pythons;            ///< interpreters, in order: a path, or a bare name for PATH
};

/// The candidate script paths of Note [Finding the report script] for an executable in `exe_dir`,
/// sources configured at `source_dir` (empty: none known) and the working directory `cwd`.
[[nodiscard]] std::vector<std::filesystem::path> report_script_paths(const std::filesystem::path& exe_dir,
                                                                     const std::filesystem::path& source_dir,
                                                                     const std::filesystem::path& cwd);

/// This process's environment: its executable, the configured source dir, the working directory,
/// and the interpreters /usr/bin/python3 then python3.
[[nodiscard]] report_environment default_report_environment();

/// Renders DIR/report.html and DIR/figures/ from DIR (a `vtensor compare --out` folder). Returns
/// exit_usage when DIR/summary.json is missing or not a vtensor-compare version 1 file, when
/// `options.cell` names no cell, or when the script finds DIR's content bad; exit_failure when no
/// script, no Python with matplotlib, or the script fails; exit_success otherwise. Messages (and
/// what the script prints) go to io.err prefixed "vtensor report: "; nothing goes to io.out, so a
/// caller rendering into a temporary folder names the final path itself. Does not throw.
[[nodiscard]] int render_report(const std::filesystem::path& dir, const cli_streams& io,
                                const report_options& options = {});

/// The same with the script and interpreters of `env`.
[[nodiscard]] int render_report(const std::filesystem::path& dir, const cli_streams& io, const report_options& options,
                                const report_environment& env);

/// `vtensor report DIR [--cell ID]` (tools/cmd_report.cpp).
[[nodiscard]] int cmd_report(std::span<const std::string> args, const cli_streams& io);

}  // namespace vtensor::tools
