#pragma once
// The report fixture (tests/data/compare-fixture/) with an eviction group: its paged arm made
// `paged --eviction lru` and two made-up arms beside it, `paged-fifo` and `paged-offline`, that
// differ from it only in their eviction order (docs/compare.md, "Eviction orders"). Their points
// copy paged's (time series included) with the hit rate moved, so the report draws the eviction
// section and figure without a replay.

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>

namespace vtensor::testing {

/// Rewrites DIR/summary.json (a copy of the fixture) as above: paged-fifo hits 0.9x and
/// paged-offline 1.2x paged's hit rate at every cell.
inline void add_eviction_arms(const std::filesystem::path& dir) {
  using json = nlohmann::ordered_json;
  const std::filesystem::path path = dir / "summary.json";
  json s;
  {
    std::ifstream in(path);
    s = json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  }
  const auto set_order = [](json& point, const char* order) {
    point["summary"]["config"]["policy_options"]["eviction"] = order;
  };
  json points = json::array();
  for (json& p : s["points"]) {
    if (p["arm"] != "paged") {
      points.push_back(p);
      continue;
    }
    set_order(p, "lru");
    points.push_back(p);
    for (const auto& [arm, order, scale] : {std::tuple{"paged-fifo", "fifo", 0.9}, {"paged-offline", "offline", 1.2}}) {
      json q = p;
      q["arm"] = arm;
      q["id"] = std::string(arm) + "@" + p["cell"].get<std::string>();
      q["hit_rate"] = p["hit_rate"].get<double>() * scale;
      set_order(q, order);
      points.push_back(q);
    }
  }
  s["points"] = points;
  s["arms"].push_back({{"name", "paged-fifo"}, {"policy", "paged"}, {"options", "--block-tokens 16 --eviction fifo"}});
  s["arms"].push_back(
      {{"name", "paged-offline"}, {"policy", "paged"}, {"options", "--block-tokens 16 --eviction offline"}});
  s.erase("verdicts");  // judged again by the report
  std::ofstream(path) << s.dump(2) << "\n";
}

}  // namespace vtensor::testing
