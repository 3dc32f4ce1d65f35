#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace vtensor::traces {

/// Bad trace input: unreadable file, malformed line, missing or mistyped field, inconsistent
/// values. The message reads `FILE:LINE: field 'F': WHY` (the line and field parts are left out
/// when they do not apply), so users can fix the input; the parts are also kept apart.
class trace_error : public std::runtime_error {
 public:
  /// `line` 0 and an empty `field` mean "not tied to a line / field".
  trace_error(std::string file, std::uint64_t line, std::string field, const std::string& why);

  [[nodiscard]] const std::string& file() const noexcept { return file_; }    ///< the input path
  [[nodiscard]] std::uint64_t line() const noexcept { return line_; }         ///< 1-based, or 0
  [[nodiscard]] const std::string& field() const noexcept { return field_; }  ///< or empty

 private:
  std::string file_;
  std::uint64_t line_;
  std::string field_;
};

}  // namespace vtensor::traces
