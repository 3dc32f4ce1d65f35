#include "traces/vtensor_reader.hpp"

#include "traces/json_fields.hpp"
#include "traces/trace_error.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <cstring>
#include <limits>

namespace vtensor::traces {
namespace {

constexpr std::uint32_t default_block_tokens = 512;
constexpr std::uint64_t max_tokens = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint64_t format_version = 1;

bool is_blank(std::string_view text) { return text.find_first_not_of(" \t") == std::string_view::npos; }

constexpr std::uint64_t max_arrival_us = std::uint64_t{1} << 62;

}  // namespace

// Note [The request fast path]
// A request line is parsed twice over in the worst case, never wrongly. parse_request() first
// hands the line to simdjson's parser (runtime-dispatched SIMD kernels, a flat tape instead of a
// tree of nodes); it accepts a line only when every member is one of the six known ones, appears
// once, holds a non-negative integer within its bound (block_keys: an array of them) and nothing
// follows the object. Anything else (a syntax error, a float, a minus sign anywhere, an unknown
// or repeated member, a value out of range) makes it give up (the fast path sets has_session
// and has_turn only when it succeeds), and the line goes through the nlohmann-json path below,
// which either reads the same values or throws the exact error the format promises. Measured
// reason (results/README.md, "Sessions 14 and 15"): `vtensor inspect` of the 1,000,000-request
// trace took 2.96-3.42 s with the document path alone, 1.23-1.27 s with the fast path.
struct vtensor_reader::fast_parser {
  simdjson::dom::parser parser;
  std::string padded;  // the line, then SIMDJSON_PADDING spare bytes

  // Fills `request` from `text` and returns true, or returns false (request half-filled).
  bool parse(std::string_view text, trace_request& request, bool& has_session, bool& has_turn) {
    if (text.find('-') != std::string_view::npos) return false;  // "-0" would read as 0
    padded.resize(text.size() + simdjson::SIMDJSON_PADDING);
    std::memcpy(padded.data(), text.data(), text.size());
    simdjson::dom::object object;
    if (parser.parse(padded.data(), text.size(), false).get(object)) return false;
    unsigned seen = 0;
    for (const auto field : object) {
      const std::string_view key = field.key;
      unsigned bit = 0;
      std::uint64_t limit = max_tokens;
      if (key == "arrival_us") {
        bit = 1, limit = max_arrival_us;
      } else if (key == "session") {
        bit = 2, limit = std::numeric_limits<std::uint64_t>::max();
      } else if (key == "turn") {
        bit = 4;
      } else if (key == "input_tokens") {
        bit = 8;
      } else if (key == "output_tokens") {
        bit = 16;
      } else if (key == "block_keys") {
        bit = 32;
      } else {
        return false;
      }
      if ((seen & bit) != 0) return false;
      seen |= bit;
      if (bit == 32) {
        simdjson::dom::array keys;
        if (field.value.get_array().get(keys)) return false;
        request.block_keys.clear();
        request.block_keys.reserve(keys.size());
        for (const auto element : keys) {
          std::uint64_t block = 0;
          if (element.get_uint64().get(block)) return false;
          request.block_keys.push_back(block);
        }
        continue;
      }
      std::uint64_t number = 0;
      if (field.value.get_uint64().get(number) || number > limit) return false;
      switch (bit) {
        case 1: request.arrival_us = number; break;
        case 2: request.session = number; break;
        case 4: request.turn = static_cast<std::uint32_t>(number); break;
        case 8: request.input_tokens = static_cast<std::uint32_t>(number); break;
        default: request.output_tokens = static_cast<std::uint32_t>(number); break;
      }
    }
    if ((seen & (1 | 8 | 16)) != (1 | 8 | 16)) return false;
    if ((seen & 32) == 0) request.block_keys.clear();
    has_session = (seen & 2) != 0;
    has_turn = (seen & 4) != 0;
    return true;
  }
};

vtensor_reader::~vtensor_reader() = default;

vtensor_reader::vtensor_reader(std::string path, const reader_options& options)
    : trace_reader(path, trace_format::vtensor, {"arrival_us", "input_tokens", "block_keys"},
                   options.block_tokens.value_or(default_block_tokens)),
      lines_(std::move(path)),
      fast_(std::make_unique<fast_parser>()) {
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
  bool has_session = false;
  bool has_turn = false;
  if (fast_->parse(text, request, has_session, has_turn)) {
    finish_request(request, has_session, has_turn);
    return;
  }
  const detail::line_context where{lines_.path(), request.line};
  const nlohmann::json object = detail::parse_object(text, where);
  request.block_keys.clear();
  for (const auto& [key, value] : object.items()) {
    if (key == "arrival_us") {
      request.arrival_us = detail::to_unsigned(value, key, where, max_arrival_us);
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
  finish_request(request, has_session, has_turn);
}

void vtensor_reader::finish_request(trace_request& request, bool has_session, bool has_turn) {
  if (!has_session) request.session = index_;
  if (!has_turn) request.turn = 0;
  request.block_tokens = block_tokens();
  ++index_;
}

}  // namespace vtensor::traces
