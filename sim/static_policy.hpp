#pragma once
/// The `static` KV policy: Orca / FasterTransformer-style reservation, as the vLLM paper
/// (arXiv 2309.06180, section 3 and figure 2) describes the systems before it. Every admitted
/// request reserves one contiguous region of the KV arena for the tokens it may ever hold, from
/// a real allocator over one preallocated arena, so that internal fragmentation, reservation and
/// external fragmentation are measured rather than assumed.
///
/// Note [Static reservation]
/// What a request reserves (`--reserve`):
/// - `max`: the maximum context (`--max-context`), as FasterTransformer preallocates its cache
///   for the longest sequence it serves;
/// - `pow2`: the next power of two of prompt + output, the vLLM paper's description of Orca's
///   "power of two" variant;
/// - `exact`: prompt + output exactly, the paper's "Orca (Oracle)", which knows each request's
///   output length in advance (the trace does).
/// Growth never fails: the region already holds prompt + output. The arena is the device_pool's
/// range, allocated whole at start from the budget; its allocator (`--arena`) is first fit (the
/// lowest-addressed free extent that fits; freed extents coalesce with their neighbours) or a
/// binary buddy system over power-of-two blocks in token units (a request is rounded up to a
/// power of two and takes the lowest free block of the smallest order that fits, split as
/// needed; a freed block merges with its buddy while the buddy is free; an arena that is not a
/// power of two starts as the aligned blocks of its binary representation). A request that
/// cannot get its region waits (admission fails changing nothing). No prefix caching: every
/// prompt is computed.
///
/// Note [Static breakdown]
/// In token slots of `bytes_per_token`: used = tokens written; reserved idle = the part of the
/// region up to prompt + output not written yet (the vLLM paper's "reserved" slots) plus the
/// arena's tail below one token; internal = the region beyond prompt + output (rounding to a
/// power of two, to the maximum context, or by the buddy allocator: "internal fragmentation" in
/// the paper); free = the largest free extent; external = every other free extent (free memory
/// a request larger than the largest extent cannot use). With `--memory unlimited` the arena
/// grows by chunks when no extent fits (the growth's VMM time is on the step's clock).

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backends/enum_names.hpp"
#include "sim/device_pool.hpp"
#include "sim/kv_policy.hpp"
#include "sim/policy_options.hpp"
#include "sim/pool_policy.hpp"

namespace vtensor::sim {

/// What a `static` request reserves (Orca / FasterTransformer style).
enum class static_reserve : std::uint8_t {
  max,    ///< the maximum context
  pow2,   ///< the next power of two of prompt + max output
  exact,  ///< prompt + output exactly (the vLLM paper's "oracle")
};
inline constexpr enum_names<static_reserve, 3> k_static_reserve_names{
    {{{static_reserve::max, "max"}, {static_reserve::pow2, "pow2"}, {static_reserve::exact, "exact"}}}};

/// The allocator of the `static` arena.
enum class arena_fit : std::uint8_t {
  first_fit,  ///< lowest-addressed free extent that fits
  buddy,      ///< binary buddy system over power-of-two blocks
};
inline constexpr enum_names<arena_fit, 2> k_arena_fit_names{
    {{{arena_fit::first_fit, "first-fit"}, {arena_fit::buddy, "buddy"}}}};

/// The static policy's own settings (its option table: static_definition()).
struct static_settings {
  static constexpr std::string_view policy_name = "static";  ///< its registry name
  static_reserve reserve = static_reserve::max;              ///< what a request reserves
  arena_fit arena = arena_fit::first_fit;                    ///< the arena's allocator
};

/// The static policy's registration: its option table and its answers (sim/policy_registry.cpp).
[[nodiscard]] policy_definition<static_settings> static_definition();

/// An allocator of token-slot extents in an arena that can grow at its end. Offsets and sizes
/// are in token slots.
class arena_allocator {
 public:
  virtual ~arena_allocator() = default;
  /// An extent of at least `tokens` slots (the granted size in `granted`), or nullopt.
  [[nodiscard]] virtual std::optional<std::uint64_t> allocate(std::uint64_t tokens, std::uint64_t& granted) = 0;
  /// Gives back the extent at `offset` of `granted` slots.
  virtual void free(std::uint64_t offset, std::uint64_t granted) = 0;
  /// Slots [capacity, capacity + more) join the arena.
  virtual void extend(std::uint64_t more) = 0;
  /// Slots the arena holds.
  [[nodiscard]] std::uint64_t capacity() const { return capacity_; }
  /// Free slots.
  [[nodiscard]] std::uint64_t free_slots() const { return free_; }
  /// The largest free extent a request could get whole.
  [[nodiscard]] virtual std::uint64_t largest_free() const = 0;
  /// The slots a request of `tokens` would be granted (rounding).
  [[nodiscard]] virtual std::uint64_t granted_for(std::uint64_t tokens) const = 0;
  /// Throws std::logic_error when the free structures disagree with the counts.
  virtual void check(std::uint64_t allocated_slots) const = 0;

