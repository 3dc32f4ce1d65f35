#pragma once

#include "traces/atomic_output_file.hpp"
#include "traces/trace_request.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace vtensor::traces {

/// Writes vtensor's own JSONL (traces/FORMAT.md): the header line, then one request a line,
/// all members always present. Streams through an atomic_output_file: nothing appears at `path`
/// until commit(). Throws std::system_error on I/O failure, std::invalid_argument when a
/// request's keys do not fit its prompt at this block size.
class vtensor_writer {
 public:
  /// `metadata` members (e.g. "generator") are added to the header line.
  vtensor_writer(std::string path, std::uint32_t block_tokens,
                 const nlohmann::json& metadata = nlohmann::json::object());

  /// Appends one request; its arrival must not precede the previous one's.
  void write(const trace_request& request);

  /// Flushes and moves the file into place.
  void commit();

  [[nodiscard]] std::uint64_t requests_written() const noexcept { return requests_written_; }

 private:
  void flush_buffer();

  atomic_output_file file_;
  std::uint32_t block_tokens_;
  std::string buffer_;
  std::uint64_t requests_written_ = 0;
  std::uint64_t last_arrival_us_ = 0;
};

}  // namespace vtensor::traces
