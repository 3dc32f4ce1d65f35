#include "sim/outputs.hpp"

#include <fmt/format.h>

#include "backends/units.hpp"

namespace vtensor::sim {
namespace {

double gib(std::uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(k_gib); }
double us(sim_ns t) { return static_cast<double>(t.count()) / 1000.0; }

}  // namespace

timeseries_writer::timeseries_writer(std::string path, std::ostream* standard_output)
    : file_(std::move(path), standard_output) {
  file_.write(
      "time_s,physical_bytes,mapped_bytes,used_bytes,cached_bytes,logical_bytes,internal_fragmentation,"
      "sharing_saving,running,waiting,internal_bytes,reserved_idle_bytes,external_bytes,free_bytes,"
      "cached_pinning_bytes,reclaimable_bytes\n");
}

void timeseries_writer::on_sample(const replica_state& s) {
  const memory_breakdown& b = s.breakdown;
  file_.write(fmt::format("{:.6f},{},{},{},{},{},{:.6f},{:.6f},{},{},{},{},{},{},{},{}\n",
                          static_cast<double>(s.at) / 1e6, s.memory.physical_bytes, s.memory.mapped_bytes,
                          s.memory.used_bytes, s.memory.cached_bytes, s.memory.logical_bytes,
                          s.memory.internal_fragmentation(), s.memory.sharing_saving(), s.running, s.waiting,
                          b.internal, b.reserved_idle, b.external, b.free, b.cached_pinning, b.reclaimable));
}

chrome_trace_writer::chrome_trace_writer(std::string path, std::ostream* standard_output)
    : file_(std::move(path), standard_output) {
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
      s.compute_us, s.memory_us, us(s.vmm_critical), s.running, s.waiting));
  if (s.vmm_total > sim_ns{0}) {
    const time_us critical_us = std::chrono::ceil<sim_us>(s.vmm_critical).count();
    std::string calls;
    for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
      if (s.vmm_calls[k] != 0)
        calls += fmt::format(R"j(,"{}":{})j", to_string(static_cast<vmm_call>(k)), s.vmm_calls[k]);
    }
    event(fmt::format(
        R"j({{"name":"vmm","ph":"X","pid":1,"tid":2,"ts":{},"dur":{},"args":{{"critical_us":{:.1f},"charged_us":{:.1f}{}}}}})j",
        s.start, critical_us, us(s.vmm_critical), us(s.vmm_total), calls));
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
      s.at, gib(s.memory.mapped_bytes), gib(s.memory.cached_bytes),
      gib(s.memory.physical_bytes - s.memory.mapped_bytes - s.memory.cached_bytes)));
  event(fmt::format(R"j({{"name":"requests","ph":"C","pid":1,"ts":{},"args":{{"running":{},"waiting":{}}}}})j", s.at,
                    s.running, s.waiting));
}

void chrome_trace_writer::commit() {
  file_.write("\n]}\n");
  file_.commit();
}

}  // namespace vtensor::sim
