#pragma once
// A scratch folder per test process.

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace vtensor::testing {

/// `<tmp>/vtensor-test-<pid>/<suite>`: a folder of this test process, created on first use; the
/// process's folder is removed with its content when the process exits.
///
/// CTest runs every TEST_CASE as its own process, several at once (`ctest -j`); a folder shared by
/// name between processes let one test see another's temporary files (a check for leftover
/// `.tmp-` files failed in CI because a neighbouring test was writing beside it). One folder per
/// process keeps tests out of each other's files.
inline std::filesystem::path scratch_dir(const std::string& suite) {
  struct folder {
    std::filesystem::path path;
    explicit folder(std::filesystem::path p) : path(std::move(p)) { std::filesystem::create_directories(path); }
    folder(const folder&) = delete;
    folder& operator=(const folder&) = delete;
    ~folder() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const folder process(std::filesystem::temp_directory_path() / ("vtensor-test-" + std::to_string(::getpid())));
  const auto dir = process.path / suite;
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace vtensor::testing
