#pragma once

#include "backends/enum_names.hpp"
#include "traces/trace_request.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace vtensor::traces {

/// The trace file formats vtensor reads (traces/FORMAT.md describes each).
enum class trace_format {
  mooncake,  ///< Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids
  azure,     ///< Azure LLM inference CSV: TIMESTAMP, ContextTokens, GeneratedTokens
  vtensor,   ///< vtensor's own JSONL (optional header line, then one request a line)
  vidur,     ///< Vidur / Splitwise CSV: arrived_at (s), num_prefill_tokens, num_decode_tokens
};

/// The formats' names, as users type them ("auto" is not one: it asks for detection).
inline constexpr enum_names<trace_format, 4> k_trace_format_names{{{{trace_format::mooncake, "mooncake"},
                                                                    {trace_format::azure, "azure"},
                                                                    {trace_format::vtensor, "vtensor"},
                                                                    {trace_format::vidur, "vidur"}}}};

/// "mooncake", "azure", "vtensor" or "vidur".
[[nodiscard]] inline std::string_view to_string(trace_format format) noexcept {
  return k_trace_format_names.name(format);
}

/// Parses a format name; "auto" and unknown names give nullopt.
[[nodiscard]] inline std::optional<trace_format> parse_trace_format(std::string_view name) noexcept {
  return k_trace_format_names.parse(name);
}

/// The names a format gives the fields that trace_reader checks, for its messages.
struct field_names {
  std::string arrival;       ///< e.g. "timestamp"
  std::string input_tokens;  ///< e.g. "input_length"
  std::string block_keys;    ///< e.g. "hash_ids"
};

/// Options common to all readers.
struct reader_options {
  /// Tokens per prefix block for formats that do not state it (Mooncake: 512 by default;
  /// vtensor without a header: 512). A vtensor header that states another value is an error.
  std::optional<std::uint32_t> block_tokens;
};

/// A stream of requests in arrival order, read one at a time: memory stays bounded by one
/// request, so traces of millions of requests replay in constant space.
///
/// Contract, checked here for every format: arrivals never go backwards (equal arrivals are
/// fine and keep file order); a request has at least one prompt token; its block keys, when
/// present, number exactly ceil(input_tokens / block_tokens). Violations throw trace_error
/// naming file, line and field. Implementations only parse (`do_next`).
class trace_reader {
 public:
  virtual ~trace_reader() = default;
  trace_reader(const trace_reader&) = delete;
  trace_reader& operator=(const trace_reader&) = delete;

  /// Reads the next request into `request` (reusing its key storage); false at end of trace.
  /// Throws trace_error on bad input.
  [[nodiscard]] bool next(trace_request& request);

  /// The next request, or nullopt at end of trace. Throws trace_error on bad input.
  [[nodiscard]] std::optional<trace_request> next();

  [[nodiscard]] const std::string& path() const noexcept { return path_; }  ///< source, for messages
  [[nodiscard]] trace_format format() const noexcept { return format_; }    ///< format being read
  /// Tokens per prefix block, or 0 when the trace carries no prefix identity.
  [[nodiscard]] std::uint32_t block_tokens() const noexcept { return block_tokens_; }
  [[nodiscard]] std::uint64_t requests_read() const noexcept { return requests_read_; }  ///< so far

 protected:
  trace_reader(std::string path, trace_format format, field_names fields, std::uint32_t block_tokens);

  void set_block_tokens(std::uint32_t block_tokens) noexcept { block_tokens_ = block_tokens; }

 private:
  /// Parses the next request (all fields, `line` included); false at end of input.
  virtual bool do_next(trace_request& request) = 0;

  std::string path_;
  trace_format format_;
  field_names fields_;
  std::uint32_t block_tokens_;
  std::uint64_t requests_read_ = 0;
  std::uint64_t last_arrival_us_ = 0;
  std::uint64_t last_line_ = 0;
};

/// Tells a file's format from its first non-empty line: `{` with "hash_ids" is Mooncake, `{`
/// with "vtensor-trace" or "arrival_us" is vtensor, a CSV header starting with TIMESTAMP is
/// Azure, a CSV header naming num_prefill_tokens is Vidur. Throws trace_error when the file cannot be read or the line
/// matches none.
[[nodiscard]] trace_format detect_trace_format(const std::string& path);

/// Opens a reader for `path`; `format` nullopt detects it from the content. Throws trace_error
/// when the file cannot be opened or its header is bad.
[[nodiscard]] std::unique_ptr<trace_reader> open_trace(const std::string& path, std::optional<trace_format> format,
                                                       const reader_options& options = {});

}  // namespace vtensor::traces
