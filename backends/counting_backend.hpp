#pragma once
/// Counting and tracing adaptor: forwards every call to the inner backend, counts it (the base
/// class does), and optionally records one trace_record per call into a buffer and/or a sink.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend_adaptor.hpp"
#include "backends/enum_names.hpp"

namespace vtensor {

/// How a traced call ended.
enum class call_result : std::uint8_t {
  ok,             ///< succeeded
  out_of_memory,  ///< create returned std::nullopt
  error,          ///< threw (vmm_error or other)
};

/// The names of the results (backends/enum_names.hpp).
inline constexpr enum_names<call_result, 3> k_call_result_names{{{
    {call_result::ok, "ok"},
    {call_result::out_of_memory, "out_of_memory"},
    {call_result::error, "error"},
}}};

/// k_call_result_names.name(result): "ok", "out_of_memory", "error".
[[nodiscard]] constexpr std::string_view to_string(call_result result) { return k_call_result_names.name(result); }

/// One forwarded call.
struct trace_record {
  vmm_call call = vmm_call::reserve;     ///< kind of call
  device_addr va = 0;                    ///< address: base returned (reserve), argument otherwise; 0 if none
  std::uint64_t bytes = 0;               ///< size argument (reserve, set_access, unmap), chunk bytes for map; else 0
  chunk_handle handle{};                 ///< handle argument or created handle; {} if none
  call_result result = call_result::ok;  ///< how the call ended
  std::uint64_t charged_ns = 0;          ///< time the inner backend charged for it
};

/// Counting/tracing adaptor; named "counting(<inner>)". Tracing costs one vector append (and
/// the sink call) per call; with tracing off the adaptor adds only a virtual call.
class counting_backend final : public backend_adaptor {
 public:
  /// Callback invoked for every call while a sink is set.
  using trace_sink = std::function<void(const trace_record&)>;
  /// Buffer limit meaning "keep every record".
  static constexpr std::size_t k_unbounded = std::numeric_limits<std::size_t>::max();

  /// Wraps `inner` (not null, else std::invalid_argument). Tracing starts off.
  explicit counting_backend(std::unique_ptr<vmm_backend> inner);

  /// Starts keeping trace records in the buffer, at most `max_records`; later ones are dropped
  /// (and counted in dropped_records()).
  void enable_trace(std::size_t max_records = k_unbounded);
  /// Stops buffering; keeps what was buffered.
  void disable_trace() { tracing_ = false; }
  /// Sends every record to `sink` (an empty function removes it); independent of the buffer.
  void set_sink(trace_sink sink) { sink_ = std::move(sink); }

  /// Records buffered so far, oldest first.
  [[nodiscard]] const std::vector<trace_record>& trace() const { return trace_; }
  /// Returns the buffered records and empties the buffer.
  [[nodiscard]] std::vector<trace_record> take_trace();
  /// Records not buffered because the buffer was full.
  [[nodiscard]] std::uint64_t dropped_records() const { return dropped_; }

 private:
  [[nodiscard]] std::string do_name() const override { return "counting(" + inner().name() + ")"; }
  [[nodiscard]] device_addr do_reserve(std::uint64_t bytes) override;
  void do_free_range(device_addr base) override;
  [[nodiscard]] std::optional<chunk_handle> do_create_chunk() override;
  void do_release_chunk(chunk_handle h) override;
  void do_map(device_addr va, chunk_handle h) override;
  void do_set_access(device_addr va, std::uint64_t bytes) override;
  void do_unmap(device_addr va, std::uint64_t bytes) override;

  /// Forwards `fn` and records it (with `record` filled in by `fn`'s result where relevant).
  template <typename F>
  decltype(auto) traced(trace_record record, F&& fn);
  void emit(const trace_record& record);

  bool tracing_ = false;
  std::size_t max_records_ = k_unbounded;
  std::vector<trace_record> trace_;
  std::uint64_t dropped_ = 0;
  trace_sink sink_;
};

}  // namespace vtensor
