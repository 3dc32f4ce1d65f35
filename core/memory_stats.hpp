#pragma once
/// The memory snapshot every layer speaks: the manager's stats, a KV policy's stats, the
/// replica's sampled state and the step log all hold one, and the ratios reported from it are
/// written here once. Definitions: docs/metrics.md.

#include <cstdint>

namespace vtensor {

/// num / den, 0 when den is 0 (a ratio of nothing is reported as 0, not NaN).
[[nodiscard]] constexpr double ratio_or_zero(double num, double den) { return den <= 0 ? 0.0 : num / den; }

/// Prefix hit rate: tokens served from the cache over prompt tokens (0 without prompts).
[[nodiscard]] constexpr double prefix_hit_rate(std::uint64_t hit_tokens, std::uint64_t prompt_tokens) {
  return ratio_or_zero(static_cast<double>(hit_tokens), static_cast<double>(prompt_tokens));
}

/// Device memory of a KV cache at an instant, in bytes.
struct memory_stats {
  std::uint64_t physical_bytes = 0;   ///< chunks created and not released (device memory held)
  std::uint64_t mapped_bytes = 0;     ///< of which mapped in live requests (each chunk once)
  std::uint64_t used_bytes = 0;       ///< of mapped, bytes holding valid KV (shared chunks once)
  std::uint64_t cached_bytes = 0;     ///< of physical, held only by the prefix cache
  std::uint64_t free_pool_bytes = 0;  ///< of physical, idle chunks kept for reuse
  std::uint64_t logical_bytes = 0;    ///< sum over live requests of tokens x bytes per token

  /// 1 - used / mapped (0 when nothing is mapped).
  [[nodiscard]] double internal_fragmentation() const {
    return mapped_bytes == 0 ? 0.0 : 1.0 - static_cast<double>(used_bytes) / static_cast<double>(mapped_bytes);
  }
  /// 1 - used / logical: memory saved by sharing prefixes (0 when nothing is live).
  [[nodiscard]] double sharing_saving() const {
    return logical_bytes == 0 ? 0.0 : 1.0 - static_cast<double>(used_bytes) / static_cast<double>(logical_bytes);
  }
  friend bool operator==(const memory_stats&, const memory_stats&) = default;
};

}  // namespace vtensor
