#include "sim/paged_policy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "backends/units.hpp"

namespace vtensor::sim {
namespace {

constexpr std::uint8_t k_in_queue = 1;
constexpr std::uint8_t k_in_spare = 2;
constexpr std::uint64_t k_prefetch_ahead = 8;  // Note [Paged prefetches]

// splitmix64's finaliser: a bijection that spreads every input bit.
constexpr std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

constexpr std::uint64_t combine(std::uint64_t h, std::uint64_t v) {
  return mix64(h ^ mix64(v + 0x9E3779B97F4A7C15ull));
}

// The parent of a request's first block (vLLM's NONE_HASH).
constexpr std::uint64_t k_root_hash = 0x6A09E667F3BCC909ull;

std::uint64_t block_bytes_of(const kv_policy_options& o, std::uint32_t block_tokens) {
  if (block_tokens == 0) throw std::invalid_argument("paged policy: block_tokens must be at least 1");
  const std::uint64_t token = o.kv.kv_bytes_per_token();
  if (token == 0) throw std::invalid_argument("paged policy: kv (the model's KV shape) holds no byte per token");
  if (token > std::numeric_limits<std::uint64_t>::max() / block_tokens) {
    throw std::invalid_argument(fmt::format("paged policy: block_tokens {} makes a block too large", block_tokens));
  }
  return token * block_tokens;
}

std::unique_ptr<device_pool> make_pool(std::unique_ptr<vmm_backend> inner, const latency_model& model,
                                       const kv_policy_options& o, const paged_settings& s) {
  const std::uint64_t bytes = block_bytes_of(o, s.block_tokens);  // options first: nothing is reserved for bad ones
  if (o.memory_bytes != std::numeric_limits<std::uint64_t>::max() &&
      o.memory_bytes / k_chunk_bytes * k_chunk_bytes < bytes) {
    throw std::invalid_argument(
        fmt::format("paged policy: memory_bytes {} holds no whole block of {} bytes", o.memory_bytes, bytes));
  }
  return std::make_unique<device_pool>(std::move(inner), model, o.memory_bytes);
}

}  // namespace

// ---- intrusive lists and the hash index -------------------------------------------------------

void paged_policy::block_list::push_back(std::vector<block>& bs, std::uint32_t b) {
  block& x = bs[b];
  x.prev = tail;
  x.next = k_nil;
  x.list = tag;
  if (tail == k_nil) {
    head = b;
  } else {
    bs[tail].next = b;
  }
  tail = b;
  ++size;
}

std::uint32_t paged_policy::block_list::pop_front(std::vector<block>& bs) {
  const std::uint32_t b = head;
  remove(bs, b);
  return b;
}

void paged_policy::block_list::remove(std::vector<block>& bs, std::uint32_t b) {
  block& x = bs[b];
  if (x.prev == k_nil) {
    head = x.next;
  } else {
    bs[x.prev].next = x.next;
  }
  if (x.next == k_nil) {
    tail = x.prev;
  } else {
    bs[x.next].prev = x.prev;
  }
  x.prev = x.next = k_nil;
  x.list = 0;
  --size;
}

// Note [A compact hash index]
// The index maps a block hash to the first block registered with it. Its entries hold the low 32
// bits of mix64(key), which give the home slot (the table never has more than 2^32 slots: block
// ids are 32-bit) and filter the probes, and the block; the full key is that block's hash, read
// from the block when the fingerprint matches (for a hit the block is read next anyway). An
// entry is 8 bytes instead of 16: on whole Mooncake (63,654 blocks) the table is 1 MiB instead
// of 2, and an admission's hundreds of lookups, registrations and evictions miss the cache less
// (results/README.md, "Session 13"). An eviction finds its entry by block, with no key compare.
namespace {
std::uint32_t fingerprint_of(std::uint64_t key) { return static_cast<std::uint32_t>(mix64(key)); }
}  // namespace

std::size_t paged_policy::hash_index::slot_of(std::uint64_t key, const std::vector<block>& bs) const {
  const std::size_t mask = slots.size() - 1;
  const std::uint32_t fp = fingerprint_of(key);
  std::size_t at = fp & mask;
  for (;; at = (at + 1) & mask) {
    const entry& e = slots[at];
    if (e.value == k_nil || (e.fingerprint == fp && bs[e.value].hash == key)) return at;
  }
}

std::size_t paged_policy::hash_index::slot_holding(std::uint64_t key, std::uint32_t value) const {
  const std::size_t mask = slots.size() - 1;
  std::size_t at = fingerprint_of(key) & mask;
  while (slots[at].value != value) at = (at + 1) & mask;
  return at;
}

void paged_policy::hash_index::prefetch(std::uint64_t key) const {
  __builtin_prefetch(&slots[fingerprint_of(key) & (slots.size() - 1)]);
}

void paged_policy::hash_index::grow() {
  if (slots.size() > (std::size_t{1} << 31)) throw std::length_error("paged policy: hash index past 2^32 slots");
  std::vector<entry> old(slots.size() * 2);
  old.swap(slots);
  const std::size_t mask = slots.size() - 1;
  for (const entry& e : old) {
    if (e.value == k_nil) continue;
    std::size_t at = e.fingerprint & mask;
    while (slots[at].value != k_nil) at = (at + 1) & mask;
    slots[at] = e;
  }
}

void paged_policy::hash_index::insert_at(std::size_t slot, std::uint64_t key, std::uint32_t value,
                                         const std::vector<block>& bs) {
  if ((size + 1) * 2 > slots.size()) {
    grow();
    slot = slot_of(key, bs);
  }
  slots[slot] = {fingerprint_of(key), value};
  ++size;
}

// Linear probing with backward-shift deletion: no tombstones, so lookups stay short however
// many blocks are evicted.
void paged_policy::hash_index::erase_at(std::size_t hole) {
  const std::size_t mask = slots.size() - 1;
  --size;
  for (std::size_t at = (hole + 1) & mask; slots[at].value != k_nil; at = (at + 1) & mask) {
    const std::size_t home = slots[at].fingerprint & mask;
    // Move the entry at `at` into the hole unless its home lies cyclically in (hole, at].
    const bool stays = hole <= at ? (hole < home && home <= at) : (hole < home || home <= at);
    if (stays) continue;
    slots[hole] = slots[at];
    hole = at;
  }
  slots[hole] = {};
}

// ---- construction -----------------------------------------------------------------------------

paged_policy::paged_policy(const kv_policy_options& options, const paged_settings& settings)
    : paged_policy(make_backend(options.backend, device_config(options)), latency_model_for(device_config(options)),
                   options, settings) {}

paged_policy::paged_policy(std::unique_ptr<vmm_backend> inner, const latency_model& model,
                           const kv_policy_options& options, const paged_settings& settings)
    : pool_policy(make_pool(std::move(inner), model, options, settings)) {
  init(options, settings);
}

policy_definition<paged_settings> paged_definition() {
  using s = paged_settings;
  policy_definition<s> d;
  d.options = {count_option<s, std::uint32_t>("block-tokens", "paged: tokens per KV block", &s::block_tokens, 16, 1),
               prefix_caching_option(&s::prefix_caching)};
  for (auto& row : eviction_options(&s::eviction)) d.options.push_back(std::move(row));
  d.check = [](const s& v) { check_eviction(v.eviction); };
  d.make = construct_with<paged_policy, s>();
  d.access = [](const kv_policy_options&, const s& v) { return kv_access{true, v.block_tokens}; };
  d.sharing = [](const kv_policy_options&, const s& v) {
    return shared_at_admission(v.prefix_caching, v.block_tokens);
  };
  return d;
}

paged_policy::~paged_policy() = default;

void paged_policy::init(const kv_policy_options& o, const paged_settings& s) {
  backend_name_ = o.backend;
  memory_bytes_ = o.memory_bytes;
  token_bytes_ = o.kv.kv_bytes_per_token();
  block_tokens_ = s.block_tokens;
  block_bytes_ = block_bytes_of(o, s.block_tokens);
  prefix_caching_ = s.prefix_caching;
  unlimited_ = !pool_->preallocated();
  queue_.tag = k_in_queue;
  spare_.tag = k_in_spare;
  eviction_ = eviction_for(o, s.eviction);
  if (eviction_.name != "lru") order_ = make_eviction_order(eviction_);  // Note [Paged eviction orders]
  if (pool_->capacity_bytes() / block_bytes_ >= k_nil) {
    throw std::invalid_argument(
        fmt::format("paged policy: memory_bytes {} holds {} blocks of block_tokens {}, more than block ids can name",
                    o.memory_bytes, pool_->capacity_bytes() / block_bytes_, s.block_tokens));
  }
  adopt_new_blocks();
}

// Blocks of the chunks mapped since the last call enter the free list in index order (vLLM's
// FreeKVCacheBlockQueue starts as blocks 0, 1, ..., N - 1).
void paged_policy::adopt_new_blocks() {
  const std::uint64_t n = pool_->physical_bytes() / block_bytes_;
  while (blocks_.size() < n) {
    const auto b = static_cast<std::uint32_t>(blocks_.size());
    blocks_.emplace_back();
    free_list_for(blocks_[b]).push_back(blocks_, b);
    ++free_;
  }
}

// ---- block hashes -----------------------------------------------------------------------------

// Note [Block hashes from trace keys]
// vLLM hashes each full block of block_size tokens as hash(parent block's hash, the block's token
// ids) (kv_cache_utils.hash_block_tokens, chained in hash_request_tokens / request.block_hashes);
// a partial block has no hash and is never shared. A trace gives no token ids, only keys:
// kv_request::blocks, one per 512 tokens in Mooncake (the last may be shorter), each naming the
// content of its tokens. The tokens of a block are therefore named by the keys that cover them and
// where in those keys they lie: block i covers tokens [i * B, (i + 1) * B), and for each key k
// overlapping that span the hash takes in (k, first and one-past-last offset inside k), in order,
// chained onto the parent block's hash. With B dividing 512 a block lies in key floor(i * B / 512)
// at offset i * B mod 512; a block straddling two keys takes in both. Two requests thus share a
// block exactly when the same key chain covers it (the chain through the parent hash), whatever
// the length of a short last key (its first tokens are the same tokens). Only blocks that keys
// cover entirely are hashed: a block reaching past the keyed tokens (into a prompt's unkeyed tail
// or a request's generated tokens) holds tokens unique to its request, so it gets no hash, and
// nor does any block after it (their parent chain is unique). Hashes are 64 bits; a collision
// would share a block wrongly (vLLM's builtin hash takes the same risk; its sha256 option does not).
//
// Note [Hashes of a retried admission]
// Once memory is full the replica tries the head of its queue again at every step, and a long
// prompt has hundreds of blocks to hash: on a whole Mooncake replay the hashing of refused
// admissions was two fifths of the time. The hashes depend only on the keys and the prompt's
// length, so the last ones computed are kept with their input and reused when it is equal.
void paged_policy::hash_blocks(const kv_request& r) const {
  if (hashed_prompt_ == r.prompt_tokens &&
      std::equal(r.blocks.begin(), r.blocks.end(), hashed_blocks_.begin(), hashed_blocks_.end())) {
    return;
  }
  hashed_prompt_ = r.prompt_tokens;
  hashed_blocks_.assign(r.blocks.begin(), r.blocks.end());
  hashes_.clear();
  std::uint64_t keyed = 0;
  for (const token_block& k : r.blocks) keyed += k.tokens;
  keyed = std::min(keyed, r.prompt_tokens);
  const std::uint64_t full = keyed / block_tokens_;
  hashes_.reserve(full);
  std::uint64_t parent = k_root_hash;
  std::size_t key = 0;          // first key that may overlap the block
  std::uint64_t key_start = 0;  // its first token
  for (std::uint64_t i = 0; i < full; ++i) {
    const std::uint64_t begin = i * block_tokens_;
    const std::uint64_t end = begin + block_tokens_;
    while (key_start + r.blocks[key].tokens <= begin) key_start += r.blocks[key++].tokens;
    std::uint64_t h = parent;
    std::size_t k = key;
    std::uint64_t k_start = key_start;
    for (;;) {
      const std::uint64_t k_end = k_start + r.blocks[k].tokens;
      const std::uint64_t lo = std::max(begin, k_start) - k_start;
      const std::uint64_t hi = std::min(end, k_end) - k_start;
      h = combine(combine(h, r.blocks[k].key), (lo << 32) | hi);
      if (k_end >= end) break;
      k_start = k_end;
      ++k;
    }
    if (h == 0) h = 1;  // 0 marks "no hash"
    hashes_.push_back(h);
    parent = h;
  }
}

// ---- the prefix cache -------------------------------------------------------------------------

// vLLM keeps every block registered under a hash, duplicates included (a request that recomputed
// a block another one cached: block tables are append-only, so it is not swapped), and a lookup
// answers with the first registered (BlockPool.get_cached_block). The index holds that first
// block; the others follow it in registration order on the dup links, and the first knows the last
// (`dup_last`), so that a registration does not walk a long chain of duplicates.
void paged_policy::register_block(std::uint32_t b, std::uint64_t hash) {
  block& x = blocks_[b];
  x.hash = hash;
  const std::size_t slot = index_.slot_of(hash, blocks_);
  const std::uint32_t first = index_.slots[slot].value;
  if (first == k_nil) {
    index_.insert_at(slot, hash, b, blocks_);
    x.dup_last = b;
    return;
  }
  const std::uint32_t last = blocks_[first].dup_last;
  blocks_[last].dup_next = b;
  x.dup_prev = last;
  blocks_[first].dup_last = b;
}

void paged_policy::unregister_block(std::uint32_t b) {
  block& x = blocks_[b];
  if (x.dup_prev == k_nil) {
    if (x.dup_next == k_nil) {
      index_.erase_at(index_.slot_holding(x.hash, b));
    } else {
      index_.slots[index_.slot_holding(x.hash, b)].value = x.dup_next;
      blocks_[x.dup_next].dup_last = x.dup_last;
    }
  } else {
    blocks_[x.dup_prev].dup_next = x.dup_next;
    if (x.dup_next == k_nil) blocks_[index_.find(x.hash, blocks_)].dup_last = x.dup_prev;  // it was the last
  }
  if (x.dup_next != k_nil) blocks_[x.dup_next].dup_prev = x.dup_prev;
  x.dup_prev = x.dup_next = x.dup_last = k_nil;
  x.hash = 0;
}

// ---- allocation -------------------------------------------------------------------------------

// Note [Admission like allocate_slots]
// vLLM's KVCacheManager.allocate_slots asks for num_new_blocks = blocks for the tokens - blocks
// the request holds - its cache hits, and refuses (returning None, having changed nothing) when
// that number plus the hit blocks that sit in the free queue (refcount 0: reviving them takes
// them out of the queue, single_type_kv_cache_manager.get_num_blocks_to_allocate) exceeds the
// free queue's length. Otherwise it touches the hits (BlockPool.touch: out of the queue, refcount
// + 1), pops the new blocks from the queue's head, evicting the hash of any popped block
// (BlockPool.get_new_blocks, _maybe_evict_cached_block), and caches the blocks that are full
// (cache_full_blocks). An unlimited pool grows instead (Note [Unlimited pool]).
bool paged_policy::have_free(std::uint64_t n, std::uint64_t revived) {
  if (!unlimited_) return n + revived <= free_blocks();
  if (n <= spare_.size) return true;
  const std::uint64_t want = blocks_.size() + (n - spare_.size);
  bool grown = false;
  if (want <= pool_->capacity_bytes() / block_bytes_) {
    try {
      grown = pool_->grow_to(want * block_bytes_);
    } catch (...) {
      adopt_new_blocks();  // the chunks mapped before the failure stay in the pool
      throw;
    }
  }
  adopt_new_blocks();
  return grown && n <= spare_.size;
}

std::uint32_t paged_policy::take_block() {
  block_list& from = unlimited_ ? spare_ : queue_;
  std::uint32_t b = k_nil;
  if (order_ != nullptr && !unlimited_ && queue_.size == 0) {  // Note [Paged eviction orders]
    const std::optional<cache_slot> victim = order_->pop_victim();
    if (!victim || *victim >= blocks_.size() || blocks_[*victim].ref != 0 || blocks_[*victim].hash == 0) {
      throw std::logic_error("paged policy: the eviction order has no cached free block to give");
    }
    b = *victim;
  } else {
    b = from.pop_front(blocks_);
  }
  block& x = blocks_[b];
  if (x.hash != 0) {
    unregister_block(b);
    ++evictions_;
    --cached_;
  } else {
    --free_;
  }
  x.fill = 0;
  x.ref = 1;
  ++held_;
  return b;
}

void paged_policy::append_blocks(request_state& s, std::uint64_t tokens) {
  if (!s.table.empty()) {  // the last block's free slots first
    block& last = blocks_[s.table.back()];
    const auto add = static_cast<std::uint32_t>(std::min<std::uint64_t>(block_tokens_ - last.fill, tokens));
    last.fill += add;
    tokens -= add;
  }
  if (tokens > block_tokens_) prefetch_queue_head(ceil_div(tokens, std::uint64_t{block_tokens_}));
  while (tokens > 0) {
    const std::uint32_t b = take_block();
    const auto add = static_cast<std::uint32_t>(std::min<std::uint64_t>(block_tokens_, tokens));
    blocks_[b].fill = add;
    tokens -= add;
    s.table.push_back(b);
  }
}

// Note [Paged prefetches]
// An admission looks up, registers and evicts hundreds of block hashes (a Mooncake prompt is
// some 600 blocks of 16 tokens), each at a random slot of the hash index and a random block of
// the pool: on a whole Mooncake replay those misses were two thirds of the paged policy's time
// (perf: the first probe of slot_of, the block loads of append_blocks). The hashes an admission
// looks up and registers are known before the loops start, and the blocks it will pop are the
// queue's first ones, so their slots and blocks are asked for ahead (k_prefetch_ahead) and the
// misses overlap. Nothing changes in what is done or in which order.
void paged_policy::prefetch_queue_head(std::uint64_t n) const {
  if (unlimited_) return;  // spare blocks have no hash to evict
  std::uint32_t b = queue_.head;
  for (std::uint64_t i = 0; i < n && b != k_nil; ++i) {
    const block& x = blocks_[b];
    if (x.hash != 0) index_.prefetch(x.hash);
    b = x.next;
  }
}

paged_policy::request_state& paged_policy::live(request_id id) {
  const auto it = requests_.find(id.value);
  if (it == requests_.end()) throw std::invalid_argument(fmt::format("paged policy: unknown request {}", id.value));
  return it->second;
}

const std::vector<std::uint32_t>& paged_policy::block_table(request_id id) const {
  const auto it = requests_.find(id.value);
  if (it == requests_.end()) throw std::invalid_argument(fmt::format("paged policy: unknown request {}", id.value));
  return it->second.table;
}

// The lookup of do_admit(), read only (a router's read of the cache).
std::uint64_t paged_policy::do_cached_tokens(const kv_request& r) const {
  if (!prefix_caching_ || r.prompt_tokens == 0) return 0;
  hash_blocks(r);
  const std::uint64_t max_hits = std::min<std::uint64_t>(hashes_.size(), (r.prompt_tokens - 1) / block_tokens_);
  std::uint64_t hits = 0;
  while (hits < max_hits && index_.find(hashes_[hits], blocks_) != k_nil) ++hits;
  return hits * block_tokens_;
}

kv_admit_result paged_policy::do_admit(const kv_request& r) {
  if (requests_.contains(r.id.value)) {
    throw std::invalid_argument(fmt::format("paged policy: request {} is already admitted", r.id.value));
  }
  if (r.prompt_tokens == 0 || r.prompt_tokens > r.max_tokens) {
    throw std::invalid_argument(fmt::format("paged policy: request {} has prompt_tokens {} and max_tokens {}",
                                            r.id.value, r.prompt_tokens, r.max_tokens));
  }
  // The cache lookup: leading full blocks whose hash is cached, at most (prompt - 1) / B of them
  // (kv_cache_manager.get_computed_blocks: max_cache_hit_length = num_tokens - 1).
  hits_.clear();
  std::uint64_t revived = 0;
  if (prefix_caching_) {
    drop_expired();
    hash_blocks(r);
    const std::uint64_t max_hits = std::min<std::uint64_t>(hashes_.size(), (r.prompt_tokens - 1) / block_tokens_);
    for (std::uint64_t i = 0; i < std::min(max_hits, k_prefetch_ahead); ++i) index_.prefetch(hashes_[i]);
    for (std::uint64_t i = 0; i < max_hits; ++i) {
      if (i + k_prefetch_ahead < max_hits) index_.prefetch(hashes_[i + k_prefetch_ahead]);
      const std::uint32_t b = index_.find(hashes_[i], blocks_);
      if (b == k_nil) break;
      hits_.push_back(b);
      if (blocks_[b].ref == 0) ++revived;
    }
  }
  const std::uint64_t needed = ceil_div(r.prompt_tokens, std::uint64_t{block_tokens_}) - hits_.size();
  if (!have_free(needed, revived)) return {};

  request_state s;
  s.table.reserve(ceil_div(r.max_tokens, std::uint64_t{block_tokens_}));
  for (const std::uint32_t b : hits_) {  // BlockPool.touch
    block& x = blocks_[b];
    if (order_ != nullptr) order_->touch(b);  // a hit is a use
    if (x.ref == 0) {
      if (order_ != nullptr) {
        order_->set_candidate(b, false);
      } else {
        queue_.remove(blocks_, b);
      }
      --cached_;
      ++held_;
      used_tokens_ += x.fill;
    }
    ++x.ref;
    s.table.push_back(b);
  }
  const std::uint64_t hit_tokens = hits_.size() * block_tokens_;
  append_blocks(s, r.prompt_tokens - hit_tokens);
  used_tokens_ += r.prompt_tokens - hit_tokens;
  if (prefix_caching_) {  // cache_full_blocks: the new full keyed blocks
    for (std::size_t i = hits_.size(); i < hashes_.size(); ++i) {
      if (i + k_prefetch_ahead < hashes_.size()) index_.prefetch(hashes_[i + k_prefetch_ahead]);
      register_block(s.table[i], hashes_[i]);
      if (order_ != nullptr) {
        const std::uint64_t at = i * block_tokens_;
        order_->insert(s.table[i], {block_tokens_, at, trace_key_at(r, at)});
      }
    }
  }
  s.tokens = r.prompt_tokens;
  s.max_tokens = r.max_tokens;
  requests_.emplace(r.id.value, std::move(s));
  live_tokens_ += r.prompt_tokens;
  prompt_tokens_ += r.prompt_tokens;
  hit_tokens_ += hit_tokens;
  return {true, hit_tokens, 0};
}

bool paged_policy::do_grow(request_id id, std::uint64_t tokens) {
  request_state& s = live(id);
  if (tokens > s.max_tokens - s.tokens) {
    throw std::invalid_argument(fmt::format("paged policy: request {} grows by {} past its max_tokens {} (has {})",
                                            id.value, tokens, s.max_tokens, s.tokens));
  }
  const std::uint64_t needed = ceil_div(s.tokens + tokens, std::uint64_t{block_tokens_}) - s.table.size();
  if (!have_free(needed, 0)) return false;
  append_blocks(s, tokens);
  s.tokens += tokens;
  used_tokens_ += tokens;
  live_tokens_ += tokens;
  return true;
}

// Note [Paged rounds]
// A decoding request grows in place while its last block has room: grow() then appends the token
// to that block (append_blocks fills the last block first, and have_free(0, 0) holds), with no
// block taken, no hash touched and no VMM call. So a decode round's rounds in place are, for the
// step's decoders, the fewest free slots left in a last block (and the fewest tokens left before
// a max_tokens), and a round advanced does what grow() does for each of them: one more token in
// the last block, in the request and in the figures (Note [One decode protocol] in
// kv_policy.hpp, whose lease ends at any other change). The last block of a request holds at
// least one token of its own (an admission's hits stop short of its last prompt token), so it is
// never a shared cached block.
std::uint64_t paged_policy::do_decode_rounds(std::span<const request_id> ids) {
  round_.clear();
  std::uint64_t rounds = ids.empty() ? 0 : std::numeric_limits<std::uint64_t>::max();
  for (const request_id id : ids) {
    request_state& s = live(id);
    if (s.table.empty()) {
      rounds = 0;
      break;
    }
    const block& last = blocks_[s.table.back()];
    rounds = std::min({rounds, std::uint64_t{block_tokens_ - last.fill}, s.max_tokens - s.tokens});
    round_.push_back(&s);
  }
  if (rounds == 0) round_.clear();
  return rounds;
}

kv_memory_view paged_policy::do_advance_round(std::span<const request_id> ids) {
  if (ids.size() != round_.size()) throw std::logic_error("paged policy: a round over other requests than its lease's");
  for (request_state* s : round_) {
    block& last = blocks_[s->table.back()];
    if (last.fill >= block_tokens_ || s->tokens >= s->max_tokens) {
      throw std::logic_error("paged policy: a round past the rounds in place it answered");
    }
    ++last.fill;
    ++s->tokens;
  }
  used_tokens_ += round_.size();
  live_tokens_ += round_.size();
  return memory_view();
}

// Note [Freeing tail first]
// vLLM frees a request's blocks in reverse order (single_type_kv_cache_manager.free:
// `ordered_blocks = reversed(req_blocks)`), and BlockPool.free_blocks appends each block whose
// refcount drops to 0 to the queue's tail: the request's last block enters the queue first and
// is evicted first, its first block (the most shared prefix) last. A freed block keeps its hash,
// so it stays findable until it is popped. A preempted request is freed the same way
// (Scheduler._preempt_request calls kv_cache_manager.free): its cached blocks stay hashable and
// its re-admission may hit them.
void paged_policy::do_release(request_id id, release_reason /*why*/) {
  const auto it = requests_.find(id.value);
  if (it == requests_.end()) throw std::invalid_argument(fmt::format("paged policy: unknown request {}", id.value));
  const request_state& s = it->second;
  const std::size_t n = s.table.size();
  for (std::size_t i = 0; i < std::min<std::size_t>(n, k_prefetch_ahead); ++i) {
    __builtin_prefetch(&blocks_[s.table[n - 1 - i]], 1);
  }
  for (auto b = s.table.rbegin(); b != s.table.rend(); ++b) {
    if (const auto left = static_cast<std::size_t>(s.table.rend() - b); left > k_prefetch_ahead) {
      __builtin_prefetch(&blocks_[*(b + k_prefetch_ahead)], 1);  // Note [Paged prefetches]
    }
    block& x = blocks_[*b];
    if (--x.ref > 0) continue;
    --held_;
    used_tokens_ -= x.fill;
    if (x.hash != 0) {
      ++cached_;
    } else {
      x.fill = 0;
      ++free_;
    }
    park_free(*b);
  }
  live_tokens_ -= s.tokens;
  requests_.erase(it);
}

// ---- eviction orders --------------------------------------------------------------------------

// Note [Paged eviction orders]
// With --eviction lru (the default) the free queue is vLLM's FreeKVCacheBlockQueue itself: freed
// blocks, cached or not, join its tail in release order (Note [Freeing tail first]) and new blocks
// come from its head, so an uncached free block and a cached one are taken in the order they were
// freed. Any other order (core/eviction_order.hpp) keeps the cached free blocks as its candidates
// instead, and the queue holds only the uncached ones, which are taken first: dropping them loses
// nothing, so no order should spend a cached block while one is left. The order sees a block's
// registration (insert: tokens = block_tokens, offset = its first token, key = the trace key of
// the block holding that token, so the offline order and the ghost lists of arc and s3-fifo know
// blocks at the trace's granularity), every cache hit on it (touch), and whether it is free
// (candidate). A release is not a use here: recency is that of the last hit or registration.
void paged_policy::park_free(std::uint32_t b) {
  if (order_ != nullptr && blocks_[b].hash != 0) {
    order_->set_candidate(b, true);
  } else {
    free_list_for(blocks_[b]).push_back(blocks_, b);
  }
}

void paged_policy::uncache_free(std::uint32_t b) {
  block& x = blocks_[b];
  unregister_block(b);
  ++evictions_;
  --cached_;
  ++free_;
  x.fill = 0;
  free_list_for(x).push_back(blocks_, b);
}

// Note [Expiry at admission] in core/scheduler.cpp: the same here (the ttl order only).
void paged_policy::drop_expired() {
  if (order_ == nullptr) return;
  while (const std::optional<cache_slot> b = order_->pop_expired()) {
    if (*b >= blocks_.size() || blocks_[*b].ref != 0 || blocks_[*b].hash == 0) {
      throw std::logic_error("paged policy: the eviction order expired a block that is not cached and free");
    }
    uncache_free(*b);
  }
}

std::uint64_t paged_policy::trace_key_at(const kv_request& r, std::uint64_t token) {
  if (r.blocks.empty() || r.blocks.front().tokens == 0) return 0;
  const std::uint64_t i = token / r.blocks.front().tokens;  // every block but the last is whole
  return i < r.blocks.size() ? r.blocks[i].key : 0;
}

// ---- figures ----------------------------------------------------------------------------------

// Note [Paged memory breakdown]
// Every block is held (refcount > 0), cached (refcount 0 with a hash: in the queue, revivable) or
// free (refcount 0, no hash). Of the held blocks, `used` is their valid tokens, each block once
// however many requests share it (only full blocks are shared); the rest of the held blocks is
// `internal` (the unused tail of each request's last block). The bytes of the pool below one
// block (the end of the last chunk) back no block: `reserved_idle`. Any free block serves any
// request, so nothing is `external`. The pool never returns a chunk to the driver, so evicting
// cached blocks reclaims nothing (`reclaimable` 0) and `cached_pinning` is reported as 0.
kv_stats paged_policy::do_stats() const {
  return unit_stats({.unit_bytes = block_bytes_,
                     .units = blocks_.size(),
                     .held = held_,
                     .cached = cached_,
                     .free = free_,
                     .used_bytes = used_tokens_ * token_bytes_,
                     .logical_bytes = live_tokens_ * token_bytes_});
}

nlohmann::ordered_json paged_policy::do_describe() const {
  nlohmann::ordered_json j = {
      {"backend", backend_name_},
      {"memory_bytes", unlimited_ ? nlohmann::ordered_json("unlimited") : nlohmann::ordered_json(memory_bytes_)},
      {"kv_bytes_per_token", token_bytes_},
      {"block_tokens", block_tokens_},
      {"block_bytes", block_bytes_},
      {"prefix_caching", prefix_caching_},
      {"pool", unlimited_ ? "grows on demand" : "preallocated"},
      {"num_blocks", blocks_.size()}};
  if (order_ != nullptr) {  // lru, vLLM's free queue, is what the describe() of a paged policy always meant
    j["eviction"] = eviction_.name;
    describe_eviction_settings(j, eviction_);
  }
  return j;
}

std::vector<std::uint32_t> paged_policy::free_queue() const {
  std::vector<std::uint32_t> out;
  out.reserve(queue_.size);
  for (std::uint32_t b = queue_.head; b != k_nil; b = blocks_[b].next) out.push_back(b);
  return out;
}

// ---- invariants -------------------------------------------------------------------------------

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::logic_error("paged policy: " + what); }

}  // namespace

