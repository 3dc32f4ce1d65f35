#include "sim/static_policy.hpp"

#include <fmt/format.h>

#include <bit>
#include <limits>
#include <stdexcept>

namespace vtensor::sim {

// ---- first fit -------------------------------------------------------------------------------

void first_fit_arena::insert(std::uint64_t offset, std::uint64_t slots) {
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {  // joins the extent before it
      offset = prev->first;
      slots += prev->second;
      sizes_.erase(sizes_.find(prev->second));
      free_by_offset_.erase(prev);
    }
  }
  if (next != free_by_offset_.end() && offset + slots == next->first) {  // and the one after it
    slots += next->second;
    sizes_.erase(sizes_.find(next->second));
    free_by_offset_.erase(next);
  }
  free_by_offset_.emplace(offset, slots);
  sizes_.insert(slots);
}

std::optional<std::uint64_t> first_fit_arena::allocate(std::uint64_t tokens, std::uint64_t& granted) {
  if (tokens == 0 || largest_free() < tokens) return std::nullopt;
  for (auto it = free_by_offset_.begin(); it != free_by_offset_.end(); ++it) {
    if (it->second < tokens) continue;
    const auto [offset, slots] = *it;
    sizes_.erase(sizes_.find(slots));
    free_by_offset_.erase(it);
    if (slots > tokens) {
      free_by_offset_.emplace(offset + tokens, slots - tokens);
      sizes_.insert(slots - tokens);
    }
    free_ -= tokens;
    granted = tokens;
    return offset;
  }
  return std::nullopt;  // unreachable: largest_free() said one fits
}

void first_fit_arena::free(std::uint64_t offset, std::uint64_t granted) {
  insert(offset, granted);
  free_ += granted;
}

void first_fit_arena::extend(std::uint64_t more) {
  if (more == 0) return;
  insert(capacity_, more);
  capacity_ += more;
  free_ += more;
}

std::uint64_t first_fit_arena::largest_free() const { return sizes_.empty() ? 0 : *sizes_.rbegin(); }

void first_fit_arena::check(std::uint64_t allocated_slots) const {
  std::uint64_t sum = 0;
  std::uint64_t end = 0;
  bool first = true;
  for (const auto& [offset, slots] : free_by_offset_) {
    if (slots == 0) throw std::logic_error("first fit: an empty free extent");
    if (!first && offset <= end) {
      throw std::logic_error(fmt::format("first fit: free extent at {} overlaps or touches the one before", offset));
    }
    if (offset + slots > capacity_) throw std::logic_error("first fit: a free extent past the arena's end");
    end = offset + slots;
    first = false;
    sum += slots;
  }
  if (sum != free_ || sizes_.size() != free_by_offset_.size()) {
    throw std::logic_error(fmt::format("first fit: free extents sum to {} slots, count says {}", sum, free_));
  }
  if (free_ + allocated_slots != capacity_) {
    throw std::logic_error(
        fmt::format("first fit: {} free + {} allocated != {} slots", free_, allocated_slots, capacity_));
  }
}

// ---- buddy -----------------------------------------------------------------------------------

namespace {
int order_for(std::uint64_t tokens) { return tokens <= 1 ? 0 : std::bit_width(tokens - 1); }
}  // namespace

std::uint64_t buddy_arena::granted_for(std::uint64_t tokens) const { return std::uint64_t{1} << order_for(tokens); }

void buddy_arena::add_root(std::uint64_t offset, int order) {
  // A free block of 2^order slots at `offset` (aligned): joins its buddy while the buddy is free.
  while (order + 1 < k_orders) {
    const std::uint64_t buddy = offset ^ (std::uint64_t{1} << order);
    auto it = blocks_[static_cast<std::size_t>(order)].find(buddy);
    if (it == blocks_[static_cast<std::size_t>(order)].end()) break;
    blocks_[static_cast<std::size_t>(order)].erase(it);
    offset = std::min(offset, buddy);
    ++order;
  }
  blocks_[static_cast<std::size_t>(order)].insert(offset);
}

std::optional<std::uint64_t> buddy_arena::allocate(std::uint64_t tokens, std::uint64_t& granted) {
  if (tokens == 0) return std::nullopt;
  const int want = order_for(tokens);
  int have = want;
  while (have < k_orders && blocks_[static_cast<std::size_t>(have)].empty()) ++have;
  if (have >= k_orders) return std::nullopt;
  auto& from = blocks_[static_cast<std::size_t>(have)];
  const std::uint64_t offset = *from.begin();  // the lowest block of that order: deterministic
  from.erase(from.begin());
  while (have > want) {  // split, keeping the lower half
    --have;
    blocks_[static_cast<std::size_t>(have)].insert(offset + (std::uint64_t{1} << have));
  }
  granted = std::uint64_t{1} << want;
  free_ -= granted;
  return offset;
}

void buddy_arena::free(std::uint64_t offset, std::uint64_t granted) {
  add_root(offset, order_for(granted));
  free_ += granted;
}

