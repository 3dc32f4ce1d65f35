#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>

namespace vtensor::traces {

/// The random engine of every generator: seeded std::mt19937_64. Its output sequence is fixed
/// by the standard, and all sampling below is done by hand from it (no std:: distributions,
/// whose algorithms differ between standard libraries), so a seed gives the same trace on any
/// platform.
using random_engine = std::mt19937_64;

/// Uniform double in [0, 1) from 53 random bits.
[[nodiscard]] double uniform_01(random_engine& engine) noexcept;
/// Exponential with the given mean.
[[nodiscard]] double sample_exponential(random_engine& engine, double mean) noexcept;
/// Standard normal (Box-Muller, one value per call).
[[nodiscard]] double sample_normal(random_engine& engine) noexcept;
/// Gamma with the given shape and scale (Marsaglia-Tsang).
[[nodiscard]] double sample_gamma(random_engine& engine, double shape, double scale) noexcept;

/// A distribution of non-negative integers (token counts, turns, milliseconds), written as
/// `NAME:PARAMS`:
///   `const:N` (or just `N`)      always N
///   `uniform:LO:HI`              integers LO..HI inclusive
///   `lognormal:MEDIAN:SIGMA`     exp(normal(ln MEDIAN, SIGMA)), rounded; mean = MEDIAN e^(SIGMA^2/2)
///   `exp:MEAN`                   exponential, rounded
///   `geometric:MEAN`             1, 2, 3, ... with P(k) = p (1-p)^(k-1), p = 1/MEAN (MEAN >= 1)
///   `gamma:MEAN:CV`              gamma with that mean and coefficient of variation, rounded
class int_distribution {
 public:
  enum class kind { constant, uniform, lognormal, exponential, geometric, gamma };

  /// Parses a spec; throws std::invalid_argument naming the spec and what is wrong.
  [[nodiscard]] static int_distribution parse(std::string_view spec);

  /// Draws one value.
  [[nodiscard]] std::uint64_t sample(random_engine& engine) const noexcept;

  /// The spec in canonical form (parse(to_string()) gives the same distribution).
  [[nodiscard]] std::string to_string() const;

  /// The distribution's mean (before rounding).
  [[nodiscard]] double mean() const noexcept;

 private:
  kind kind_ = kind::constant;
  double a_ = 0;  // constant / LO / MEDIAN / MEAN
  double b_ = 0;  // HI / SIGMA / CV
};

}  // namespace vtensor::traces
