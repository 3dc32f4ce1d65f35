/// The eviction zoo beyond lru, fifo and lfu (Note [Eviction orders]): slru, arc, s3-fifo,
/// priority, cost-aware, ttl and offline. Each order is one class below with what it does and
/// where it comes from; all share detail::checked_order's contract checks.

#include <algorithm>
#include <cmath>
#include <list>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "core/eviction_order.hpp"
#include "core/eviction_order_base.hpp"

namespace vtensor::detail {

namespace {

using recency = std::pair<std::uint64_t, std::uint64_t>;  // (last use, insertion sequence) on a logical clock
using recency_set = std::set<std::pair<recency, cache_slot>>;

/// Segmented LRU (Karedla, Love & Wherry, IEEE Computer 1994): a probation and a protected LRU
/// segment. A new item enters probation; a touch moves an item to protected's most recent end (a
/// touch in protected refreshes it there). While protected holds more than `slru_protected` of
/// the cached tokens, its least recent item (candidate or not) moves to probation's most recent
/// end. Victim: probation's least recent candidate, else protected's. insert_like takes `like`'s
/// segment and recency. Non-candidates keep their segment and place; they are ranked, not queued,
/// so one that becomes a candidate again competes from its last use.
/// Costs: O(log n) per operation, demotions amortized (each follows a promotion or a shrink).
class slru_order final : public checked_order {
 public:
  explicit slru_order(double protected_share) : share_(protected_share) {}
  std::string_view name() const override { return "slru"; }

 private:
  struct slot_state {
    bool prot = false;
    recency r;
  };

  void on_insert(cache_slot slot, const cache_slot* like) override {
    ensure_slot(s_, slot);
    slot_state& s = s_[slot];
    const std::uint64_t seq = ++clock_;
    if (like != nullptr) {
      s.prot = s_[*like].prot;
      s.r = {s_[*like].r.first, seq};
    } else {
      s.prot = false;
      s.r = {seq, seq};
    }
    link(slot);
    rebalance(cached_tokens());
  }
  void on_resize(cache_slot slot, const cache_item& old) override {
    if (s_[slot].prot) prot_tokens_ = prot_tokens_ - old.tokens + item(slot).tokens;
    rebalance(cached_tokens());
  }
  void on_touch(cache_slot slot) override {
    unlink(slot);
    s_[slot].prot = true;
    s_[slot].r.first = ++clock_;
    link(slot);
    rebalance(cached_tokens());
  }
  void on_refresh(cache_slot slot) override {  // recency in its own segment, no promotion
    unlink(slot);
    s_[slot].r.first = ++clock_;
    link(slot);
  }
  void on_candidate(cache_slot slot, bool candidate) override {
    auto& set = cand_[s_[slot].prot ? 1 : 0];
    if (candidate) {
      set.insert({s_[slot].r, slot});
    } else {
      set.erase({s_[slot].r, slot});
    }
  }
  cache_slot on_pop_victim() override {
    const cache_slot v = (cand_[0].empty() ? cand_[1] : cand_[0]).begin()->second;
    unlink(v);
    rebalance(cached_tokens() - item(v).tokens);
    return v;
  }
  void on_erase(cache_slot slot, bool /*was_candidate*/) override {
    unlink(slot);
    rebalance(cached_tokens() - item(slot).tokens);
  }

  /// Into its segment's structures (the candidate set when a candidate).
  void link(cache_slot slot) {
    const slot_state& s = s_[slot];
    if (is_candidate(slot)) cand_[s.prot ? 1 : 0].insert({s.r, slot});
    if (s.prot) {
      prot_all_.insert({s.r, slot});
      prot_tokens_ += item(slot).tokens;
    }
  }
  void unlink(cache_slot slot) {
    const slot_state& s = s_[slot];
    if (is_candidate(slot)) cand_[s.prot ? 1 : 0].erase({s.r, slot});
    if (s.prot) {
      prot_all_.erase({s.r, slot});
      prot_tokens_ -= item(slot).tokens;
    }
  }
  /// Demotes protected's least recent items while it holds more than its share of `total`.
  void rebalance(std::uint64_t total) {
    while (!prot_all_.empty() && static_cast<double>(prot_tokens_) > share_ * static_cast<double>(total)) {
      const cache_slot d = prot_all_.begin()->second;
      unlink(d);
      s_[d].prot = false;
      s_[d].r.first = ++clock_;
      link(d);
    }
  }

