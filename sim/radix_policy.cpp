#include "sim/radix_policy.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

namespace vtensor::sim {
namespace {

constexpr std::uint32_t k_none = std::numeric_limits<std::uint32_t>::max();

std::uint64_t checked_bytes_per_token(const kv_policy_options& o, const radix_settings& s) {
  if (s.page_tokens == 0) throw std::invalid_argument("radix policy: page_tokens (--page-tokens) must be at least 1");
  const std::uint64_t b = o.kv.kv_bytes_per_token();
  if (b == 0) throw std::invalid_argument(fmt::format("radix policy: model '{}' has no KV bytes per token", o.kv.name));
  return b;
}

// The pool, after the options are checked (nothing is reserved for bad ones).
std::unique_ptr<device_pool> make_pool(const kv_policy_options& o, const radix_settings& s,
                                       std::unique_ptr<vmm_backend> inner, const latency_model& model) {
  (void)checked_bytes_per_token(o, s);
  return std::make_unique<device_pool>(std::move(inner), model, o.memory_bytes);
}

std::uint64_t mix(std::uint64_t h, std::uint64_t x) noexcept {
  h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return h;
}

}  // namespace

std::size_t radix_policy::child_key_hash::operator()(const child_key& k) const noexcept {
  std::uint64_t h = mix(k.parent, k.first.key);
  h = mix(h, k.first.offset);
  h = mix(h, k.last.key);
  return static_cast<std::size_t>(mix(h, k.last.offset));
}

radix_policy::radix_policy(const kv_policy_options& options, const radix_settings& settings)
    : radix_policy(options, make_backend(options.backend, device_config(options)),
                   latency_model_for(device_config(options)), settings) {}

radix_policy::radix_policy(const kv_policy_options& options, std::unique_ptr<vmm_backend> inner,
                           const latency_model& model, const radix_settings& settings)
    : pool_policy(make_pool(options, settings, std::move(inner), model)),
      options_(options),
      settings_(settings),
      bytes_per_token_(checked_bytes_per_token(options, settings)),
      page_tokens_(settings.page_tokens),
      page_bytes_(bytes_per_token_ * page_tokens_),
      eviction_(eviction_for(options, settings.eviction)),
      order_(make_eviction_order(eviction_)) {
  nodes_.emplace_back().live = true;  // the root: holds no token, never locked, never evicted
  sync_pool_pages();
  if (pool_->preallocated() && total_pages_ == 0) {
    throw std::invalid_argument(fmt::format("radix policy: a KV budget of {} bytes holds no page of {} bytes",
                                            options.memory_bytes, page_bytes_));
  }
}

radix_policy::~radix_policy() = default;

policy_definition<radix_settings> radix_definition() {
  using s = radix_settings;
  policy_definition<s> d;
  d.options = {
      count_option<s, std::uint32_t>("page-tokens", "radix: tokens per page of the token pool", &s::page_tokens, 1, 1),
      prefix_caching_option(&s::prefix_caching)};
  for (auto& row : eviction_options(&s::eviction)) d.options.push_back(std::move(row));
  d.check = [](const s& v) { check_eviction(v.eviction); };
  d.make = construct_with<radix_policy, s>();
  d.access = [](const kv_policy_options&, const s& v) { return kv_access{true, v.page_tokens}; };
  d.sharing = [](const kv_policy_options&, const s& v) { return shared_at_admission(v.prefix_caching, v.page_tokens); };
  return d;
}

// ---------------------------------------------------------------------------------------------
// Pool

void radix_policy::sync_pool_pages() {
  const std::uint64_t pages = pool_->physical_bytes() / page_bytes_;
  free_pages_ += pages - total_pages_;
  total_pages_ = pages;
}

// Note [Making room]
// SGLang allocates through alloc_token_slots / alloc_paged_token_slots_extend
// (srt/mem_cache/common.py), which call evict_from_tree_cache first: when the allocator's
// available size is below the tokens asked for, the tree evicts that many tokens (the whole
// request, not the shortfall), popping unlocked leaves from a heap ordered by last access time,
// pushing a parent when it becomes an unlocked leaf, and stopping once at least that many are
// evicted (a leaf is evicted whole, so it may free more). The scheduler only gets that far for a
// request whose tokens fit in available + evictable (PrefillAdder's budget), so here an
// admission or growth first checks free + cached pages and fails without evicting anything when
// even the whole cache would not do; otherwise it evicts `need` pages' worth of leaves, as SGLang
// does. With an unlimited budget there is no eviction while the pool can grow: the pool maps
// more chunks instead (an infinite cache keeps everything).
bool radix_policy::make_room(std::uint64_t need) {
  if (free_pages_ >= need) return true;
  if (can_grow_pool()) {
    const std::uint64_t target = (total_pages_ + (need - free_pages_)) * page_bytes_;
    try {
      (void)pool_->grow_to(target);
    } catch (...) {
      sync_pool_pages();  // chunks mapped before the failure stay in the pool
      throw;
    }
    sync_pool_pages();
    if (free_pages_ >= need) return true;
  }
  if (free_pages_ + unlocked_pages_ < need) return false;
  evict(need);
  return free_pages_ >= need;
}

void radix_policy::evict(std::uint64_t pages) {
  std::uint64_t evicted = 0;
  while (evicted < pages) {
    const std::optional<cache_slot> victim = order_->pop_victim();
    if (!victim) break;
    evicted += remove_leaf(*victim);
  }
}

// Note [Expiry at admission] in core/scheduler.cpp: the same here.
void radix_policy::drop_expired() {
  while (const std::optional<cache_slot> victim = order_->pop_expired()) (void)remove_leaf(*victim);
}

std::uint64_t radix_policy::remove_leaf(std::uint32_t id) {
  if (id >= nodes_.size() || !nodes_[id].candidate) {
    throw std::logic_error(fmt::format("radix policy: the eviction order picked node {}, not a candidate", id));
  }
  node& n = nodes_[id];
  n.candidate = false;
  const std::uint64_t p = pages_of(n);
  free_pages_ += p;
  unlocked_pages_ -= p;
  ++evictions_;
  children_.erase(n.key);
  const std::uint32_t parent = n.parent;
  n.live = false;
  n.blocks.clear();
  free_nodes_.push_back(id);
  --live_nodes_;
  --nodes_[parent].children;
  if (parent != k_root) update_evictable(parent);
  return p;
}

// ---------------------------------------------------------------------------------------------
// Tree

radix_policy::key_view radix_policy::view_of(std::span<const token_block> blocks) const {
  key_view v;
  v.blocks = blocks;
  v.starts.reserve(blocks.size() + 1);
  std::uint64_t at = 0;
  v.starts.push_back(0);
  for (const token_block& b : blocks) v.starts.push_back(at += b.tokens);
  return v;
}

radix_policy::token_id radix_policy::key_view::at(std::uint64_t pos) const {
  // The last block starting at or before pos (blocks of no tokens are skipped).
  const auto it = std::upper_bound(starts.begin(), starts.end() - 1, pos);
  const auto j = static_cast<std::size_t>(it - starts.begin()) - 1;
  return {blocks[j].key, pos - starts[j]};
}

radix_policy::child_key radix_policy::key_at(std::uint32_t parent, const key_view& v, std::uint64_t pos) const {
  return {parent, v.at(pos), v.at(pos + page_tokens_ - 1)};
}

radix_policy::child_key radix_policy::key_of_edge(std::uint32_t parent, const node& n) const {
  const auto id_at = [&](std::uint64_t pos) {
    for (const edge_block& b : n.blocks) {
      if (pos < b.end) return token_id{b.key, pos - b.start};
    }
    throw std::logic_error("radix policy: an edge's blocks do not cover its tokens");
  };
  return {parent, id_at(n.begin), id_at(n.begin + page_tokens_ - 1)};
}

std::uint32_t radix_policy::find_child(std::uint32_t parent, const key_view& v, std::uint64_t pos) const {
  const auto it = children_.find(key_at(parent, v, pos));
  return it == children_.end() ? k_none : it->second;
}

// How far `v` agrees with the edge `n`, from n.begin up to min(n.end, limit), in whole pages
// (SGLang's _key_match_paged): position p agrees when both name it with the same block key at
// the same offset.
std::uint64_t radix_policy::match_edge(const node& n, const key_view& v, std::uint64_t limit) const {
  const std::uint64_t stop = std::min(n.end, limit);
  const std::size_t blocks = v.blocks.size();
  if (n.begin >= v.keyed()) return n.begin;
  auto j =
      static_cast<std::size_t>(std::upper_bound(v.starts.begin(), v.starts.end() - 1, n.begin) - v.starts.begin()) - 1;
  std::uint64_t reached = n.begin;
  for (const edge_block& b : n.blocks) {
    const std::uint64_t lo = std::max(b.start, n.begin);
    if (lo >= stop) break;
    while (j < blocks && v.starts[j + 1] <= lo) ++j;
    if (j >= blocks || v.blocks[j].key != b.key || v.starts[j] != b.start) break;
    const std::uint64_t hi = std::min(b.end, stop);
    reached = std::min(hi, v.starts[j + 1]);
    if (reached < hi) break;
  }
  return std::max(n.begin, floor_page(reached));
}

// Note [LRU clock]
// SGLang stamps last_access_time with time.monotonic() on every node a match or an insert walks
// (_match_prefix_helper, _insert_helper) and on nodes it creates (a split's new node too); the
// eviction heap orders leaves by it. Wall time must not steer a simulation, and within one
// simulated step many calls happen at the same instant, so the order (core/eviction_order.hpp)
// is told of every creation (insert) and every walk, in SGLang's order: a match's walk is a use
// (touch), an insert's walk over what is already there a refresh (recency, not a use). Its LRU,
// which treats both alike, orders nodes exactly as SGLang's monotonic time would, with no ties;
// frequency orders count matches only.
void radix_policy::touch(std::uint32_t id) {
  if (id != k_root) order_->touch(id);
}

void radix_policy::refresh(std::uint32_t id) {
  if (id != k_root) order_->refresh(id);
}

void radix_policy::enter(std::uint32_t id) {
  const node& n = nodes_[id];
  order_->insert(id, {n.tokens(), n.begin, n.blocks.empty() ? 0 : n.blocks.front().key});
}

void radix_policy::update_evictable(std::uint32_t id) {
  node& n = nodes_[id];
  const bool should = is_evictable(n);
  if (should == n.candidate) return;
  n.candidate = should;
  order_->set_candidate(id, should);
}

void radix_policy::inc_lock(std::uint32_t id) {
  while (id != k_root) {
    node& n = nodes_[id];
    if (n.lock_ref == 0) {
      unlocked_pages_ -= pages_of(n);
      locked_pages_ += pages_of(n);
    }
    ++n.lock_ref;
    update_evictable(id);
    id = n.parent;
  }
}

void radix_policy::dec_lock(std::uint32_t id) {
  while (id != k_root) {
    node& n = nodes_[id];
    if (n.lock_ref == 0) throw std::logic_error("radix policy: unlocking a node no request locks");
    if (--n.lock_ref == 0) {
      locked_pages_ -= pages_of(n);
      unlocked_pages_ += pages_of(n);
      update_evictable(id);
    }
    id = n.parent;
  }
}

std::uint32_t radix_policy::new_node() {
  std::uint32_t id;
  if (!free_nodes_.empty()) {
    id = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    id = static_cast<std::uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  node& n = nodes_[id];
  n.parent = k_root;
  n.children = 0;
  n.lock_ref = 0;
  n.live = true;
  ++live_nodes_;
  return id;
}

// SGLang's _split_node: a new node takes the first part of the edge [begin, at) and the child's
// lock count (every lock through the child passes through it), the child keeps [at, end) under
// it; the new node is stamped now. Page counts move between two nodes of the same lock state.
std::uint32_t radix_policy::split(std::uint32_t id, std::uint64_t at) {
  const std::uint32_t nid = new_node();  // may move nodes_
  node& c = nodes_[id];
  node& n = nodes_[nid];
  n.parent = c.parent;
  n.begin = c.begin;
  n.end = at;
  n.lock_ref = c.lock_ref;
  n.children = 1;
  n.key = c.key;
  n.blocks.clear();
  for (const edge_block& b : c.blocks) {
    if (std::max(b.start, c.begin) >= at) break;
    n.blocks.push_back({b.key, b.start, std::min(b.end, at)});
  }
  children_[n.key] = nid;
  const auto first_kept =
      std::find_if(c.blocks.begin(), c.blocks.end(), [&](const edge_block& b) { return b.end > at; });
  c.blocks.erase(c.blocks.begin(), first_kept);
  c.begin = at;
  c.parent = nid;
  c.key = key_of_edge(nid, c);
  children_.emplace(c.key, id);
  enter(nid);  // stamped now, as SGLang's new TreeNode; never a candidate while `c` hangs below
  order_->resize(id, {c.tokens(), c.begin, c.blocks.front().key});
  return nid;
}

// SGLang's match_prefix over the first `limit` tokens (already capped and page-aligned): walks
// down, stamping every child it enters, and splits the edge a match ends inside. Returns the
// deepest node matched and the tokens matched.
std::pair<std::uint32_t, std::uint64_t> radix_policy::match_prefix(const key_view& v, std::uint64_t limit) {
  std::uint32_t cur = k_root;
  std::uint64_t pos = 0;
  while (pos + page_tokens_ <= limit) {
    const std::uint32_t c = find_child(cur, v, pos);
    if (c == k_none) break;
    touch(c);
    const std::uint64_t m = match_edge(nodes_[c], v, limit);
    if (m == nodes_[c].begin) break;  // keys that are not chained disagree inside the first page
    if (m < nodes_[c].end) return {split(c, m), m};
    cur = c;
    pos = m;
  }
  return {cur, pos};
}

// match_prefix() read only: no stamp, no split; the tokens it would match.
std::uint64_t radix_policy::peek_prefix(const key_view& v, std::uint64_t limit) const {
  std::uint32_t cur = k_root;
  std::uint64_t pos = 0;
  while (pos + page_tokens_ <= limit) {
    const std::uint32_t c = find_child(cur, v, pos);
    if (c == k_none) break;
    const std::uint64_t m = match_edge(nodes_[c], v, limit);
    if (m < nodes_[c].end) return m;  // m == begin: keys that are not chained disagree inside the first page
    cur = c;
    pos = m;
  }
  return pos;
}

std::uint64_t radix_policy::do_cached_tokens(const kv_request& r) const {
  if (!settings_.prefix_caching || r.prompt_tokens == 0) return 0;
  const key_view v = view_of(r.blocks);
  const std::uint64_t keyed = std::min(v.keyed(), r.prompt_tokens);
  return peek_prefix(v, floor_page(std::min(keyed, r.prompt_tokens - 1)));
}

// SGLang's _insert_helper from node `from` at position `pos` (the matched prefix) up to `limit`
// (page-aligned): walks what is already there (counting the pages the request computed again,
// which SGLang frees as duplicates), splits where the key leaves an edge, and hangs the rest as
// one new leaf. Returns the node at the end and the position reached (limit, unless keys that are
// not chained stop it).
std::pair<std::uint32_t, std::uint64_t> radix_policy::insert(std::uint32_t from, const key_view& v, std::uint64_t pos,
                                                             std::uint64_t limit, std::uint64_t& duplicate_pages) {
  std::uint32_t cur = from;
  while (pos < limit) {
    const std::uint32_t c = find_child(cur, v, pos);
    if (c == k_none) {
      const std::uint32_t leaf = new_node();
      node& l = nodes_[leaf];
      l.parent = cur;
      l.begin = pos;
      l.end = limit;
      l.blocks.clear();
      auto j =
          static_cast<std::size_t>(std::upper_bound(v.starts.begin(), v.starts.end() - 1, pos) - v.starts.begin()) - 1;
      for (; j < v.blocks.size() && v.starts[j] < limit; ++j) {
        if (v.starts[j + 1] > v.starts[j])
          l.blocks.push_back({v.blocks[j].key, v.starts[j], std::min(v.starts[j + 1], limit)});
      }
      l.key = key_at(cur, v, pos);
      children_.emplace(l.key, leaf);
      enter(leaf);
      unlocked_pages_ += pages_of(l);
      ++nodes_[cur].children;
      if (cur != k_root) update_evictable(cur);
      update_evictable(leaf);
      return {leaf, limit};
    }
    refresh(c);  // a walk over what is there: recency, not a use (Note [LRU clock])
    const std::uint64_t m = match_edge(nodes_[c], v, limit);
    if (m == nodes_[c].begin) break;
    duplicate_pages += (m - pos) / page_tokens_;
    pos = m;
    cur = m < nodes_[c].end ? split(c, m) : c;
  }
  return {cur, pos};
}

// ---------------------------------------------------------------------------------------------
// The policy

// Note [Admission]
// SGLang's scheduler matches the waiting request's prompt against the tree
// (Req.init_next_round_input: match_prefix over at most input_len - 1 tokens, truncated to whole
// pages), locks the matched node (inc_lock_ref), allocates the rest of the prompt (evicting as in
// Note [Making room]), runs the prefill, and then inserts the prompt into the tree
// (cache_unfinished_req): the inserted path is locked in place of the matched one, and pages the
// request computed that the tree already held (the prompt's last token's page when its match was
// capped, or a prefix another request inserted meanwhile) are freed as duplicates. Here the
// prefill is part of the step that admits the request, so admission is also the insertion point:
// a request admitted after it in the same or a later step sees its prompt in the tree, as it
// would in SGLang once the prefill chunk is done. Only the keyed tokens are inserted (Note
// [Token identity in the radix tree]).
kv_admit_result radix_policy::do_admit(const kv_request& r) {
  if (r.prompt_tokens == 0)
    throw std::invalid_argument(fmt::format("radix policy: request {} has no prompt", r.id.value));
  if (r.max_tokens < r.prompt_tokens) {
    throw std::invalid_argument(fmt::format("radix policy: request {} has max_tokens {} below its prompt of {}",
                                            r.id.value, r.max_tokens, r.prompt_tokens));
  }
  if (requests_.contains(r.id.value)) {
    throw std::invalid_argument(fmt::format("radix policy: request {} is already admitted", r.id.value));
  }
  const bool caching = settings_.prefix_caching;
  if (caching) drop_expired();
  const key_view v = caching ? view_of(r.blocks) : key_view{};
  const std::uint64_t keyed = caching ? std::min(v.keyed(), r.prompt_tokens) : 0;
  std::uint32_t matched = k_root;
  std::uint64_t hit = 0;
  if (caching) std::tie(matched, hit) = match_prefix(v, floor_page(std::min(keyed, r.prompt_tokens - 1)));
  const std::uint64_t need = pages_for(r.prompt_tokens - hit);
  inc_lock(matched);
  bool room = false;
  try {
    room = make_room(need);
  } catch (...) {
    dec_lock(matched);
    throw;
  }
  if (!room) {
    dec_lock(matched);
    return {};
  }
  free_pages_ -= need;
  live_request q;
  q.node = matched;
  q.tree_end = hit;
  q.tokens = r.prompt_tokens;
  q.max_tokens = r.max_tokens;
  if (caching && floor_page(keyed) > hit) {
    std::uint64_t duplicates = 0;
    const auto [end_node, end] = insert(matched, v, hit, floor_page(keyed), duplicates);
    inc_lock(end_node);
    dec_lock(matched);
    free_pages_ += duplicates;
    q.node = end_node;
    q.tree_end = end;
  }
  q.private_pages = need - (q.tree_end - hit) / page_tokens_;
  private_pages_ += q.private_pages;
  private_tokens_ += q.tokens - q.tree_end;
  logical_tokens_ += q.tokens;
  prompt_tokens_ += r.prompt_tokens;
  hit_tokens_ += hit;
  requests_.emplace(r.id.value, q);
  return {true, hit, 0};
}

bool radix_policy::do_grow(request_id id, std::uint64_t tokens) {
  const auto it = requests_.find(id.value);
  if (it == requests_.end()) throw std::invalid_argument(fmt::format("radix policy: unknown request {}", id.value));
  live_request& q = it->second;
  if (tokens > q.max_tokens - q.tokens) {
    throw std::invalid_argument(fmt::format("radix policy: request {} would grow to {} tokens, past its max_tokens {}",
                                            id.value, q.tokens + tokens, q.max_tokens));
  }
  const std::uint64_t need = pages_for(q.tokens + tokens - q.tree_end) - q.private_pages;
  if (need > 0) {
    if (!make_room(need)) return false;
    free_pages_ -= need;
    q.private_pages += need;
    private_pages_ += need;
  }
  q.tokens += tokens;
  private_tokens_ += tokens;
  logical_tokens_ += tokens;
  return true;
}

// SGLang's cache_finished_req (a finished request) and release_kv_cache with is_insert=False (a
// retracted one) both leave the tree as it is, unlock the request's node and free the pages
// outside the tree; a finished request would also insert its output, which no later request can
// match here (generated tokens carry no key), so it is freed at once (docs/policies/radix.md).
void radix_policy::do_release(request_id id, release_reason /*why*/) {
  const auto it = requests_.find(id.value);
  if (it == requests_.end()) throw std::invalid_argument(fmt::format("radix policy: unknown request {}", id.value));
  const live_request& q = it->second;
  free_pages_ += q.private_pages;
  private_pages_ -= q.private_pages;
  private_tokens_ -= q.tokens - q.tree_end;
  logical_tokens_ -= q.tokens;
  dec_lock(q.node);
  requests_.erase(it);
}

kv_stats radix_policy::do_stats() const {
  return unit_stats({.unit_bytes = page_bytes_,
                     .units = total_pages_,
                     .held = locked_pages_ + private_pages_,
                     .cached = unlocked_pages_,
                     .free = free_pages_,
                     .used_bytes = (locked_pages_ * page_tokens_ + private_tokens_) * bytes_per_token_,
                     .logical_bytes = logical_tokens_ * bytes_per_token_});
}

nlohmann::ordered_json radix_policy::do_describe() const {
  const bool unlimited = options_.memory_bytes == std::numeric_limits<std::uint64_t>::max();
  nlohmann::ordered_json j = describe_device(options_.backend, device_config(options_));
  const nlohmann::ordered_json own = {
      {"page_tokens", page_tokens_},
      {"prefix_caching", settings_.prefix_caching},
      {"kv_bytes_per_token", bytes_per_token_},
      {"page_bytes", page_bytes_},
      {"pool_pages", unlimited ? nlohmann::ordered_json("grows on demand") : nlohmann::ordered_json(total_pages_)},
      {"eviction", settings_.eviction.name + " leaves"}};
  for (const auto& [key, value] : own.items()) j[key] = value;
  describe_eviction_settings(j, eviction_);
  return j;
}

void radix_policy::do_check_invariants() const {
  const auto fail = [](const std::string& what) { throw std::logic_error("radix policy: " + what); };
  // Locks: each live request locks its node's path.
  std::vector<std::uint64_t> locks(nodes_.size(), 0);
  std::uint64_t private_pages = 0, private_tokens = 0, logical = 0;
  for (const auto& [id, q] : requests_) {
    if (!nodes_[q.node].live) fail(fmt::format("request {} locks a dead node", id));
    if (q.node != k_root && nodes_[q.node].end != q.tree_end)
      fail(fmt::format("request {}: node ends off its tree tokens", id));
    if (q.node == k_root && q.tree_end != 0) fail(fmt::format("request {} has tree tokens and no node", id));
    if (q.tokens < q.tree_end || q.tokens > q.max_tokens) fail(fmt::format("request {}: token counts disagree", id));
    if (q.private_pages != pages_for(q.tokens - q.tree_end)) fail(fmt::format("request {}: private pages", id));
    for (std::uint32_t n = q.node; n != k_root; n = nodes_[n].parent) ++locks[n];
    private_pages += q.private_pages;
    private_tokens += q.tokens - q.tree_end;
    logical += q.tokens;
  }
  if (private_pages != private_pages_ || private_tokens != private_tokens_ || logical != logical_tokens_) {
    fail("request totals disagree with the counters");
  }
  std::vector<std::uint32_t> children(nodes_.size(), 0);
  std::uint64_t locked = 0, unlocked = 0, live = 0, listed = 0;
  for (std::uint32_t id = 1; id < nodes_.size(); ++id) {
    const node& n = nodes_[id];
    if (!n.live) continue;
    ++live;
    const node& p = nodes_[n.parent];
    if (!p.live) fail(fmt::format("node {} hangs under a dead node", id));
    if (n.begin != p.end || n.end <= n.begin) fail(fmt::format("node {} does not continue its parent", id));
    if (n.begin % page_tokens_ != 0 || n.end % page_tokens_ != 0) fail(fmt::format("node {} holds a partial page", id));
    ++children[n.parent];
    if (n.lock_ref != locks[id])
      fail(fmt::format("node {}: lock_ref {} but {} requests lock it", id, n.lock_ref, locks[id]));
    (n.lock_ref > 0 ? locked : unlocked) += pages_of(n);
    std::uint64_t at = n.begin;
    for (const edge_block& b : n.blocks) {
      if (std::max(b.start, n.begin) != at || b.end <= at) fail(fmt::format("node {}: its blocks do not tile it", id));
      at = b.end;
    }
    if (at != n.end) fail(fmt::format("node {}: its blocks do not cover it", id));
    const auto it = children_.find(n.key);
    if (it == children_.end() || it->second != id || n.key != key_of_edge(n.parent, n)) {
      fail(fmt::format("node {} is not found under its key", id));
    }
  }
  for (std::uint32_t id = 0; id < nodes_.size(); ++id) {
    const node& n = nodes_[id];
    if (!n.live) continue;
    if (n.children != children[id])
      fail(fmt::format("node {}: {} children counted, {} found", id, n.children, children[id]));
    if (id != k_root && n.candidate != is_evictable(n)) fail(fmt::format("node {}: eviction candidacy disagrees", id));
    listed += n.candidate ? 1 : 0;
  }
  if (listed != order_->candidates()) fail("the eviction order's candidates disagree with the tree");
  if (live != live_nodes_ || children_.size() != live_nodes_) fail("node counts disagree");
  if (locked != locked_pages_ || unlocked != unlocked_pages_) {
    fail(fmt::format("tree pages: locked {} (counter {}), cached {} (counter {})", locked, locked_pages_, unlocked,
                     unlocked_pages_));
  }
  if (total_pages_ != pool_->physical_bytes() / page_bytes_) fail("pool pages disagree with the pool's bytes");
  if (free_pages_ + locked_pages_ + unlocked_pages_ + private_pages_ != total_pages_) {
    fail(fmt::format("pages: free {} + locked {} + cached {} + private {} != pool {}", free_pages_, locked_pages_,
                     unlocked_pages_, private_pages_, total_pages_));
  }
  if (!settings_.prefix_caching && live_nodes_ != 0) fail("a tree without prefix caching");
}

}  // namespace vtensor::sim
