#include "traces/trace_reader.hpp"

#include "traces/azure_reader.hpp"
#include "traces/line_reader.hpp"
#include "traces/mooncake_reader.hpp"
#include "traces/trace_error.hpp"
#include "traces/vidur_reader.hpp"
#include "traces/vtensor_reader.hpp"

#include <fmt/format.h>

namespace vtensor::traces {

trace_reader::trace_reader(std::string path, trace_format format, field_names fields, std::uint32_t block_tokens)
    : path_(std::move(path)), format_(format), fields_(std::move(fields)), block_tokens_(block_tokens) {}

bool trace_reader::next(trace_request& request) {
  if (!do_next(request)) return false;
  if (request.input_tokens == 0) {
    throw trace_error(path_, request.line, fields_.input_tokens, "a request needs at least one prompt token");
  }
  if (!request.block_keys.empty()) {
    const std::uint64_t expected = blocks_for_tokens(request.input_tokens, request.block_tokens);
    if (request.block_keys.size() != expected) {
      throw trace_error(path_, request.line, fields_.block_keys,
                        fmt::format("{} block keys do not fit {} prompt tokens: {}-token blocks "
                                    "need exactly {}",
                                    request.block_keys.size(), request.input_tokens, request.block_tokens, expected));
    }
  }
  if (requests_read_ > 0 && request.arrival_us < last_arrival_us_) {
    throw trace_error(path_, request.line, fields_.arrival,
                      fmt::format("arrival goes backwards: {} us, after {} us on line {}", request.arrival_us,
                                  last_arrival_us_, last_line_));
  }
  last_arrival_us_ = request.arrival_us;
  last_line_ = request.line;
  ++requests_read_;
  return true;
}

std::optional<trace_request> trace_reader::next() {
  trace_request request;
  if (!next(request)) return std::nullopt;
  return request;
}

trace_format detect_trace_format(const std::string& path) {
  line_reader lines(path);
  while (const auto line = lines.next()) {
    std::string_view text = *line;
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string_view::npos) continue;
    text.remove_prefix(first);
    if (text.front() == '{') {
      if (text.find("\"hash_ids\"") != std::string_view::npos) return trace_format::mooncake;
      if (text.find("\"vtensor-trace\"") != std::string_view::npos ||
          text.find("\"arrival_us\"") != std::string_view::npos) {
        return trace_format::vtensor;
      }
    } else if (text.substr(0, 9) == "TIMESTAMP") {
      return trace_format::azure;
    } else if (text.find("num_prefill_tokens") != std::string_view::npos) {
      return trace_format::vidur;
    }
    throw trace_error(path, lines.line_number(), "",
                      "cannot tell the trace format from this line (expected a Mooncake or "
                      "vtensor JSON object, an Azure CSV header or a Vidur CSV header); name it with --format");
  }
  throw trace_error(path, 0, "", "empty trace: cannot tell its format");
}

std::unique_ptr<trace_reader> open_trace(const std::string& path, std::optional<trace_format> format,
                                         const reader_options& options) {
  const trace_format chosen = format ? *format : detect_trace_format(path);
  switch (chosen) {
    case trace_format::mooncake: return std::make_unique<mooncake_reader>(path, options);
    case trace_format::azure: return std::make_unique<azure_reader>(path);
    case trace_format::vtensor: return std::make_unique<vtensor_reader>(path, options);
    case trace_format::vidur: return std::make_unique<vidur_reader>(path);
  }
  throw trace_error(path, 0, "", "unknown trace format");
}

}  // namespace vtensor::traces