void paged_policy::do_check_invariants() const {
  const std::uint64_t n = blocks_.size();
  if (n != pool_->physical_bytes() / block_bytes_) {
    fail(fmt::format("{} blocks in a pool of {} bytes", n, pool_->physical_bytes()));
  }
  if (held_ + cached_ + free_ != n) fail(fmt::format("held {} + cached {} + free {} != {}", held_, cached_, free_, n));
  check_list(queue_, "free queue");
  check_list(spare_, "spare");
  if (!unlimited_ && spare_.size != 0) fail("a preallocated pool uses the spare list");
  check_index(check_blocks(check_tables()));
}

// A free list: links both ways, members free, its size.
void paged_policy::check_list(const block_list& l, const char* name) const {
  const std::uint64_t n = blocks_.size();
  std::uint64_t count = 0;
  std::uint32_t prev = k_nil;
  for (std::uint32_t b = l.head; b != k_nil; b = blocks_[b].next) {
    if (b >= n || ++count > n) fail(fmt::format("the {} list is broken at block {}", name, b));
    const block& x = blocks_[b];
    if (x.prev != prev || x.list != l.tag) fail(fmt::format("block {} is badly linked in the {} list", b, name));
    if (x.ref != 0) fail(fmt::format("block {} with refcount {} is in the {} list", b, x.ref, name));
    prev = b;
  }
  if (prev != l.tail || count != l.size) fail(fmt::format("the {} list holds {}, says {}", name, count, l.size));
}

