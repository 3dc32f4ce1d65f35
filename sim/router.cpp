// The routers (Note [Routers] in sim/router.hpp) and their registry.

#include "sim/router.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <list>
#include <random>
#include <stdexcept>
#include <unordered_map>

namespace vtensor::sim {
namespace {

constexpr std::string_view k_round_robin = "round-robin";
constexpr std::string_view k_least_loaded = "least-loaded";
constexpr std::string_view k_session = "session";
constexpr std::string_view k_prefix_approx = "prefix-approx";
constexpr std::string_view k_prefix_precise = "prefix-precise";

// The replica with the fewest queued and running tokens; the lowest index on a tie.
std::uint32_t least_tokens(const cluster_view& c) {
  std::uint32_t best = 0;
  std::uint64_t best_tokens = c.load(0).tokens();
  for (std::size_t i = 1; i < c.replicas(); ++i) {
    const std::uint64_t t = c.load(i).tokens();
    if (t < best_tokens) {
      best = static_cast<std::uint32_t>(i);
      best_tokens = t;
    }
  }
  return best;
}

class round_robin_router final : public router {
 public:
  route_choice route(const routed_request& /*r*/, const cluster_view& c) override {
    const auto i = static_cast<std::uint32_t>(next_ % c.replicas());
    ++next_;
    return {i, "rotation"};
  }
  [[nodiscard]] std::string_view name() const override { return k_round_robin; }
  [[nodiscard]] std::vector<std::string_view> reasons() const override { return {"rotation"}; }

 private:
  std::uint64_t next_ = 0;
};

class least_loaded_router final : public router {
 public:
  route_choice route(const routed_request& /*r*/, const cluster_view& c) override {
    return {least_tokens(c), "least-loaded"};
  }
  [[nodiscard]] std::string_view name() const override { return k_least_loaded; }
  [[nodiscard]] std::vector<std::string_view> reasons() const override { return {"least-loaded"}; }
};

class session_router final : public router {
 public:
  route_choice route(const routed_request& r, const cluster_view& c) override {
    const auto [it, inserted] = home_.try_emplace(r.trace.session, 0);
    if (!inserted) return {it->second, "sticky"};
    it->second = least_tokens(c);
    return {it->second, "new-session"};
  }
  [[nodiscard]] std::string_view name() const override { return k_session; }
  [[nodiscard]] std::vector<std::string_view> reasons() const override { return {"sticky", "new-session"}; }

