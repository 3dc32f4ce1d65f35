// Fuzzes `vtensor compare`'s option parsing and checking, arms included: the input's lines are
// the arguments. Every combination must end in exit 0, 1 or 2 with a message, never a crash or a
// sanitizer report. The points run on a 4-request trace, one at a time. Arguments that would
// touch the file system outside the harness (outputs, experiment files, other traces,
// calibration or kernel-factor files) are left out. A line "@N" is the N-th option of the
// policies' tables (fuzzing::table_option()): outside an arm, a usage error to exercise too.
#include <cstdint>

#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return vtensor::fuzzing::run_command_lines(
      data, size, "compare",
      {"json", "--out", "arms", "trace", "calibration", "kernel-factors", "jobs", "max-requests", "sample", "/", "."},
      {"--trace", VTENSOR_SOURCE_DIR "/tests/data/traces/mooncake_small.jsonl", "--max-requests", "4", "--no-wall",
       "--jobs", "1"});
}
