#pragma once
// Shared by the libFuzzer harnesses (tests/fuzz/README.md): the input as a file, for the readers
// that take a path, the policies' options named from the registry's tables, and a command run on
// the input's lines as its arguments.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "sim/policy_registry.hpp"
#include "tools/cli.hpp"

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

/// Runs `vtensor COMMAND` with the input's lines as its arguments (each through table_option()),
/// then `tail`; an input over 512 bytes, with over 15 arguments or with one that holds a word of
/// `refused` is passed over. Traps unless the command exits 0, 1 or 2, and unless a failure says why.
inline int run_command_lines(const std::uint8_t* data, std::size_t size, const char* command,
                             std::initializer_list<const char*> refused, std::initializer_list<const char*> tail) {
  const auto allowed = [&](const std::string& arg) {
    for (const char* r : refused) {
      if (arg.find(r) != std::string::npos) return false;
    }
    return true;
  };
  if (size > 512) return 0;
  std::vector<std::string> args{command};
  std::string current;
  for (std::size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      current = table_option(current);
      if (!allowed(current)) return 0;
      if (!current.empty()) args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (args.size() > 16) return 0;
  args.insert(args.end(), tail.begin(), tail.end());
  std::ostringstream out, err;
  const int code = tools::run_cli(args, {out, err});
  if (code != 0 && code != 1 && code != 2) __builtin_trap();
  if (code != 0 && err.str().empty()) __builtin_trap();  // a failure must say why
  return 0;
}

}  // namespace vtensor::fuzzing
