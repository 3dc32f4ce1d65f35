#include "traces/azure_reader.hpp"

#include "traces/csv_cells.hpp"
#include "traces/trace_error.hpp"

#include <fmt/format.h>

#include <charconv>
#include <limits>
#include <vector>

namespace vtensor::traces {
namespace {

constexpr std::string_view timestamp_name = "TIMESTAMP";
constexpr std::string_view context_name = "ContextTokens";
constexpr std::string_view generated_name = "GeneratedTokens";

using csv::split;
using csv::trim;

// Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar (H. Hinnant's algorithm).
std::int64_t days_from_civil(std::int64_t year, unsigned month, unsigned day) noexcept {
  year -= month <= 2 ? 1 : 0;
  const std::int64_t era = (year >= 0 ? year : year - 399) / 400;
  const auto year_of_era = static_cast<unsigned>(year - era * 400);
  const unsigned day_of_year = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1;
  const unsigned day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
  return era * 146097 + static_cast<std::int64_t>(day_of_era) - 719468;
}

bool is_leap(std::int64_t year) noexcept { return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0; }

unsigned days_in_month(std::int64_t year, unsigned month) noexcept {
  constexpr unsigned days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && is_leap(year) ? 29 : days[month - 1];
}

// Reads exactly `digits` decimal digits at `at`, advancing it.
bool read_digits(std::string_view text, std::size_t& at, std::size_t digits, unsigned& value) {
  if (at + digits > text.size()) return false;
  value = 0;
  for (std::size_t i = 0; i < digits; ++i) {
    const char c = text[at + i];
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  at += digits;
  return true;
}

bool expect(std::string_view text, std::size_t& at, char c) {
  if (at >= text.size() || text[at] != c) return false;
  ++at;
  return true;
}

}  // namespace

std::optional<std::int64_t> parse_date_time_ns(std::string_view text) noexcept {
  std::size_t at = 0;
  unsigned year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!read_digits(text, at, 4, year) || !expect(text, at, '-') || !read_digits(text, at, 2, month) ||
      !expect(text, at, '-') || !read_digits(text, at, 2, day)) {
    return std::nullopt;
  }
  if (!expect(text, at, ' ') && !expect(text, at, 'T')) return std::nullopt;
  if (!read_digits(text, at, 2, hour) || !expect(text, at, ':') || !read_digits(text, at, 2, minute) ||
      !expect(text, at, ':') || !read_digits(text, at, 2, second)) {
    return std::nullopt;
  }
  std::int64_t fraction_ns = 0;
  if (at < text.size() && text[at] == '.') {
    ++at;
    std::size_t digits = 0;
    std::int64_t scale = 100'000'000;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
      if (digits == 9) return std::nullopt;
      fraction_ns += (text[at] - '0') * scale;
      scale /= 10;
      ++digits;
      ++at;
    }
    if (digits == 0) return std::nullopt;
  }
  if (at != text.size()) return std::nullopt;
  if (month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) || hour > 23 || minute > 59 ||
      second > 60) {
    return std::nullopt;
  }
  const std::int64_t days = days_from_civil(year, month, day);
  const std::int64_t seconds = days * 86400 + hour * 3600 + minute * 60 + second;
  // Nanoseconds since 1970 fit 64 bits for about 292 years either side (1678 to 2261).
  constexpr std::int64_t limit = std::numeric_limits<std::int64_t>::max() / 1'000'000'000 - 1;
  if (seconds > limit || seconds < -limit) return std::nullopt;
  return seconds * 1'000'000'000 + fraction_ns;
}

azure_reader::azure_reader(std::string path)
    : trace_reader(path, trace_format::azure, {std::string(timestamp_name), std::string(context_name), ""}, 0),
      lines_(std::move(path)) {
  std::optional<std::string_view> line;
  do {
    line = lines_.next();
    if (!line) throw trace_error(lines_.path(), 0, "", "empty file: expected a CSV header");
  } while (trim(*line).empty());
  const std::string_view header = csv::without_bom(*line);
  std::vector<std::string_view> cells;
  split(header, cells);
  columns_ = cells.size();
  const auto column = [&](std::string_view name) {
    for (std::size_t i = 0; i < cells.size(); ++i) {
      if (cells[i] == name) return i;
    }
    throw trace_error(lines_.path(), lines_.line_number(), std::string(name),
                      fmt::format("missing column in the CSV header \"{}\"", header));
  };
  timestamp_column_ = column(timestamp_name);
  context_column_ = column(context_name);
  generated_column_ = column(generated_name);
}

bool azure_reader::do_next(trace_request& request) {
  std::optional<std::string_view> line;
  do {
    line = lines_.next();
    if (!line) return false;
  } while (trim(*line).empty());
  const std::uint64_t line_number = lines_.line_number();
  const auto fail = [&](std::string_view field, const std::string& why) {
    throw trace_error(lines_.path(), line_number, std::string(field), why);
  };

  std::vector<std::string_view>& cells = cells_;
  split(*line, cells);
  if (cells.size() != columns_) {
    fail("", fmt::format("expected {} columns, got {}", columns_, cells.size()));
  }
  const auto tokens = [&](std::size_t column, std::string_view name) {
    const std::string_view cell = cells[column];
    if (!cell.empty() && cell.front() == '-') fail(name, fmt::format("negative value {}", cell));
    std::uint32_t value = 0;
    const auto [end, error] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
    if (error == std::errc::result_out_of_range) fail(name, fmt::format("value {} is too large", cell));
    if (error != std::errc{} || end != cell.data() + cell.size()) {
      fail(name, fmt::format("expected a non-negative integer, got \"{}\"", cell));
    }
    return value;
  };

  const std::string_view stamp = cells[timestamp_column_];
  const auto time_ns = parse_date_time_ns(stamp);
  if (!time_ns) {
    fail(timestamp_name, fmt::format("expected \"YYYY-MM-DD HH:MM:SS.fffffff\", got \"{}\"", stamp));
  }
  if (!first_ns_) first_ns_ = *time_ns;
  if (*time_ns < *first_ns_) {
    fail(timestamp_name, fmt::format("arrival goes backwards: {} is before the first row's time", stamp));
  }
  request.arrival_us = static_cast<std::uint64_t>((*time_ns - *first_ns_) / 1000);
  request.input_tokens = tokens(context_column_, context_name);
  request.output_tokens = tokens(generated_column_, generated_name);
  request.block_keys.clear();
  request.block_tokens = 0;
  request.session = index_++;
  request.turn = 0;
  request.line = line_number;
  return true;
}

}  // namespace vtensor::traces
