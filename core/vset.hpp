#pragma once
/// vSet: the ordered set of mapped virtual pages. One `mapping` per chunk-sized span mapped at a
/// virtual address, ordered by address (Boost.Intrusive red-black tree) and also linked into its
/// chunk's list of mappings in the pSet. The vSet owns the mapping nodes (a free-list pool: no
/// allocation per map in steady state).

#include <cstdint>
#include <deque>
#include <vector>

#include <boost/intrusive/list.hpp>
#include <boost/intrusive/set.hpp>

#include "backends/vmm_backend.hpp"
#include "core/ids.hpp"
#include "core/intrusive.hpp"

namespace vtensor {

/// One chunk mapped at one virtual address for one request.
struct mapping {
  device_addr va = 0;     ///< chunk-aligned address of the span
  chunk_id chunk;         ///< the chunk mapped there
  request_id owner;       ///< the live request whose vTensor holds the span
  bool shared = false;    ///< immutable shared-prefix mapping (no one writes it); else the owner's private page
  boost::intrusive::set_member_hook<link_mode_t> by_va_hook;     ///< vSet order
  boost::intrusive::list_member_hook<link_mode_t> by_chunk_hook; ///< the chunk's mapping list
};

/// The list of mappings of one chunk (constant-time size).
using mapping_list = boost::intrusive::list<
    mapping, boost::intrusive::member_hook<mapping, boost::intrusive::list_member_hook<link_mode_t>,
                                           &mapping::by_chunk_hook>,
    boost::intrusive::constant_time_size<true>>;

/// Ordered set of mappings by virtual address.
class vset {
 public:
  vset() = default;
  vset(const vset&) = delete;
  vset& operator=(const vset&) = delete;
  ~vset();

  /// Records a new mapping; throws std::logic_error if `va` is already in the set. `before`, if
  /// given, is the mapping just below `va` (the previous page of a run): the insertion then
  /// costs amortized O(1) instead of a descent from the root.
  mapping& insert(device_addr va, chunk_id chunk, request_id owner, bool shared, const mapping* before = nullptr);
  /// Removes `m` (which must be in this set) and recycles its node.
  void erase(mapping& m);
  /// The mapping at exactly `va`, or nullptr.
  [[nodiscard]] const mapping* find(device_addr va) const;
  /// The mapping whose span holds `addr`, or nullptr.
  [[nodiscard]] const mapping* find_containing(device_addr addr, std::uint64_t chunk_bytes) const;
  /// Mappings in the set.
  [[nodiscard]] std::size_t size() const { return by_va_.size(); }
  /// Visits every mapping in address order.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& m : by_va_) f(m);
  }

 private:
  struct va_key {
    using type = device_addr;
    device_addr operator()(const mapping& m) const { return m.va; }
  };
  using by_va_set = boost::intrusive::set<
      mapping,
      boost::intrusive::member_hook<mapping, boost::intrusive::set_member_hook<link_mode_t>, &mapping::by_va_hook>,
      boost::intrusive::key_of_value<va_key>, boost::intrusive::constant_time_size<true>>;

  by_va_set by_va_;
  std::deque<mapping> nodes_;       // stable storage of every node ever made
  std::vector<mapping*> spare_;     // recycled nodes
};

}  // namespace vtensor
