#include "traces/memory_trace.hpp"

namespace vtensor::traces {

loaded_trace load_trace(const std::string& path, std::optional<trace_format> format, std::uint64_t max_requests) {
  const auto reader = open_trace(path, format);
  loaded_trace t;
  t.path = path;
  t.format = reader->format();
  trace_request r;
  while ((max_requests == 0 || t.requests.size() < max_requests) && reader->next(r)) t.requests.push_back(r);
  t.block_tokens = reader->block_tokens();
  return t;
}

memory_trace_reader::memory_trace_reader(const loaded_trace& trace)
    : trace_reader(trace.path, trace.format, field_names{"arrival", "input_tokens", "block_keys"}, trace.block_tokens),
      trace_(trace) {}

bool memory_trace_reader::do_next(trace_request& request) {
  if (next_ >= trace_.requests.size()) return false;
  request = trace_.requests[next_++];
  return true;
}

}  // namespace vtensor::traces
