// Fuzzes `vtensor replay`'s option parsing and checking: the input's lines are the arguments.
// Every combination must end in exit 0, 1 or 2 with a message, never a crash or a sanitizer
// report. The replay itself runs on a 4-request trace. Arguments that would touch the file system
// or wall time outside the harness (outputs, other traces or calibration files, step emulation,
// the GPU) are left out, as are inputs with an option given twice by us (exit 2 anyway). A line
// "@N" is the N-th option of the policies' tables (fuzzing::table_option()).
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_support.hpp"
#include "tools/cli.hpp"

namespace {

bool allowed(const std::string& arg) {
  static const char* const refused[] = {"json",           "timeseries", "chrome",       "trace",   "calibration",
                                        "kernel-factors", "emulate",    "step-time",    "backend", "compare",
                                        "device",         "sample",     "max-requests", "/",       "."};
  for (const char* r : refused) {
    if (arg.find(r) != std::string::npos) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 512) return 0;
  std::vector<std::string> args{"replay"};
  std::string current;
  for (std::size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      current = vtensor::fuzzing::table_option(current);
      if (!allowed(current)) return 0;
      if (!current.empty()) args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (args.size() > 16) return 0;
  args.insert(args.end(), {"--trace", VTENSOR_SOURCE_DIR "/tests/data/traces/mooncake_small.jsonl", "--max-requests",
                           "4", "--no-wall"});
  std::ostringstream out, err;
  const int code = vtensor::tools::run_cli(args, {out, err});
  if (code != 0 && code != 1 && code != 2) __builtin_trap();
  if (code != 0 && err.str().empty()) __builtin_trap();  // a failure must say why
  return 0;
}
