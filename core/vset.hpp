#pragma once
/// vSet: the ordered set of mapped virtual pages -> chunk.
///
/// Note [vSet by range]: every mapping lies in a vTensor's range, and a range's pages are a dense
/// table (page x tensor -> mapping). So the vSet orders the *ranges* by base address (a
/// Boost.Intrusive red-black tree, one node per live vTensor) and each range holds its page
/// table; an address resolves to its range in O(log ranges), then to its mapping in O(1), and an
/// in-order walk visits every mapping by address. Mapping a chunk costs no tree operation: with
/// one node per chunk, tree insertion and removal were a quarter of a whole-trace replay.
/// The vSet also owns the mapping nodes (a free-list pool: no allocation per map in steady state).

#include <cstdint>
#include <deque>
#include <vector>

#include <boost/intrusive/set.hpp>

#include "backends/vmm_backend.hpp"
#include "core/ids.hpp"
#include "core/intrusive.hpp"

namespace vtensor {

/// One chunk mapped at one virtual address for one request (24 bytes; a chunk counts its
/// mappings, Note [Mappings counted, not listed] in pset.hpp).
struct mapping {
  device_addr va = 0;   ///< chunk-aligned address of the span
  request_id owner;     ///< the live request whose vTensor holds the span
  chunk_id chunk;       ///< the chunk mapped there
  bool shared = false;  ///< immutable shared-prefix mapping (no one writes it); else the owner's private page
  bool parked = false;  ///< in a parked vTensor's range (Note [Parked vTensors] in scheduler.cpp)
};
static_assert(sizeof(mapping) == 24, "Note [Mappings counted, not listed] in pset.hpp");

/// A vTensor's virtual range and its page table: the unit the vSet orders (Note [vSet by range]).
struct mapped_range {
  device_addr base = 0;                 ///< start of the reserved range
  std::uint64_t tensor_span_bytes = 0;  ///< virtual bytes of each tensor
  std::uint32_t tensors = 0;            ///< tensors in the range
  std::uint32_t mapped_pages = 0;       ///< pages mapped in every tensor
  std::vector<mapping*> maps;           ///< [page * tensors + tensor]; null where a mapping is being made
  boost::intrusive::set_member_hook<link_mode_t> by_base_hook;  ///< vSet order

  /// Address of page `page` of tensor `tensor`.
  [[nodiscard]] device_addr page_addr(std::uint32_t tensor, std::uint64_t page, std::uint64_t chunk_bytes) const {
    return base + tensor * tensor_span_bytes + page * chunk_bytes;
  }
  /// One past the range's last byte.
  [[nodiscard]] device_addr end() const { return base + tensors * tensor_span_bytes; }
};

/// The ordered set of mapped pages, by range.
class vset {
 public:
  vset() = default;
  vset(const vset&) = delete;
  vset& operator=(const vset&) = delete;
  ~vset();

  /// A mapping node for `chunk` at `va` (not yet in any page table).
  mapping& make(device_addr va, chunk_id chunk, request_id owner, bool shared);
  /// Returns a node from make() to the pool.
  void recycle(mapping& m);
  /// Adds a range (its base must be set); throws std::logic_error if it overlaps one in the set.
  void insert(mapped_range& r);
  /// Removes a range.
  void erase(mapped_range& r);
  /// Removes every range (shutdown of a scheduler that still holds some).
  void clear_ranges() { by_base_.clear(); }

  /// The range holding `addr`, or nullptr.
  [[nodiscard]] const mapped_range* range_containing(device_addr addr) const;
  /// The mapping whose chunk starts at `va`, or nullptr.
  [[nodiscard]] const mapping* find(device_addr va) const;
  /// A mapping of `chunk`, or nullptr: a walk of every page table (O(mappings)).
  [[nodiscard]] const mapping* any_mapping_of(chunk_id chunk) const;
  /// The mapping whose chunk holds `addr`, or nullptr.
  [[nodiscard]] const mapping* find_containing(device_addr addr, std::uint64_t chunk_bytes) const;
  /// Mapping nodes in use.
  [[nodiscard]] std::size_t size() const { return nodes_.size() - spare_.size(); }
  /// Ranges in the set.
  [[nodiscard]] std::size_t range_count() const { return by_base_.size(); }
  /// Visits every mapping in address order.
  template <class F>
  void for_each(F&& f) const {
    for (const mapped_range& r : by_base_) {
      const std::size_t pages = r.tensors == 0 ? 0 : r.maps.size() / r.tensors;
      for (std::uint32_t t = 0; t < r.tensors; ++t) {
        for (std::size_t p = 0; p < pages; ++p) {
          if (const mapping* m = r.maps[p * r.tensors + t]) f(*m);
        }
      }
    }
  }

 private:
  struct base_key {
    using type = device_addr;
    device_addr operator()(const mapped_range& r) const { return r.base; }
  };
  using by_base_set =
      boost::intrusive::set<mapped_range,
                            boost::intrusive::member_hook<mapped_range, boost::intrusive::set_member_hook<link_mode_t>,
                                                          &mapped_range::by_base_hook>,
                            boost::intrusive::key_of_value<base_key>, boost::intrusive::constant_time_size<true>>;

  by_base_set by_base_;
  std::deque<mapping> nodes_;    // stable storage of every node ever made
  std::vector<mapping*> spare_;  // recycled nodes
};

}  // namespace vtensor
