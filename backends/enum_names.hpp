#pragma once
/// One table per enum of names users type and read (layouts, policies, call kinds): to_string,
/// parsing and the list for help texts all come from it, so a name is written once.
///
///     inline constexpr enum_names<kv_layout, 3> k_layout_names{{
///         {kv_layout::kv_split, "kv-split"}, {kv_layout::kv_fused, "kv-fused"}, ...}};
///     k_layout_names.name(kv_layout::kv_fused)  // "kv-fused"
///     k_layout_names.parse("kv-fused")          // kv_layout::kv_fused, or nullopt
///     k_layout_names.list()                     // "kv-split, kv-fused, token-major"

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace vtensor {

/// A fixed table of (value, name) pairs.
template <class E, std::size_t N>
struct enum_names {
  std::array<std::pair<E, std::string_view>, N> entries;  ///< every value once, in display order

  /// The value's name ("?" for a value outside the table).
  [[nodiscard]] constexpr std::string_view name(E value) const {
    for (const auto& [v, n] : entries) {
      if (v == value) return n;
    }
    return "?";
  }
  /// The value named `text`, or nullopt.
  [[nodiscard]] constexpr std::optional<E> parse(std::string_view text) const {
    for (const auto& [v, n] : entries) {
      if (n == text) return v;
    }
    return std::nullopt;
  }
  /// The names joined by `sep`, for help texts and error messages.
  [[nodiscard]] std::string list(std::string_view sep = ", ") const {
    std::string out;
    for (const auto& [v, n] : entries) {
      if (!out.empty()) out += sep;
      out += n;
    }
    return out;
  }
};

}  // namespace vtensor
