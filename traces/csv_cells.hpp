#pragma once
/// The small CSV dialect of the public LLM traces (Azure, Vidur/Splitwise): comma-separated
/// cells without quoting, blanks around cells ignored, an optional UTF-8 byte-order mark before
/// the header. Shared by the CSV readers.

#include <string_view>
#include <vector>

namespace vtensor::traces::csv {

/// `text` without leading and trailing blanks (spaces, tabs, a carriage return).
[[nodiscard]] inline std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

/// Splits `line` at commas into `cells` (trimmed, views into `line`).
inline void split(std::string_view line, std::vector<std::string_view>& cells) {
  cells.clear();
  for (;;) {
    const auto comma = line.find(',');
    cells.push_back(trim(line.substr(0, comma)));
    if (comma == std::string_view::npos) return;
    line.remove_prefix(comma + 1);
  }
}

/// `line` without a leading UTF-8 byte-order mark.
[[nodiscard]] inline std::string_view without_bom(std::string_view line) {
  if (line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);
  return line;
}

}  // namespace vtensor::traces::csv
