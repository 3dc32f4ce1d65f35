#include "traces/json_fields.hpp"

#include "traces/trace_error.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace vtensor::traces::detail {
namespace {

[[noreturn]] void fail(const line_context& where, std::string_view key, const std::string& why) {
  throw trace_error(where.path, where.line, std::string(key), why);
}

std::string describe(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return fmt::format("{} {}", value.type_name(), text);
}

}  // namespace

nlohmann::json parse_object(std::string_view text, const line_context& where) {
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {  // parse errors and number overflow
    std::string why = error.what();
    if (const auto at = why.find("] "); at != std::string::npos) why = why.substr(at + 2);
    throw trace_error(where.path, where.line, "", "bad JSON: " + why);
  }
  if (!object.is_object()) {
    throw trace_error(where.path, where.line, "", fmt::format("expected a JSON object, got {}", describe(object)));
  }
  return object;
}

const nlohmann::json& require_member(const nlohmann::json& object, std::string_view key, const line_context& where) {
  const auto found = object.find(key);
  if (found == object.end()) fail(where, key, "missing");
  return *found;
}

std::uint64_t to_unsigned(const nlohmann::json& value, std::string_view key, const line_context& where,
                          std::uint64_t max) {
  std::uint64_t result = 0;
  if (value.is_number_unsigned()) {
    result = value.get<std::uint64_t>();
  } else if (value.is_number_integer()) {
    fail(where, key, fmt::format("negative value {}", value.get<std::int64_t>()));
  } else if (value.is_number_float()) {
    const double number = value.get<double>();
    if (number < 0) fail(where, key, fmt::format("negative value {}", number));
    fail(where, key, fmt::format("wrong type: expected an integer, got {}", number));
  } else {
    fail(where, key, fmt::format("wrong type: expected a non-negative integer, got {}", describe(value)));
  }
  if (result > max) fail(where, key, fmt::format("value {} is too large (at most {})", result, max));
  return result;
}

std::uint64_t to_scaled_unsigned(const nlohmann::json& value, std::string_view key, const line_context& where,
                                 std::uint64_t scale) {
  constexpr std::uint64_t max = std::uint64_t{1} << 62;
  if (!value.is_number_float()) {
    const std::uint64_t number = to_unsigned(value, key, where, max / scale);
    return number * scale;
  }
  const double number = value.get<double>();
  if (!std::isfinite(number)) fail(where, key, "not a finite number");
  if (number < 0) fail(where, key, fmt::format("negative value {}", number));
  const double scaled = std::round(number * static_cast<double>(scale));
  if (scaled > static_cast<double>(max)) fail(where, key, fmt::format("value {} is too large", number));
  return static_cast<std::uint64_t>(scaled);
}

void to_key_array(const nlohmann::json& value, std::string_view key, const line_context& where,
                  std::vector<std::uint64_t>& keys) {
  if (!value.is_array()) {
    fail(where, key, fmt::format("wrong type: expected an array of integers, got {}", describe(value)));
  }
  keys.clear();
  keys.reserve(value.size());
  for (std::size_t i = 0; i < value.size(); ++i) {
    const auto& element = value[i];
    if (!element.is_number_unsigned()) {
      fail(where, key, fmt::format("element {}: expected a non-negative integer, got {}", i, describe(element)));
    }
    keys.push_back(element.get<std::uint64_t>());
  }
}

}  // namespace vtensor::traces::detail
