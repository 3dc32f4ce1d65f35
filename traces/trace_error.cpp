#include "traces/trace_error.hpp"

#include <fmt/format.h>

namespace vtensor::traces {
namespace {

std::string format_message(const std::string& file, std::uint64_t line, const std::string& field,
                           const std::string& why) {
  std::string message = file;
  if (line != 0) message += fmt::format(":{}", line);
  message += ": ";
  if (!field.empty()) message += fmt::format("field '{}': ", field);
  message += why;
  return message;
}

}  // namespace

trace_error::trace_error(std::string file, std::uint64_t line, std::string field, const std::string& why)
    : std::runtime_error(format_message(file, line, field, why)),
      file_(std::move(file)),
      line_(line),
      field_(std::move(field)) {}

}  // namespace vtensor::traces