  double share_;
  std::vector<slot_state> s_;
  recency_set cand_[2];   // candidates: probation, protected
  recency_set prot_all_;  // every protected item, candidate or not (demotion order)
  std::uint64_t prot_tokens_ = 0;
  std::uint64_t clock_ = 0;
};

/// A FIFO of evicted keys with their sizes, for the ghost lists of arc and s3-fifo. The map is
/// only looked up, never iterated, so the order stays deterministic.
class ghost_fifo {
 public:
  [[nodiscard]] bool contains(std::uint64_t key) const { return where_.count(key) != 0; }
  [[nodiscard]] std::uint64_t tokens() const { return tokens_; }
  [[nodiscard]] bool empty() const { return fifo_.empty(); }
  /// Appends `key` as the newest entry (an older entry of the same key goes first).
  void push(std::uint64_t key, std::uint64_t tokens) {
    erase(key);
    fifo_.push_back({key, tokens});
    where_[key] = std::prev(fifo_.end());
    tokens_ += tokens;
  }
  void erase(std::uint64_t key) {
    auto it = where_.find(key);
    if (it == where_.end()) return;
    tokens_ -= it->second->second;
    fifo_.erase(it->second);
    where_.erase(it);
  }
  void pop_oldest() { erase(fifo_.front().first); }

 private:
  std::list<std::pair<std::uint64_t, std::uint64_t>> fifo_;  // (key, tokens), oldest first
  std::unordered_map<std::uint64_t, std::list<std::pair<std::uint64_t, std::uint64_t>>::iterator> where_;
  std::uint64_t tokens_ = 0;
};

/// ARC (Megiddo & Modha, FAST'03), in tokens. T1 holds items used once since they entered, T2
/// items used again; ghosts B1/B2 remember the keys last evicted from T1/T2. A new item whose key
/// is in B1 raises the target p of T1's tokens by its tokens x max(1, B2/B1) (B2: lowers it by
/// tokens x max(1, B1/B2)), clamped to [0, c], and enters T2; otherwise it enters T1. A touch moves
/// an item to T2's most recent end. Victim (ARC's REPLACE): T1's least recent candidate when T1
/// holds more than p tokens or T2 has no candidate, else T2's; its key goes to B1/B2 (key 0: to
/// none). Adaptations: the capacity c is the tokens cached now (the caches here have no fixed
/// size), and after each eviction the ghosts are trimmed, oldest first, so that T1+B1 <= c and
/// B1+B2 <= c in tokens (ARC's |T1|+|B1| <= c and total <= 2c); eviction is asked for by the host,
/// so REPLACE's tie case on a B2 hit (|T1| = p) has no request to look at and is dropped.
/// insert_like takes `like`'s list and recency. Non-candidates keep their list and recency.
/// Costs: O(log n) per operation; ghost trimming amortized O(1).
class arc_order final : public checked_order {
 public:
  std::string_view name() const override { return "arc"; }

 private:
  struct slot_state {
    int list = 0;  // 0: T1, 1: T2
    recency r;
  };

