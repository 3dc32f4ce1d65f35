#pragma once

#include "traces/line_reader.hpp"
#include "traces/trace_reader.hpp"

namespace vtensor::traces {

/// Reads Mooncake JSONL (kvcache-ai/Mooncake FAST25 traces): one object a line with
/// `timestamp` (ms, integer or not), `input_length`, `output_length`, `hash_ids` (one chained key
/// per block of `block_tokens`, 512 by default); other members are ignored. Each request is its
/// own session (the format has no session id): session = 0-based request index, turn 0.
/// Throws trace_error (from the constructor when the file cannot be opened).
class mooncake_reader final : public trace_reader {
 public:
  explicit mooncake_reader(std::string path, const reader_options& options = {});

 private:
  bool do_next(trace_request& request) override;

  line_reader lines_;
  std::uint64_t index_ = 0;
};

}  // namespace vtensor::traces
