// The verdicts of a comparison (tools/compare_verdict.hpp; Note [Verdicts weigh differences]).

#include "tools/compare_verdict.hpp"

#include "tools/cli.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace vtensor::tools {
namespace {

using json = nlohmann::json;

// The value at `path` in `point`, when it is a number.
std::optional<double> value_at(const json& point, const std::vector<std::string_view>& path) {
  const json* at = &point;
  for (const std::string_view key : path) {
    if (!at->is_object()) return std::nullopt;
    const auto it = at->find(std::string(key));
    if (it == at->end()) return std::nullopt;
    at = &*it;
  }
  if (!at->is_number()) return std::nullopt;
  return at->get<double>();
}

// How far a difference is from a tie: |ln r|, infinite when the baseline is 0.
double weight(const metric_difference& d) {
  return d.ratio ? std::abs(std::log(*d.ratio)) : std::numeric_limits<double>::infinity();
}

// "TTFT p50 17.0% lower (0.830x)"; "throughput 3.00x higher"; "preemptions 12 against 0".
std::string difference_text(const metric_difference& d, quantity_unit unit) {
  if (!d.ratio || *d.ratio <= 0)
    return fmt::format("{} {} against {}", d.label, quantity_text(d.value, unit), quantity_text(d.baseline, unit));
  const double r = *d.ratio;
  if (r >= 2) return fmt::format("{} {} higher", d.label, ratio_text(r));
  return fmt::format("{} {}% {} ({})", d.label, significant3(std::abs(r - 1) * 100), d.higher ? "higher" : "lower",
                     ratio_text(r));
}

quantity_unit unit_of(const std::string& key) {
  for (const verdict_metric& m : verdict_metrics()) {
    if (m.key == key) return m.unit;
  }
  return quantity_unit::count;
}

nlohmann::ordered_json difference_json(const metric_difference& d) {
  return {{"metric", d.key},
          {"value", d.value},
          {"baseline", d.baseline},
          {"ratio", d.ratio ? nlohmann::ordered_json(*d.ratio) : nlohmann::ordered_json(nullptr)}};
}

}  // namespace

const std::vector<verdict_metric>& verdict_metrics() {
  static const std::vector<verdict_metric> metrics = {
      {"prefix_hit_rate", "hit rate", {"hit_rate"}, true, quantity_unit::fraction},
      {"throughput_tokens_per_s",
       "throughput",
       {"summary", "throughput_tokens_per_s"},
       true,
       quantity_unit::tokens_per_s},
      {"ttft_p50_ms", "TTFT p50", {"summary", "ttft_ms", "p50"}, false, quantity_unit::ms},
      {"ttft_p99_ms", "TTFT p99", {"summary", "ttft_ms", "p99"}, false, quantity_unit::ms},
      {"tpot_p50_ms", "TPOT p50", {"summary", "tpot_ms", "p50"}, false, quantity_unit::ms},
      {"tpot_p99_ms", "TPOT p99", {"summary", "tpot_ms", "p99"}, false, quantity_unit::ms},
      {"preemptions", "preemptions", {"summary", "preemptions"}, false, quantity_unit::count},
      {"peak_physical_bytes", "peak memory", {"summary", "peak_physical_bytes"}, std::nullopt, quantity_unit::bytes},
  };
  return metrics;
}

