#pragma once
/// What every eviction order shares (core/eviction_order.cpp, core/eviction_zoo.cpp): the host's
/// contract checked once, per-slot items and the cached-token total, and a ranked candidate set
/// for the orders that are a sort key (lru, fifo, lfu, priority, cost-aware, ttl, offline).
/// Internal: include it only from the orders' sources.

#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/eviction_order.hpp"

namespace vtensor::detail {

/// Checks the host's calls (Note [Eviction orders]) with one state byte per slot and forwards
/// them to hooks; a broken contract (unknown slot, double insert, zero tokens) throws
/// std::logic_error. Keeps each slot's item and the tokens of all cached items.
/// `set_candidate` with the value the slot already has is a no-op (hosts re-assert freely).
class checked_order : public eviction_order {
 public:
  void insert(cache_slot slot, const cache_item& item) final {
    enter(slot, item);
    on_insert(slot, nullptr);
  }
  void insert_like(cache_slot slot, const cache_item& item, cache_slot like) final {
    require_present(like, "insert_like (like)");
    enter(slot, item);
    on_insert(slot, &like);
  }
  void resize(cache_slot slot, const cache_item& item) final {
    require_present(slot, "resize");
    require_tokens(item);
    const cache_item old = items_[slot];
    tokens_ = tokens_ - old.tokens + item.tokens;
    items_[slot] = item;
    on_resize(slot, old);
  }
  void touch(cache_slot slot) final {
    require_present(slot, "touch");
    on_touch(slot);
  }
  void refresh(cache_slot slot) final {
    require_present(slot, "refresh");
    on_refresh(slot);
  }
  void set_candidate(cache_slot slot, bool candidate) final {
    require_present(slot, "set_candidate");
    if (is_candidate(slot) == candidate) return;
    state_[slot] = candidate ? state::candidate : state::present;
    candidates_ = candidate ? candidates_ + 1 : candidates_ - 1;
    on_candidate(slot, candidate);
  }
  [[nodiscard]] std::optional<cache_slot> pop_victim() final {
    if (candidates_ == 0) return std::nullopt;
    return leave(on_pop_victim());
  }
  [[nodiscard]] std::optional<cache_slot> pop_expired() final {
    if (candidates_ == 0) return std::nullopt;
    const std::optional<cache_slot> s = on_pop_expired();
    if (!s) return std::nullopt;
    return leave(*s);
  }
  void erase(cache_slot slot) final {
    require_present(slot, "erase");
    const bool was = is_candidate(slot);
    on_erase(slot, was);
    if (was) --candidates_;
    tokens_ -= items_[slot].tokens;
    state_[slot] = state::absent;
  }
  [[nodiscard]] std::size_t candidates() const final { return candidates_; }

 protected:
  /// `slot` entered (items and totals already updated); `like` is the slot whose history it takes.
  virtual void on_insert(cache_slot slot, const cache_slot* like) = 0;
  /// `slot`'s item changed from `old` (totals already updated).
  virtual void on_resize(cache_slot /*slot*/, const cache_item& /*old*/) {}
  virtual void on_touch(cache_slot slot) = 0;
  /// A refresh (eviction_order::refresh): a touch by default, for the orders whose rank is recency alone.
  virtual void on_refresh(cache_slot slot) { on_touch(slot); }
  /// `slot`'s candidacy changed to `candidate` (is_candidate() already says so).
  virtual void on_candidate(cache_slot slot, bool candidate) = 0;
  /// Unlinks and returns the next victim; called only when candidates() > 0.
  virtual cache_slot on_pop_victim() = 0;
  /// Unlinks and returns an expired candidate, if any; called only when candidates() > 0.
  virtual std::optional<cache_slot> on_pop_expired() { return std::nullopt; }
  /// `slot` leaves for the host's reason; is_candidate() still says what it was.
  virtual void on_erase(cache_slot slot, bool was_candidate) = 0;

  [[nodiscard]] bool is_candidate(cache_slot slot) const { return state_[slot] == state::candidate; }
  [[nodiscard]] const cache_item& item(cache_slot slot) const { return items_[slot]; }
  /// Tokens of every cached item, candidate or not.
  [[nodiscard]] std::uint64_t cached_tokens() const { return tokens_; }
  /// Per-slot storage grows with this (slots are dense); orders size their own vectors to it.
  [[nodiscard]] std::size_t slot_capacity() const { return state_.size(); }

 private:
  enum class state : std::uint8_t { absent, present, candidate };

  void require_present(cache_slot slot, const char* what) const {
    if (slot >= state_.size() || state_[slot] == state::absent)
      throw std::logic_error(std::string("eviction order: ") + what + " of a slot not in the cache");
  }
  static void require_tokens(const cache_item& item) {
    if (item.tokens == 0) throw std::logic_error("eviction order: an item of 0 tokens");
  }
  void enter(cache_slot slot, const cache_item& item) {
    require_tokens(item);
    if (slot >= state_.size()) {
      state_.resize(static_cast<std::size_t>(slot) + 1, state::absent);
      items_.resize(state_.size());
    }
    if (state_[slot] != state::absent) throw std::logic_error("eviction order: insert of a slot already cached");
    state_[slot] = state::present;
    items_[slot] = item;
    tokens_ += item.tokens;
  }
  cache_slot leave(cache_slot slot) {
    if (slot >= state_.size() || state_[slot] != state::candidate)
      throw std::logic_error("eviction order: popped a slot that is not a candidate");
    state_[slot] = state::absent;
    --candidates_;
    tokens_ -= items_[slot].tokens;
    return slot;
  }

  std::vector<state> state_;
  std::vector<cache_item> items_;
  std::uint64_t tokens_ = 0;
  std::size_t candidates_ = 0;
};

/// An order that is a sort key: candidates sit in an ordered set by `Rank` (which must end in
/// something unique, the insertion sequence), lowest first. Subclasses compute rank(slot) from
/// their per-slot state and bracket every change of a candidate's state with unrank/rerank.
/// Each operation costs O(log n) in the candidates.
template <class Rank>
class ranked_order : public checked_order {
 protected:
  [[nodiscard]] virtual Rank rank(cache_slot slot) const = 0;

  /// Before changing the state rank() reads.
  void unrank(cache_slot slot) {
    if (is_candidate(slot)) set_.erase({rank(slot), slot});
  }
  /// After.
  void rerank(cache_slot slot) {
    if (is_candidate(slot)) set_.insert({rank(slot), slot});
  }
  void on_candidate(cache_slot slot, bool candidate) override {
    if (candidate) {
      set_.insert({rank(slot), slot});
    } else {
      set_.erase({rank(slot), slot});
    }
  }
  cache_slot on_pop_victim() override {
    const cache_slot s = set_.begin()->second;
    set_.erase(set_.begin());
    return s;
  }
  void on_erase(cache_slot slot, bool was_candidate) override {
    if (was_candidate) set_.erase({rank(slot), slot});
  }
  /// The lowest-ranked candidate; the set must not be empty.
  [[nodiscard]] const std::pair<Rank, cache_slot>& first() const { return *set_.begin(); }
  [[nodiscard]] const std::pair<Rank, cache_slot>& last() const { return *set_.rbegin(); }

 private:
  std::set<std::pair<Rank, cache_slot>> set_;
};

/// Grows a per-slot vector so that `slot` is a valid index.
template <class T>
void ensure_slot(std::vector<T>& v, cache_slot slot) {
  if (slot >= v.size()) v.resize(static_cast<std::size_t>(slot) + 1);
}

}  // namespace vtensor::detail
