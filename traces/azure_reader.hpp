#pragma once

#include "traces/line_reader.hpp"
#include "traces/trace_reader.hpp"

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace vtensor::traces {

/// Reads the Azure LLM inference CSV (Azure/AzurePublicDataset, 2023 traces): a header naming
/// TIMESTAMP, ContextTokens and GeneratedTokens (in any order; other columns ignored), then one
/// row a request. TIMESTAMP is a wall-clock `YYYY-MM-DD HH:MM:SS[.fraction]` (up to 9 fractional
/// digits); arrivals are microseconds after the first row's, floored. No prefix identity (empty
/// block_keys) and no sessions (session = 0-based row index, turn 0). Throws trace_error.
class azure_reader final : public trace_reader {
 public:
  explicit azure_reader(std::string path);

 private:
  bool do_next(trace_request& request) override;

  line_reader lines_;
  std::size_t timestamp_column_ = 0;
  std::size_t context_column_ = 0;
  std::size_t generated_column_ = 0;
  std::size_t columns_ = 0;
  std::vector<std::string_view> cells_;  // of the current line, reused
  std::optional<std::int64_t> first_ns_;
  std::uint64_t index_ = 0;
};

/// Nanoseconds since 1970-01-01 00:00:00 of a `YYYY-MM-DD HH:MM:SS[.fraction]` wall-clock time
/// (no time zone, proleptic Gregorian calendar); nullopt when malformed or out of range.
[[nodiscard]] std::optional<std::int64_t> parse_date_time_ns(std::string_view text) noexcept;

}  // namespace vtensor::traces
