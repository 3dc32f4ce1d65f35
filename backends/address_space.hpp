#pragma once
/// The contract's bookkeeping, written once for every device backend (`sim` and `cuda` each own
/// one): reserved ranges, live chunks, and which chunk is mapped at each chunk-sized span. Its
/// `check_*` methods are the rules of backends/vmm_backend.hpp (alignment is checked by the base
/// class before); each throws vmm_error naming the call, the address and the reason, and changes
/// nothing. The backend runs its own work (the driver call, the simulated cost) between a check
/// and the matching commit, so a driver failure leaves the bookkeeping as it was.
///
/// Note [Tracking on the map path]
/// On a GPU every driver call leaves the calling thread's caches cold, so each cache line touched
/// between two calls costs a miss (figures: results/README.md, "Figures behind the notes of
/// backends/, tools/ and bench/"). The simulated device makes millions of these calls per replay,
/// so the same path is its hot loop. The map path therefore touches few lines: the range used
/// last is looked at first; a range keeps its spans in one vector indexed by chunk (grown to the
/// highest span mapped); chunks live in one dense table of entries, found from a handle through
/// the backend's slot function when its handles carry their slot (the simulated device's do) or
/// through a hash index otherwise (the driver's handles are opaque); a span remembers its
/// chunk's entry, so an unmap counts the lost mapping with no lookup at all.

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/vmm_backend.hpp"