  void on_insert(cache_slot slot, const cache_slot* like) override {
    ensure_slot(s_, slot);
    slot_state& s = s_[slot];
    const std::uint64_t seq = ++clock_;
    const cache_item& it = item(slot);
    if (like != nullptr) {
      s.list = s_[*like].list;
      s.r = {s_[*like].r.first, seq};
    } else {
      s.r = {seq, seq};
      s.list = 0;
      const double c = static_cast<double>(cached_tokens());
      const auto t = static_cast<double>(it.tokens);
      if (it.key != 0 && b_[0].contains(it.key)) {
        const double ratio = static_cast<double>(b_[1].tokens()) / static_cast<double>(b_[0].tokens());
        p_ = std::min(c, p_ + t * std::max(1.0, ratio));
        s.list = 1;
      } else if (it.key != 0 && b_[1].contains(it.key)) {
        const double ratio = static_cast<double>(b_[0].tokens()) / static_cast<double>(b_[1].tokens());
        p_ = std::max(0.0, p_ - t * std::max(1.0, ratio));
        s.list = 1;
      }
      if (it.key != 0) {
        b_[0].erase(it.key);
        b_[1].erase(it.key);
      }
    }
    list_tokens_[s.list] += it.tokens;
  }
  void on_resize(cache_slot slot, const cache_item& old) override {
    auto& t = list_tokens_[s_[slot].list];
    t = t - old.tokens + item(slot).tokens;
  }
  void on_touch(cache_slot slot) override {
    slot_state& s = s_[slot];
    if (is_candidate(slot)) cand_[s.list].erase({s.r, slot});
    list_tokens_[s.list] -= item(slot).tokens;
    s.list = 1;
    s.r.first = ++clock_;
    list_tokens_[1] += item(slot).tokens;
    if (is_candidate(slot)) cand_[1].insert({s.r, slot});
  }
  void on_refresh(cache_slot slot) override {  // recency in its own list, no move to T2
    slot_state& s = s_[slot];
    if (is_candidate(slot)) cand_[s.list].erase({s.r, slot});
    s.r.first = ++clock_;
    if (is_candidate(slot)) cand_[s.list].insert({s.r, slot});
  }
  void on_candidate(cache_slot slot, bool candidate) override {
    auto& set = cand_[s_[slot].list];
    if (candidate) {
      set.insert({s_[slot].r, slot});
    } else {
      set.erase({s_[slot].r, slot});
    }
  }
  cache_slot on_pop_victim() override {
    const bool from_t1 = !cand_[0].empty() && (static_cast<double>(list_tokens_[0]) > p_ || cand_[1].empty());
    auto& set = cand_[from_t1 ? 0 : 1];
    const cache_slot v = set.begin()->second;
    set.erase(set.begin());
    const cache_item& it = item(v);
    list_tokens_[from_t1 ? 0 : 1] -= it.tokens;
    if (it.key != 0) b_[from_t1 ? 0 : 1].push(it.key, it.tokens);
    // Ghost bounds against the capacity after this eviction.
    const std::uint64_t c = cached_tokens() - it.tokens;
    while (!b_[0].empty() && list_tokens_[0] + b_[0].tokens() > c) b_[0].pop_oldest();
    while (!b_[1].empty() && b_[0].tokens() + b_[1].tokens() > c) b_[1].pop_oldest();
    return v;
  }
  void on_erase(cache_slot slot, bool was_candidate) override {
    const slot_state& s = s_[slot];
    if (was_candidate) cand_[s.list].erase({s.r, slot});
    list_tokens_[s.list] -= item(slot).tokens;
  }

