#pragma once
/// The mapping records: every chunk mapped at a virtual address, in the vSet, with each chunk's
/// mapping counts in its pSet record (a mapping is a reference), and the driver's unmaps of runs
/// of them. Maps are recorded at once and their driver calls written into a mapping_job, run now
/// (vmm_gate::run_now) or by the worker (Note [Deferred mappings] in async_mapper.hpp).
/// Threads: not thread-safe; the step thread only (the manager serialises). Driver calls go
/// through the vmm_gate, under its backend lock.

#include <cstdint>
#include <span>

#include "core/async_mapper.hpp"
#include "core/pset.hpp"
#include "core/vmm_gate.hpp"
#include "core/vset.hpp"

namespace vtensor {

/// The vSet and the mapping side of the pSet records.
class mapping_table {
 public:
  /// Counts mappings in `chunks` (owned by the chunk pool); unmaps through `gate` in units of
  /// `chunk_bytes`.
  mapping_table(vmm_gate& gate, pset& chunks, std::uint64_t chunk_bytes)
      : gate_(gate), chunks_(chunks), chunk_bytes_(chunk_bytes) {}

  /// Puts a vTensor's range (base set) in the vSet.
  void track(mapped_range& r) { vset_.insert(r); }
  /// Takes it out (before its range is freed).
  void untrack(mapped_range& r) { vset_.erase(r); }
  /// Takes every range out (a scheduler destroyed while requests are live).
  void untrack_all() { vset_.clear_ranges(); }

  /// Records a mapping of `c` at `va` now and defers the driver's map and set-access into `job`
  /// (Note [Deferred mappings] in async_mapper.hpp).
  mapping& map_deferred(device_addr va, chunk_id c, request_id owner, bool shared, mapping_job& job) {
    return map_deferred_into(va, c, owner, shared, job.maps.emplace_back());
  }
  /// map_deferred() writing the driver's call into `entry`, a slot of a job the caller fills out
  /// of order.
  mapping& map_deferred_into(device_addr va, chunk_id c, request_id owner, bool shared, mapping_entry& entry);
  /// Asks the cache for the record of `c`, about to be mapped (Note [Dense chunk records]).
  void prefetch_record(chunk_id c) const { chunks_.prefetch(c); }
  /// Undoes the bookkeeping of a mapping whose driver call never happened or was undone.
  void unrecord(mapping& m) { unrecord(chunks_, m); }
  /// Turns a private mapping into an immutable shared one.
  void make_shared(mapping& m);
  /// Marks a shared mapping as a parked vTensor's, owned by `owner` (Note [Parked vTensors] in
  /// scheduler.cpp): a chunk whose every mapping is parked counts as cached, not mapped.
  void park(mapping& m, request_id owner);
  /// Gives a parked mapping to `owner`, a live request.
  void unpark(mapping& m, request_id owner);
  /// Unmaps the contiguous mappings `maps` (adjacent addresses, ascending) in one call; chunks left
  /// unreferenced go to the free pool.
  void unmap_run(std::span<mapping* const> maps);
  /// As unmap_run, but the driver's unmap is deferred into `job` (a release on the worker, Note
  /// [Releases on the worker] in scheduler.cpp); the bookkeeping is done now.
  void unmap_run_deferred(std::span<mapping* const> maps, mapping_job& job);

  /// The vSet.
  [[nodiscard]] const vset& records() const { return vset_; }
  /// Chunks mapped at least once.
  [[nodiscard]] std::uint64_t mapped_chunks() const { return mapped_chunks_; }
  /// Chunks mapped shared at least once.
  [[nodiscard]] std::uint64_t shared_chunks() const { return shared_chunks_; }
  /// Of the mapped chunks, those mapped by parked vTensors only (all of them shared).
  [[nodiscard]] std::uint64_t parked_only_chunks() const { return parked_only_chunks_; }

 private:
  void unrecord(pset& chunks, mapping& m);
  /// unrecord() of each mapping of a run, prefetching the chunk records ahead.
  void unrecord_run(std::span<mapping* const> maps);

  vmm_gate& gate_;
  pset& chunks_;
  std::uint64_t chunk_bytes_;
  vset vset_;
  std::uint64_t mapped_chunks_ = 0;
  std::uint64_t shared_chunks_ = 0;
  std::uint64_t parked_only_chunks_ = 0;
};

}  // namespace vtensor
