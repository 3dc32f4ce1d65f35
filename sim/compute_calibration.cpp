#include "sim/compute_calibration.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>

namespace vtensor::sim {
namespace {

constexpr std::string_view k_format = "vtensor-compute-calibration";
constexpr int k_version = 2;  // 2 added the layouts; version 1 files (no layouts) are read too

// Reads one JSON document, naming the key of the first problem (Note [Compute calibration file]).
class reader {
 public:
  explicit reader(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw std::invalid_argument(key.empty() ? fmt::format("{}: {}", origin_, why)
                                            : fmt::format("{}: key '{}': {}", origin_, key, why));
  }
  static std::string describe(const nlohmann::json& v) {
    std::string text = v.dump();
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return fmt::format("{} {}", v.type_name(), text);
  }
  const nlohmann::json& require(const nlohmann::json& obj, const std::string& where, const char* key) const {
    const auto it = obj.find(key);
    if (it == obj.end()) fail(join(where, key), "missing");
    return *it;
  }
  void only(const nlohmann::json& obj, const std::string& where, std::initializer_list<const char*> keys) const {
    for (const auto& item : obj.items()) {
      const std::string& k = item.key();  // not a structured binding: clang 14 cannot capture one
      if (std::none_of(keys.begin(), keys.end(), [&](const char* known) { return k == known; })) {
        fail(join(where, k), "unknown key");
      }
    }
  }
  const nlohmann::json& object(const nlohmann::json& obj, const std::string& where, const char* key) const {
    const nlohmann::json& v = require(obj, where, key);
    if (!v.is_object()) fail(join(where, key), fmt::format("expected an object, got {}", describe(v)));
    return v;
  }
  const nlohmann::json& array(const nlohmann::json& obj, const std::string& where, const char* key) const {
    const nlohmann::json& v = require(obj, where, key);
    if (!v.is_array() || v.empty())
      fail(join(where, key), fmt::format("expected a non-empty array, got {}", describe(v)));
    return v;
  }
  std::string string(const nlohmann::json& obj, const std::string& where, const char* key) const {
    const nlohmann::json& v = require(obj, where, key);
    if (!v.is_string() || v.get<std::string>().empty()) {
      fail(join(where, key), fmt::format("expected a non-empty string, got {}", describe(v)));
    }
    return v.get<std::string>();
  }
  double positive(const nlohmann::json& v, const std::string& key) const {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0)) {
      fail(key, fmt::format("expected a positive number, got {}", describe(v)));
    }
    return v.get<double>();
  }
  double positive(const nlohmann::json& obj, const std::string& where, const char* key) const {
    return positive(require(obj, where, key), join(where, key));
  }
  std::uint32_t count(const nlohmann::json& v, const std::string& key) const {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > 0xffffffffLL) {
      fail(key, fmt::format("expected an integer from 1 to 4294967295, got {}", describe(v)));
    }
    return static_cast<std::uint32_t>(v.get<std::int64_t>());
  }
  std::uint32_t count(const nlohmann::json& obj, const std::string& where, const char* key) const {
    return count(require(obj, where, key), join(where, key));
  }
  static std::string join(const std::string& where, std::string_view key) {
    return where.empty() ? std::string(key) : fmt::format("{}.{}", where, key);
  }

 private:
  std::string origin_;
};

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  return n % 2 == 1 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

// Scales both sides of a roofline part so that its bound is `seconds` (Note [Measured step cost]).
void scale_to(roofline_sides& r, double seconds) {
  const double b = r.bound_s();
  if (b > 0) {
    r.compute_s *= seconds / b;
    r.memory_s *= seconds / b;
  } else {
    r.memory_s = seconds;
  }
}

}  // namespace

double interpolate_log_linear(const std::vector<std::pair<double, double>>& points, double x) {
  if (points.empty()) throw std::logic_error("interpolate_log_linear: no points");
  if (x <= points.front().first) return points.front().second;
  if (x >= points.back().first) return points.back().second;
  const auto hi = std::upper_bound(points.begin(), points.end(), x,
                                   [](double v, const std::pair<double, double>& p) { return v < p.first; });
  const auto lo = hi - 1;
  const double w = std::log(x / lo->first) / std::log(hi->first / lo->first);
  return lo->second + (hi->second - lo->second) * w;
}

