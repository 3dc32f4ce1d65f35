// Fuzzes `vtensor compare --arms FILE`, the experiment file (docs/compare.md): the input is the
// file's content, written to this process's own temporary file, and the comparison runs on a
// 4-request trace, one point at a time, with no output folder. Every file must end in exit 0, 1
// or 2 with a message, never a crash, a hang or a sanitizer report. Entries naming other traces
// or kernel-factor files are left out (they would read the file system outside the harness).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/cli.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 2048) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (text.find("traces") != std::string::npos || text.find('/') != std::string::npos ||
      text.find(".json") != std::string::npos) {
    return 0;
  }
  static const std::string path = "/tmp/vtensor-fuzz-experiment-" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
  }
  const std::vector<std::string> args{
      "compare",        "--arms", path,        "--trace", VTENSOR_SOURCE_DIR "/tests/data/traces/mooncake_small.jsonl",
      "--max-requests", "4",      "--no-wall", "--jobs",  "1"};
  std::ostringstream out, err;
  const int code = vtensor::tools::run_cli(args, {out, err});
  if (code != 0 && code != 1 && code != 2) __builtin_trap();
  if (code != 0 && err.str().empty()) __builtin_trap();  // a failure must say why
  return 0;
}
