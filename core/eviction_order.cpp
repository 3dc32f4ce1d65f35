#include "core/eviction_order.hpp"

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/eviction_order_base.hpp"

namespace vtensor {

namespace {

/// One logical clock for the classic orders, advanced at every insert, insert_like and touch
/// (the rTree's `clock_` before the zoo: a node's `created` and `last_access` are its values), so
/// that the host driving them with the tree's events reproduces the tree's order exactly.
struct use_history {
  std::uint64_t seq = 0;   ///< clock at insert / insert_like: the insertion sequence (ties)
  std::uint64_t last = 0;  ///< clock at the last use; insert_like copies like's
  std::uint64_t hits = 0;  ///< touches; insertion is not one; insert_like copies like's
};

/// The classic orders' shared bookkeeping: a use_history per slot, ranked by Rank.
template <class Rank>
class history_order : public detail::ranked_order<Rank> {
 protected:
  void on_insert(cache_slot slot, const cache_slot* like) override {
    detail::ensure_slot(h_, slot);
    use_history& h = h_[slot];
    h.seq = ++clock_;
    if (like != nullptr) {
      h.last = h_[*like].last;
      h.hits = h_[*like].hits;
    } else {
      h.last = h.seq;
      h.hits = 0;
    }
  }
  void on_touch(cache_slot slot) override {
    this->unrank(slot);
    h_[slot].last = ++clock_;
    ++h_[slot].hits;
    this->rerank(slot);
  }
  void on_refresh(cache_slot slot) override {  // recency only: lru as a touch, lfu counts no hit
    this->unrank(slot);
    h_[slot].last = ++clock_;
    this->rerank(slot);
  }
  [[nodiscard]] const use_history& history(cache_slot slot) const { return h_[slot]; }

 private:
  std::vector<use_history> h_;
  std::uint64_t clock_ = 0;
};

/// Least recently used first (SGLang's and vLLM's default): the oldest last use, ties by
/// insertion. A split's upper node (insert_like) takes the lower one's last use.
class lru_order final : public history_order<std::pair<std::uint64_t, std::uint64_t>> {
 public:
  std::string_view name() const override { return "lru"; }

 private:
  std::pair<std::uint64_t, std::uint64_t> rank(cache_slot s) const override {
    return {history(s).last, history(s).seq};
  }
};

/// Oldest insertion first, whatever its use. insert_like does not inherit `like`'s place: a split
/// node is a new item and queues behind everything inserted before it.
class fifo_order final : public history_order<std::uint64_t> {
 public:
  std::string_view name() const override { return "fifo"; }

 private:
  std::uint64_t rank(cache_slot s) const override { return history(s).seq; }
};

/// Least frequently used first: the fewest touches, then the oldest last use, then insertion.
/// insert_like takes `like`'s touches and last use. Touches count up to 2^20 - 1 and then tie, as
/// in the rTree's old packed key (hits << 43 | last access), so that the two agree on every trace.
class lfu_order final : public history_order<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>> {
 public:
  std::string_view name() const override { return "lfu"; }

 private:
  static constexpr std::uint64_t k_max_hits = (std::uint64_t{1} << 20) - 1;
  std::tuple<std::uint64_t, std::uint64_t, std::uint64_t> rank(cache_slot s) const override {
    return {std::min(history(s).hits, k_max_hits), history(s).last, history(s).seq};
  }
};

}  // namespace

std::vector<std::string> eviction_order_names() {
  std::vector<std::string> names{"lru", "fifo", "lfu"};
  for (auto& n : detail::zoo_order_names()) names.push_back(std::move(n));
  return names;
}

std::unique_ptr<eviction_order> make_eviction_order(const eviction_config& config) {
  if (config.name == "lru") return std::make_unique<lru_order>();
  if (config.name == "fifo") return std::make_unique<fifo_order>();
  if (config.name == "lfu") return std::make_unique<lfu_order>();
  if (auto zoo = detail::make_zoo_order(config)) return zoo;
  throw std::invalid_argument(fmt::format("unknown eviction order '{}' (--eviction); known: {}", config.name,
                                          fmt::join(eviction_order_names(), ", ")));
}

}  // namespace vtensor
