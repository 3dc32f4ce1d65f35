#pragma once
/// Units, in one place: byte sizes, rounding of counts, and the two time units of the simulator.
///
/// Time: the event queue's clock counts whole microseconds (`sim_us` where it meets the rest); VMM
/// prices, the KV policy interface and the replica's VMM accounting speak nanoseconds (`sim_ns`);
/// conversions happen where the two meet, explicitly. A duration is never a bare
/// integer whose unit lives in its name only: `sim_ns` and `sim_us` do not mix without a cast.

#include <chrono>
#include <cstdint>

namespace vtensor {

inline constexpr std::uint64_t k_kib = std::uint64_t{1} << 10;  ///< bytes in a KiB
inline constexpr std::uint64_t k_mib = std::uint64_t{1} << 20;  ///< bytes in a MiB
inline constexpr std::uint64_t k_gib = std::uint64_t{1} << 30;  ///< bytes in a GiB

/// ceil(a / b) for b > 0.
[[nodiscard]] constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }
/// The least multiple of `b` not below `a` (b > 0).
[[nodiscard]] constexpr std::uint64_t round_up(std::uint64_t a, std::uint64_t b) { return ceil_div(a, b) * b; }

/// Simulated durations and instants (from the start of a replay): unsigned, as the clock never
/// runs backwards.
using sim_ns = std::chrono::duration<std::uint64_t, std::nano>;
using sim_us = std::chrono::duration<std::uint64_t, std::micro>;

}  // namespace vtensor
