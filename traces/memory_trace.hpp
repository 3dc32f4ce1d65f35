#pragma once
/// A trace read and checked once into memory, then replayed any number of times: `vtensor
/// compare` replays the same requests at every point (arm x axis value) without reading the
/// file again, from several threads at once (the loaded trace is only read).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "traces/trace_reader.hpp"
#include "traces/trace_request.hpp"

namespace vtensor::traces {

/// Every request of a trace, in file order, checked by trace_reader's contract.
struct loaded_trace {
  std::string path;                     ///< source, for messages and the summary
  trace_format format{};                ///< format it was read as
  std::uint32_t block_tokens = 0;       ///< tokens per prefix block (0: no prefix identity)
  std::vector<trace_request> requests;  ///< in arrival order
};

/// Reads `path` whole (the first `max_requests` requests; 0: all). Throws trace_error on bad
/// input, as open_trace and trace_reader::next do.
[[nodiscard]] loaded_trace load_trace(const std::string& path, std::optional<trace_format> format,
                                      std::uint64_t max_requests = 0);

/// A trace_reader over a loaded_trace (which must outlive it): yields copies of its requests.
class memory_trace_reader final : public trace_reader {
 public:
  explicit memory_trace_reader(const loaded_trace& trace);

 private:
  bool do_next(trace_request& request) override;

  const loaded_trace& trace_;
  std::size_t next_ = 0;
};

}  // namespace vtensor::traces
