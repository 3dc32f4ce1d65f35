#pragma once

#include "traces/line_reader.hpp"
#include "traces/trace_reader.hpp"

#include <memory>
#include <optional>
#include <string>

namespace vtensor::traces {

/// Reads vtensor's own JSONL (traces/FORMAT.md): an optional header line
/// `{"format": "vtensor-trace", "version": 1, "block_tokens": 512, ...}` then one request a
/// line `{"arrival_us", "session", "turn", "input_tokens", "output_tokens", "block_keys"}`.
/// Version 1 is strict: an unknown member in a request line is an error (a typo must not pass
/// silently); unknown header members are metadata and ignored. Throws trace_error (from the
/// constructor for a missing file or a bad header).
class vtensor_reader final : public trace_reader {
 public:
  explicit vtensor_reader(std::string path, const reader_options& options = {});
  ~vtensor_reader() override;

  /// The header line as written (empty when the file has none): generator parameters, seed.
  [[nodiscard]] const std::string& header() const noexcept { return header_; }

 private:
  bool do_next(trace_request& request) override;
  struct fast_parser;  // Note [The request fast path] in vtensor_reader.cpp

  void parse_request(std::string_view text, trace_request& request);
  void finish_request(trace_request& request, bool has_session, bool has_turn);

  line_reader lines_;
  std::string header_;
  std::optional<std::string> pending_;  // first request line, read while looking for the header
  std::uint64_t pending_line_ = 0;
  std::uint64_t index_ = 0;
  std::unique_ptr<fast_parser> fast_;
};

}  // namespace vtensor::traces