double parse_tie(const std::string& text, std::string_view option) {
  std::string number = text;
  double scale = 1;
  if (!number.empty() && number.back() == '%') {
    number.pop_back();
    scale = 0.01;
  }
  double value = 0;
  std::size_t used = 0;
  try {
    value = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  value *= scale;
  if (number.empty() || used != number.size() || !std::isfinite(value) || value < 0 || value >= 1) {
    throw usage_error(
        fmt::format("{} {}: not a tolerance (a fraction in [0, 1) such as 0.01, or a percentage "
                    "such as 1%)",
                    option, text));
  }
  return value;
}

std::vector<verdict> judge(const json& summary, double tie) {
  if (!summary.is_object() || !summary.contains("baseline") || !summary.contains("points") ||
      !summary["points"].is_array())
    throw std::invalid_argument("summary.json: \"baseline\" or \"points\" is missing");
  const std::string baseline = summary["baseline"].get<std::string>();
  const json& points = summary["points"];
  std::vector<verdict> out;
  for (const json& p : points) {
    const std::string arm = p.value("arm", "");
    const std::string cell = p.value("cell", "");
    if (arm == baseline) continue;
    const auto base = std::find_if(points.begin(), points.end(), [&](const json& q) {
      return q.value("arm", "") == baseline && q.value("cell", "") == cell;
    });
    if (base == points.end()) continue;
    verdict v{arm, cell, {}, {}, {}, {}};
    for (const verdict_metric& m : verdict_metrics()) {
      if (!m.higher_better) continue;
      const std::optional<double> value = value_at(p, m.path);
      const std::optional<double> ref = value_at(*base, m.path);
      if (!value || !ref) {
        v.unknown.emplace_back(m.label);
        continue;
      }
      metric_difference d{std::string(m.key), std::string(m.label), *value, *ref, std::nullopt, *value > *ref};
      if (*ref != 0) d.ratio = *value / *ref;
      const bool same = d.ratio ? std::abs(*d.ratio - 1) <= tie : *value == 0;
      if (same) {
        v.ties.emplace_back(m.label);
      } else if (d.higher == *m.higher_better) {
        v.wins.push_back(d);
      } else {
        v.losses.push_back(d);
      }
    }
    const auto largest_first = [](const metric_difference& a, const metric_difference& b) {
      return weight(a) > weight(b);
    };
    std::stable_sort(v.wins.begin(), v.wins.end(), largest_first);
    std::stable_sort(v.losses.begin(), v.losses.end(), largest_first);
    out.push_back(std::move(v));
  }
  return out;
}

std::string verdict_text(const verdict& v) {
  std::vector<std::string> parts;
  const auto list = [](const std::vector<metric_difference>& ds) {
    std::vector<std::string> texts;
    for (const metric_difference& d : ds) texts.push_back(difference_text(d, unit_of(d.key)));
    return fmt::format("{}", fmt::join(texts, ", "));
  };
  if (!v.wins.empty()) parts.push_back("wins: " + list(v.wins));
  if (!v.losses.empty()) parts.push_back("loses: " + list(v.losses));
  if (!v.ties.empty()) {
    parts.push_back(v.wins.empty() && v.losses.empty()
                        ? fmt::format("tie on every metric ({})", fmt::join(v.ties, ", "))
                        : fmt::format("tie: {}", fmt::join(v.ties, ", ")));
  }
  if (!v.unknown.empty()) parts.push_back(fmt::format("not compared: {}", fmt::join(v.unknown, ", ")));
  return fmt::format("{}", fmt::join(parts, "; "));
}

nlohmann::ordered_json verdicts_json(const std::vector<verdict>& verdicts, double tie) {
  nlohmann::ordered_json higher = nlohmann::ordered_json::array();
  nlohmann::ordered_json lower = nlohmann::ordered_json::array();
  nlohmann::ordered_json not_judged = nlohmann::ordered_json::array();
  for (const verdict_metric& m : verdict_metrics()) {
    (!m.higher_better ? not_judged : *m.higher_better ? higher : lower).push_back(std::string(m.key));
  }
  nlohmann::ordered_json items = nlohmann::ordered_json::array();
  for (const verdict& v : verdicts) {
    nlohmann::ordered_json wins = nlohmann::ordered_json::array();
    nlohmann::ordered_json losses = nlohmann::ordered_json::array();
    for (const metric_difference& d : v.wins) wins.push_back(difference_json(d));
    for (const metric_difference& d : v.losses) losses.push_back(difference_json(d));
    items.push_back({{"arm", v.arm},
                     {"cell", v.cell},
                     {"text", verdict_text(v)},
                     {"wins", wins},
                     {"losses", losses},
                     {"ties", v.ties}});
  }
  return {{"tie", tie},
          {"higher_is_better", higher},
          {"lower_is_better", lower},
          {"not_judged", not_judged},
          {"run_to_run_spread", "none: every point is one deterministic replay"},
          {"items", items}};
}

std::string significant3(double value) {
  if (!std::isfinite(value)) return fmt::format("{}", value);
  if (value == 0) return "0";
  // The decimals that leave three significant digits, after rounding to them (0.9996 -> "1.00").
  int exponent = static_cast<int>(std::floor(std::log10(std::abs(value))));
  int decimals = std::max(0, 2 - exponent);
  const double scale = std::pow(10.0, decimals);
  const double rounded = std::round(value * scale) / scale;
  if (rounded != 0 && static_cast<int>(std::floor(std::log10(std::abs(rounded)))) > exponent) {
    ++exponent;
    decimals = std::max(0, 2 - exponent);
  }
  return fmt::format("{:.{}f}", value, decimals);
}

std::string ratio_text(double ratio) { return significant3(ratio) + "x"; }

std::string quantity_text(double value, quantity_unit unit) {
  const double a = std::abs(value);
  switch (unit) {
    case quantity_unit::fraction: return fmt::format("{:.4f}", value);
    case quantity_unit::count: return fmt::format("{:.0f}", value);
    case quantity_unit::tokens_per_s:
      if (a >= 9999.5e3) return significant3(value / 1e6) + "M tok/s";
      if (a >= 9999.5) return significant3(value / 1e3) + "k tok/s";
      return significant3(value) + " tok/s";
    case quantity_unit::ms:
      if (value == 0) return "0 ms";
      if (a < 1) return significant3(value * 1e3) + " us";
      if (a < 999.5) return significant3(value) + " ms";
      if (a < 9999.5e3) return significant3(value / 1e3) + " s";
      return significant3(value / 3.6e6) + " h";
    case quantity_unit::bytes: {
      constexpr double mib = 1024.0 * 1024.0;
      if (a < 999.5 * mib) return significant3(value / mib) + " MiB";
      if (a < 9999.5 * mib * 1024) return significant3(value / (mib * 1024)) + " GiB";
      return significant3(value / (mib * 1024 * 1024)) + " TiB";
    }
  }
  return fmt::format("{}", value);
}

}  // namespace vtensor::tools
