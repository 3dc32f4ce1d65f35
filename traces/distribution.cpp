#include "traces/distribution.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace vtensor::traces {
namespace {

constexpr double two_pi = 6.283185307179586;

std::uint64_t round_non_negative(double value) noexcept {
  if (!(value > 0)) return 0;
  if (value >= 1.8e19) return UINT64_MAX;
  return static_cast<std::uint64_t>(std::llround(value));
}

double parse_number(std::string_view spec, std::string_view text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) {
    throw std::invalid_argument(fmt::format("distribution '{}': '{}' is not a number", spec, text));
  }
  return value;
}

}  // namespace

double uniform_01(random_engine& engine) noexcept { return static_cast<double>(engine() >> 11) * 0x1.0p-53; }

double sample_exponential(random_engine& engine, double mean) noexcept {
  return -std::log1p(-uniform_01(engine)) * mean;
}

double sample_normal(random_engine& engine) noexcept {
  const double u1 = 1.0 - uniform_01(engine);  // (0, 1]
  const double u2 = uniform_01(engine);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
}

double sample_gamma(random_engine& engine, double shape, double scale) noexcept {
  if (shape < 1.0) {
    const double boost = std::pow(1.0 - uniform_01(engine), 1.0 / shape);
    return sample_gamma(engine, shape + 1.0, scale) * boost;
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = 0;
    double v = 0;
    do {
      x = sample_normal(engine);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = 1.0 - uniform_01(engine);
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v * scale;
  }
}

int_distribution int_distribution::parse(std::string_view spec) {
  std::vector<std::string_view> parts;
  for (std::string_view rest = spec;;) {
    const auto colon = rest.find(':');
    parts.push_back(rest.substr(0, colon));
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  const auto bad = [&](std::string_view why) {
    return std::invalid_argument(fmt::format("distribution '{}': {}", spec, why));
  };
  const auto need = [&](std::size_t count, std::string_view form) {
    if (parts.size() != count + 1) throw bad(fmt::format("expected {}", form));
  };
  int_distribution result;
  const std::string_view name = parts[0];
  if (parts.size() == 1 && !name.empty() && (std::isdigit(static_cast<unsigned char>(name[0])) != 0)) {
    result.kind_ = kind::constant;
    result.a_ = parse_number(spec, name);
  } else if (name == "const") {
    need(1, "const:N");
    result.kind_ = kind::constant;
    result.a_ = parse_number(spec, parts[1]);
  } else if (name == "uniform") {
    need(2, "uniform:LO:HI");
    result.kind_ = kind::uniform;
    result.a_ = std::floor(parse_number(spec, parts[1]));
    result.b_ = std::floor(parse_number(spec, parts[2]));
    if (result.b_ < result.a_) throw bad("HI must not be below LO");
  } else if (name == "lognormal") {
    need(2, "lognormal:MEDIAN:SIGMA");
    result.kind_ = kind::lognormal;
    result.a_ = parse_number(spec, parts[1]);
    result.b_ = parse_number(spec, parts[2]);
    if (result.a_ <= 0) throw bad("MEDIAN must be positive");
  } else if (name == "exp") {
    need(1, "exp:MEAN");
    result.kind_ = kind::exponential;
    result.a_ = parse_number(spec, parts[1]);
  } else if (name == "geometric") {
    need(1, "geometric:MEAN");
    result.kind_ = kind::geometric;
    result.a_ = parse_number(spec, parts[1]);
    if (result.a_ < 1) throw bad("MEAN must be at least 1");
  } else if (name == "gamma") {
    need(2, "gamma:MEAN:CV");
    result.kind_ = kind::gamma;
    result.a_ = parse_number(spec, parts[1]);
    result.b_ = parse_number(spec, parts[2]);
    if (result.b_ <= 0) throw bad("CV must be positive");
  } else {
    throw bad("unknown kind (const, uniform, lognormal, exp, geometric, gamma)");
  }
  if (result.a_ < 0 || result.b_ < 0) throw bad("parameters must not be negative");
  return result;
}

std::uint64_t int_distribution::sample(random_engine& engine) const noexcept {
  switch (kind_) {
    case kind::constant: return round_non_negative(a_);
    case kind::uniform: {
      const auto span = static_cast<std::uint64_t>(b_ - a_) + 1;
      return static_cast<std::uint64_t>(a_) +
             static_cast<std::uint64_t>(uniform_01(engine) * static_cast<double>(span));
    }
    case kind::lognormal: return round_non_negative(a_ * std::exp(b_ * sample_normal(engine)));
    case kind::exponential: return round_non_negative(sample_exponential(engine, a_));
    case kind::geometric: {
      if (a_ <= 1) return 1;
      const double p = 1.0 / a_;
      return 1 + static_cast<std::uint64_t>(std::floor(std::log1p(-uniform_01(engine)) / std::log1p(-p)));
    }
    case kind::gamma: {
      if (a_ == 0) return 0;
      const double shape = 1.0 / (b_ * b_);
      return round_non_negative(sample_gamma(engine, shape, a_ / shape));
    }
  }
  return 0;
}

std::string int_distribution::to_string() const {
  switch (kind_) {
    case kind::constant: return fmt::format("const:{}", a_);
    case kind::uniform: return fmt::format("uniform:{}:{}", a_, b_);
    case kind::lognormal: return fmt::format("lognormal:{}:{}", a_, b_);
    case kind::exponential: return fmt::format("exp:{}", a_);
    case kind::geometric: return fmt::format("geometric:{}", a_);
    case kind::gamma: return fmt::format("gamma:{}:{}", a_, b_);
  }
  return "?";
}

double int_distribution::mean() const noexcept {
  switch (kind_) {
    case kind::constant: return a_;
    case kind::uniform: return (a_ + b_) / 2;
    case kind::lognormal: return a_ * std::exp(b_ * b_ / 2);
    case kind::exponential:
    case kind::geometric:
    case kind::gamma: return a_;
  }
  return 0;
}

}  // namespace vtensor::traces
