#pragma once
/// A recording mock backend: a zero-latency sim_backend underneath (so every rule is still
/// enforced) that logs each call as a compact string, with addresses relative to the range they
/// fall in, so manager tests can assert the exact sequence of VMM calls:
///   "reserve 64MiB -> r0", "create -> c1", "create -> oom", "map r0+0 c1",
///   "set_access r0+0 2MiB", "unmap r0+2MiB 2MiB", "release c1", "free r0".
/// Ranges are numbered r0, r1, ... in reservation order and chunks c1, c2, ... in creation order
/// (numbers are never reused). A call that throws is logged with " -> error" appended.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/sim_backend.hpp"

namespace vtensor::testing {

/// Sizes as the log writes them: "64MiB", "1GiB", "512KiB", else "<n>B".
[[nodiscard]] std::string format_bytes(std::uint64_t bytes);

/// Recording mock over a sim_backend; named "recording(sim)".
class recording_backend final : public vmm_backend {
 public:
  /// A device of `capacity_bytes` (sim_backend::k_unlimited for no limit), zero latency.
  explicit recording_backend(std::uint64_t capacity_bytes = sim_backend::k_unlimited);

  [[nodiscard]] std::string do_name() const override { return "recording(sim)"; }

  /// The calls logged since the last take(), oldest first; empties the log.
  [[nodiscard]] std::vector<std::string> take();
  /// The calls logged since the last take(), without emptying it.
  [[nodiscard]] const std::vector<std::string>& log() const { return log_; }
  /// The simulated device underneath (accessible(), mapped_chunk(), check_invariants()).
  [[nodiscard]] const sim_backend& sim() const { return sim_; }
  /// "r<k>+<offset>" for an address inside a live range, else its hex value.
  [[nodiscard]] std::string describe_addr(device_addr va) const;
  /// "c<k>" for a handle this backend created, else its hex value.
  [[nodiscard]] std::string describe_chunk(chunk_handle h) const;

 private:
  [[nodiscard]] std::uint64_t do_granularity_bytes() const override { return sim_.granularity_bytes(); }
  [[nodiscard]] std::uint64_t do_capacity_bytes() const override { return sim_.capacity_bytes(); }
  [[nodiscard]] device_addr do_reserve(std::uint64_t bytes) override;
  void do_free_range(device_addr base) override;
  [[nodiscard]] std::optional<chunk_handle> do_create_chunk() override;
  void do_release_chunk(chunk_handle h) override;
  void do_map(device_addr va, chunk_handle h) override;
  void do_set_access(device_addr va, std::uint64_t bytes) override;
  void do_unmap(device_addr va, std::uint64_t bytes) override;
  [[nodiscard]] vmm_live do_live() const override { return sim_.live(); }

  /// Logs `entry`, runs `fn`, and marks the entry " -> error" if it throws.
  template <typename F>
  void logged(std::string entry, F&& fn);

  sim_backend sim_;
  std::vector<std::string> log_;
  std::map<device_addr, std::uint64_t> range_ids_;  ///< live range base -> k of r<k>
  std::uint64_t next_range_id_ = 0;
  std::unordered_map<std::uint64_t, std::uint64_t> chunk_ids_;  ///< handle value -> k of c<k>
  std::uint64_t next_chunk_id_ = 1;
};

}  // namespace vtensor::testing