  std::vector<slot_state> s_;
  recency_set cand_[2];                // candidates of T1, T2 by recency
  std::uint64_t list_tokens_[2] = {};  // tokens of T1, T2, candidates or not
  ghost_fifo b_[2];                    // B1, B2
  double p_ = 0;                       // target tokens of T1
  std::uint64_t clock_ = 0;
};

/// S3-FIFO (Yang et al., SOSP'23; the rules of libCacheSim's S3FIFO.c): a small FIFO S for
/// `s3fifo_small` of the cached tokens, a main FIFO M and a ghost FIFO G of keys evicted from S.
/// A new item enters M if its key is in G (leaving G), else S. A touch raises the item's
/// frequency, capped at 3. Eviction: from S while S holds at least its share of the cached tokens
/// (or M has no candidate), else from M. From S (until one is evicted or S has no candidate left, then
/// from M), the oldest item goes to M's newest end with its
/// frequency reset to 0 if it was touched (freq > 0), and the next one is looked at; an untouched
/// one is the victim and its key (not 0) enters G. From M, the oldest item with freq > 0 is
/// reinserted at M's newest end with freq - 1 (lazy promotion, a 2-bit CLOCK); one with freq 0 is
/// the victim. G is bounded, oldest first, to M's share of the cached tokens (1 - s3fifo_small; the
/// ghost-size-ratio 0.9 of libCacheSim) counted in the ghosts' tokens.
/// Non-candidates: the queues hold candidates only. An item keeps its queue tag (S or M) and its
/// frequency while it is not a candidate, and enters its queue at the newest end when it becomes
/// one. Shares count all tagged items, candidates or not. insert_like takes `like`'s tag and
/// frequency. Costs: O(1) amortized per operation (each reinsertion is paid by a touch, each move
/// to M by an insert).
class s3fifo_order final : public checked_order {
 public:
  explicit s3fifo_order(double small_share) : share_(small_share) {}
  std::string_view name() const override { return "s3-fifo"; }

 private:
  struct slot_state {
    int queue = 0;  // 0: S, 1: M
    std::uint8_t freq = 0;
    std::list<cache_slot>::iterator at;  // valid while a candidate
  };

  void on_insert(cache_slot slot, const cache_slot* like) override {
    ensure_slot(s_, slot);
    slot_state& s = s_[slot];
    const cache_item& it = item(slot);
    if (like != nullptr) {
      s.queue = s_[*like].queue;
      s.freq = s_[*like].freq;
    } else {
      s.freq = 0;
      s.queue = it.key != 0 && ghost_.contains(it.key) ? 1 : 0;
      if (it.key != 0) ghost_.erase(it.key);
    }
    q_tokens_[s.queue] += it.tokens;
  }
  void on_resize(cache_slot slot, const cache_item& old) override {
    auto& t = q_tokens_[s_[slot].queue];
    t = t - old.tokens + item(slot).tokens;
  }
  void on_touch(cache_slot slot) override {
    if (s_[slot].freq < 3) ++s_[slot].freq;
  }
  void on_refresh(cache_slot /*slot*/) override {}  // not a use: the frequency stays
  void on_candidate(cache_slot slot, bool candidate) override {
    slot_state& s = s_[slot];
    if (candidate) {
      q_[s.queue].push_back(slot);
      s.at = std::prev(q_[s.queue].end());
    } else {
      q_[s.queue].erase(s.at);
    }
  }
  cache_slot on_pop_victim() override {
    const bool from_small = !q_[0].empty() && (q_[1].empty() || static_cast<double>(q_tokens_[0]) >=
                                                                    share_ * static_cast<double>(cached_tokens()));
    while (from_small && !q_[0].empty()) {
      const cache_slot t = q_[0].front();
      q_[0].pop_front();
      slot_state& s = s_[t];
      q_tokens_[0] -= item(t).tokens;
      if (s.freq == 0) {
        if (item(t).key != 0) {
          ghost_.push(item(t).key, item(t).tokens);
          const double bound = (1.0 - share_) * static_cast<double>(cached_tokens() - item(t).tokens);
          while (!ghost_.empty() && static_cast<double>(ghost_.tokens()) > bound) ghost_.pop_oldest();
        }
        return t;
      }
      q_tokens_[1] += item(t).tokens;
      s.queue = 1;
      s.freq = 0;
      q_[1].push_back(t);
      s.at = std::prev(q_[1].end());
    }
    for (;;) {  // M has a candidate here; each item comes round at most 3 times
      const cache_slot t = q_[1].front();
      q_[1].pop_front();
      slot_state& s = s_[t];
      if (s.freq == 0) {
        q_tokens_[1] -= item(t).tokens;
        return t;
      }
      --s.freq;
      q_[1].push_back(t);
      s.at = std::prev(q_[1].end());
    }
  }
  void on_erase(cache_slot slot, bool was_candidate) override {
    slot_state& s = s_[slot];
    if (was_candidate) q_[s.queue].erase(s.at);
    q_tokens_[s.queue] -= item(slot).tokens;
  }

