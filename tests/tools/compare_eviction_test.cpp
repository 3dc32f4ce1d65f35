// The eviction analysis of `vtensor compare` (tools/compare_eviction.hpp) on made-up summaries:
// the share of the gap closed, n/a where there is no gap, which arms form a group (read from the
// points' resolved options, not the arm names), and which ceiling it takes.

#include "tools/compare_eviction.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace vtt = vtensor::tools;
using nlohmann::json;

namespace {

// A point of `arm` at `cell` that ran `policy` with `options` (its resolved policy_options).
json point(const std::string& arm, const std::string& cell, const std::string& policy, const json& options,
           double hit) {
  return {{"id", arm + "@" + cell},
          {"arm", arm},
          {"cell", cell},
          {"hit_rate", hit},
          {"summary", {{"config", {{"policy", policy}, {"memory", cell}, {"policy_options", options}}}}}};
}

json cell(const std::string& id, const json& memory_bytes, double offline, double infinite) {
  return {{"id", id},
          {"memory", id},
          {"memory_bytes", memory_bytes},
          {"time_scale", 1},
          {"kernel_factors", "modern"},
          {"trace", 0},
          {"bounds", {{"infinite_hit_rate", infinite}, {"offline_hit_rate", offline}}}};
}

json paged(const std::string& eviction, int block_tokens = 16) {
  return {{"block_tokens", block_tokens}, {"eviction", eviction}};
}

// Arms lru (no order named), fifo, off (offline) and big (lru with other options) of paged, and
// radix (lru) at a 2 GiB budget and unlimited; `with_offline` false leaves the offline arm out.
json summary(bool with_offline) {
  json s;
  s["arms"] = json::array();
  s["traces"] = json::array({{{"index", 0}, {"path", "/data/t.jsonl"}}});
  s["cells"] = json::array({cell("2GiB", 2147483648.0, 0.5, 0.8), cell("unlimited", nullptr, 0.8, 0.8)});
  s["points"] = json::array();
  struct arm {
    const char* name;
    const char* policy;
    json options;
    double hit_2g, hit_unlimited;
  };
  // lru names no order, as paged with vLLM's free queue: the default, lru.
  std::vector<arm> arms = {{"lru", "paged", json{{"block_tokens", 16}}, 0.2, 0.8},
                           {"fifo", "paged", paged("fifo"), 0.1, 0.8},
                           {"off", "paged", paged("offline"), 0.6, 0.8},
                           {"big", "paged", paged("lru", 32), 0.3, 0.8},
                           {"rdx", "radix", json{{"eviction", "lru leaves"}}, 0.25, 0.8}};
  for (const arm& a : arms) {
    if (!with_offline && std::string(a.name) == "off") continue;
    s["arms"].push_back({{"name", a.name}, {"policy", a.policy}, {"options", "(not read)"}});
    s["points"].push_back(point(a.name, "2GiB", a.policy, a.options, a.hit_2g));
    s["points"].push_back(point(a.name, "unlimited", a.policy, a.options, a.hit_unlimited));
  }
  return s;
}

}  // namespace

TEST_CASE("compare eviction: the share of the LRU-to-ceiling gap closed, n/a without a gap") {
  CHECK(*vtt::gap_closed(0.2, 0.2, 0.6) == 0.0);  // the floor
  CHECK(*vtt::gap_closed(0.6, 0.2, 0.6) == 1.0);  // the ceiling
  CHECK(*vtt::gap_closed(0.3, 0.2, 0.6) == doctest::Approx(0.25));
  CHECK(*vtt::gap_closed(0.1, 0.2, 0.6) == doctest::Approx(-0.25));  // worse than LRU
  CHECK(*vtt::gap_closed(0.7, 0.2, 0.6) == doctest::Approx(1.25));   // beats the ceiling
  CHECK_FALSE(vtt::gap_closed(0.8, 0.8, 0.8).has_value());           // no gap: n/a
  CHECK_FALSE(vtt::gap_closed(0.3, 0.4, 0.35).has_value());          // a ceiling below LRU: n/a too
}

TEST_CASE("compare eviction: arms that differ only in their eviction order form a group, the offline arm its ceiling") {
  const auto groups = vtt::eviction_groups(summary(true));
  REQUIRE(groups.size() == 1);  // big (other block size) and rdx (other policy, alone) are in none
  const vtt::eviction_group& g = groups[0];
  CHECK(g.policy == "paged");
  CHECK(g.arms == std::vector<std::string>{"lru", "fifo", "off"});
  CHECK(g.orders == std::vector<std::string>{"lru", "fifo", "offline"});
  CHECK(g.floor_arm == "lru");
  REQUIRE(g.ceiling_arm.has_value());
  CHECK(*g.ceiling_arm == "off");
  REQUIRE(g.cells.size() == 2);
  const vtt::eviction_cell& c = g.cells[0];
  CHECK(c.cell == "2GiB");
  CHECK(c.label == "t.jsonl 2GiB");
  CHECK(c.floor == 0.2);
  CHECK(c.ceiling == 0.6);
  CHECK(*c.gap[0] == 0.0);
  CHECK(*c.gap[1] == doctest::Approx(-0.25));  // (0.1 - 0.2) / (0.6 - 0.2)
  CHECK(*c.gap[2] == 1.0);
  for (const auto& gap : g.cells[1].gap) CHECK_FALSE(gap.has_value());  // unlimited: every order hits 0.8

  const auto j = vtt::eviction_json(groups);
  CHECK(j[0]["ceiling"] == "off");
  CHECK(j[0]["ceiling_kind"] == "offline_arm");
  CHECK(j[0]["cells"][0]["gap_closed"]["fifo"].get<double>() == doctest::Approx(-0.25));
  CHECK(j[0]["cells"][1]["gap_closed"]["fifo"].is_null());
  CHECK(j[0]["cells"][1]["memory_bytes"].is_null());

  std::ostringstream table;
  vtt::print_eviction_table(table, groups);
  INFO(table.str());
  CHECK(table.str().find("eviction: share of the LRU-to-offline gap closed") != std::string::npos);
  CHECK(table.str().find("-0.250 (0.1000)") != std::string::npos);
  CHECK(table.str().find("n/a (0.8000)") != std::string::npos);
}

TEST_CASE("compare eviction: without an offline arm the ceiling is the cell's offline bound - no group, no output") {
  const auto groups = vtt::eviction_groups(summary(false));
  REQUIRE(groups.size() == 1);
  CHECK_FALSE(groups[0].ceiling_arm.has_value());
  CHECK(groups[0].cells[0].ceiling == 0.5);                                 // the 2 GiB cell's offline bound
  CHECK(*groups[0].cells[0].gap[1] == doctest::Approx((0.1 - 0.2) / 0.3));  // fifo
  CHECK(vtt::eviction_json(groups)[0]["ceiling_kind"] == "offline_bound");

  // One arm per policy: no group, and the table prints nothing.
  json one = summary(false);
  one["arms"] = json::array({one["arms"][0], one["arms"][3]});  // lru (paged 16) and rdx
  const auto none = vtt::eviction_groups(one);
  CHECK(none.empty());
  std::ostringstream table;
  vtt::print_eviction_table(table, none);
  CHECK(table.str().empty());
}