 private:
  std::unordered_map<std::uint64_t, std::uint32_t> home_;  // session -> replica of its first turn
};

// The chained identity of each leading block of a prompt: block i's names blocks 0..i, so that
// equal keys under different prefixes differ (traces need not chain their keys).
std::uint64_t chain(std::uint64_t parent, std::uint64_t key) {
  std::uint64_t h = parent ^ (key + 0x9e3779b97f4a7c15ULL + (parent << 6) + (parent >> 2));
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

// One replica's tree in the approximate router: the chained blocks it was sent, least recently
// used at the back, bounded by `capacity` tokens (0: none).
class approx_tree {
 public:
  explicit approx_tree(std::uint64_t capacity) : capacity_(capacity) {}

  // Tokens of the leading blocks of `chained` (with their tokens) present.
  [[nodiscard]] std::uint64_t match(std::span<const std::uint64_t> chained, std::span<const token_block> blocks) const {
    std::uint64_t tokens = 0;
    for (std::size_t i = 0; i < chained.size() && index_.contains(chained[i]); ++i) tokens += blocks[i].tokens;
    return tokens;
  }
  // Records every block as used now: the deepest first, so that a block's ancestors are always
  // more recent than it and the least recent is a leaf (a tree drops leaves first).
  void insert(std::span<const std::uint64_t> chained, std::span<const token_block> blocks) {
    for (std::size_t k = chained.size(); k-- > 0;) {
      const auto it = index_.find(chained[k]);
      if (it != index_.end()) {
        order_.splice(order_.begin(), order_, it->second);
      } else {
        order_.push_front({chained[k], blocks[k].tokens});
        index_.emplace(chained[k], order_.begin());
        tokens_ += blocks[k].tokens;
      }
    }
    while (capacity_ != 0 && tokens_ > capacity_ && !order_.empty()) {
      tokens_ -= order_.back().tokens;
      index_.erase(order_.back().chained);
      order_.pop_back();
    }
  }
  [[nodiscard]] std::uint64_t tokens() const { return tokens_; }

 private:
  struct entry {
    std::uint64_t chained;
    std::uint64_t tokens;
  };
  std::uint64_t capacity_;
  std::uint64_t tokens_ = 0;
  std::list<entry> order_;
  std::unordered_map<std::uint64_t, std::list<entry>::iterator> index_;
};

class prefix_approx_router final : public router {
 public:
  explicit prefix_approx_router(const router_options& o) : options_(o) {}

  route_choice route(const routed_request& r, const cluster_view& c) override {
    const std::size_t n = c.replicas();
    while (trees_.size() < n) trees_.emplace_back(options_.tree_tokens);
    chained_.clear();
    std::uint64_t h = 0;
    for (const token_block& b : r.blocks) chained_.push_back(h = chain(h, b.key));
    in_flight_.resize(n);
    std::uint32_t least = 0;  // the least loaded (requests in flight)
    for (std::size_t i = 0; i < n; ++i) {
      in_flight_[i] = c.load(i).requests();
      if (in_flight_[i] < in_flight_[least]) least = static_cast<std::uint32_t>(i);
    }
    const std::uint32_t lo = in_flight_[least];
    const std::uint32_t hi = *std::max_element(in_flight_.begin(), in_flight_.end());
    route_choice choice;
    if (hi - lo > options_.balance_abs && static_cast<double>(hi) > static_cast<double>(lo) * options_.balance_rel) {
      choice = {least, "balance"};
    } else {
      // Ties (a prefix every replica was sent, trees at their bound) go to fewer requests in
      // flight, then the lower index: sgl-router leaves them to its maps' order.
      std::uint32_t best = 0, smallest = 0;
      std::uint64_t best_match = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t m = trees_[i].match(chained_, r.blocks);
        if (i == 0 || m > best_match || (m == best_match && in_flight_[i] < in_flight_[best])) {
          best_match = m;
          best = static_cast<std::uint32_t>(i);
        }
        if (std::pair(trees_[i].tokens(), in_flight_[i]) < std::pair(trees_[smallest].tokens(), in_flight_[smallest])) {
          smallest = static_cast<std::uint32_t>(i);
        }
      }
      const double rate = r.trace.input_tokens == 0 ? 0.0 : static_cast<double>(best_match) / r.trace.input_tokens;
      choice = rate > options_.cache_threshold ? route_choice{best, "prefix-match"}
                                               : route_choice{smallest, "smallest-tree"};
    }
    trees_[choice.replica].insert(chained_, r.blocks);
    return choice;
  }
  [[nodiscard]] std::string_view name() const override { return k_prefix_approx; }
  [[nodiscard]] std::vector<std::string_view> reasons() const override {
    return {"prefix-match", "smallest-tree", "balance"};
  }
  [[nodiscard]] nlohmann::ordered_json describe() const override {
    return {{"cache_threshold", options_.cache_threshold},
            {"balance_abs", options_.balance_abs},
            {"balance_rel", options_.balance_rel},
            {"tree_tokens", options_.tree_tokens}};
  }

 private:
  router_options options_;
  std::vector<approx_tree> trees_;
  std::vector<std::uint64_t> chained_;    // scratch: the request's chained blocks
  std::vector<std::uint32_t> in_flight_;  // scratch: each replica's requests
};

class prefix_precise_router final : public router {
 public:
  explicit prefix_precise_router(const router_options& o) : options_(o), draw_(o.seed) {}

