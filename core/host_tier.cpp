#include "core/host_tier.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace vtensor {

host_tier::host_tier(std::uint64_t capacity_bytes, std::uint64_t bytes_per_token, const eviction_config& eviction)
    : bytes_per_token_(bytes_per_token),
      capacity_tokens_(bytes_per_token == 0          ? 0
                       : capacity_bytes == unlimited ? unlimited
                                                     : capacity_bytes / bytes_per_token),
      order_(make_eviction_order(eviction)) {
  if (bytes_per_token == 0) throw std::invalid_argument("host tier: bytes per token must be at least 1");
}

host_tier::~host_tier() = default;

void host_tier::evict_one() {
  const std::optional<cache_slot> victim = order_->pop_victim();
  if (!victim) throw std::logic_error("host tier: over capacity with no candidate to evict");
  host_block& b = slots_[*victim];
  stats_.evicted_tokens += b.tokens;
  stats_.held_tokens -= b.tokens;
  by_key_.erase(b.key);
  b = host_block{};
  free_.push_back(*victim);
}

std::uint64_t host_tier::offer(const host_block& block) {
  if (block.key == 0 || block.tokens == 0) throw std::invalid_argument("host tier: a block needs a key and tokens");
  stats_.offered_tokens += block.tokens;
  if (const auto it = by_key_.find(block.key); it != by_key_.end()) {
    order_->refresh(it->second);
    return 0;
  }
  if (block.tokens > capacity_tokens_) {
    stats_.rejected_tokens += block.tokens;
    return 0;
  }
  while (capacity_tokens_ - stats_.held_tokens < block.tokens) evict_one();
  cache_slot slot = 0;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = static_cast<cache_slot>(slots_.size());
    slots_.emplace_back();
  }
  slots_[slot] = block;
  by_key_.emplace(block.key, slot);
  order_->insert(slot, cache_item{block.tokens, block.offset, block.key});
  order_->set_candidate(slot, true);
  stats_.held_tokens += block.tokens;
  stats_.peak_held_tokens = std::max(stats_.peak_held_tokens, stats_.held_tokens);
  stats_.stored_tokens += block.tokens;
  return block.tokens * bytes_per_token_;
}

std::uint64_t host_tier::match(std::span<const host_block> blocks) {
  std::uint64_t tokens = 0;
  for (const host_block& b : blocks) {
    const auto it = by_key_.find(b.key);
    if (it == by_key_.end()) break;
    order_->touch(it->second);
    tokens += slots_[it->second].tokens;
  }
  stats_.hit_tokens += tokens;
  return tokens;
}

void host_tier::check_invariants() const {
  std::uint64_t held = 0;
  std::size_t used = 0;
  for (cache_slot s = 0; s < slots_.size(); ++s) {
    const host_block& b = slots_[s];
    if (b.key == 0) continue;
    ++used;
    held += b.tokens;
    const auto it = by_key_.find(b.key);
    if (it == by_key_.end() || it->second != s)
      throw std::logic_error("host tier: slot " + std::to_string(s) + " is not in the key index");
  }
  if (used != by_key_.size()) throw std::logic_error("host tier: the key index names freed slots");
  if (used + free_.size() != slots_.size()) throw std::logic_error("host tier: slots lost");
  if (held != stats_.held_tokens) throw std::logic_error("host tier: held tokens do not add up");
  if (held > capacity_tokens_) throw std::logic_error("host tier: over capacity");
  if (order_->candidates() != used) throw std::logic_error("host tier: the order's candidates are not the held blocks");
}

}  // namespace vtensor