void buddy_arena::extend(std::uint64_t more) {
  // The new slots as the aligned power-of-two blocks of their binary decomposition; each merges
  // with a free buddy, so an arena grown chunk by chunk still offers large blocks.
  std::uint64_t at = capacity_;
  const std::uint64_t end = capacity_ + more;
  while (at < end) {
    int order = at == 0 ? k_orders - 1 : std::countr_zero(at);
    while ((std::uint64_t{1} << order) > end - at) --order;
    add_root(at, order);
    at += std::uint64_t{1} << order;
  }
  capacity_ = end;
  free_ += more;
}

std::uint64_t buddy_arena::largest_free() const {
  for (int k = k_orders - 1; k >= 0; --k) {
    if (!blocks_[static_cast<std::size_t>(k)].empty()) return std::uint64_t{1} << k;
  }
  return 0;
}

void buddy_arena::check(std::uint64_t allocated_slots) const {
  std::uint64_t sum = 0;
  std::map<std::uint64_t, std::uint64_t> blocks;
  for (int k = 0; k < k_orders; ++k) {
    const std::uint64_t size = std::uint64_t{1} << k;
    for (const std::uint64_t offset : blocks_[static_cast<std::size_t>(k)]) {
      if (offset % size != 0) throw std::logic_error(fmt::format("buddy: block at {} not aligned to {}", offset, size));
      if (offset + size > capacity_) throw std::logic_error("buddy: a free block past the arena's end");
      if (blocks_[static_cast<std::size_t>(k)].count(offset ^ size) != 0 && k + 1 < k_orders) {
        throw std::logic_error(fmt::format("buddy: free buddies at {} and {} not merged", offset, offset ^ size));
      }
      blocks.emplace(offset, size);
      sum += size;
    }
  }
  std::uint64_t end = 0;
  for (const auto& [offset, size] : blocks) {
    if (offset < end) throw std::logic_error(fmt::format("buddy: free block at {} overlaps the one before", offset));
    end = offset + size;
  }
  if (sum != free_ || free_ + allocated_slots != capacity_) {
    throw std::logic_error(fmt::format("buddy: free blocks sum to {} slots, count {}, allocated {}, arena {}", sum,
                                       free_, allocated_slots, capacity_));
  }
}

// ---- the policy ------------------------------------------------------------------------------

namespace {

std::unique_ptr<arena_allocator> make_arena(arena_fit fit) {
  if (fit == arena_fit::buddy) return std::make_unique<buddy_arena>();
  return std::make_unique<first_fit_arena>();
}

}  // namespace

static_policy::static_policy(const kv_policy_options& options, const static_settings& settings)
    : static_policy(options,
                    std::make_unique<device_pool>(options.backend, device_config(options), options.memory_bytes),
                    settings) {}

static_policy::static_policy(const kv_policy_options& options, std::unique_ptr<device_pool> pool,
                             const static_settings& settings)
    : pool_policy(std::move(pool)),
      options_(options),
      settings_(settings),
      bytes_per_token_(options.kv.kv_bytes_per_token()),
      arena_(make_arena(settings.arena)) {
  if (bytes_per_token_ == 0) throw std::invalid_argument("static policy: one token's KV is 0 bytes");
  if (options_.max_context_tokens == 0) throw std::invalid_argument("static policy: --max-context is 0");
  sync_capacity();
}

static_policy::~static_policy() = default;

policy_definition<static_settings> static_definition() {
  using s = static_settings;
  policy_definition<s> d;
  d.options = {choice_option("reserve", "static: tokens a request reserves: " + k_static_reserve_names.list(" or "),
                             &s::reserve, static_reserve::max, k_static_reserve_names),
               choice_option("arena", "static: arena allocator: " + k_arena_fit_names.list(" or "), &s::arena,
                             arena_fit::first_fit, k_arena_fit_names)};
  d.make = construct_with<static_policy, s>();
  d.access = [](const kv_policy_options&, const s&) { return kv_access{}; };  // contiguous per request
  d.sharing = [](const kv_policy_options&, const s&) { return sharing_model{sharing_model::moment::never, 1}; };
  return d;
}

void static_policy::sync_capacity() {
  const std::uint64_t slots = pool_->physical_bytes() / bytes_per_token_;
  if (slots > arena_->capacity()) arena_->extend(slots - arena_->capacity());
}

std::uint64_t static_policy::reservation_for(std::uint64_t max_tokens) const {
  switch (settings_.reserve) {
    case static_reserve::max: return options_.max_context_tokens;
    case static_reserve::pow2: return std::bit_ceil(max_tokens);
    case static_reserve::exact: break;
  }
  return max_tokens;
}

static_policy::region& static_policy::find(request_id id) {
  const auto it = live_.find(id);
  if (it == live_.end()) throw std::invalid_argument(fmt::format("static policy: unknown request {}", id.value));
  return it->second;
}

std::uint64_t static_policy::offset_of(request_id id) const {
  const auto it = live_.find(id);
  if (it == live_.end()) throw std::invalid_argument(fmt::format("static policy: unknown request {}", id.value));
  return it->second.offset;
}