  route_choice route(const routed_request& r, const cluster_view& c) override {
    cost_.assign(c.replicas(), 0.0);
    cached_.assign(c.replicas(), 0);
    for (std::size_t i = 0; i < c.replicas(); ++i) {
      const replica_load l = c.load(i);
      cached_[i] = std::min<std::uint64_t>(c.cached_tokens(i), r.trace.input_tokens);
      const double prefill = static_cast<double>(l.queued_tokens + l.prefill_left + r.trace.input_tokens - cached_[i]);
      cost_[i] = prefill + options_.decode_weight * static_cast<double>(l.running_tokens);
    }
    std::uint32_t pick = 0;
    if (options_.temperature <= 0) {
      for (std::size_t i = 1; i < cost_.size(); ++i) {
        if (cost_[i] < cost_[pick]) pick = static_cast<std::uint32_t>(i);
      }
    } else {
      const double scale = std::max(1.0, *std::max_element(cost_.begin(), cost_.end())) * options_.temperature;
      const double least = *std::min_element(cost_.begin(), cost_.end());
      std::vector<double> weight(cost_.size());
      for (std::size_t i = 0; i < cost_.size(); ++i) weight[i] = std::exp(-(cost_[i] - least) / scale);
      std::discrete_distribution<std::uint32_t> d(weight.begin(), weight.end());
      pick = d(draw_);
    }
    const std::uint64_t most = *std::max_element(cached_.begin(), cached_.end());
    return {pick, most == 0 ? "no-hit" : cached_[pick] == most ? "longest-prefix" : "load"};
  }
  [[nodiscard]] bool reads_caches() const override { return true; }
  [[nodiscard]] std::string_view name() const override { return k_prefix_precise; }
  [[nodiscard]] std::vector<std::string_view> reasons() const override { return {"longest-prefix", "load", "no-hit"}; }
  [[nodiscard]] nlohmann::ordered_json describe() const override {
    return {{"decode_weight", options_.decode_weight}, {"temperature", options_.temperature}};
  }

 private:
  router_options options_;
  std::mt19937_64 draw_;
  std::vector<double> cost_;           // scratch
  std::vector<std::uint64_t> cached_;  // scratch
};

struct registered_router {
  std::string_view name;
  std::string_view help;
  std::function<std::unique_ptr<router>(const router_options&)> make;
};

const std::vector<registered_router>& registry() {
  static const std::vector<registered_router> routers = {
      {k_round_robin, "replicas in turn", [](const router_options&) { return std::make_unique<round_robin_router>(); }},
      {k_least_loaded, "fewest tokens queued and running",
       [](const router_options&) { return std::make_unique<least_loaded_router>(); }},
      {k_session, "a session's turns where its first went (least-loaded for a first turn)",
       [](const router_options&) { return std::make_unique<session_router>(); }},
      {k_prefix_approx, "SGLang's cache-aware router: its own tree of what it sent where, load-balance thresholds",
       [](const router_options& o) { return std::make_unique<prefix_approx_router>(o); }},
      {k_prefix_precise, "reads each replica's cache: least prefill ahead + decode-weight x decode load",
       [](const router_options& o) { return std::make_unique<prefix_precise_router>(o); }},
  };
  return routers;
}

void check(const router_options& o) {
  const auto bad = [](std::string_view what, double v, std::string_view want) {
    return std::invalid_argument(fmt::format("router option {} is {}: it must be {}", what, v, want));
  };
  if (!(o.cache_threshold >= 0 && o.cache_threshold <= 1)) throw bad("cache threshold", o.cache_threshold, "in [0, 1]");
  if (!(o.balance_rel >= 1) || !std::isfinite(o.balance_rel)) throw bad("balance-rel", o.balance_rel, "at least 1");
  if (!(o.decode_weight >= 0) || !std::isfinite(o.decode_weight)) {
    throw bad("decode weight", o.decode_weight, "a number at least 0");
  }
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) {
    throw bad("temperature", o.temperature, "a number at least 0");
  }
}

}  // namespace

std::vector<std::string> router_names() {
  std::vector<std::string> names;
  for (const auto& r : registry()) names.emplace_back(r.name);
  return names;
}

std::string router_help() {
  std::string text;
  for (const auto& r : registry()) text += fmt::format("  {:<15} {}\n", r.name, r.help);
  return text;
}

std::unique_ptr<router> make_router(std::string_view name, const router_options& options) {
  check(options);
  for (const auto& r : registry()) {
    if (r.name == name) return r.make(options);
  }
  throw std::invalid_argument(fmt::format("unknown router '{}' (known: {})", name, fmt::join(router_names(), ", ")));
}

}  // namespace vtensor::sim
