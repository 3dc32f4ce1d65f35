#include "traces/vidur_reader.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "traces/csv_cells.hpp"
#include "traces/trace_error.hpp"

namespace vtensor::traces {
namespace {

constexpr std::string_view arrival_name = "arrived_at";
constexpr std::string_view prefill_name = "num_prefill_tokens";
constexpr std::string_view decode_name = "num_decode_tokens";

// A decimal number, all of `cell`; nullopt otherwise.
std::optional<double> parse_number(std::string_view cell) {
  double value = 0;
  const auto [end, error] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
  if (error != std::errc{} || end != cell.data() + cell.size() || cell.empty()) return std::nullopt;
  return value;
}

}  // namespace

vidur_reader::vidur_reader(std::string path)
    : trace_reader(path, trace_format::vidur, {std::string(arrival_name), std::string(prefill_name), ""}, 0),
      lines_(std::move(path)) {
  std::optional<std::string_view> line;
  do {
    line = lines_.next();
    if (!line) throw trace_error(lines_.path(), 0, "", "empty file: expected a CSV header");
  } while (csv::trim(*line).empty());
  const std::string_view header = csv::without_bom(*line);
  std::vector<std::string_view> cells;
  csv::split(header, cells);
  columns_ = cells.size();
  const auto column = [&](std::string_view name) {
    for (std::size_t i = 0; i < cells.size(); ++i) {
      if (cells[i] == name) return i;
    }
    throw trace_error(lines_.path(), lines_.line_number(), std::string(name),
                      fmt::format("missing column in the CSV header \"{}\"", header));
  };
  arrival_column_ = column(arrival_name);
  prefill_column_ = column(prefill_name);
  decode_column_ = column(decode_name);
}

bool vidur_reader::do_next(trace_request& request) {
  std::optional<std::string_view> line;
  do {
    line = lines_.next();
    if (!line) return false;
  } while (csv::trim(*line).empty());
  const std::uint64_t line_number = lines_.line_number();
  const auto fail = [&](std::string_view field, const std::string& why) {
    throw trace_error(lines_.path(), line_number, std::string(field), why);
  };
  csv::split(*line, cells_);
  if (cells_.size() != columns_) fail("", fmt::format("expected {} columns, got {}", columns_, cells_.size()));

  const auto tokens = [&](std::size_t column, std::string_view name) {
    const std::string_view cell = cells_[column];
    const std::optional<double> v = parse_number(cell);
    if (!v || !std::isfinite(*v)) fail(name, fmt::format("expected a non-negative integer, got \"{}\"", cell));
    if (*v < 0) fail(name, fmt::format("negative value {}", cell));
    if (*v != std::floor(*v)) fail(name, fmt::format("expected a whole number of tokens, got {}", cell));
    if (*v > 4294967295.0) fail(name, fmt::format("value {} is too large", cell));
    return static_cast<std::uint32_t>(*v);
  };

  const std::string_view stamp = cells_[arrival_column_];
  const std::optional<double> seconds = parse_number(stamp);
  if (!seconds || !std::isfinite(*seconds)) fail(arrival_name, fmt::format("expected seconds, got \"{}\"", stamp));
  if (*seconds < 0) fail(arrival_name, fmt::format("negative arrival {}", stamp));
  if (!first_s_) first_s_ = *seconds;
  if (*seconds < *first_s_)
    fail(arrival_name, fmt::format("arrival goes backwards: {} is before the first row's", stamp));
  const double us = std::round((*seconds - *first_s_) * 1e6);
  if (us > 1.8e19) fail(arrival_name, fmt::format("arrival {} is too large", stamp));
  request.arrival_us = static_cast<std::uint64_t>(us);
  request.input_tokens = tokens(prefill_column_, prefill_name);
  request.output_tokens = tokens(decode_column_, decode_name);
  request.block_keys.clear();
  request.block_tokens = 0;
  request.session = index_++;
  request.turn = 0;
  request.line = line_number;
  return true;
}

}  // namespace vtensor::traces
