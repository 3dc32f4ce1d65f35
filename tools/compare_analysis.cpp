#include "tools/compare_analysis.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <stdexcept>

namespace vtensor::tools {

void point_recorder::on_admit(const sim::admission_record& a) {
  if (!a.first || a.id >= requests_.size()) return;
  request_times& t = requests_[a.id];
  t.admitted = a.at;
  t.hit_tokens = a.hit_tokens;
}

void point_recorder::on_request(const sim::request_record& r) {
  if (r.id >= requests_.size()) return;
  request_times& t = requests_[r.id];
  t.arrival = r.arrival;
  t.finish = r.finish;
  if (!r.rejected.empty()) {
    t.rejected = true;
    return;
  }
  t.first_token = r.first_token;
  t.output_tokens = r.output_tokens;
}

log_histogram::log_histogram() {
  constexpr int per_decade = 4;
  constexpr int first = -3 * per_decade;  // 1 ms
  constexpr int last = 5 * per_decade;    // 1e5 s
  for (int k = first; k <= last; ++k) edges.push_back(std::pow(10.0, static_cast<double>(k) / per_decade));
  counts.assign(edges.size() - 1, 0);
}

void log_histogram::add(double seconds, std::uint64_t weight) {
  const auto above = std::upper_bound(edges.begin(), edges.end(), seconds);
  auto bin = static_cast<std::ptrdiff_t>(above - edges.begin()) - 1;
  bin = std::clamp<std::ptrdiff_t>(bin, 0, static_cast<std::ptrdiff_t>(counts.size()) - 1);
  counts[static_cast<std::size_t>(bin)] += weight;
}

std::vector<double> quantiles_ms(std::vector<std::uint64_t>& values_us) {
  std::vector<double> q(101, 0.0);
  if (values_us.empty()) return q;
  std::sort(values_us.begin(), values_us.end());
  const auto n = values_us.size();
  for (std::size_t k = 0; k <= 100; ++k) {
    // Nearest rank, as summarize_latencies: the ceil(q n)-th value, at least the first.
    std::size_t rank = (k * n + 99) / 100;
    rank = std::clamp<std::size_t>(rank, 1, n);
    q[k] = static_cast<double>(values_us[rank - 1]) / 1000.0;
  }
  return q;
}

namespace {

using moment = sharing_model::moment;

// Per prefix block, over the requests before the current one (in trace order, which is the
// order of first admissions: Note [Why a token missed] in docs/compare.md).
struct block_history {
  explicit block_history(std::size_t nodes)
      : published(nodes, k_never),
        computed(nodes, k_never),
        last_use(nodes, k_never),
        first_use(nodes, k_never),
        last_hit(nodes, k_never) {}
  std::vector<sim::time_us> published;  // earliest time some request shared it
  std::vector<sim::time_us> computed;   // earliest time some request's prefill completed
  std::vector<sim::time_us> last_use;   // latest admission that used it
  std::vector<sim::time_us> first_use;  // earliest admission that used it
  std::vector<sim::time_us> last_hit;   // latest admission of this point that hit it
};

// One request as the analysis sees it: its blocks, when it was admitted (or turned away), what it
// hit and what the infinite cache would have.
struct request_view {
  std::span<const std::uint32_t> path;  // its prefix blocks
  std::uint64_t block_tokens = 0;       // tokens per block
  sim::time_us at = 0;                  // admission, or rejection
  bool admitted = false;
  std::uint64_t hit = 0;    // hit at first admission
  std::uint64_t bound = 0;  // the infinite cache's hit
};

// Why the tokens of `r` that the infinite cache hits and this point did not missed.
void count_misses(const request_view& r, const sharing_model& sharing, const block_history& h, miss_causes& misses) {
  if (r.hit >= r.bound) return;
  if (sharing.at == moment::never) {
    misses.no_cache += r.bound - r.hit;  // no prefix cache: timing and granularity do not apply
    return;
  }
  const std::uint64_t unit = std::max<std::uint32_t>(sharing.unit_tokens, 1);
  const std::uint64_t shareable = std::max(r.hit, r.bound / unit * unit);
  const std::uint64_t bt = r.block_tokens;
  misses.granularity += r.bound - shareable;
  for (std::uint64_t j = r.hit / bt; j * bt < shareable; ++j) {
    const std::uint64_t tokens = std::min(shareable, (j + 1) * bt) - std::max(r.hit, j * bt);
    const std::uint32_t node = r.path[j];
    if (h.published[node] <= r.at) {
      misses.evicted += tokens;
    } else if (h.computed[node] <= r.at) {
      misses.unpublished += tokens;
    } else {
      misses.in_flight += tokens;
    }
  }
}

// The reuse distance of each block `r` hit, and its last hit.
void record_hits(const request_view& r, block_history& h, log_histogram& reuse_distance) {
  const std::uint64_t bt = r.block_tokens;
  if (!r.admitted || bt == 0) return;
  for (std::uint64_t j = 0; j * bt < r.hit && j < r.path.size(); ++j) {
    const std::uint32_t node = r.path[j];
    const std::uint64_t tokens = std::min(r.hit, (j + 1) * bt) - j * bt;
    if (h.last_use[node] != k_never) reuse_distance.add(static_cast<double>(r.at - h.last_use[node]) / 1e6, tokens);
    h.last_hit[node] = r.at;
  }
}

// What `r` (times `t`) leaves in the history of its blocks: when they were shared and computed.
void record_use(const request_view& r, const request_times& t, const sharing_model& sharing, block_history& h) {
  const sim::time_us shares = !r.admitted                       ? k_never
                              : sharing.at == moment::admission ? t.admitted
                              : sharing.at == moment::release   ? t.finish
                              : sharing.at == moment::computed  ? t.first_token
                                                                : k_never;
  for (const std::uint32_t node : r.path) {
    h.published[node] = std::min(h.published[node], shares);
    if (r.admitted) {
      h.computed[node] = std::min(h.computed[node], t.first_token);
      h.last_use[node] = r.at;
      h.first_use[node] = std::min(h.first_use[node], r.at);
    }
  }
}

// The 101 quantiles of TTFT and TPOT over the completed requests.
void latency_quantiles(const std::vector<request_times>& times, point_analysis& a) {
  std::vector<std::uint64_t> ttft, tpot;
  for (const request_times& t : times) {
    if (t.rejected || t.first_token == k_never || t.finish == k_never) continue;
    ttft.push_back(t.first_token - t.arrival);
    if (t.output_tokens >= 2) tpot.push_back((t.finish - t.first_token) / (t.output_tokens - 1));
  }
  a.ttft_ms = quantiles_ms(ttft);
  a.tpot_ms = quantiles_ms(tpot);
}

}  // namespace

point_analysis analyse_point(const traces::loaded_trace& trace, const traces::prefix_index& index,
                             const std::vector<request_times>& times, const sharing_model& sharing,
                             const sim::replica_counters& counters) {
  point_analysis a;
  const std::size_t n = trace.requests.size();
  if (times.size() != n || index.infinite_hit.size() != n)
    throw std::logic_error("compare: the point's records do not match the trace");
  const std::size_t nodes = index.parent.size();
  block_history h(nodes);
  std::uint64_t infinite_total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const request_times& t = times[i];
    request_view r;
    r.path = index.path(i);
    r.block_tokens = trace.requests[i].block_tokens;
    r.admitted = !t.rejected && t.admitted != k_never;
    r.at = r.admitted ? t.admitted : t.finish;  // a rejected request: when it was turned away
    r.hit = t.hit_tokens;
    r.bound = index.infinite_hit[i];
    infinite_total += r.bound;
    if (r.hit > r.bound) ++a.over_bound_requests;
    count_misses(r, sharing, h, a.misses);
    record_hits(r, h, a.reuse_distance);
    record_use(r, t, sharing, h);
  }
  for (std::size_t node = 1; node < nodes; ++node) {
    if (h.last_hit[node] != k_never && h.first_use[node] != k_never) {
      a.cached_lifetime.add(static_cast<double>(h.last_hit[node] - h.first_use[node]) / 1e6);
    }
  }
  a.misses.cold = counters.prompt_tokens - infinite_total;
  a.misses.preempted = counters.recomputed_tokens;
  a.misses.total = counters.prompt_tokens - counters.hit_tokens + counters.recomputed_tokens;
  latency_quantiles(times, a);
  return a;
}

}  // namespace vtensor::tools
