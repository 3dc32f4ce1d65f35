#pragma once
// Shared by the libFuzzer harnesses (tests/fuzz/README.md): the input as a file, for the readers
// that take a path.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace vtensor::fuzzing {

/// Writes `data` to a file private to this process (rewritten on every call) and returns its path.
inline const std::string& as_file(const std::uint8_t* data, std::size_t size, const char* suffix) {
  static const std::string path = "/tmp/vtensor-fuzz-" + std::to_string(::getpid()) + suffix;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();  // the harness itself cannot work: stop loudly
  if (size > 0 && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  return path;
}

}  // namespace vtensor::fuzzing
