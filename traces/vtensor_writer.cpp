#include "traces/vtensor_writer.hpp"

#include <fmt/format.h>

#include <iterator>
#include <stdexcept>

namespace vtensor::traces {
namespace {

constexpr std::size_t flush_bytes = std::size_t{1} << 20;

}  // namespace

vtensor_writer::vtensor_writer(std::string path, std::uint32_t block_tokens, const nlohmann::json& metadata)
    : file_(std::move(path)), block_tokens_(block_tokens) {
  if (block_tokens == 0) throw std::invalid_argument("vtensor_writer: block_tokens must be at least 1");
  nlohmann::ordered_json header;
  header["format"] = "vtensor-trace";
  header["version"] = 1;
  header["block_tokens"] = block_tokens;
  for (const auto& [key, value] : metadata.items()) header[key] = value;
  buffer_ = header.dump();
  buffer_ += '\n';
}

void vtensor_writer::write(const trace_request& request) {
  if (!request.block_keys.empty() &&
      request.block_keys.size() != blocks_for_tokens(request.input_tokens, block_tokens_)) {
    throw std::invalid_argument(fmt::format("vtensor_writer: {} block keys do not fit {} prompt tokens",
                                            request.block_keys.size(), request.input_tokens));
  }
  if (requests_written_ > 0 && request.arrival_us < last_arrival_us_) {
    throw std::invalid_argument("vtensor_writer: arrivals must not go backwards");
  }
  auto out = std::back_inserter(buffer_);
  fmt::format_to(out, R"({{"arrival_us":{},"session":{},"turn":{},"input_tokens":{},"output_tokens":{},"block_keys":[)",
                 request.arrival_us, request.session, request.turn, request.input_tokens, request.output_tokens);
  bool first = true;
  for (const std::uint64_t key : request.block_keys) {
    if (!first) buffer_ += ',';
    first = false;
    fmt::format_to(out, "{}", key);
  }
  buffer_ += "]}\n";
  last_arrival_us_ = request.arrival_us;
  ++requests_written_;
  if (buffer_.size() >= flush_bytes) flush_buffer();
}

void vtensor_writer::flush_buffer() {
  file_.write(buffer_);
  buffer_.clear();
}

void vtensor_writer::commit() {
  flush_buffer();
  file_.commit();
}

}  // namespace vtensor::traces
