#include "core/mapping_table.hpp"

namespace vtensor {

mapping& mapping_table::map_deferred_into(device_addr va, chunk_id c, request_id owner, bool shared,
                                          mapping_entry& entry) {
  chunk_record& r = chunks_[c];
  entry = {va, r.handle};
  mapping& m = vset_.make(va, c, owner, shared);
  if (r.mappings != 0 && r.parked_mappings == r.mappings) --parked_only_chunks_;  // mapped by a live request now
  if (r.mappings++ == 0) ++mapped_chunks_;
  ++r.ref_count;  // pset::add_ref, on the record at hand
  if (shared && r.shared_mappings++ == 0) ++shared_chunks_;
  return m;
}

// The chunk records are another part's: `chunks_` is a reference, which the compiler reloads
// after every call and store it cannot tell apart from it. A run's unrecords read it once.
void mapping_table::unrecord(pset& chunks, mapping& m) {
  chunk_record& r = chunks[m.chunk];
  const bool was_parked_only = r.parked_mappings == r.mappings;
  if (m.parked) --r.parked_mappings;
  if (m.shared && --r.shared_mappings == 0) --shared_chunks_;
  if (--r.mappings == 0) --mapped_chunks_;
  const bool parked_only = r.mappings != 0 && r.parked_mappings == r.mappings;
  if (was_parked_only != parked_only) was_parked_only ? --parked_only_chunks_ : ++parked_only_chunks_;
  const chunk_id c = m.chunk;
  vset_.recycle(m);
  chunks.drop_ref(c);
}

void mapping_table::make_shared(mapping& m) {
  if (m.shared) return;
  m.shared = true;
  if (chunks_[m.chunk].shared_mappings++ == 0) ++shared_chunks_;
}

void mapping_table::park(mapping& m, request_id owner) {
  chunk_record& r = chunks_[m.chunk];
  m.owner = owner;
  if (m.parked) return;
  m.parked = true;
  if (++r.parked_mappings == r.mappings) ++parked_only_chunks_;
}

void mapping_table::unpark(mapping& m, request_id owner) {
  chunk_record& r = chunks_[m.chunk];
  m.owner = owner;
  if (!m.parked) return;
  if (r.parked_mappings-- == r.mappings) --parked_only_chunks_;
  m.parked = false;
}

void mapping_table::unrecord_run(std::span<mapping* const> maps) {
  constexpr std::size_t k_ahead = 4;  // Note [Dense chunk records]
  pset& chunks = chunks_;
  for (std::size_t i = 0; i < maps.size() && i < k_ahead; ++i) chunks.prefetch(maps[i]->chunk);
  for (std::size_t i = 0; i < maps.size(); ++i) {
    if (i + k_ahead < maps.size()) chunks.prefetch(maps[i + k_ahead]->chunk);
    unrecord(chunks, *maps[i]);
  }
}

void mapping_table::unmap_run(std::span<mapping* const> maps) {
  if (maps.empty()) return;
  gate_.vmm([&](vmm_backend& b) { b.unmap(maps.front()->va, maps.size() * chunk_bytes_); });
  unrecord_run(maps);
}

void mapping_table::unmap_run_deferred(std::span<mapping* const> maps, mapping_job& job) {
  if (maps.empty()) return;
  job.unmaps.push_back({maps.front()->va, maps.size() * chunk_bytes_});
  unrecord_run(maps);
}

}  // namespace vtensor
