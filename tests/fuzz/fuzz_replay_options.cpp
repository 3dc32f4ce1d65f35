// Fuzzes `vtensor replay`'s option parsing and checking: the input's lines are the arguments.
// Every combination must end in exit 0, 1 or 2 with a message, never a crash or a sanitizer
// report. The replay itself runs on a 4-request trace. Arguments that would touch the file system
// or wall time outside the harness (outputs, other traces or calibration files, step emulation,
// the GPU) are left out, as are inputs with an option given twice by us (exit 2 anyway). A line
// "@N" is the N-th option of the policies' tables (fuzzing::table_option()).
#include <cstdint>

#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return vtensor::fuzzing::run_command_lines(
      data, size, "replay",
      {"json", "timeseries", "chrome", "trace", "calibration", "kernel-factors", "emulate", "step-time", "backend",
       "compare", "device", "sample", "max-requests", "/", "."},
      {"--trace", VTENSOR_SOURCE_DIR "/tests/data/traces/mooncake_small.jsonl", "--max-requests", "4", "--no-wall"});
}
