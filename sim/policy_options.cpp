#include "sim/policy_options.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

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

namespace {

double parse_number(std::string_view option, std::string_view text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, v);
  if (text.empty() || error != std::errc{} || stop != end || !std::isfinite(v)) {
    throw option_error(fmt::format("{}: '{}' is not a number", option, text));
  }
  return v;
}

}  // namespace

double parse_fraction(std::string_view option, std::string_view text) {
  const double v = parse_number(option, text);
  if (!(v > 0 && v < 1)) throw option_error(fmt::format("{}: '{}' is not between 0 and 1 (exclusive)", option, text));
  return v;
}

double parse_seconds(std::string_view option, std::string_view text) {
  const double v = parse_number(option, text);
  if (!(v >= 0)) throw option_error(fmt::format("{}: '{}' is not a number of seconds (0 or more)", option, text));
  return v;
}

std::string parse_eviction_name(std::string_view text) {
  const auto names = eviction_order_names();
  if (std::find(names.begin(), names.end(), text) == names.end()) {
    throw unknown_value("--eviction", text, fmt::format("{}", fmt::join(names, ", ")));
  }
  return std::string(text);
}

void check_eviction(const eviction_config& e) {
  if (e.name == "ttl" && !(e.ttl_s > 0)) throw option_error("--eviction ttl needs --eviction-ttl (seconds above 0)");
}

// Note [Recompute cost of a prefix]
// The cost-aware order weighs a cached token by the work its reuse saves: computing a token at
// context position p costs the linear layers' 2 x params FLOPs plus attention over the p tokens
// before it, 4 x layers x hidden FLOPs per earlier token (QK^T and AV, a multiply-add each). In
// units of a context-free token that is 1 + attention_weight x p with attention_weight =
// 4 x layers x hidden / (2 x params): 3.3e-5 for Llama-3-8B, so a token at position 8,192 saves
// 1.27 times what a first token does. A model without a preset gets 0 (every token costs the same).
eviction_config eviction_for(const kv_policy_options& options, eviction_config e) {
  e.clock = options.clock;
  if (e.name == "offline" && options.oracle) e.oracle = options.oracle();  // read the trace only when asked
  if (const model_preset_entry* p = find_model_preset(options.kv.name); p != nullptr && p->params > 0) {
    e.attention_weight = 4.0 * p->kv.layers * p->hidden / (2.0 * p->params);
  }
  return e;
}

void describe_eviction_settings(nlohmann::ordered_json& j, const eviction_config& e) {
  if (e.name == "ttl") j["eviction_ttl_s"] = e.ttl_s;
  if (e.name == "priority") j["eviction_pin_tokens"] = e.pin_tokens;
  if (e.name == "slru") j["eviction_slru_protected"] = e.slru_protected;
  if (e.name == "s3-fifo") j["eviction_s3fifo_small"] = e.s3fifo_small;
  if (e.name == "cost-aware") j["eviction_attention_weight"] = e.attention_weight;
}

option_error too_large(std::string_view option, std::string_view text) {
  return option_error(fmt::format("{}: '{}' is too large", option, text));
}

option_error unknown_value(std::string_view option, std::string_view text, const std::string& names) {
  return option_error(fmt::format("{}: unknown value '{}' ({})", option, text, names));
}

}  // namespace vtensor::sim
