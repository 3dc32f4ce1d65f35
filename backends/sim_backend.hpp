#pragma once
/// The simulated device: a real backend that keeps the driver's state on the host, enforces every
/// rule of the contract (backends/vmm_backend.hpp) and charges each call its calibrated cost.
///
/// Note [Simulated virtual addresses]
/// Ranges come from a window of the 47-bit user address space, carved from the top of free blocks
/// so addresses look like the driver's (0x7ff...). Free blocks are kept by address (to coalesce
/// neighbours on free) and by size (best fit: the smallest block that fits, the lowest address
/// among equals), so a long replay that reserves and frees millions of multi-GiB ranges reuses
/// the window in O(log blocks) per call and never runs out while the live total fits.
///
/// Note [Simulated chunk handles]
/// A handle is (generation << 32) | (slot + 1). Released slots are reused with the next
/// generation, so memory stays bounded by the peak number of live chunks while a stale handle
/// (double release, map after release) is never live again: address_space reports it.

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/address_space.hpp"
#include "backends/latency_model.hpp"
#include "backends/vmm_backend.hpp"

namespace vtensor {

/// The part of the address space a sim_backend hands ranges from.
struct va_window {
  device_addr base = device_addr{0x1000'0000'0000};                          ///< first address (16 TiB)
  std::uint64_t bytes = std::uint64_t{0x7fff'0000'0000} - 0x1000'0000'0000;  ///< ~112 TiB
};

/// The simulated device. Costs O(1) expected per map, set_access and unmap of one chunk,
/// O(log ranges) per reserve and free_range. Throws vmm_error on every broken rule (the rules are
/// address_space's, shared with the cuda backend).
class sim_backend final : public vmm_backend {
 public:
  /// Capacity value meaning "no limit on chunks".
  static constexpr std::uint64_t k_unlimited = std::numeric_limits<std::uint64_t>::max();

  /// A device of `capacity_bytes` (rounded down to whole chunks; k_unlimited for no limit),
  /// charging `model`'s costs, handing ranges from `window` (2 MiB aligned, else invalid_argument).
  explicit sim_backend(std::uint64_t capacity_bytes = k_unlimited, latency_model model = latency_model::h200(),
                       va_window window = {});

  /// The costs this device charges.
  [[nodiscard]] const latency_model& model() const { return model_; }
  /// True when capacity is unlimited.
  [[nodiscard]] bool unlimited() const { return capacity_chunks_ == k_unlimited; }

  /// True when the chunk-sized span at `va` is mapped and its access has been set.
  [[nodiscard]] bool accessible(device_addr va) const;
  /// The chunk mapped at the chunk-sized span containing `va`, if any.
  [[nodiscard]] std::optional<chunk_handle> mapped_chunk(device_addr va) const;
  /// How many addresses live chunk `h` is mapped at; 0 for an unknown or released handle.
  [[nodiscard]] std::uint64_t mapping_count(chunk_handle h) const;
  /// Base and size of the reserved range containing `va`, if any.
  [[nodiscard]] std::optional<std::pair<device_addr, std::uint64_t>> range_of(device_addr va) const;

  /// Bytes of the window not reserved.
  [[nodiscard]] std::uint64_t free_va_bytes() const { return free_va_bytes_; }
  /// Number of disjoint free blocks in the window (1 when nothing is reserved).
  [[nodiscard]] std::size_t free_va_blocks() const { return free_by_addr_.size(); }

  /// Walks every structure and throws std::logic_error on an inconsistency. O(state).
  void check_invariants() const;

 private:
  [[nodiscard]] std::string do_name() const override { return "sim"; }
  [[nodiscard]] std::uint64_t do_capacity_bytes() const override;
  [[nodiscard]] device_addr do_reserve(std::uint64_t bytes) override;
  void do_free_range(device_addr base) override;
  [[nodiscard]] std::optional<chunk_handle> do_create_chunk() override;
  void do_release_chunk(chunk_handle h) override;
  void do_map(device_addr va, chunk_handle h) override;
  void do_set_access(device_addr va, std::uint64_t bytes) override;
  void do_map_with_access(device_addr va, chunk_handle h) override;
  /// A run checked and recorded chunk by chunk, charged at once (Note [Runs of maps]).
  void do_map_run_with_access(device_addr va, std::span<const chunk_handle> handles, std::size_t& mapped) override;
  /// A job's runs, the range looked up once a run, charged at once (Note [Runs of maps]).
  void do_map_runs_with_access(std::span<const mapping_entry> maps, std::size_t& done) override;
  void do_unmap(device_addr va, std::uint64_t bytes) override;
  [[nodiscard]] vmm_live do_live() const override { return space_.live(); }

  /// The mean cost of one call of `call`.
  [[nodiscard]] std::uint64_t cost(vmm_call call) const { return cost_ns_[static_cast<std::size_t>(call)]; }
  /// Charges `n` maps with access (a run's or a job's).
  void charge_maps(std::size_t n);
  /// Charges the chunks a run or a job mapped with access, from `first` to `done`, also when one
  /// fails (its check charges nothing).
  struct maps_charge {
    sim_backend& self;
    const std::size_t& done;
    std::size_t first;
    ~maps_charge() { self.charge_maps(done - first); }
  };
  void add_free_block(device_addr base, std::uint64_t bytes);
  void remove_free_block(std::map<device_addr, std::uint64_t>::iterator it);

  std::uint64_t capacity_chunks_;
  latency_model model_;
  std::array<std::uint64_t, k_vmm_call_kinds> cost_ns_{};  ///< model_'s mean costs, for the hot path
  va_window window_;

  address_space space_;                                           ///< ranges, chunks, mappings and the rules
  std::map<device_addr, std::uint64_t> free_by_addr_;             ///< free blocks: base -> bytes
  std::set<std::pair<std::uint64_t, device_addr>> free_by_size_;  ///< free blocks: (bytes, base)
  std::uint64_t free_va_bytes_ = 0;

  std::vector<std::uint32_t> generations_;  ///< per handle slot, see Note [Simulated chunk handles]
  std::vector<std::uint32_t> free_slots_;   ///< released slots, reused last-in first-out
};

}  // namespace vtensor
