#pragma once
// Shared by the libFuzzer harnesses (tests/fuzz/README.md): the input as a file, for the readers
// that take a path, and the policies' options named from the registry's tables.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "sim/policy_registry.hpp"

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

/// An argument line "@N" as "--NAME", NAME the N-th option (modulo their count) of the
/// policies' tables (sim::kv_policy_option_table()), so that every policy option, a new one
/// included, is one short line away; any other line as it is.
inline std::string table_option(const std::string& line) {
  if (line.size() < 2 || line[0] != '@' || line.find_first_not_of("0123456789", 1) != std::string::npos) return line;
  const auto& table = sim::kv_policy_option_table();
  return "--" + table[std::stoull(line.substr(1, 6)) % table.size()].name;
}

}  // namespace vtensor::fuzzing
