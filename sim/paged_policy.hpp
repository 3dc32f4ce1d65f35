#pragma once
/// The `paged` KV policy, after vLLM v1 (vllm/v1/core: kv_cache_manager.py, block_pool.py,
/// kv_cache_utils.py, single_type_kv_cache_manager.py): one pool of fixed blocks of
/// `block_tokens` tokens, per-request block tables, automatic prefix caching by a hash chained
/// over full blocks, reference counts, and a free-block queue in LRU order whose head is evicted
/// when a block is allocated. docs/policies/paged.md says what is modelled and where it departs.
///
/// Note [Paged pool]
/// vLLM sizes its KV cache from the memory budget at start-up (num_gpu_blocks) and allocates it
/// whole. Here the pool is one sim::device_pool mapped whole at start for a finite budget:
/// num_blocks = floor(physical bytes / block bytes), block i at byte offset i x block bytes; the
/// bytes below one block at the end of the last chunk back no block and count as reserved-idle.
/// The pool never gives memory back to the driver. With `--memory unlimited` there is no budget
/// to size it from; the pool then grows by whole chunks when an allocation finds no free block
/// without a hash (Note [Unlimited pool]).
///
/// Note [Unlimited pool]
/// An unlimited budget stands for "a vLLM whose pool is large enough never to evict": in such a
/// pool the queue's head is always a block never used before, so no cached block is ever
/// popped. The policy keeps that meaning without a pool of infinite size: cached free blocks
/// (refcount 0, with a hash) stay in the LRU queue (where a hit revives them) and are never
/// popped; free blocks without a hash sit in a second list (`spare`) that allocation takes from;
/// when it is short, the pool maps more chunks and appends the blocks they hold to it. Which
/// hashless block a request gets changes no figure, so the second list needs no LRU order.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sim/device_pool.hpp"
#include "sim/kv_policy.hpp"
#include "sim/policy_options.hpp"
#include "sim/pool_policy.hpp"

namespace vtensor::sim {

/// The paged policy's own settings (its option table: paged_definition()).
struct paged_settings {
  static constexpr std::string_view policy_name = "paged";  ///< its registry name
  std::uint32_t block_tokens = 16;                          ///< tokens per KV block (vLLM's block_size)
  bool prefix_caching = true;                               ///< keep and share prefixes
  eviction_config eviction;  ///< which cached block goes first (Note [Paged eviction orders]); lru: vLLM's queue
};

/// The paged policy's registration: its option table and its answers (sim/policy_registry.cpp).
[[nodiscard]] policy_definition<paged_settings> paged_definition();

/// The paged policy. Reads kv (bytes per token), memory_bytes, backend, calibration_file,
/// zero_latency and device_index of kv_policy_options, and its own settings.
class paged_policy final : public pool_policy {
 public:
  /// Builds the pool on the backend named in `options`. Throws std::invalid_argument for bad
  /// options (naming the option), unknown_backend_error, calibration_error, vmm_error, or
  /// std::runtime_error when the device cannot back the budget.
  explicit paged_policy(const kv_policy_options& options, const paged_settings& settings = {});
  /// The same over a backend built by the caller (tests inject faults this way); `model` prices
  /// the calls. On a throw nothing is left held on `inner`.
  paged_policy(std::unique_ptr<vmm_backend> inner, const latency_model& model, const kv_policy_options& options,
               const paged_settings& settings = {});
  ~paged_policy() override;

  /// Marks "no block" in block ids and links.
  static constexpr std::uint32_t k_nil = ~std::uint32_t{0};

  /// Blocks in the pool now (grows with an unlimited budget).
  [[nodiscard]] std::uint64_t num_blocks() const { return blocks_.size(); }
  /// Bytes of one block (block_tokens x KV bytes per token).
  [[nodiscard]] std::uint64_t block_bytes() const { return block_bytes_; }
  /// The free-block queue, head (evicted next) first. Walks the queue: for tests.
  [[nodiscard]] std::vector<std::uint32_t> free_queue() const;
  /// The block table of live request `id` (throws std::invalid_argument when not live).
  [[nodiscard]] const std::vector<std::uint32_t>& block_table(request_id id) const;
  /// Reference count of block `b` (live requests holding it).
  [[nodiscard]] std::uint32_t ref_count(std::uint32_t b) const { return blocks_.at(b).ref; }
  /// Whether block `b` holds a hash (is in the prefix cache).
  [[nodiscard]] bool cached(std::uint32_t b) const { return blocks_.at(b).hash != 0; }
  /// The device region.