double compute_calibration::linear_flop_rate(double tokens) const {
  std::vector<std::pair<double, double>> pts;
  pts.reserve(linear.size());
  for (const auto& p : linear) pts.emplace_back(p.tokens, p.flops / p.seconds);
  return interpolate_log_linear(pts, tokens);
}

double compute_calibration::decode_bandwidth(double kv_bytes) const {
  std::map<double, std::pair<double, int>> by_bytes;  // bytes -> (sum of bandwidths, points)
  for (const auto& p : decode) {
    auto& e = by_bytes[p.kv_bytes];
    e.first += p.kv_bytes / p.contiguous_s;
    e.second += 1;
  }
  std::vector<std::pair<double, double>> pts;
  for (const auto& [bytes, e] : by_bytes) pts.emplace_back(bytes, e.first / e.second);
  return interpolate_log_linear(pts, kv_bytes);
}

std::uint32_t compute_calibration::nearest_block(std::uint32_t block) const {
  std::uint32_t best = block_tokens.front();
  double best_d = INFINITY;
  for (const std::uint32_t b : block_tokens) {
    const double d = std::fabs(std::log(static_cast<double>(b)) - std::log(static_cast<double>(std::max(block, 1u))));
    if (d < best_d || (d == best_d && b < best)) {
      best = b;
      best_d = d;
    }
  }
  return best;
}

std::vector<double> compute_calibration::paged_ratios(std::uint32_t block) const {
  const std::uint32_t b = nearest_block(block);
  std::vector<double> r;
  for (const auto& p : decode) r.push_back(p.paged_s.at(b) / p.contiguous_s);
  return r;
}

double compute_calibration::paged_decode_factor(std::uint32_t block) const { return median(paged_ratios(block)); }

std::vector<double> compute_calibration::layout_ratios(kv_layout layout) const {
  std::vector<double> r;
  if (layout == kv_layout::kv_split) return r;
  const std::string name(to_string(layout));
  for (const auto& p : decode) {
    const auto it = p.layout_s.find(name);
    if (it != p.layout_s.end()) r.push_back(it->second / p.contiguous_s);
  }
  return r;
}

std::optional<double> compute_calibration::layout_decode_factor(kv_layout layout) const {
  if (layout == kv_layout::kv_split) return 1.0;
  const std::vector<double> r = layout_ratios(layout);
  if (r.empty()) return std::nullopt;
  return median(r);
}

nlohmann::ordered_json compute_calibration::to_json() const {
  nlohmann::ordered_json j;
  j["format"] = k_format;
  j["version"] = k_version;
  j["device"] = device;
  j["source"] = source;
  j["model"] = model;
  j["tp"] = tp;
  j["copy_bandwidth"] = copy_bandwidth;
  nlohmann::ordered_json lin = nlohmann::ordered_json::array();
  for (const auto& p : linear) {
    lin.push_back({{"tokens", p.tokens}, {"seconds", p.seconds}, {"flops", p.flops}, {"bytes", p.bytes}});
  }
  j["linear"] = lin;
  nlohmann::ordered_json pts = nlohmann::ordered_json::array();
  for (const auto& p : decode) {
    nlohmann::ordered_json paged = nlohmann::ordered_json::object();
    for (const auto& [b, s] : p.paged_s) paged[std::to_string(b)] = s;
    nlohmann::ordered_json point = {{"batch", p.batch},
                                    {"context", p.context},
                                    {"kv_bytes", p.kv_bytes},
                                    {"contiguous_s", p.contiguous_s},
                                    {"paged_s", paged}};
    if (!p.layout_s.empty()) {
      nlohmann::ordered_json by_layout = nlohmann::ordered_json::object();
      for (const auto& l : layouts) {
        if (const auto it = p.layout_s.find(l); it != p.layout_s.end()) by_layout[l] = it->second;
      }
      point["layout_s"] = by_layout;
    }
    pts.push_back(std::move(point));
  }
  j["decode_attention"] = {{"block_tokens", block_tokens}, {"layouts", layouts}, {"points", pts}};
  j["prefill_attention"] = prefill_attention;
  return j;
}