kv_admit_result static_policy::do_admit(const kv_request& r) {
  if (live_.contains(r.id)) throw std::invalid_argument(fmt::format("static policy: request {} is live", r.id.value));
  if (r.prompt_tokens == 0 || r.max_tokens < r.prompt_tokens) {
    throw std::invalid_argument(
        fmt::format("static policy: request {}: prompt {} tokens, max {}", r.id.value, r.prompt_tokens, r.max_tokens));
  }
  const std::uint64_t want = reservation_for(r.max_tokens);
  if (want < r.max_tokens) {
    throw std::invalid_argument(fmt::format("static policy: request {} may hold {} tokens, more than the {} reserved",
                                            r.id.value, r.max_tokens, want));
  }
  std::uint64_t granted = 0;
  std::optional<std::uint64_t> offset = arena_->allocate(want, granted);
  if (!offset && !pool_->preallocated()) {
    // Unlimited: grow the arena by twice the rounded size (room for an aligned buddy block).
    const std::uint64_t more = 2 * arena_->granted_for(want) * bytes_per_token_;
    if (pool_->grow_to(pool_->physical_bytes() + more)) {
      sync_capacity();
      offset = arena_->allocate(want, granted);
    } else {
      sync_capacity();  // keep what was mapped
    }
  }
  if (!offset) return {};
  live_.emplace(r.id, region{*offset, granted, r.max_tokens, r.prompt_tokens});
  tokens_ += r.prompt_tokens;
  max_tokens_ += r.max_tokens;
  granted_ += granted;
  prompt_tokens_ += r.prompt_tokens;
  return {true, 0, 0};
}

bool static_policy::do_grow(request_id id, std::uint64_t tokens) {
  region& g = find(id);
  if (g.tokens + tokens > g.max_tokens) {
    throw std::invalid_argument(fmt::format("static policy: request {} grows to {} tokens, past its {}", id.value,
                                            g.tokens + tokens, g.max_tokens));
  }
  g.tokens += tokens;  // the region holds prompt + output already (Note [Static reservation])
  tokens_ += tokens;
  return true;
}

void static_policy::do_release(request_id id, release_reason /*why*/) {
  const region g = find(id);
  arena_->free(g.offset, g.granted);
  tokens_ -= g.tokens;
  max_tokens_ -= g.max_tokens;
  granted_ -= g.granted;
  live_.erase(id);
}

kv_stats static_policy::do_stats() const {
  kv_stats s;
  const std::uint64_t b = bytes_per_token_;
  s.memory.mapped_bytes = granted_ * b;
  s.memory.used_bytes = tokens_ * b;
  s.memory.free_pool_bytes = arena_->free_slots() * b;
  s.memory.logical_bytes = tokens_ * b;
  add_pool_figures(s);
  // Note [Static breakdown].
  const std::uint64_t tail = s.memory.physical_bytes - arena_->capacity() * b;
  s.breakdown.used = tokens_ * b;
  s.breakdown.reserved_idle = (max_tokens_ - tokens_) * b + tail;
  s.breakdown.internal = (granted_ - max_tokens_) * b;
  s.breakdown.free = arena_->largest_free() * b;
  s.breakdown.external = (arena_->free_slots() - arena_->largest_free()) * b;
  return s;
}

nlohmann::ordered_json static_policy::do_describe() const {
  nlohmann::ordered_json j;
  j["backend"] = options_.backend;
  j["memory_bytes"] = options_.memory_bytes;
  j["reserve"] = std::string(k_static_reserve_names.name(settings_.reserve));
  j["arena"] = std::string(k_arena_fit_names.name(settings_.arena));
  j["kv_bytes_per_token"] = bytes_per_token_;
  j["max_context_tokens"] = options_.max_context_tokens;
  j["arena_tokens"] = arena_->capacity();
  j["preallocated"] = pool_->preallocated();
  return j;
}

void static_policy::do_check_invariants() const {
  std::uint64_t tokens = 0;
  std::uint64_t max_tokens = 0;
  std::uint64_t granted = 0;
  std::map<std::uint64_t, std::uint64_t> regions;
  for (const auto& [id, g] : live_) {
    if (g.tokens > g.max_tokens || g.max_tokens > g.granted) {
      throw std::logic_error(fmt::format("static policy: request {} holds {} of {} tokens in {} slots", id.value,
                                         g.tokens, g.max_tokens, g.granted));
    }
    tokens += g.tokens;
    max_tokens += g.max_tokens;
    granted += g.granted;
    regions.emplace(g.offset, g.granted);
  }
  if (tokens != tokens_ || max_tokens != max_tokens_ || granted != granted_) {
    throw std::logic_error("static policy: the totals disagree with the live regions");
  }
  std::uint64_t end = 0;
  for (const auto& [offset, slots] : regions) {
    if (offset < end) throw std::logic_error(fmt::format("static policy: regions overlap at slot {}", offset));
    end = offset + slots;
  }
  if (end > arena_->capacity()) throw std::logic_error("static policy: a region past the arena's end");
  arena_->check(granted_);
  if (arena_->capacity() * bytes_per_token_ > pool_->physical_bytes()) {
    throw std::logic_error("static policy: the arena is larger than the mapped pool");
  }
}

}  // namespace vtensor::sim