 private:
  /// One block of the pool. `hash` is 0 when the block holds none.
  struct block {
    std::uint64_t hash = 0;                            // chained block hash, 0: not in the cache
    std::uint32_t prev = k_nil, next = k_nil;          // links of the free list it is in
    std::uint32_t dup_prev = k_nil, dup_next = k_nil;  // blocks of the same hash, registration order
    std::uint32_t dup_last = k_nil;                    // the first of them: the last one
    std::uint32_t ref = 0;                             // live requests holding it
    std::uint32_t fill = 0;                            // valid tokens (kept while cached)
    std::uint8_t list = 0;                             // 0: none, 1: queue, 2: spare
  };

  /// An intrusive doubly linked list of blocks (vLLM's FreeKVCacheBlockQueue): O(1) append,
  /// pop from the head and removal from the middle.
  struct block_list {
    std::uint32_t head = k_nil, tail = k_nil;
    std::uint64_t size = 0;
    std::uint8_t tag = 0;  // the `list` value of its members
    void push_back(std::vector<block>& bs, std::uint32_t b);
    std::uint32_t pop_front(std::vector<block>& bs);
    void remove(std::vector<block>& bs, std::uint32_t b);
  };

  /// Open-addressing map from a block hash to the first block registered with it (vLLM's
  /// cached_block_hash_to_block keeps every duplicate and answers with the first). An entry is
  /// 8 bytes, the key's fingerprint and the block: the key itself is that block's hash (Note
  /// [A compact hash index] in paged_policy.cpp).
  struct hash_index {
    struct entry {
      std::uint32_t fingerprint = 0;  // the low 32 bits of mix64(key): its home slot, a first filter
      std::uint32_t value = k_nil;    // the first block of the key; k_nil: empty
    };
    std::vector<entry> slots = std::vector<entry>(1024);
    std::uint64_t size = 0;
    /// The first block registered with `key`, or k_nil.
    [[nodiscard]] std::uint32_t find(std::uint64_t key, const std::vector<block>& bs) const {
      return slots[slot_of(key, bs)].value;
    }
    /// The slot holding `key`, or the empty slot where it would go.
    [[nodiscard]] std::size_t slot_of(std::uint64_t key, const std::vector<block>& bs) const;
    /// The slot holding block `value`, which the index holds under `key`.
    [[nodiscard]] std::size_t slot_holding(std::uint64_t key, std::uint32_t value) const;
    /// Puts `key` -> `value` in `slot`, an empty slot from slot_of(key) (may grow the table).
    void insert_at(std::size_t slot, std::uint64_t key, std::uint32_t value, const std::vector<block>& bs);
    /// Empties `slot` (backward-shift deletion).
    void erase_at(std::size_t slot);
    void prefetch(std::uint64_t key) const;  // asks the cache for key's home slot (Note [Paged prefetches])
    void grow();
  };

  struct request_state {
    std::vector<std::uint32_t> table;  // block table
    std::uint64_t tokens = 0;          // tokens backed
    std::uint64_t max_tokens = 0;
  };