// The live block tables: their fills and tokens; returns each block's references from them.
std::vector<std::uint32_t> paged_policy::check_tables() const {
  const std::uint64_t n = blocks_.size();
  std::vector<std::uint32_t> refs(n, 0);
  std::uint64_t live_tokens = 0;
  for (const auto& [id, s] : requests_) {
    if (s.tokens == 0 || s.tokens > s.max_tokens) fail(fmt::format("request {} has {} tokens", id, s.tokens));
    if (s.table.size() != ceil_div(s.tokens, std::uint64_t{block_tokens_})) {
      fail(fmt::format("request {} has {} tokens in {} blocks", id, s.tokens, s.table.size()));
    }
    for (std::size_t k = 0; k < s.table.size(); ++k) {
      const std::uint32_t b = s.table[k];
      if (b >= n) fail(fmt::format("request {} holds block {} of {}", id, b, n));
      ++refs[b];
      const std::uint64_t want = std::min<std::uint64_t>(block_tokens_, s.tokens - k * block_tokens_);
      if (blocks_[b].fill != want)
        fail(fmt::format("block {} of request {} holds {} tokens, not {}", b, id, blocks_[b].fill, want));
      if (blocks_[b].hash != 0 && want != block_tokens_) fail(fmt::format("partial block {} has a hash", b));
    }
    live_tokens += s.tokens;
  }
  if (live_tokens != live_tokens_) fail(fmt::format("live tokens {} != {}", live_tokens, live_tokens_));
  return refs;
}