compute_calibration compute_calibration_from_json(const nlohmann::json& j, const std::string& origin) {
  const reader rd(origin);
  if (!j.is_object()) rd.fail("", fmt::format("expected a JSON object, got {}", reader::describe(j)));
  rd.only(j, "",
          {"format", "version", "device", "source", "model", "tp", "copy_bandwidth", "linear", "decode_attention",
           "prefill_attention"});
  const nlohmann::json& format = rd.require(j, "", "format");
  if (!format.is_string() || format.get<std::string>() != k_format) {
    rd.fail("format", fmt::format("expected \"{}\", got {}", k_format, reader::describe(format)));
  }
  const nlohmann::json& version = rd.require(j, "", "version");
  if (!version.is_number_integer() || version.get<std::int64_t>() < 1 || version.get<std::int64_t>() > k_version) {
    rd.fail("version", fmt::format("expected 1 to {}, got {}", k_version, reader::describe(version)));
  }
  const bool has_layouts = version.get<std::int64_t>() >= 2;
  compute_calibration c;
  c.device = rd.string(j, "", "device");
  c.source = rd.string(j, "", "source");
  c.model = rd.string(j, "", "model");
  c.tp = rd.count(j, "", "tp");
  c.copy_bandwidth = rd.positive(j, "", "copy_bandwidth");
  c.prefill_attention = rd.string(j, "", "prefill_attention");
  const nlohmann::json& lin = rd.array(j, "", "linear");
  for (std::size_t i = 0; i < lin.size(); ++i) {
    const std::string where = fmt::format("linear[{}]", i);
    if (!lin[i].is_object()) rd.fail(where, fmt::format("expected an object, got {}", reader::describe(lin[i])));
    rd.only(lin[i], where, {"tokens", "seconds", "flops", "bytes"});
    linear_point p;
    p.tokens = rd.count(lin[i], where, "tokens");
    p.seconds = rd.positive(lin[i], where, "seconds");
    p.flops = rd.positive(lin[i], where, "flops");
    p.bytes = rd.positive(lin[i], where, "bytes");
    if (!c.linear.empty() && p.tokens <= c.linear.back().tokens) {
      rd.fail(where + ".tokens",
              fmt::format("{} does not follow {}: token counts must increase", p.tokens, c.linear.back().tokens));
    }
    c.linear.push_back(p);
  }
  const nlohmann::json& dec = rd.object(j, "", "decode_attention");
  if (has_layouts) {
    rd.only(dec, "decode_attention", {"block_tokens", "layouts", "points"});
  } else {
    rd.only(dec, "decode_attention", {"block_tokens", "points"});
  }
  const nlohmann::json& blocks = rd.array(dec, "decode_attention", "block_tokens");
  std::set<std::uint32_t> seen;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::string key = fmt::format("decode_attention.block_tokens[{}]", i);
    const std::uint32_t b = rd.count(blocks[i], key);
    if ((b & (b - 1)) != 0) rd.fail(key, fmt::format("{} is not a power of two", b));
    if (!seen.insert(b).second) rd.fail(key, fmt::format("{} appears twice", b));
    c.block_tokens.push_back(b);
  }
  if (has_layouts) {
    const nlohmann::json& names = rd.require(dec, "decode_attention", "layouts");
    if (!names.is_array()) {
      rd.fail("decode_attention.layouts", fmt::format("expected an array, got {}", reader::describe(names)));
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
      const std::string key = fmt::format("decode_attention.layouts[{}]", i);
      const auto layout = names[i].is_string() ? kv_layout_from_string(names[i].get<std::string>()) : std::nullopt;
      if (!layout || *layout == kv_layout::kv_split) {
        rd.fail(key, fmt::format("expected kv-fused or token-major (kv-split is contiguous_s), got {}",
                                 reader::describe(names[i])));
      }
      const std::string name(to_string(*layout));
      if (std::find(c.layouts.begin(), c.layouts.end(), name) != c.layouts.end()) {
        rd.fail(key, fmt::format("{} appears twice", name));
      }
      c.layouts.push_back(name);
    }
  }
  const nlohmann::json& pts = rd.array(dec, "decode_attention", "points");
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const std::string where = fmt::format("decode_attention.points[{}]", i);
    if (!pts[i].is_object()) rd.fail(where, fmt::format("expected an object, got {}", reader::describe(pts[i])));
    if (has_layouts) {
      rd.only(pts[i], where, {"batch", "context", "kv_bytes", "contiguous_s", "paged_s", "layout_s"});
    } else {
      rd.only(pts[i], where, {"batch", "context", "kv_bytes", "contiguous_s", "paged_s"});
    }
    decode_point p;
    p.batch = rd.count(pts[i], where, "batch");
    p.context = rd.count(pts[i], where, "context");
    p.kv_bytes = rd.positive(pts[i], where, "kv_bytes");
    p.contiguous_s = rd.positive(pts[i], where, "contiguous_s");
    const nlohmann::json& paged = rd.object(pts[i], where, "paged_s");
    for (const auto& item : paged.items()) {
      const std::string& k = item.key();  // not a structured binding: clang 14 cannot capture one
      const nlohmann::json& v = item.value();
      const auto b = std::find_if(c.block_tokens.begin(), c.block_tokens.end(),
                                  [&](std::uint32_t x) { return std::to_string(x) == k; });
      if (b == c.block_tokens.end()) rd.fail(where + ".paged_s." + k, "not one of decode_attention.block_tokens");
      p.paged_s[*b] = rd.positive(v, where + ".paged_s." + k);
    }
    for (const std::uint32_t b : c.block_tokens) {
      if (p.paged_s.count(b) == 0) rd.fail(fmt::format("{}.paged_s.{}", where, b), "missing");
    }
    if (pts[i].contains("layout_s")) {  // a layout may be absent at a point (its pool did not fit)
      const nlohmann::json& by_layout = rd.object(pts[i], where, "layout_s");
      for (const auto& item : by_layout.items()) {
        const std::string& k = item.key();
        if (std::find(c.layouts.begin(), c.layouts.end(), k) == c.layouts.end()) {
          rd.fail(where + ".layout_s." + k, "not one of decode_attention.layouts");
        }
        p.layout_s[k] = rd.positive(item.value(), where + ".layout_s." + k);
      }
    }
    c.decode.push_back(std::move(p));
  }
  return c;
}

