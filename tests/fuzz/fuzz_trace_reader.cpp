// Fuzzes the four trace readers and format detection: any input either reads as requests that
// keep the reader's contract or throws trace_error; anything else (another exception, a crash, a
// sanitizer report, a leak) is a finding. The first byte picks the format (or detection).
#include <cstdint>
#include <optional>

#include "tests/fuzz/fuzz_support.hpp"
#include "traces/trace_error.hpp"
#include "traces/trace_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace vtensor::traces;
  if (size == 0) return 0;
  const std::uint8_t pick = data[0] % 5;
  std::optional<trace_format> format;
  if (pick < 4) format = static_cast<trace_format>(pick);
  const std::string& path = vtensor::fuzzing::as_file(data + 1, size - 1, ".trace");
  try {
    auto reader = open_trace(path, format);
    trace_request r;
    std::uint64_t last = 0;
    while (reader->next(r)) {
      if (r.arrival_us < last || r.input_tokens == 0) __builtin_trap();  // the contract, broken
      last = r.arrival_us;
    }
  } catch (const trace_error&) {
  }
  return 0;
}