  double share_;
  std::vector<slot_state> s_;
  std::list<cache_slot> q_[2];      // candidates of S, M; oldest first
  std::uint64_t q_tokens_[2] = {};  // tokens tagged S, M, candidates or not
  ghost_fifo ghost_;
};

/// Pinned prefixes (system prompts): an item starting within a sequence's first `pin_tokens`
/// tokens (offset < pin_tokens) goes only when no other candidate remains; LRU within each class
/// (on a logical clock of inserts and touches, ties by insertion; insert_like takes `like`'s last
/// use). pin_tokens 0 is plain LRU. A resize that moves an item's offset moves its class.
/// Costs: O(log n) per operation.
class priority_order final : public ranked_order<std::tuple<bool, std::uint64_t, std::uint64_t>> {
 public:
  explicit priority_order(std::uint64_t pin_tokens) : pin_tokens_(pin_tokens) {}
  std::string_view name() const override { return "priority"; }

 private:
  struct slot_state {
    bool pinned = false;  // offset < pin_tokens
    recency r;
  };

  std::tuple<bool, std::uint64_t, std::uint64_t> rank(cache_slot s) const override {
    return {s_[s].pinned, s_[s].r.first, s_[s].r.second};
  }
  void on_insert(cache_slot slot, const cache_slot* like) override {
    ensure_slot(s_, slot);
    const std::uint64_t seq = ++clock_;
    s_[slot] = {item(slot).offset < pin_tokens_, {like != nullptr ? s_[*like].r.first : seq, seq}};
  }
  void on_resize(cache_slot slot, const cache_item& /*old*/) override {
    unrank(slot);
    s_[slot].pinned = item(slot).offset < pin_tokens_;
    rerank(slot);
  }
  void on_touch(cache_slot slot) override {
    unrank(slot);
    s_[slot].r.first = ++clock_;
    rerank(slot);
  }

  std::uint64_t pin_tokens_;
  std::vector<slot_state> s_;
  std::uint64_t clock_ = 0;
};

/// GreedyDual-Size (Cao & Irani, USITS'97) with recompute cost, as Marconi (MLSys'25) weighs
/// prefix-cache entries: an item's value H = L + cost/size, where cost is the FLOPs to recompute
/// its tokens in units of a context-free token, tokens + attention_weight x (sum of the positions
/// p in [offset, offset + tokens)), and size is tokens, so cost/size = 1 + attention_weight x
/// (offset + (tokens - 1) / 2): deep tokens are dearer to recompute. H is set at insert and at each
/// touch from the inflation L then current; the victim is the least H (ties by insertion) and L
/// rises to its H, so that items untouched for long age out. insert_like and resize keep the L the
/// item's H was last set from and recompute cost/size for the new shape. attention_weight 0 is
/// LRU-like (H = L + 1). Doubles are computed the same way on every path, so the order is
/// deterministic. Costs: O(log n) per operation.
class cost_aware_order final : public ranked_order<std::pair<double, std::uint64_t>> {
 public:
  explicit cost_aware_order(double attention_weight) : w_(attention_weight) {}
  std::string_view name() const override { return "cost-aware"; }

 private:
  struct slot_state {
    double base = 0;  // L when H was last set
    double h = 0;
    std::uint64_t seq = 0;
  };

