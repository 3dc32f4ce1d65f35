#include "traces/mooncake_reader.hpp"

#include "traces/json_fields.hpp"
#include "traces/trace_error.hpp"

#include <fmt/format.h>

#include <limits>

namespace vtensor::traces {
namespace {

constexpr std::uint32_t mooncake_block_tokens = 512;
constexpr std::uint64_t max_tokens = std::numeric_limits<std::uint32_t>::max();

bool is_blank(std::string_view text) { return text.find_first_not_of(" \t") == std::string_view::npos; }

}  // namespace

mooncake_reader::mooncake_reader(std::string path, const reader_options& options)
    : trace_reader(path, trace_format::mooncake, {"timestamp", "input_length", "hash_ids"},
                   options.block_tokens.value_or(mooncake_block_tokens)),
      lines_(std::move(path)) {}

bool mooncake_reader::do_next(trace_request& request) {
  std::optional<std::string_view> line;
  do {
    line = lines_.next();
    if (!line) return false;
  } while (is_blank(*line));

  const detail::line_context where{lines_.path(), lines_.line_number()};
  const nlohmann::json object = detail::parse_object(*line, where);
  request.arrival_us =
      detail::to_scaled_unsigned(detail::require_member(object, "timestamp", where), "timestamp", where, 1000);
  request.input_tokens = static_cast<std::uint32_t>(
      detail::to_unsigned(detail::require_member(object, "input_length", where), "input_length", where, max_tokens));
  request.output_tokens = static_cast<std::uint32_t>(
      detail::to_unsigned(detail::require_member(object, "output_length", where), "output_length", where, max_tokens));
  detail::to_key_array(detail::require_member(object, "hash_ids", where), "hash_ids", where, request.block_keys);
  if (request.block_keys.empty() && request.input_tokens > 0) {
    throw trace_error(where.path, where.line, "hash_ids",
                      fmt::format("empty, but {} prompt tokens need {} blocks", request.input_tokens,
                                  blocks_for_tokens(request.input_tokens, block_tokens())));
  }
  request.session = index_++;
  request.turn = 0;
  request.block_tokens = block_tokens();
  request.line = where.line;
  return true;
}

}  // namespace vtensor::traces
