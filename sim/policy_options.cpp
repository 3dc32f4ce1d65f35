#include "sim/policy_options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace vtensor::sim {

backend_config device_config(const kv_policy_options& o) {
  backend_config c;
  c.capacity_bytes = o.memory_bytes;
  c.calibration_file = o.calibration_file;
  c.zero_latency = o.zero_latency;
  c.device_index = o.device_index;
  c.wrap = o.wrap_backend;
  return c;
}

nlohmann::ordered_json describe_device(const std::string& backend, const backend_config& device) {
  const bool unlimited = device.capacity_bytes == std::numeric_limits<std::uint64_t>::max();
  nlohmann::ordered_json j;
  j["backend"] = backend;
  j["memory_bytes"] = unlimited ? nlohmann::ordered_json("unlimited") : nlohmann::ordered_json(device.capacity_bytes);
  j["calibration"] = device.zero_latency               ? "zero"
                     : device.calibration_file.empty() ? "built-in h200"
                                                       : device.calibration_file;
  return j;
}

std::uint64_t parse_count(std::string_view option, std::string_view text) {
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, v);
  if (error == std::errc::result_out_of_range) throw too_large(option, text);
  if (text.empty() || error != std::errc{} || stop != end) {
    throw option_error(fmt::format("{}: '{}' is not a whole number of 0 or more", option, text));
  }
  return v;
}

bool parse_truth(std::string_view option, std::string_view text) {
  std::string t(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (t == "true" || t == "yes" || t == "on" || t == "1") return true;
  if (t == "false" || t == "no" || t == "off" || t == "0") return false;
  throw option_error(fmt::format("{}: '{}' is neither true nor false (true/false, yes/no, on/off, 1/0)", option, text));
}

option_error too_large(std::string_view option, std::string_view text) {
  return option_error(fmt::format("{}: '{}' is too large", option, text));
}

option_error unknown_value(std::string_view option, std::string_view text, const std::string& names) {
  return option_error(fmt::format("{}: unknown value '{}' ({})", option, text, names));
}

}  // namespace vtensor::sim
