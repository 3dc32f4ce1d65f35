#pragma once
/// pSet: one record per physical chunk the backend created, indexed by a dense chunk_id.
/// A chunk's reference count is its mappings plus its rTree references. A chunk that nothing
/// references leaves the in-use set for the free pool (lazy deallocation: it keeps its physical
/// memory and is reused before any new chunk is created); only `operations::trim()` and shutdown
/// give chunks back to the driver.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backends/vmm_backend.hpp"
#include "core/ids.hpp"
#include "core/vset.hpp"

namespace vtensor {

/// Where a chunk stands.
enum class chunk_state : std::uint8_t {
  free,    ///< in the free pool: no mapping, no tree reference
  active,  ///< mapped by at least one live request
  cached,  ///< held only by the rTree (a cached prefix), mapped nowhere
};

/// One physical chunk.
struct chunk_record {
  chunk_handle handle;                ///< the backend's handle; value 0 when the slot is empty
  std::uint32_t ref_count = 0;        ///< mappings + tree refs
  std::uint32_t tree_refs = 0;        ///< rTree page entries naming this chunk
  std::uint32_t shared_mappings = 0;  ///< mappings flagged shared (immutable prefix)
  std::uint32_t mappings = 0;         ///< live mappings of this chunk (Note [Mappings counted, not listed])
  std::uint16_t parked_mappings = 0;  ///< of them, in parked vTensors (Note [Parked vTensors] in scheduler.cpp)
  bool in_free_pool = false;          ///< sits in the free pool

  [[nodiscard]] chunk_state state() const {
    if (mappings != 0) return chunk_state::active;
    return tree_refs > 0 ? chunk_state::cached : chunk_state::free;
  }
};
static_assert(sizeof(chunk_record) == 32, "Note [Dense chunk records]: two records a cache line");

/// Note [Dense chunk records]
/// Every map, unmap and tree reference of a replay touches its chunk's record, in the scattered
/// order the free pool hands chunks out: on a whole-trace replay most of those touches miss the
/// cache. The records are therefore small (32 bytes: two a cache line) and stored in blocks of
/// 4096 that never move, found with a shift and a mask from a short table of blocks; a
/// std::deque kept 10 records a block and a long table of block pointers. Loops over a run of
/// chunks (a page's, a request's) prefetch the records a few chunks ahead, so that their misses
/// overlap instead of coming one after the other.

/// Note [Mappings counted, not listed]
/// A chunk record counts its mappings; it does not list them. With an intrusive list per chunk,
/// every map wrote the list's last node and every unmap rewrote both neighbours: mappings of
/// other requests, long out of the cache. With a count the record shrinks from 40 to 32 bytes
/// and a mapping from 48 to 24; on whole Mooncake under `valgrind --tool=cachegrind
/// --D1=49152,12,64 --LL=1048576,16,64` (a 1 MiB L2) the replay's L2 data misses fell from 39.7
/// to 30.9 million (results/README.md, "Session 12"). Nothing on the hot path walks a chunk's
/// mappings: state() and the free pool need the count, and the one reader of a mapping's
/// address, a copy of a prefix page that other requests map (operations::copy_prefix), finds it
/// through the vSet (vset::any_mapping_of, a walk of the page tables) and only when a device
/// copy is installed. The invariant check recounts each chunk's mappings from the vSet.

/// The physical chunk records and the free pool.
class pset {
 public:
  /// Adds a record for a chunk just created; it starts unreferenced and outside the free pool.
  chunk_id adopt(chunk_handle h);
  /// Takes a chunk from the free pool (most recently freed first), or nullopt.
  [[nodiscard]] std::optional<chunk_id> take_free();
  /// Takes up to `n` chunks from the free pool onto `out`, in the order n take_free() calls
  /// would; returns how many.
  std::size_t take_free(std::size_t n, std::vector<chunk_id>& out);
  /// Reverses the free pool's order: what taking every chunk and putting each back in the order
  /// taken leaves, without touching a record.
  void reverse_free_pool() { reverse_free_pool_from(0); }
  /// Reverses the free pool's chunks from position `from` (0: the oldest) to the newest.
  void reverse_free_pool_from(std::size_t from) {
    std::reverse(free_.begin() + static_cast<std::ptrdiff_t>(from), free_.end());
  }
  /// Takes the `n` oldest chunks of the free pool onto `out`, oldest first.
  void take_oldest_free(std::size_t n, std::vector<chunk_id>& out);
  /// Removes the record of a free-pool chunk about to be released to the driver; returns its handle.
  chunk_handle forget(chunk_id id);

  [[nodiscard]] chunk_record& operator[](chunk_id id) { return at(id.value); }
  [[nodiscard]] const chunk_record& operator[](chunk_id id) const { return at(id.value); }

  /// +1 reference (a mapping or a tree entry is about to name the chunk).
  void add_ref(chunk_id id) { ++at(id.value).ref_count; }
  /// Asks the cache for the record of `id`, about to be written (Note [Dense chunk records]).
  void prefetch(chunk_id id) const { __builtin_prefetch(&at(id.value), 1); }
  /// -1 reference; a chunk left with none goes to the free pool. Returns true when it did.
  bool drop_ref(chunk_id id);
  /// Returns an unreferenced chunk taken by take_free() or adopt() but never used to the free pool.
  void put_free(chunk_id id);

  /// Chunks with a record (created and not released).
  [[nodiscard]] std::size_t live() const { return size_ - empty_slots_.size(); }
  /// Chunks in the free pool.
  [[nodiscard]] std::size_t free_count() const { return free_.size(); }
  /// Chunks referenced by a mapping or the tree.
  [[nodiscard]] std::size_t in_use() const { return live() - free_.size(); }
  /// Free-pool chunk ids, most recently freed last.
  [[nodiscard]] const std::vector<chunk_id>& free_pool() const { return free_; }
  /// Visits every live record with its id.
  template <class F>
  void for_each(F&& f) const {
    for (std::uint32_t i = 0; i < size_; ++i) {
      if (at(i).handle.value != 0) f(chunk_id{i}, at(i));
    }
  }

 private:
  static constexpr std::uint32_t k_block_bits = 12;  // 4096 records a block
  static constexpr std::uint32_t k_block_mask = (1u << k_block_bits) - 1;
  [[nodiscard]] chunk_record& at(std::uint32_t i) { return blocks_[i >> k_block_bits][i & k_block_mask]; }
  [[nodiscard]] const chunk_record& at(std::uint32_t i) const { return blocks_[i >> k_block_bits][i & k_block_mask]; }

  std::vector<std::unique_ptr<chunk_record[]>> blocks_;  // Note [Dense chunk records]
  std::uint32_t size_ = 0;                               // records made (live or empty slots)
  std::vector<chunk_id> free_;
  std::vector<chunk_id> empty_slots_;
};

}  // namespace vtensor
