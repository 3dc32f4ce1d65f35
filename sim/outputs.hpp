#pragma once
/// Replay outputs that stream while the replay runs, each into an atomic_output_file: the file
/// appears whole on commit() or not at all (an exception, an early exit).

#include <string>

#include "sim/replica.hpp"
#include "traces/atomic_output_file.hpp"

namespace vtensor::sim {

/// The state on the sample grid as CSV, one row per sample:
/// time_s,physical_bytes,mapped_bytes,used_bytes,cached_bytes,logical_bytes,
/// internal_fragmentation,sharing_saving,running,waiting,internal_bytes,reserved_idle_bytes,
/// external_bytes,free_bytes,cached_pinning_bytes,reclaimable_bytes (the memory breakdown's parts
/// beside used_bytes and cached_bytes; docs/metrics.md)
class timeseries_writer final : public replica_observer {
 public:
  /// Opens the temporary file; throws std::system_error.
  explicit timeseries_writer(std::string path, std::ostream* standard_output = nullptr);
  /// Writes the file in place of the target.
  void commit() { file_.commit(); }

 private:
  void on_sample(const replica_state& s) override;
  traces::atomic_output_file file_;
};

/// Chrome trace-event JSON (chrome://tracing, Perfetto): each step as a complete event on
/// thread "steps" with its batch in args, the VMM time it waited for as a complete event on
/// thread "vmm" (calls aggregated per step), each request as an async span from arrival to
/// completion with a "first token" instant, and memory counters on the sample grid.
/// Timestamps are simulated microseconds.
class chrome_trace_writer final : public replica_observer {
 public:
  /// Opens the temporary file and writes the header; throws std::system_error.
  explicit chrome_trace_writer(std::string path, std::ostream* standard_output = nullptr);
  /// Closes the JSON and writes the file in place of the target.
  void commit();

 private:
  void on_step(const step_record& s) override;
  void on_request(const request_record& r) override;
  void on_sample(const replica_state& s) override;
  void event(const std::string& json);

  traces::atomic_output_file file_;
  bool first_ = true;
};

}  // namespace vtensor::sim