compute_calibration load_compute_calibration(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  return compute_calibration_from_json(j, path);
}

attention_factors calibrated_factors(attention_factors set, kv_access access, const compute_calibration& calibration) {
  if (access.paged) {
    set.decode = calibration.paged_decode_factor(access.block_tokens);
  } else if (access.layout != kv_layout::kv_split) {
    if (const auto f = calibration.layout_decode_factor(access.layout)) set.decode = *f;
  }
  return set;
}

step_cost measured_step_cost(const model_compute& model, const gpu_preset& gpu, const step_work& work,
                             double overhead_s, attention_factors factors, const compute_calibration& calibration) {
  step_cost c = roofline(model, gpu, work, overhead_s, factors);
  if (work.computed_tokens > 0) {
    const double n = static_cast<double>(work.computed_tokens);
    scale_to(c.linear, 2.0 * model.params * n / model.tp / calibration.linear_flop_rate(n));
  }
  const std::uint64_t decode_tokens = work.decode.kv_read_tokens + work.decode.kv_write_tokens;
  if (decode_tokens > 0) {
    const double bytes = static_cast<double>(model.kv_bytes_per_token_per_gpu()) * static_cast<double>(decode_tokens);
    scale_to(c.decode_attention, bytes / calibration.decode_bandwidth(bytes / model.layers));
  }
  return c;
}

}  // namespace vtensor::sim