// Every block against its references, its list and the index; returns how many have a hash.
std::uint64_t paged_policy::check_blocks(const std::vector<std::uint32_t>& refs) const {
  const std::uint64_t n = blocks_.size();
  std::uint64_t held = 0, cached = 0, used = 0, hashed = 0;
  for (std::uint32_t b = 0; b < n; ++b) {
    const block& x = blocks_[b];
    if (x.ref != refs[b]) fail(fmt::format("block {} has refcount {}, held by {}", b, x.ref, refs[b]));
    if (x.hash != 0) ++hashed;
    if (x.hash != 0 && !prefix_caching_) fail(fmt::format("block {} has a hash with prefix caching off", b));
    if (x.ref > 0) {
      ++held;
      used += x.fill;
      if (x.list != 0) fail(fmt::format("held block {} is in a free list", b));
    } else if (x.hash != 0) {
      ++cached;
      if (x.list != (order_ != nullptr ? 0 : k_in_queue) || x.fill != block_tokens_) {
        fail(fmt::format("cached block {} is misplaced", b));
      }
    } else if (x.list != (unlimited_ ? k_in_spare : k_in_queue) || x.fill != 0) {
      fail(fmt::format("free block {} is misplaced", b));
    }
    if (x.hash != 0) {  // findable: the index leads to a chain holding it
      std::uint32_t c = index_.find(x.hash, blocks_);
      std::uint64_t steps = 0;
      while (c != k_nil && c != b && ++steps <= n) c = blocks_[c].dup_next;
      if (c != b) fail(fmt::format("cached block {} cannot be found by its hash", b));
    } else if (x.dup_prev != k_nil || x.dup_next != k_nil) {
      fail(fmt::format("block {} without a hash has duplicate links", b));
    }
  }
  if (held != held_ || cached != cached_)
    fail(fmt::format("held {} cached {}, counted {} {}", held, cached, held_, cached_));
  if (order_ != nullptr && order_->candidates() != cached) {
    fail(fmt::format("the eviction order has {} candidates, {} blocks are cached and free", order_->candidates(),
                     cached));
  }
  if (used != used_tokens_) fail(fmt::format("used tokens {} != {}", used, used_tokens_));
  return hashed;
}

