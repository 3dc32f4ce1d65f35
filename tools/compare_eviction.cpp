// The eviction analysis of a comparison (tools/compare_eviction.hpp; Note [Eviction groups]).

#include "tools/compare_eviction.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>

namespace vtensor::tools {
namespace {

using json = nlohmann::json;

const json& need(const json& object, const char* key, const std::string& where) {
  if (!object.is_object() || !object.contains(key))
    throw std::invalid_argument(fmt::format("summary.json: {}: the key \"{}\" is missing", where, key));
  return object.at(key);
}

double number(const json& object, const char* key, const std::string& where) {
  const json& v = need(object, key, where);
  if (!v.is_number()) throw std::invalid_argument(fmt::format("summary.json: {}: \"{}\" is not a number", where, key));
  return v.get<double>();
}

// A point's policy_options, when it has one.
const json* policy_options(const json& point) {
  if (!point.contains("summary") || !point["summary"].is_object()) return nullptr;
  const json& s = point["summary"];
  if (!s.contains("config") || !s["config"].is_object()) return nullptr;
  const json& c = s["config"];
  if (!c.contains("policy_options") || !c["policy_options"].is_object()) return nullptr;
  return &c["policy_options"];
}

// The eviction order a point ran ("lru leaves" -> "lru"); a policy that names none runs the default,
// lru (paged leaves it out with vLLM's free queue); empty without policy options.
std::string order_of(const json& point) {
  const json* o = policy_options(point);
  if (o == nullptr) return {};
  if (!o->contains("eviction")) return "lru";
  if (!(*o)["eviction"].is_string()) return {};
  const std::string name = (*o)["eviction"].get<std::string>();
  return name.substr(0, name.find(' '));
}

// What a point ran but for its eviction settings (Note [Eviction groups]).
json without_eviction(const json& point) {
  if (!point.contains("summary") || !point["summary"].is_object() || !point["summary"].contains("config")) return {};
  json config = point["summary"]["config"];
  if (config.contains("policy_options") && config["policy_options"].is_object()) {
    json& o = config["policy_options"];
    for (auto it = o.begin(); it != o.end();) {
      it = it.key().rfind("eviction", 0) == 0 ? o.erase(it) : std::next(it);
    }
  }
  return config;
}

// A cell's column head: its trace's file name and its budget, and the other axes that vary.
std::string cell_label(const json& summary, const json& cell, const std::set<std::string>& varying) {
  std::string trace = fmt::format("trace {}", cell.value("trace", json()).dump());
  if (summary.contains("traces") && summary["traces"].is_array()) {
    for (const json& t : summary["traces"]) {
      if (t.is_object() && t.value("index", json()) == cell.value("trace", json()) && t.contains("path") &&
          t["path"].is_string())
        trace = std::filesystem::path(t["path"].get<std::string>()).filename().string();
    }
  }
  std::string label = fmt::format("{} {}", trace, cell.value("memory", std::string("?")));
  if (varying.count("time_scale") != 0) label += fmt::format(" x{}", cell.value("time_scale", json()).dump());
  if (varying.count("kernel_factors") != 0) label += " " + cell.value("kernel_factors", std::string("?"));
  return label;
}

}  // namespace

std::optional<double> gap_closed(double hit, double floor, double ceiling) {
  if (!(ceiling > floor)) return std::nullopt;
  return (hit - floor) / (ceiling - floor);
}

std::vector<eviction_group> eviction_groups(const json& summary) {
  const json& arms = need(summary, "arms", "top level");
  const json& cells = need(summary, "cells", "top level");
  const json& points = need(summary, "points", "top level");
  std::map<std::pair<std::string, std::string>, const json*> point_at;  // (arm, cell) -> point
  for (const json& p : points) {
    point_at[{need(p, "arm", "points[]").get<std::string>(), need(p, "cell", "points[]").get<std::string>()}] = &p;
  }
  std::vector<std::string> cell_ids;
  for (const json& c : cells) cell_ids.push_back(need(c, "id", "cells[]").get<std::string>());

  // Each arm's key: its points' configurations without the eviction settings, cell by cell; and
  // its order (the same at every cell).
  struct member {
    std::string arm, policy, order;
    std::string key;
  };
  std::vector<member> members;
  for (const json& a : arms) {
    member m{need(a, "name", "arms[]").get<std::string>(), a.value("policy", std::string()), {}, {}};
    json key = json::array();
    bool ok = true;
    for (const std::string& cell : cell_ids) {
      const auto it = point_at.find({m.arm, cell});
      if (it == point_at.end()) {
        ok = false;
        break;
      }
      const std::string order = order_of(*it->second);
      if (order.empty() || (!m.order.empty() && order != m.order)) {
        ok = false;
        break;
      }
      m.order = order;
      key.push_back(without_eviction(*it->second));
    }
    if (!ok || cell_ids.empty()) continue;
    m.key = m.policy + "\n" + key.dump();
    members.push_back(std::move(m));
  }

  std::set<std::string> varying;
  for (const char* axis : {"memory", "time_scale", "kernel_factors", "trace"}) {
    std::set<std::string> values;
    for (const json& c : cells) values.insert(c.value(axis, json()).dump());
    if (values.size() > 1) varying.insert(axis);
  }

  std::vector<eviction_group> groups;
  std::set<std::string> seen;
  for (const member& first : members) {
    if (!seen.insert(first.key).second) continue;
    eviction_group g;
    g.policy = first.policy;
    std::set<std::string> orders;
    for (const member& m : members) {
      if (m.key != first.key) continue;
      g.arms.push_back(m.arm);
      g.orders.push_back(m.order);
      orders.insert(m.order);
    }
    const auto lru = std::find(g.orders.begin(), g.orders.end(), "lru");
    if (g.arms.size() < 2 || orders.size() < 2 || lru == g.orders.end()) continue;
    g.floor_arm = g.arms[static_cast<std::size_t>(lru - g.orders.begin())];
    const auto offline = std::find(g.orders.begin(), g.orders.end(), "offline");
    if (offline != g.orders.end()) g.ceiling_arm = g.arms[static_cast<std::size_t>(offline - g.orders.begin())];

    for (const json& c : cells) {
      eviction_cell e;
      e.cell = c.at("id").get<std::string>();
      const std::string where = "cell " + e.cell;
      e.label = cell_label(summary, c, varying);
      e.memory = c.value("memory", std::string());
      e.memory_bytes = c.value("memory_bytes", json());
      e.trace = c.value("trace", json());
      e.time_scale = c.value("time_scale", json());
      e.kernel_factors = c.value("kernel_factors", json());
      const json& bounds = need(c, "bounds", where);
      e.offline_bound = number(bounds, "offline_hit_rate", where);
      e.infinite_bound = number(bounds, "infinite_hit_rate", where);
      for (const std::string& arm : g.arms) {
        e.hit_rate.push_back(number(*point_at.at({arm, e.cell}), "hit_rate", "point " + arm + "@" + e.cell));
      }
      e.floor = e.hit_rate[static_cast<std::size_t>(lru - g.orders.begin())];
      e.ceiling = g.ceiling_arm ? e.hit_rate[static_cast<std::size_t>(offline - g.orders.begin())] : e.offline_bound;
      for (const double hit : e.hit_rate) e.gap.push_back(gap_closed(hit, e.floor, e.ceiling));
      g.cells.push_back(std::move(e));
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

nlohmann::ordered_json eviction_json(const std::vector<eviction_group>& groups) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const eviction_group& g : groups) {
    nlohmann::ordered_json arms = nlohmann::ordered_json::array();
    for (std::size_t a = 0; a < g.arms.size(); ++a) arms.push_back({{"arm", g.arms[a]}, {"order", g.orders[a]}});
    nlohmann::ordered_json cells = nlohmann::ordered_json::array();
    for (const eviction_cell& e : g.cells) {
      nlohmann::ordered_json hit = nlohmann::ordered_json::object();
      nlohmann::ordered_json gap = nlohmann::ordered_json::object();
      for (std::size_t a = 0; a < g.arms.size(); ++a) {
        hit[g.arms[a]] = e.hit_rate[a];
        gap[g.arms[a]] = e.gap[a] ? nlohmann::ordered_json(*e.gap[a]) : nlohmann::ordered_json(nullptr);
      }
      cells.push_back({{"cell", e.cell},
                       {"memory", e.memory},
                       {"memory_bytes", e.memory_bytes},
                       {"time_scale", e.time_scale},
                       {"kernel_factors", e.kernel_factors},
                       {"trace", e.trace},
                       {"floor_hit_rate", e.floor},
                       {"ceiling_hit_rate", e.ceiling},
                       {"offline_bound", e.offline_bound},
                       {"infinite_bound", e.infinite_bound},
                       {"hit_rate", hit},
                       {"gap_closed", gap}});
    }
    j.push_back({{"policy", g.policy},
                 {"arms", arms},
                 {"floor", g.floor_arm},
                 {"ceiling", g.ceiling_arm ? nlohmann::ordered_json(*g.ceiling_arm) : nlohmann::ordered_json(nullptr)},
                 {"ceiling_kind", g.ceiling_arm ? "offline_arm" : "offline_bound"},
                 {"cells", cells}});
  }
  return j;
}

void print_eviction_table(std::ostream& out, const std::vector<eviction_group>& groups) {
  if (groups.empty()) return;
  out << "\neviction: share of the LRU-to-offline gap closed, (hit rate) in brackets\n";
  for (const eviction_group& g : groups) {
    const std::string ceiling = g.ceiling_arm ? fmt::format("{} (the group's offline arm)", *g.ceiling_arm)
                                              : std::string("the cell's offline bound (no offline arm)");
    out << fmt::format("-- {} ({} arms): floor {} (lru), ceiling {}\n", g.policy, g.arms.size(), g.floor_arm, ceiling);
    std::size_t name_width = 14;
    for (const std::string& a : g.arms) name_width = std::max(name_width, a.size() + 1);
    std::vector<std::size_t> widths;
    for (const eviction_cell& e : g.cells) widths.push_back(std::max<std::size_t>(e.label.size(), 16));
    std::string head = fmt::format("{:<{}} {:<10}", "arm", name_width, "order");
    for (std::size_t c = 0; c < g.cells.size(); ++c) head += fmt::format(" {:>{}}", g.cells[c].label, widths[c]);
    out << head << "\n";
    for (std::size_t a = 0; a < g.arms.size(); ++a) {
      std::string row = fmt::format("{:<{}} {:<10}", g.arms[a], name_width, g.orders[a]);
      for (std::size_t c = 0; c < g.cells.size(); ++c) {
        const eviction_cell& e = g.cells[c];
        const std::string share = e.gap[a] ? fmt::format("{:.3f}", *e.gap[a]) : std::string("n/a");
        row += fmt::format(" {:>{}}", fmt::format("{} ({:.4f})", share, e.hit_rate[a]), widths[c]);
      }
      out << row << "\n";
    }
    for (const bool offline : {true, false}) {
      std::string row = fmt::format("{:<{}} {:<10}", "oracle", name_width, offline ? "offline" : "infinite");
      for (std::size_t c = 0; c < g.cells.size(); ++c) {
        const eviction_cell& e = g.cells[c];
        row += fmt::format(" {:>{}}", fmt::format("({:.4f})", offline ? e.offline_bound : e.infinite_bound), widths[c]);
      }
      out << row << "\n";
    }
  }
  out << "share = (hit - lru's) / (ceiling - lru's): 0 = LRU, 1 = the ceiling; n/a where the ceiling is not above "
         "LRU; oracle rows: the cell's bounds (docs/compare.md, \"Eviction orders\")\n";
}

}  // namespace vtensor::tools
