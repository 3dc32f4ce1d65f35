#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "traces/line_reader.hpp"
#include "traces/trace_reader.hpp"

namespace vtensor::traces {

/// Reads the request traces of Vidur (microsoft/vidur, `data/processed_traces/*.csv`) and of
/// the Splitwise-derived sets its users replay: a CSV header naming `arrived_at` (seconds, a
/// decimal number), `num_prefill_tokens` and `num_decode_tokens` (in any order; other columns,
/// such as `num_total_tokens` or `pd_ratio`, ignored), then one row a request. Arrivals are
/// microseconds after the first row's, rounded to the nearest. A trace without `arrived_at` is
/// refused: Vidur then draws arrivals from an interval generator, which is not a replay. No
/// prefix identity (empty block_keys), no sessions (session = 0-based row index). Token counts
/// must be non-negative integers (an integral value written `123.0` is accepted, as Vidur's
/// pandas-written files do). Throws trace_error naming file, line and column.
class vidur_reader final : public trace_reader {
 public:
  explicit vidur_reader(std::string path);

 private:
  bool do_next(trace_request& request) override;

  line_reader lines_;
  std::size_t arrival_column_ = 0;
  std::size_t prefill_column_ = 0;
  std::size_t decode_column_ = 0;
  std::size_t columns_ = 0;
  std::vector<std::string_view> cells_;  // of the current line, reused
  std::optional<double> first_s_;
  std::uint64_t index_ = 0;
};

}  // namespace vtensor::traces
