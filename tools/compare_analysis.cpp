#include "tools/compare_analysis.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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

point_analysis analyse_point(const traces::loaded_trace& trace, const traces::prefix_index& index,
                             const std::vector<request_times>& times, const sharing_model& sharing,
                             const sim::replica_counters& counters) {
  using m = sharing_model::moment;
  point_analysis a;
  const std::size_t n = trace.requests.size();
  if (times.size() != n || index.infinite_hit.size() != n)
    throw std::logic_error("compare: the point's records do not match the trace");
  const std::size_t nodes = index.parent.size();
  // Per prefix block, over the requests before the current one (in trace order, which is the
  // order of first admissions: Note [Why a token missed] in docs/compare.md):
  std::vector<sim::time_us> published(nodes, k_never);  // earliest time some request shared it
  std::vector<sim::time_us> computed(nodes, k_never);   // earliest time some request's prefill completed
  std::vector<sim::time_us> last_use(nodes, k_never);   // latest admission that used it
  std::vector<sim::time_us> first_use(nodes, k_never);  // earliest admission that used it
  std::vector<sim::time_us> last_hit(nodes, k_never);   // latest admission of this point that hit it
  std::uint64_t infinite_total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const traces::trace_request& r = trace.requests[i];
    const request_times& t = times[i];
    const bool admitted = !t.rejected && t.admitted != k_never;
    const sim::time_us at = admitted ? t.admitted : t.finish;  // a rejected request: when it was turned away
    const std::uint64_t bound = index.infinite_hit[i];
    const std::uint64_t hit = t.hit_tokens;
    const auto path = index.path(i);
    const std::uint64_t bt = r.block_tokens;
    infinite_total += bound;
    if (hit > bound) {
      ++a.over_bound_requests;
    } else if (hit < bound && sharing.at == m::never) {
      a.misses.no_cache += bound - hit;  // no prefix cache: timing and granularity do not apply
    } else if (hit < bound) {
      const std::uint64_t unit = std::max<std::uint32_t>(sharing.unit_tokens, 1);
      const std::uint64_t shareable = std::max(hit, bound / unit * unit);
      a.misses.granularity += bound - shareable;
      for (std::uint64_t j = hit / bt; j * bt < shareable; ++j) {
        const std::uint64_t tokens = std::min(shareable, (j + 1) * bt) - std::max(hit, j * bt);
        const std::uint32_t node = path[j];
        if (published[node] <= at) {
          a.misses.evicted += tokens;
        } else if (computed[node] <= at) {
          a.misses.unpublished += tokens;
        } else {
          a.misses.in_flight += tokens;
        }
      }
    }
    if (admitted && bt > 0) {
      for (std::uint64_t j = 0; j * bt < hit && j < path.size(); ++j) {
        const std::uint32_t node = path[j];
        const std::uint64_t tokens = std::min(hit, (j + 1) * bt) - j * bt;
        if (last_use[node] != k_never) a.reuse_distance.add(static_cast<double>(at - last_use[node]) / 1e6, tokens);
        last_hit[node] = at;
      }
    }
    const sim::time_us shares = !admitted                    ? k_never
                                : sharing.at == m::admission ? t.admitted
                                : sharing.at == m::release   ? t.finish
                                                             : k_never;
    for (const std::uint32_t node : path) {
      published[node] = std::min(published[node], shares);
      if (admitted) {
        computed[node] = std::min(computed[node], t.first_token);
        last_use[node] = at;
        first_use[node] = std::min(first_use[node], at);
      }
    }
  }
  for (std::size_t node = 1; node < nodes; ++node) {
    if (last_hit[node] != k_never && first_use[node] != k_never) {
      a.cached_lifetime.add(static_cast<double>(last_hit[node] - first_use[node]) / 1e6);
    }
  }
  a.misses.cold = counters.prompt_tokens - infinite_total;
  a.misses.preempted = counters.recomputed_tokens;
  a.misses.total = counters.prompt_tokens - counters.hit_tokens + counters.recomputed_tokens;

  std::vector<std::uint64_t> ttft, tpot;
  for (const request_times& t : times) {
    if (t.rejected || t.first_token == k_never || t.finish == k_never) continue;
    ttft.push_back(t.first_token - t.arrival);
    if (t.output_tokens >= 2) tpot.push_back((t.finish - t.first_token) / (t.output_tokens - 1));
  }
  a.ttft_ms = quantiles_ms(ttft);
  a.tpot_ms = quantiles_ms(tpot);
  return a;
}

}  // namespace vtensor::tools