 protected:
  std::uint64_t capacity_ = 0;
  std::uint64_t free_ = 0;
};

/// First fit over address-ordered free extents, coalescing on free.
class first_fit_arena final : public arena_allocator {
 public:
  std::optional<std::uint64_t> allocate(std::uint64_t tokens, std::uint64_t& granted) override;
  void free(std::uint64_t offset, std::uint64_t granted) override;
  void extend(std::uint64_t more) override;
  [[nodiscard]] std::uint64_t largest_free() const override;
  [[nodiscard]] std::uint64_t granted_for(std::uint64_t tokens) const override { return tokens; }
  void check(std::uint64_t allocated_slots) const override;
  /// The free extents, offset -> slots (tests).
  [[nodiscard]] const std::map<std::uint64_t, std::uint64_t>& extents() const { return free_by_offset_; }

 private:
  void insert(std::uint64_t offset, std::uint64_t slots);  // coalesces
  std::map<std::uint64_t, std::uint64_t> free_by_offset_;
  std::multiset<std::uint64_t> sizes_;  // the sizes of the free extents, for largest_free()
};

/// A binary buddy system over aligned power-of-two blocks (Note [Static reservation]).
class buddy_arena final : public arena_allocator {
 public:
  std::optional<std::uint64_t> allocate(std::uint64_t tokens, std::uint64_t& granted) override;
  void free(std::uint64_t offset, std::uint64_t granted) override;
  void extend(std::uint64_t more) override;
  [[nodiscard]] std::uint64_t largest_free() const override;
  [[nodiscard]] std::uint64_t granted_for(std::uint64_t tokens) const override;
  void check(std::uint64_t allocated_slots) const override;

 private:
  static constexpr int k_orders = 64;
  void add_root(std::uint64_t offset, int order);
  std::array<std::set<std::uint64_t>, k_orders> blocks_;  // free blocks by order (size 2^order)
};

/// The policy. Not thread-safe (the step thread only).
class static_policy final : public pool_policy {
 public:
  /// Maps the arena through `options.backend` (throws what device_pool throws) and picks the
  /// allocator. Throws std::invalid_argument when one token's KV is empty.
  explicit static_policy(const kv_policy_options& options, const static_settings& settings = {});
  /// The same over a device pool built by the caller (tests inject faults this way).
  static_policy(const kv_policy_options& options, std::unique_ptr<device_pool> pool,
                const static_settings& settings = {});
  ~static_policy() override;

  /// Slots `r` would reserve under the option in effect (before allocator rounding).
  [[nodiscard]] std::uint64_t reservation_for(std::uint64_t max_tokens) const;
  /// The arena's allocator (tests).
  [[nodiscard]] const arena_allocator& arena() const { return *arena_; }
  /// Offset in slots of live request `id`'s region (tests); throws for an unknown id.
  [[nodiscard]] std::uint64_t offset_of(request_id id) const;

 private:
  struct region {
    std::uint64_t offset = 0;      // slots
    std::uint64_t granted = 0;     // slots held (reservation after allocator rounding)
    std::uint64_t max_tokens = 0;  // prompt + output
    std::uint64_t tokens = 0;      // written
  };

  kv_admit_result do_admit(const kv_request& r) override;
  bool do_grow(request_id id, std::uint64_t tokens) override;
  void do_release(request_id id, release_reason why) override;
  [[nodiscard]] kv_stats do_stats() const override;
  [[nodiscard]] std::string do_name() const override { return "static"; }
  [[nodiscard]] nlohmann::ordered_json do_describe() const override;
  void do_check_invariants() const override;
  region& find(request_id id);
  void sync_capacity();  // arena slots follow the pool's physical bytes

  kv_policy_options options_;
  static_settings settings_;
  std::uint64_t bytes_per_token_ = 0;
  std::unique_ptr<arena_allocator> arena_;
  std::unordered_map<request_id, region> live_;
  std::uint64_t tokens_ = 0;      // written, over live requests
  std::uint64_t max_tokens_ = 0;  // prompt + output, over live requests
  std::uint64_t granted_ = 0;     // slots held, over live requests
};

}  // namespace vtensor::sim
