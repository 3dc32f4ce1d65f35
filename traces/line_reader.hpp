#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vtensor::traces {

/// Reads a text file line by line through a 1 MiB buffer: memory stays bounded by the longest
/// line, whatever the file size. Accepts '\n' and "\r\n" endings and a missing final newline.
/// Throws trace_error when the file cannot be opened or read.
class line_reader {
 public:
  explicit line_reader(std::string path);

  /// The next line without its ending, or nullopt at end of file. The view stays valid until
  /// the next call.
  [[nodiscard]] std::optional<std::string_view> next();

  [[nodiscard]] const std::string& path() const noexcept { return path_; }  ///< as given
  /// 1-based number of the line last returned (0 before the first).
  [[nodiscard]] std::uint64_t line_number() const noexcept { return line_number_; }

 private:
  struct file_closer {
    void operator()(std::FILE* file) const noexcept { std::fclose(file); }
  };

  bool refill();

  std::string path_;
  std::unique_ptr<std::FILE, file_closer> file_;
  std::vector<char> buffer_;  // bytes [begin_, end_) are read but not yet returned
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  bool eof_ = false;
  std::uint64_t line_number_ = 0;
};

}  // namespace vtensor::traces
