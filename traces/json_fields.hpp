#pragma once

// Field access with trace_error messages, shared by the JSON readers. Internal to traces/.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vtensor::traces::detail {

/// Where a value came from, for messages.
struct line_context {
  const std::string& path;  ///< the trace file
  std::uint64_t line;       ///< 1-based line
};

/// Parses one line holding a JSON object. Throws trace_error on bad JSON or another type.
[[nodiscard]] nlohmann::json parse_object(std::string_view text, const line_context& where);

/// The member `key` of `object`. Throws trace_error when it is missing.
[[nodiscard]] const nlohmann::json& require_member(const nlohmann::json& object, std::string_view key,
                                                   const line_context& where);

/// A non-negative integer no larger than `max`. Throws trace_error naming `key` for negative,
/// fractional, too large or non-numeric values.
[[nodiscard]] std::uint64_t to_unsigned(const nlohmann::json& value, std::string_view key, const line_context& where,
                                        std::uint64_t max);

/// A non-negative number (integer or not) times `scale`, rounded to an integer: Mooncake's
/// millisecond timestamps to microseconds. Throws trace_error like to_unsigned.
[[nodiscard]] std::uint64_t to_scaled_unsigned(const nlohmann::json& value, std::string_view key,
                                               const line_context& where, std::uint64_t scale);

/// An array of non-negative integers, into `keys` (cleared first). Throws trace_error.
void to_key_array(const nlohmann::json& value, std::string_view key, const line_context& where,
                  std::vector<std::uint64_t>& keys);

}  // namespace vtensor::traces::detail