  kv_admit_result do_admit(const kv_request& r) override;
  [[nodiscard]] std::uint64_t do_cached_tokens(const kv_request& r) const override;
  bool do_grow(request_id id, std::uint64_t tokens) override;
  [[nodiscard]] std::uint64_t do_decode_rounds(std::span<const request_id> ids) override;
  kv_memory_view do_advance_round(std::span<const request_id> ids) override;
  void do_release(request_id id, release_reason why) override;
  [[nodiscard]] kv_stats do_stats() const override;
  [[nodiscard]] kv_access do_access() const override { return {true, block_tokens_}; }
  [[nodiscard]] std::string do_name() const override { return "paged"; }
  [[nodiscard]] nlohmann::ordered_json do_describe() const override;
  void do_check_invariants() const override;
  void check_list(const block_list& l, const char* name) const;                            // a free list
  [[nodiscard]] std::vector<std::uint32_t> check_tables() const;                           // block tables; their refs
  [[nodiscard]] std::uint64_t check_blocks(const std::vector<std::uint32_t>& refs) const;  // blocks; hashed
  void check_index(std::uint64_t hashed) const;                                            // the hash index

  void init(const kv_policy_options& options, const paged_settings& settings);  // after pool_ is built
  void hash_blocks(const kv_request& r) const;                           // hashes_ := hashes of the full keyed blocks
  [[nodiscard]] bool have_free(std::uint64_t n, std::uint64_t revived);  // may grow an unlimited pool
  void adopt_new_blocks();                                               // blocks of chunks mapped since
  std::uint32_t take_block();                                            // pops a free block (evicts its hash)
  void register_block(std::uint32_t b, std::uint64_t hash);              // into the prefix cache
  void unregister_block(std::uint32_t b);                                // out of it (an eviction)
  void append_blocks(request_state& s, std::uint64_t tokens);            // backs `tokens` more tokens
  void prefetch_queue_head(std::uint64_t n) const;                       // Note [Paged prefetches]
  void drop_expired();                                                   // Note [Expiry at admission]
  void uncache_free(std::uint32_t b);  // a free cached block loses its hash and becomes free
  [[nodiscard]] std::uint64_t free_blocks() const { return queue_.size + (order_ ? order_->candidates() : 0); }
  [[nodiscard]] static std::uint64_t trace_key_at(const kv_request& r, std::uint64_t token);
  [[nodiscard]] request_state& live(request_id id);
  [[nodiscard]] block_list& free_list_for(const block& b) { return b.hash != 0 || !unlimited_ ? queue_ : spare_; }
  /// Where a block whose refcount dropped to 0 goes: a cached one becomes a candidate of the
  /// order (zoo mode), anything else joins its free list.
  void park_free(std::uint32_t b);

  std::string backend_name_;
  std::uint64_t memory_bytes_ = 0;
  std::uint64_t token_bytes_ = 0;  // KV bytes per token
  std::uint32_t block_tokens_ = 16;
  std::uint64_t block_bytes_ = 0;
  bool prefix_caching_ = true;
  bool unlimited_ = false;

  std::vector<block> blocks_;
  block_list queue_;  // the free-block queue (LRU order)
  block_list spare_;  // unlimited pools: free blocks without a hash (Note [Unlimited pool])
  hash_index index_;
  std::unordered_map<std::uint64_t, request_state> requests_;
  eviction_config eviction_;               // settings' with the replay's clock and oracle
  std::unique_ptr<eviction_order> order_;  // null for lru (vLLM's queue); else Note [Paged eviction orders]

  // Figures kept as the blocks move (stats() walks nothing).
  std::uint64_t held_ = 0;         // blocks with ref > 0
  std::uint64_t cached_ = 0;       // ref 0 with a hash
  std::uint64_t free_ = 0;         // ref 0 without a hash
  std::uint64_t used_tokens_ = 0;  // fill of the held blocks (shared ones once)
  std::uint64_t live_tokens_ = 0;  // tokens of live requests

  // Scratch of admit and of cached_tokens() (a cache of the last request's hashes, hence mutable):
  mutable std::vector<std::uint64_t> hashes_;  // the hashes of hashed_blocks_ (Note [Hashes of a retried admission])
  mutable std::vector<token_block> hashed_blocks_;  // the keys hashes_ was computed from
  mutable std::uint64_t hashed_prompt_ = 0;         // and the prompt's tokens (0: none)
  std::vector<std::uint32_t> hits_;                 // scratch of admit
  std::vector<request_state*> round_;               // the requests of the last decode round (Note [Paged rounds])
};

}  // namespace vtensor::sim