namespace vtensor {

/// Ranges, chunks and mappings of one device, with the contract's rule checks.
class address_space {
 public:
  /// One chunk-sized span of a range.
  struct span_state {
    std::uint64_t handle = 0;  ///< chunk_handle::value mapped here; 0: unmapped
    std::uint32_t entry = 0;   ///< the chunk's entry in the chunk table
    bool accessible = false;   ///< set_access done since the map
  };
  /// How a handle's entry is found: `slotted` handles carry it, as (generation << 32) | (slot + 1)
  /// (the entry's handle is checked, so a stale handle of a reused slot is refused; the slot is
  /// computed inline on the map path); for `opaque` ones a hash index is kept.
  enum class handle_kind : std::uint8_t { opaque, slotted };
  /// The slot a slotted handle carries (~0 for handle 0: no entry).
  [[nodiscard]] static std::uint32_t slot_in(chunk_handle h) {
    return static_cast<std::uint32_t>(h.value & 0xffff'ffff) - 1;
  }
  /// One reserved range.
  struct range_info {
    std::uint64_t bytes = 0;         ///< size of the range
    std::uint64_t mapped_spans = 0;  ///< chunk-sized mappings inside it
    std::vector<span_state> spans;   ///< by span index; grown on demand up to the highest mapped one
  };
  using range_map = std::map<device_addr, range_info>;

  /// Where check_map found room: pass it to commit_map after the backend's own work.
  struct map_slot {
    range_info* range = nullptr;
    span_state* span = nullptr;
    std::uint32_t entry = 0;  ///< the chunk's entry in the chunk table
  };
  /// The mapped spans a set_access or an unmap covers (check_mapped).
  struct mapped_run {
    range_info* range = nullptr;
    std::span<span_state> spans;
  };

  explicit address_space(handle_kind handles = handle_kind::opaque) : slotted_(handles == handle_kind::slotted) {}
  address_space(const address_space&) = delete;
  address_space& operator=(const address_space&) = delete;

  // ---- ranges ----
  /// Records a range the backend reserved.
  void add_range(device_addr base, std::uint64_t bytes);
  /// free_range(base): `base` must be a reserved range's base and the range hold no mapping.
  /// Returns the range's size.
  [[nodiscard]] std::uint64_t check_free_range(device_addr base) const;
  /// Forgets the range at `base` (after check_free_range and the backend's work).
  void remove_range(device_addr base);
  /// Base and size of the reserved range containing `va`, if any.
  [[nodiscard]] std::optional<std::pair<device_addr, std::uint64_t>> range_of(device_addr va) const;
  /// Every reserved range, by base.
  [[nodiscard]] const range_map& ranges() const { return ranges_; }

  // ---- chunks ----
  /// Records a chunk the backend created (its handle must not be live).
  void add_chunk(chunk_handle h);
  /// release_chunk(h): `h` must be live and mapped nowhere.
  void check_release(chunk_handle h) const;
  /// Forgets chunk `h` (after check_release and the backend's work).
  void remove_chunk(chunk_handle h);
  /// How many addresses live chunk `h` is mapped at; 0 for an unknown or released handle.
  [[nodiscard]] std::uint64_t mapping_count(chunk_handle h) const;

  // ---- mappings ----
  /// map(va, h) (and map_with_access): the chunk-sized span at `va` inside a reserved range and
  /// unmapped, `h` live. Throws vmm_error for `vmm_call::map`.
  [[nodiscard]] map_slot check_map(device_addr va, chunk_handle h);
  /// Records the mapping check_map found room for (not accessible yet).
  void commit_map(const map_slot& slot, chunk_handle h);
  /// check_map + commit_map + access for handles[mapped], handles[mapped + 1], ... at consecutive
  /// chunks from `va`, the range looked up once (Note [Tracking on the map path]); `mapped` counts
  /// the chunks done, and the first chunk that breaks a rule throws check_map's error.
  void map_run_with_access(device_addr va, std::span<const chunk_handle> handles, std::size_t& mapped);
  /// map_run_with_access over each run of adjacent addresses in `maps` from maps[done] on; `done`
  /// counts the entries mapped, also when one throws. The chunk entries are asked for ahead across
  /// the runs' ends.
  void map_runs_with_access(std::span<const mapping_entry> maps, std::size_t& done);
  /// set_access or unmap (`call`) of `[va, va + bytes)`: every chunk-sized span of it mapped.
  [[nodiscard]] mapped_run check_mapped(vmm_call call, device_addr va, std::uint64_t bytes);
  /// Marks the spans of `run` accessible.
  static void commit_set_access(const mapped_run& run);
  /// Records the first `count` spans of `run` unmapped (all of them by default).
  void commit_unmap(const mapped_run& run, std::size_t count);
  void commit_unmap(const mapped_run& run) { commit_unmap(run, run.spans.size()); }

  /// The span at the chunk-sized span containing `va`, or nullptr when it is not mapped.
  [[nodiscard]] const span_state* mapped_span(device_addr va) const;
  /// Ranges, chunks and mappings held now.
  [[nodiscard]] vmm_live live() const { return {ranges_.size(), live_chunks_, mappings_}; }

  /// Walks every structure and throws std::logic_error on an inconsistency. O(state).
  void check_invariants() const;

 private:
  /// One live chunk (or a free entry: handle 0).
  struct chunk_entry {
    std::uint64_t handle = 0;    ///< chunk_handle::value; 0: entry free
    std::uint64_t mappings = 0;  ///< addresses it is mapped at
  };
  static constexpr std::uint32_t k_no_entry = ~std::uint32_t{0};

  [[nodiscard]] range_map::iterator find_range(device_addr va);
  template <typename HandleAt>
  void map_run(device_addr va, std::size_t count, std::size_t known, HandleAt handle_at, std::size_t& mapped);
  [[noreturn]] void throw_unmapped(vmm_call call, device_addr span, device_addr va, std::uint64_t bytes) const;
  /// The entry of live chunk `h`, or k_no_entry.
  [[nodiscard]] std::uint32_t entry_of(chunk_handle h) const {
    if (!slotted_) return indexed_entry_of(h);
    const std::uint32_t slot = slot_in(h);
    return slot < entries_.size() && entries_[slot].handle == h.value && h.value != 0 ? slot : k_no_entry;
  }
  [[nodiscard]] std::uint32_t indexed_entry_of(chunk_handle h) const;

  range_map ranges_;                                ///< reserved ranges by base
  range_map::iterator last_range_ = ranges_.end();  ///< the range a call used last
  bool slotted_;                                    ///< handles carry their entry (handle_kind::slotted)
  /// Runs of maps and unmaps ask the cache for the chunk entries this many chunks ahead: in the
  /// pool's scattered order most of them miss, and the misses then overlap.
  static constexpr std::size_t k_entries_ahead = 8;
  std::vector<chunk_entry> entries_;                        ///< the chunk table
  std::vector<std::uint32_t> free_entries_;                 ///< free entries (hash-indexed tables only)
  std::unordered_map<std::uint64_t, std::uint32_t> index_;  ///< handle -> entry, without slot_of_
  std::uint64_t live_chunks_ = 0;                           ///< live entries
  std::uint64_t mappings_ = 0;                              ///< chunk-sized mappings in all ranges
};

}  // namespace vtensor
