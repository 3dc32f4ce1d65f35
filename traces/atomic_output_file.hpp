#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace vtensor::traces {

/// An output file that appears whole or not at all: bytes go to a temporary file beside the
/// target (same directory, so the rename is atomic) and commit() renames it over the target;
/// destroyed uncommitted (an error, an exception), it removes the temporary file and the target
/// is left untouched. Throws std::system_error when a file operation fails.
class atomic_output_file {
 public:
  explicit atomic_output_file(std::string path);
  ~atomic_output_file();
  atomic_output_file(const atomic_output_file&) = delete;
  atomic_output_file& operator=(const atomic_output_file&) = delete;

  /// Appends `bytes`; buffered (1 MiB).
  void write(std::string_view bytes);

  /// Flushes, closes and renames onto the target. Call once.
  void commit();

  [[nodiscard]] const std::string& path() const noexcept { return path_; }  ///< the target

 private:
  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
};

}  // namespace vtensor::traces