  [[nodiscard]] double cost_per_token(const cache_item& it) const {
    return 1.0 + w_ * (static_cast<double>(it.offset) + static_cast<double>(it.tokens - 1) / 2.0);
  }
  std::pair<double, std::uint64_t> rank(cache_slot s) const override { return {s_[s].h, s_[s].seq}; }
  void on_insert(cache_slot slot, const cache_slot* like) override {
    ensure_slot(s_, slot);
    slot_state& s = s_[slot];
    s.seq = ++seq_;
    s.base = like != nullptr ? s_[*like].base : l_;
    s.h = s.base + cost_per_token(item(slot));
  }
  void on_resize(cache_slot slot, const cache_item& /*old*/) override {
    unrank(slot);
    s_[slot].h = s_[slot].base + cost_per_token(item(slot));
    rerank(slot);
  }
  void on_touch(cache_slot slot) override {
    unrank(slot);
    s_[slot].base = l_;
    s_[slot].h = l_ + cost_per_token(item(slot));
    rerank(slot);
  }
  void on_refresh(cache_slot /*slot*/) override {}  // not an access: H stays
  cache_slot on_pop_victim() override {
    const cache_slot v = ranked_order::on_pop_victim();
    l_ = std::max(l_, s_[v].h);
    return v;
  }

  double w_;
  std::vector<slot_state> s_;
  double l_ = 0;  // inflation: the H of the last victim (never decreases)
  std::uint64_t seq_ = 0;
};

/// Time to live: an item expires `ttl_s` seconds (clock->seconds) after its last insert or touch
/// (insert_like takes `like`'s). pop_expired returns the candidate that has been idle longest if it
/// has expired (last use + ttl_s <= now); pop_victim evicts in LRU order regardless. Ranked by
/// (last use in seconds, last use on a logical clock, insertion), so equal times fall back to LRU.
/// Costs: O(log n) per operation.
class ttl_order final : public ranked_order<std::tuple<double, std::uint64_t, std::uint64_t>> {
 public:
  ttl_order(double ttl_s, const eviction_clock& clock) : ttl_s_(ttl_s), clock_(clock) {}
  std::string_view name() const override { return "ttl"; }

 private:
  struct slot_state {
    double last_s = 0;
    recency r;
  };

  std::tuple<double, std::uint64_t, std::uint64_t> rank(cache_slot s) const override {
    return {s_[s].last_s, s_[s].r.first, s_[s].r.second};
  }
  void on_insert(cache_slot slot, const cache_slot* like) override {
    ensure_slot(s_, slot);
    const std::uint64_t seq = ++logical_;
    if (like != nullptr) {
      s_[slot] = {s_[*like].last_s, {s_[*like].r.first, seq}};
    } else {
      s_[slot] = {clock_.seconds, {seq, seq}};
    }
  }
  void on_touch(cache_slot slot) override {
    unrank(slot);
    s_[slot].last_s = clock_.seconds;
    s_[slot].r.first = ++logical_;
    rerank(slot);
  }
  std::optional<cache_slot> on_pop_expired() override {
    if (std::get<0>(first().first) + ttl_s_ > clock_.seconds) return std::nullopt;
    return on_pop_victim();
  }

  double ttl_s_;
  const eviction_clock& clock_;
  std::vector<slot_state> s_;
  std::uint64_t logical_ = 0;
};

/// Belady's MIN (Belady, IBM Systems Journal 1966) on the replay's foresight: the victim is the
/// candidate whose key is next used farthest in the future (never used again first), asked of the
/// oracle from clock->next_request when the item becomes a candidate and at each touch (key 0:
/// never). Ties go to the item inserted first. A recorded next use before clock->next_request is
/// stale (that request came without touching the item, e.g. it matched a shorter prefix), so
/// before each pick the stale candidates, which sit at the near end of the order, are asked
/// again. An upper bound, not a policy: it sees requests the scheduler has not admitted.
/// Costs: O(log n) per operation plus the oracle's, and O(log n) per stale refresh, each of which
/// follows an admitted request.
class offline_order final : public ranked_order<std::pair<std::uint64_t, std::uint64_t>> {
 public:
  offline_order(const eviction_clock& clock, const next_use_oracle& oracle) : clock_(clock), oracle_(oracle) {}
  std::string_view name() const override { return "offline"; }

 private:
  struct slot_state {
    std::uint64_t next = next_use_oracle::never;
    std::uint64_t seq = 0;
  };