// Every index entry heads a chain of blocks of its hash, in order; chains cover every hashed block.
void paged_policy::check_index(std::uint64_t hashed) const {
  const std::uint64_t n = blocks_.size();
  std::uint64_t chained = 0;
  std::uint64_t entries = 0;
  for (const hash_index::entry& e : index_.slots) {
    if (e.value == k_nil) continue;
    ++entries;
    if (e.value >= n) fail(fmt::format("an index entry names block {} of {}", e.value, n));
    const std::uint64_t key = blocks_[e.value].hash;
    if (key == 0 || e.fingerprint != fingerprint_of(key) || index_.find(key, blocks_) != e.value) {
      fail(fmt::format("the index entry of block {} (hash {:#x}) is not where its hash leads", e.value, key));
    }
    std::uint32_t prev = k_nil;
    for (std::uint32_t c = e.value; c != k_nil; c = blocks_[c].dup_next) {
      if (c >= n || blocks_[c].hash != key || blocks_[c].dup_prev != prev || ++chained > n) {
        fail(fmt::format("the chain of hash {:#x} is broken at block {}", key, c));
      }
      prev = c;
    }
    if (blocks_[e.value].dup_last != prev) fail(fmt::format("the chain of hash {:#x} ends elsewhere", key));
  }
  if (entries != index_.size) fail(fmt::format("the index counts {} entries, holds {}", index_.size, entries));
  if (chained != hashed) fail(fmt::format("{} hashed blocks, {} in the index", hashed, chained));
}

}  // namespace vtensor::sim
