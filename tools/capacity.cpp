// The objective and the search of `vtensor capacity` (tools/capacity.hpp).

#include "tools/capacity.hpp"

#include "tools/cli.hpp"

#include <fmt/format.h>

#include <cmath>
#include <regex>

namespace vtensor::tools {

// Note [Capacity search]
// The load of a replay is the trace's arrival rate times L (its timestamps divided by L: replay's
// --time-scale 1/L). The search assumes what queueing makes nearly true: an objective met at a
// load is met at any lighter one. It starts at L = 1, doubles while the objective holds (up to
// max_load) or halves while it fails (down to min_load), then bisects the bracket geometrically
// until the failing load is within `tolerance` of the met one; the capacity is the met end. Each
// probe is one deterministic replay, so a capacity is exact for its bracket, and every probe is
// reported, so a trace where the objective is not monotone in load shows it. A load between
// min_load and max_load never met or always met ends as "none" or "at least".

double slo::value(const slo_clause& c, const sim::replay_summary& s) {
  const sim::latency_summary& l = c.metric == "ttft" ? s.ttft : c.metric == "tpot" ? s.tpot : s.e2e;
  return c.quantile == "p50" ? l.p50 : c.quantile == "p90" ? l.p90 : l.p99;
}

bool slo::met(const sim::replay_summary& s) const {
  for (const slo_clause& c : clauses) {
    if (!(value(c, s) <= c.limit_ms)) return false;
  }
  return true;
}

slo parse_slo(const std::string& text) {
  static const std::regex clause(R"(\s*(ttft|tpot|e2e)_(p50|p90|p99)\s*(<=|<)\s*([0-9]+(\.[0-9]+)?)\s*(s|ms|us)\s*)");
  slo out;
  std::size_t from = 0;
  while (from <= text.size() && !text.empty()) {  // every comma separates two clauses: none may be empty
    const std::size_t comma = std::min(text.find(',', from), text.size());
    const std::string item = text.substr(from, comma - from);
    from = comma + 1;
    std::smatch m;
    if (!std::regex_match(item, m, clause)) {
      throw usage_error(fmt::format(
          "--slo: '{}' is not a clause like ttft_p90<=5s (metrics ttft, tpot, e2e; quantiles p50, p90, p99; "
          "units s, ms, us)",
          item));
    }
    const double number = std::stod(m[4].str());
    const double scale = m[6] == "s" ? 1e3 : m[6] == "ms" ? 1.0 : 1e-3;
    if (!(number > 0)) throw usage_error(fmt::format("--slo: '{}': the limit must be positive", item));
    out.clauses.push_back({m[1].str(), m[2].str(), number * scale, item});
  }
  if (out.clauses.empty()) throw usage_error("--slo: no clause (e.g. 'ttft_p90<=5s,tpot_p99<=100ms')");
  return out;
}

std::optional<double> capacity_search::next() const {
  if (!met && !failed) return 1.0;
  if (!met) {
    const double l = *failed / 2;
    return l < min_load ? std::nullopt : std::optional(std::max(l, min_load));
  }
  if (!failed) {
    const double l = *met * 2;
    return *met >= max_load ? std::nullopt : std::optional(std::min(l, max_load));
  }
  if (*failed <= *met * (1 + tolerance)) return std::nullopt;
  return std::sqrt(*met * *failed);
}

void capacity_search::record(double load, bool meets) {
  ++replays;
  if (meets) {
    if (!met || load > *met) met = load;
  } else if (!failed || load < *failed) {
    failed = load;
  }
}

std::string capacity_search::status() const {
  if (!met) return "none";
  if (!failed) return "at least";
  return "found";
}

// Note [Fewest replicas]
// The other question an operator asks of the SLO: how many GPUs does each policy need for the
// load the trace has? replica_search answers it at the trace's own rate with the same assumption
// as the load search, turned around: an objective met by N replicas behind the router is met by
// more (the router spreads the same arrivals thinner; routing that reads caches can make this
// false by a little, which the probes, all reported, would show). Counts double from 1 while the
// objective fails (up to max_replicas), then bisect between the most that failed and the fewest
// that met until they are adjacent: exact for integers, about 2 log2(N) replays.
std::optional<std::uint32_t> replica_search::next() const {
  if (!met) {
    if (!failed) return 1;
    return *failed >= max_replicas ? std::nullopt : std::optional(std::min(*failed * 2, max_replicas));
  }
  const std::uint32_t low = failed.value_or(0);
  if (*met - low <= 1) return std::nullopt;
  return low + (*met - low) / 2;
}

void replica_search::record(std::uint32_t replicas, bool meets) {
  ++replays;
  if (meets) {
    if (!met || replicas < *met) met = replicas;
  } else if (!failed || replicas > *failed) {
    failed = replicas;
  }
}

}  // namespace vtensor::tools
