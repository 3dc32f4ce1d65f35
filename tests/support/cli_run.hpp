#pragma once
// Runs the `vtensor` command line in-process, capturing what it prints.

#include <sstream>
#include <string>
#include <vector>

#include "tools/cli.hpp"

namespace vtensor::testing {

/// Exit code and captured streams of one run.
struct cli_result {
  int code;         ///< exit code
  std::string out;  ///< what went to stdout
  std::string err;  ///< what went to stderr
};

/// Runs `vtensor ARGS...` (args[0] is the subcommand).
inline cli_result run_cli(const std::vector<std::string>& args) {
  std::ostringstream out;
  std::ostringstream err;
  const int code = tools::run_cli(args, {out, err});
  return {code, out.str(), err.str()};
}

}  // namespace vtensor::testing
