#include "traces/vtensor_reader.hpp"

#include "traces/json_fields.hpp"
#include "traces/trace_error.hpp"

#include <fmt/format.h>

#include <limits>

namespace vtensor::traces {
namespace {

constexpr std::uint32_t default_block_tokens = 512;
constexpr std::uint64_t max_tokens = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint64_t format_version = 1;

bool is_blank(std::string_view text) { return text.find_first_not_of(" \t") == std::string_view::npos; }

}  // namespace

vtensor_reader::vtensor_reader(std::string path, const reader_options& options)
    : trace_reader(path, trace_format::vtensor, {"arrival_us", "input_tokens", "block_keys"},
                   options.block_tokens.value_or(default_block_tokens)),
      lines_(std::move(path)) {
  std::optional<std::string_view> line;
  do {
    line = lines_.next();
    if (!line) return;
  } while (is_blank(*line));
  const detail::line_context where{lines_.path(), lines_.line_number()};
  if (line->find("\"format\"") == std::string_view::npos) {
    pending_ = std::string(*line);
    pending_line_ = where.line;
    return;
  }
  const nlohmann::json object = detail::parse_object(*line, where);
  const auto& format = detail::require_member(object, "format", where);
  if (!format.is_string() || format.get<std::string>() != "vtensor-trace") {
    throw trace_error(where.path, where.line, "format",
                      fmt::format("expected \"vtensor-trace\", got {}", format.dump()));
  }
  const std::uint64_t version =
      detail::to_unsigned(detail::require_member(object, "version", where), "version", where, max_tokens);
  if (version != format_version) {
    throw trace_error(
        where.path, where.line, "version",
        fmt::format("version {} is not supported (this build reads version {})", version, format_version));
  }
  if (const auto found = object.find("block_tokens"); found != object.end()) {
    const auto stated = detail::to_unsigned(*found, "block_tokens", where, max_tokens);
    if (stated == 0) throw trace_error(where.path, where.line, "block_tokens", "must be at least 1");
    if (options.block_tokens && *options.block_tokens != stated) {
      throw trace_error(where.path, where.line, "block_tokens",
                        fmt::format("the header says {} but {} was asked for", stated, *options.block_tokens));
    }
    set_block_tokens(static_cast<std::uint32_t>(stated));
  }
  header_ = std::string(*line);
}

bool vtensor_reader::do_next(trace_request& request) {
  if (pending_) {
    const std::string text = std::move(*pending_);
    pending_.reset();
    request.line = pending_line_;
    parse_request(text, request);
    return true;
  }
  std::optional<std::string_view> line;
  do {
    line = lines_.next();
    if (!line) return false;
  } while (is_blank(*line));
  request.line = lines_.line_number();
  parse_request(*line, request);
  return true;
}

void vtensor_reader::parse_request(std::string_view text, trace_request& request) {
  const detail::line_context where{lines_.path(), request.line};
  const nlohmann::json object = detail::parse_object(text, where);
  bool has_session = false;
  bool has_turn = false;
  request.block_keys.clear();
  for (const auto& [key, value] : object.items()) {
    if (key == "arrival_us") {
      request.arrival_us = detail::to_unsigned(value, key, where, std::uint64_t{1} << 62);
    } else if (key == "session") {
      request.session = detail::to_unsigned(value, key, where, std::numeric_limits<std::uint64_t>::max());
      has_session = true;
    } else if (key == "turn") {
      request.turn = static_cast<std::uint32_t>(detail::to_unsigned(value, key, where, max_tokens));
      has_turn = true;
    } else if (key == "input_tokens") {
      request.input_tokens = static_cast<std::uint32_t>(detail::to_unsigned(value, key, where, max_tokens));
    } else if (key == "output_tokens") {
      request.output_tokens = static_cast<std::uint32_t>(detail::to_unsigned(value, key, where, max_tokens));
    } else if (key == "block_keys") {
      detail::to_key_array(value, key, where, request.block_keys);
    } else {
      throw trace_error(where.path, where.line, key, "unknown field in a version 1 request");
    }
  }
  for (const char* required : {"arrival_us", "input_tokens", "output_tokens"}) {
    if (!object.contains(required)) throw trace_error(where.path, where.line, required, "missing");
  }
  if (!has_session) request.session = index_;
  if (!has_turn) request.turn = 0;
  request.block_tokens = block_tokens();
  ++index_;
}

}  // namespace vtensor::traces