  // Lowest first: the farthest next use first (never = UINT64_MAX maps to 0), then insertion.
  std::pair<std::uint64_t, std::uint64_t> rank(cache_slot s) const override {
    return {next_use_oracle::never - s_[s].next, s_[s].seq};
  }
  [[nodiscard]] std::uint64_t ask(cache_slot slot) const {
    const std::uint64_t key = item(slot).key;
    return key == 0 ? next_use_oracle::never : oracle_.next_use(key, clock_.next_request);
  }
  void on_insert(cache_slot slot, const cache_slot* /*like*/) override {
    ensure_slot(s_, slot);
    s_[slot] = {next_use_oracle::never, ++seq_};
  }
  void on_candidate(cache_slot slot, bool candidate) override {
    if (candidate) s_[slot].next = ask(slot);
    ranked_order::on_candidate(slot, candidate);
  }
  void on_resize(cache_slot slot, const cache_item& old) override {
    if (old.key == item(slot).key) return;
    unrank(slot);
    if (is_candidate(slot)) s_[slot].next = ask(slot);
    rerank(slot);
  }
  void on_touch(cache_slot slot) override {
    unrank(slot);
    if (is_candidate(slot)) s_[slot].next = ask(slot);
    rerank(slot);
  }
  cache_slot on_pop_victim() override {
    for (;;) {
      const auto& [r, slot] = last();
      const std::uint64_t next = next_use_oracle::never - r.first;
      if (next >= clock_.next_request) break;
      const cache_slot s = slot;
      unrank(s);
      s_[s].next = ask(s);
      rerank(s);
    }
    return ranked_order::on_pop_victim();
  }

  const eviction_clock& clock_;
  const next_use_oracle& oracle_;
  std::vector<slot_state> s_;
  std::uint64_t seq_ = 0;
};

}  // namespace

std::vector<std::string> zoo_order_names() {
  return {"slru", "arc", "s3-fifo", "priority", "cost-aware", "ttl", "offline"};
}

std::unique_ptr<eviction_order> make_zoo_order(const eviction_config& config) {
  const std::string& n = config.name;
  const auto share = [&](double v, const char* option) {
    if (!(v > 0 && v < 1))
      throw std::invalid_argument(fmt::format("eviction '{}' needs {} in (0, 1), got {}", n, option, v));
  };
  if (n == "slru") {
    share(config.slru_protected, "--eviction-slru-protected");
    return std::make_unique<slru_order>(config.slru_protected);
  }
  if (n == "arc") return std::make_unique<arc_order>();
  if (n == "s3-fifo") {
    share(config.s3fifo_small, "--eviction-s3fifo-small");
    return std::make_unique<s3fifo_order>(config.s3fifo_small);
  }
  if (n == "priority") return std::make_unique<priority_order>(config.pin_tokens);
  if (n == "cost-aware") {
    if (!(std::isfinite(config.attention_weight) && config.attention_weight >= 0))
      throw std::invalid_argument(fmt::format("eviction 'cost-aware' needs an attention weight >= 0 and finite, got {}",
                                              config.attention_weight));
    return std::make_unique<cost_aware_order>(config.attention_weight);
  }
  if (n == "ttl") {
    if (!(config.ttl_s > 0 && std::isfinite(config.ttl_s)))
      throw std::invalid_argument(fmt::format("eviction 'ttl' needs --eviction-ttl > 0, got {}", config.ttl_s));
    if (config.clock == nullptr) throw std::invalid_argument("eviction 'ttl' needs the replay's clock");
    return std::make_unique<ttl_order>(config.ttl_s, *config.clock);
  }
  if (n == "offline") {
    if (config.clock == nullptr || config.oracle == nullptr)
      throw std::invalid_argument("eviction 'offline' needs the replay's clock and its next-use oracle");
    return std::make_unique<offline_order>(*config.clock, *config.oracle);
  }
  return nullptr;
}

}  // namespace vtensor::detail
