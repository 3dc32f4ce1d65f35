#include "sim/outputs.hpp"

#include <fmt/format.h>

namespace vtensor::sim {

timeseries_writer::timeseries_writer(std::string path) : file_(std::move(path)) {
  file_.write(
      "time_s,physical_bytes,mapped_bytes,used_bytes,cached_bytes,logical_bytes,internal_fragmentation,"
      "sharing_saving,running,waiting\n");
}

void timeseries_writer::on_sample(const replica_state& s) {
  file_.write(fmt::format("{:.6f},{},{},{},{},{},{:.6f},{:.6f},{},{}\n", static_cast<double>(s.at) / 1e6,
                          s.physical_bytes, s.mapped_bytes, s.used_bytes, s.cached_bytes, s.logical_bytes,
                          s.internal_fragmentation, s.sharing_saving, s.running, s.waiting));
}

chrome_trace_writer::chrome_trace_writer(std::string path) : file_(std::move(path)) {
  file_.write("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  event(R"j({"name":"process_name","ph":"M","pid":1,"args":{"name":"replica 0"}})j");
  event(R"j({"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"steps"}})j");
  event(R"j({"name":"thread_name","ph":"M","pid":1,"tid":2,"args":{"name":"vmm (critical path)"}})j");
}

void chrome_trace_writer::event(const std::string& json) {
  if (!first_) file_.write(",\n");
  first_ = false;
  file_.write(json);
}

void chrome_trace_writer::on_step(const step_record& s) {
  event(fmt::format(
      R"j({{"name":"step","ph":"X","pid":1,"tid":1,"ts":{},"dur":{},"args":{{"index":{},"decode":{},"prefill_seqs":{},)j"
      R"j("prefill_tokens":{},"admitted":{},"preempted":{},"compute_us":{:.1f},"memory_us":{:.1f},"vmm_us":{:.1f},)j"
      R"j("running":{},"waiting":{}}}}})j",
      s.start, s.duration_us, s.index, s.decode_seqs, s.prefill_seqs, s.prefill_tokens, s.admitted, s.preempted,
      s.compute_us, s.memory_us, static_cast<double>(s.vmm_critical_ns) / 1000.0, s.running, s.waiting));
  if (s.vmm_total_ns > 0) {
    const time_us critical_us = (s.vmm_critical_ns + 999) / 1000;
    std::string calls;
    for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
      if (s.vmm_calls[k] != 0) calls += fmt::format(R"j(,"{}":{})j", to_string(static_cast<vmm_call>(k)), s.vmm_calls[k]);
    }
    event(fmt::format(
        R"j({{"name":"vmm","ph":"X","pid":1,"tid":2,"ts":{},"dur":{},"args":{{"critical_us":{:.1f},"charged_us":{:.1f}{}}}}})j",
        s.start, critical_us, static_cast<double>(s.vmm_critical_ns) / 1000.0,
        static_cast<double>(s.vmm_total_ns) / 1000.0, calls));
  }
}

void chrome_trace_writer::on_request(const request_record& r) {
  if (!r.rejected.empty()) {
    event(fmt::format(
        R"j({{"name":"rejected","ph":"i","s":"p","pid":1,"tid":1,"ts":{},"args":{{"request":{},"line":{},"why":"{}"}}}})j",
        r.finish, r.id, r.trace_line, r.rejected));
    return;
  }
  event(fmt::format(
      R"j({{"name":"request","cat":"request","ph":"b","pid":1,"id":{},"ts":{},"args":{{"line":{},"prompt":{},"output":{},"hit":{},"preemptions":{}}}}})j",
      r.id, r.arrival, r.trace_line, r.prompt_tokens, r.output_tokens, r.hit_tokens, r.preemptions));
  event(fmt::format(R"j({{"name":"first token","cat":"request","ph":"n","pid":1,"id":{},"ts":{}}})j", r.id,
                    r.first_token));
  event(fmt::format(R"j({{"name":"request","cat":"request","ph":"e","pid":1,"id":{},"ts":{}}})j", r.id, r.finish));
}

void chrome_trace_writer::on_sample(const replica_state& s) {
  event(fmt::format(
      R"j({{"name":"memory (GiB)","ph":"C","pid":1,"ts":{},"args":{{"mapped":{:.3f},"cached":{:.3f},"idle":{:.3f}}}}})j",
      s.at, static_cast<double>(s.mapped_bytes) / 1073741824.0, static_cast<double>(s.cached_bytes) / 1073741824.0,
      static_cast<double>(s.physical_bytes - s.mapped_bytes - s.cached_bytes) / 1073741824.0));
  event(fmt::format(R"j({{"name":"requests","ph":"C","pid":1,"ts":{},"args":{{"running":{},"waiting":{}}}}})j", s.at,
                    s.running, s.waiting));
}

void chrome_trace_writer::commit() {
  file_.write("\n]}\n");
  file_.commit();
}

}  // namespace vtensor::sim
