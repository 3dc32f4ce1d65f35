#pragma once
// Shared helpers of the backends tests.

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <doctest/doctest.h>

#include "backends/vmm_backend.hpp"

namespace vtensor::backend_testing {

/// A fresh directory under the system temp dir, removed with its content on destruction.
class temp_dir {
 public:
  temp_dir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("vtensor-backends-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  /// Writes `text` to `name` inside the directory and returns its path.
  [[nodiscard]] std::filesystem::path write(const std::string& name, std::string_view text) const {
    const std::filesystem::path file = path_ / name;
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }

 private:
  std::filesystem::path path_;
};

/// Runs `fn` and checks it throws vmm_error for `call` whose message names the call.
template <typename F>
void check_vmm_error(vmm_call call, F&& fn) {
  try {
    std::forward<F>(fn)();
    FAIL("expected vmm_error from " << to_string(call));
  } catch (const vmm_error& e) {
    INFO("what(): " << e.what());
    CHECK(e.call() == call);
    CHECK(std::string_view(e.what()).starts_with(to_string(call)));
  }
}

}  // namespace vtensor::backend_testing
