// The experiment of `vtensor compare`: arms, axes, the experiment file and the grid of points
// (tools/compare_experiment.hpp).

#include "tools/compare_experiment.hpp"

#include "tools/cli.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <boost/make_shared.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace vtensor::tools {
namespace po = boost::program_options;

// An arm sets its policy's options (the registry's tables: policy_option_table()); replica
// settings are shared by every arm (given once on the compare command line). Every other replay
// option is an axis, or not offered: the backend is always `sim` (points run in parallel) and
// outputs are compare's own.
const std::vector<std::string> k_shared_options = {"format",       "model",          "gpu",
                                                   "tp",           "seed",           "max-requests",
                                                   "token-budget", "max-running",    "chunked-prefill",
                                                   "max-context",  "over-context",   "step-overhead-ms",
                                                   "sample-ms",    "calibration",    "compute-calibration",
                                                   "zero-latency", "warmup-fraction"};

po::options_description shared_option_table() {
  const po::options_description all = replay_option_table();
  po::options_description o("replica settings shared by every arm (as replay takes them)");
  for (const std::string& n : k_shared_options) o.add(boost::make_shared<po::option_description>(all.find(n, false)));
  return o;
}

std::vector<std::string> shared_tokens(const po::parsed_options& parsed) {
  std::vector<std::string> shared;
  for (const po::option& opt : parsed.options) {
    if (std::find(k_shared_options.begin(), k_shared_options.end(), opt.string_key) == k_shared_options.end()) continue;
    shared.insert(shared.end(), opt.original_tokens.begin(), opt.original_tokens.end());
  }
  return shared;
}

namespace {

// Splits a comma-separated list (items trimmed, none empty).
std::vector<std::string> split_list(const std::string& option, const std::string& text) {
  std::vector<std::string> items;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    const auto b = item.find_first_not_of(' ');
    const auto e = item.find_last_not_of(' ');
    if (b == std::string::npos) throw usage_error(fmt::format("--{}: empty item in '{}'", option, text));
    items.push_back(item.substr(b, e - b + 1));
  }
  if (items.empty()) throw usage_error(fmt::format("--{}: no value", option));
  return items;
}

double parse_time_scale(const std::string& where, const std::string& text) {
  double v = 0;
  std::size_t used = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  if (used != text.size() || !(v > 0) || !std::isfinite(v))
    throw usage_error(fmt::format("{}: '{}' is not a positive time scale", where, text));
  return v;
}

std::uint32_t parse_replicas(const std::string& where, const std::string& text) {
  std::uint64_t v = 0;
  std::size_t used = 0;
  try {
    v = std::stoull(text, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  if (used != text.size() || text.front() == '-' || v == 0 || v > 4096)
    throw usage_error(fmt::format("{}: '{}' is not a replica count from 1 to 4096", where, text));
  return static_cast<std::uint32_t>(v);
}

// "NAME=POLICY [options]" or, from a file, name and "POLICY [options]".
arm make_arm(const std::string& where, const std::string& arm_name, const std::string& spec) {
  if (arm_name.empty()) throw usage_error(fmt::format("{}: an arm needs a name (NAME='POLICY [options]')", where));
  if (arm_name.find_first_of(" @=,") != std::string::npos)
    throw usage_error(fmt::format("{}: arm name '{}' may not hold spaces, '@', '=' or ','", where, arm_name));
  std::vector<std::string> words = po::split_unix(spec);
  if (words.empty()) throw usage_error(fmt::format("{}: arm {} names no policy", where, arm_name));
  arm a;
  a.name = arm_name;
  a.policy = words.front();
  const std::vector<std::string> tokens(words.begin() + 1, words.end());
  const auto space = spec.find_first_not_of(' ');
  const auto rest = spec.find(a.policy, space == std::string::npos ? 0 : space) + a.policy.size();
  const auto opt = spec.find_first_not_of(' ', rest);
  a.options = opt == std::string::npos ? "" : spec.substr(opt);
  const auto known = sim::kv_policy_names();
  if (std::find(known.begin(), known.end(), a.policy) == known.end()) {
    throw usage_error(
        fmt::format("{}: arm {}: unknown policy '{}' (known: {})", where, arm_name, a.policy, fmt::join(known, ", ")));
  }
  // Options no policy's table holds (a shared setting, an axis, a typo) fail here, as do the
  // options of another policy and bad values.
  // The router's options (not --replicas, an axis) ride with the arm: an arm is a policy behind
  // a router, so one comparison can set vtensor behind one router against paged behind another.
  po::options_description table = policy_option_table("arm");
  const po::options_description cluster = cluster_options();
  for (const auto& o : cluster.options()) {
    if (o->long_name() != "replicas") table.add(o);
  }
  po::variables_map v;
  try {
    const po::parsed_options parsed = po::command_line_parser(tokens).options(table).run();
    po::store(parsed, v);
    po::notify(v);
    for (const po::option& o : parsed.options) {
      if (o.string_key.rfind("router", 0) == 0)
        a.router.insert(a.router.end(), o.original_tokens.begin(), o.original_tokens.end());
    }
  } catch (const po::error& e) {
    throw usage_error(
        fmt::format("{}: arm {}: {} (an arm takes its policy's options: --{}, and the router's: --router, "
                    "--router-*; shared settings go on the command line)",
                    where, arm_name, e.what(), fmt::join(sim::kv_policy_option_names(a.policy), ", --")));
  }
  try {
    a.choice = parse_policy_choice(a.policy, v);
  } catch (const std::invalid_argument& e) {  // sim::option_error
    throw usage_error(fmt::format("{}: arm {}: {}", where, arm_name, e.what()));
  }
  return a;
}

// ---- the experiment file (docs/compare.md, "Experiment file"); every error names the field --

// An error in field `field` of the experiment file at `path`.
usage_error bad_field(const std::string& path, const std::string& field, const std::string& why) {
  return usage_error(fmt::format("--arms {}: field '{}': {}", path, field, why));
}

nlohmann::json parse_experiment_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw usage_error(fmt::format("--arms {}: cannot open the file", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw usage_error(fmt::format("--arms {}: not JSON: {}", path, e.what()));
  }
  if (!j.is_object()) throw bad_field(path, "(top)", "expected an object with \"arms\" and axes");
  const std::set<std::string> known = {"arms",           "baseline", "memory",  "time_scale",
                                       "kernel_factors", "traces",   "replicas"};
  for (const auto& [key, value] : j.items()) {
    if (known.count(key) == 0) {
      throw bad_field(path, key,
                      "unknown field (known: arms, baseline, memory, time_scale, kernel_factors, traces, replicas)");
    }
  }
  return j;
}

// An axis of the file: a non-empty array of strings (time scales may be numbers).
std::vector<std::string> file_strings(const std::string& path, const nlohmann::json& j, const char* field) {
  std::vector<std::string> out;
  if (!j.contains(field)) return out;
  const auto& v = j[field];
  if (!v.is_array() || v.empty()) throw bad_field(path, field, "expected a non-empty array");
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i].is_string()) {
      out.push_back(v[i].get<std::string>());
    } else if (v[i].is_number() && (std::string(field) == "time_scale" || std::string(field) == "replicas")) {
      out.push_back(v[i].dump());
    } else {
      throw bad_field(path, fmt::format("{}[{}]", field, i), "expected a string");
    }
  }
  return out;
}

// Arm `i` of the file's array form: {"name", "policy", "options"}.
arm file_arm(const std::string& path, const nlohmann::json& a, std::size_t i) {
  const std::string field = fmt::format("arms[{}]", i);
  if (!a.is_object()) throw bad_field(path, field, "expected an object {\"name\", \"policy\", \"options\"}");
  for (const auto& [key, value] : a.items()) {
    if (key != "name" && key != "policy" && key != "options") throw bad_field(path, field + "." + key, "unknown field");
  }
  for (const char* f : {"name", "policy"}) {
    if (!a.contains(f) || !a[f].is_string()) throw bad_field(path, field + "." + f, "expected a string");
  }
  if (a.contains("options") && !a["options"].is_string())
    throw bad_field(path, field + ".options", "expected a string");
  const std::string spec = a["policy"].get<std::string>() + " " + a.value("options", std::string());
  return make_arm(fmt::format("--arms {}: field '{}'", path, field), a["name"].get<std::string>(), spec);
}

// The file's arms: {NAME: "POLICY [options]"} or [{name, policy, options}].
void read_file_arms(const std::string& path, const nlohmann::json& arms, experiment& x) {
  if (arms.is_object()) {
    for (const auto& [key, value] : arms.items()) {
      if (!value.is_string()) throw bad_field(path, "arms." + key, "expected a string \"POLICY [options]\"");
      x.arms.push_back(make_arm(fmt::format("--arms {}: field 'arms.{}'", path, key), key, value.get<std::string>()));
    }
  } else if (arms.is_array()) {
    for (std::size_t i = 0; i < arms.size(); ++i) x.arms.push_back(file_arm(path, arms[i], i));
  } else {
    throw bad_field(path, "arms",
                    "expected an object {NAME: \"POLICY [options]\"} or an array of {name, policy, options}");
  }
}

void read_experiment_file(const std::string& path, experiment& x) {
  const nlohmann::json j = parse_experiment_file(path);
  if (j.contains("arms")) read_file_arms(path, j["arms"], x);
  if (j.contains("baseline")) {
    if (!j["baseline"].is_string()) throw bad_field(path, "baseline", "expected a string");
    x.baseline = j["baseline"].get<std::string>();
  }
  x.memory = file_strings(path, j, "memory");
  x.kernel_factors = file_strings(path, j, "kernel_factors");
  x.traces = file_strings(path, j, "traces");
  for (const std::string& t : file_strings(path, j, "time_scale")) {
    x.time_scale_text.push_back(t);
    x.time_scale.push_back(parse_time_scale(fmt::format("--arms {}: field 'time_scale'", path), t));
  }
  for (const std::string& r : file_strings(path, j, "replicas")) {
    x.replicas.push_back(parse_replicas(fmt::format("--arms {}: field 'replicas'", path), r));
  }
}

// ---- the command line ------------------------------------------------------------------------

std::vector<std::string> list_option(const po::variables_map& v, const char* option) {
  std::vector<std::string> out;
  if (v.count(option) == 0) return out;
  for (const std::string& text : v[option].as<std::vector<std::string>>()) {
    for (std::string& item : split_list(option, text)) out.push_back(std::move(item));
  }
  return out;
}

// The arms of the file and of --arm, each named once, and the baseline among them.
void read_arms(const po::variables_map& v, experiment& x) {
  if (v.count("arms") != 0) read_experiment_file(v["arms"].as<std::string>(), x);
  if (v.count("arm") != 0) {
    for (const std::string& text : v["arm"].as<std::vector<std::string>>()) {
      const auto eq = text.find('=');
      if (eq == std::string::npos) throw usage_error(fmt::format("--arm '{}': expected NAME='POLICY [options]'", text));
      x.arms.push_back(make_arm("--arm", text.substr(0, eq), text.substr(eq + 1)));
    }
  }
  if (x.arms.empty()) throw usage_error("no arms: give --arm NAME='POLICY [options]' (one or more) or --arms FILE");
  std::set<std::string> names;
  for (const arm& a : x.arms) {
    if (!names.insert(a.name).second) throw usage_error(fmt::format("arm {} is given twice", a.name));
  }
  if (v.count("baseline") != 0) x.baseline = v["baseline"].as<std::string>();
  if (x.baseline.empty()) x.baseline = x.arms.front().name;
  if (names.count(x.baseline) == 0)
    throw usage_error(fmt::format("--baseline: no arm is called '{}' (arms: {})", x.baseline, fmt::join(names, ", ")));
}

// The axes: the command line's replace the file's; an axis given nowhere takes its default.
void read_axes(const po::variables_map& v, const std::string& bundled, experiment& x) {
  if (auto m = list_option(v, "memory"); !m.empty()) x.memory = m;
  if (auto k = list_option(v, "kernel-factors"); !k.empty()) x.kernel_factors = k;
  if (v.count("trace") != 0) x.traces = v["trace"].as<std::vector<std::string>>();
  if (auto t = list_option(v, "time-scale"); !t.empty()) {
    x.time_scale.clear();
    x.time_scale_text = t;
    for (const std::string& s : t) x.time_scale.push_back(parse_time_scale("--time-scale", s));
  }
  if (x.memory.empty()) x.memory = {"default"};
  if (x.kernel_factors.empty()) x.kernel_factors = {"modern"};
  if (x.traces.empty()) x.traces = {bundled};
  if (x.time_scale.empty()) {
    x.time_scale = {1.0};
    x.time_scale_text = {"1"};
  }
  if (auto r = list_option(v, "replicas"); !r.empty()) {
    x.replicas.clear();
    for (const std::string& n : r) x.replicas.push_back(parse_replicas("--replicas", n));
  }
  if (x.replicas.empty()) x.replicas = {1};
}

// Every budget parses; no axis holds a value twice (two equal values would give two points one
// id, and one time-series file).
void check_axes(const experiment& x) {
  for (const std::string& m : x.memory) {
    if (m != "default") (void)parse_size_option("--memory", m, size_rule::budget);
  }
  const auto once = [](const char* axis, const std::vector<std::string>& values) {
    std::set<std::string> seen;
    for (const std::string& value : values) {
      if (!seen.insert(value).second) throw usage_error(fmt::format("--{}: '{}' is given twice", axis, value));
    }
  };
  once("memory", x.memory);
  once("time-scale", x.time_scale_text);
  once("kernel-factors", x.kernel_factors);
  once("trace", x.traces);
  std::vector<std::string> replicas;
  for (const std::uint32_t r : x.replicas) replicas.push_back(std::to_string(r));
  once("replicas", replicas);
}

}  // namespace

experiment read_experiment(const po::variables_map& v, const std::string& bundled) {
  experiment x;
  read_arms(v, x);
  read_axes(v, bundled, x);
  check_axes(x);
  return x;
}

// ---- the grid ----------------------------------------------------------------------------------

namespace {

std::string sanitized(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '=' || c == ',' ||
                    c == '@' || c == '-';
    if (!ok) c = '_';
  }
  return out;
}

// The shared settings as typed, read with replay's options (every point reads them).
po::variables_map shared_settings(const std::vector<std::string>& shared) {
  po::variables_map v;
  po::store(po::command_line_parser(shared).options(replay_option_table()).run(), v);
  po::notify(v);
  return v;
}

// The replay options of one point: the shared settings, the arm's policy as make_arm() parsed it
// and the point's values of the axes, checked by replay's own parser.
replay_options point_options(const po::variables_map& settings, const arm& a, const replay_axes& axes) {
  try {
    return parse_replay_options(settings, a.choice, axes);
  } catch (const usage_error& e) {
    throw usage_error(fmt::format("arm {}: {}", a.name, e.what()));
  } catch (const std::invalid_argument& e) {
    throw usage_error(fmt::format("arm {}: {}", a.name, e.what()));
  }
}

// Arm `a`'s point in cell `c` (the g.cells.size()-th), at time scale `scale`.
point make_point(const experiment& x, const po::variables_map& settings, std::size_t a, const cell& c,
                 std::size_t cell_index, double scale) {
  point p;
  p.arm = a;
  p.cell = cell_index;
  p.id = sanitized(x.arms[a].name + "@" + c.id);
  const replay_axes axes{x.memory[c.memory] == "default" ? std::nullopt : std::optional(x.memory[c.memory]), scale,
                         x.kernel_factors[c.kernel_factors], x.traces[c.trace]};
  p.options = point_options(settings, x.arms[a], axes);
  p.options.config.replica.measure_wall = false;  // a point reports no step wall time
  // The cell's replicas behind the arm's router (parsed as replay parses them, after the memory).
  std::vector<std::string> tokens = x.arms[a].router;
  tokens.insert(tokens.end(), {"--replicas", std::to_string(x.replicas[c.replicas])});
  po::variables_map v;  // the router's seed is the point's (parse_cluster_options reads it there)
  po::store(po::command_line_parser(tokens).options(cluster_options()).run(), v);
  po::notify(v);
  try {
    parse_cluster_options(v, p.options);
  } catch (const usage_error& e) {
    throw usage_error(fmt::format("arm {}: {}", x.arms[a].name, e.what()));
  }
  return p;
}

// A cell's id: its axes' values (the replica count when the experiment varies it).
std::string cell_id(const experiment& x, std::size_t m, const std::string& time_scale, std::size_t k, std::size_t t,
                    std::size_t r) {
  std::string id = fmt::format("memory={},time_scale={},kernel_factors={},trace={}", x.memory[m], time_scale,
                               x.kernel_factors[k], t);
  if (x.names_replicas()) id += fmt::format(",replicas={}", x.replicas[r]);
  return sanitized(id);
}

// The budget of a cell whose points are made: nullopt for unlimited.
void set_budget(cell& c, const point& p) {
  const std::uint64_t bytes = p.options.policy.memory_bytes;
  if (bytes != std::numeric_limits<std::uint64_t>::max()) c.memory_bytes = bytes;
}

// Cell (m, s, k, t, r) of the axes and its points, one per arm.
void add_cell(const experiment& x, const po::variables_map& settings, std::size_t m, std::size_t s, std::size_t k,
              std::size_t t, std::size_t r, compare_grid& g) {
  cell c;
  c.memory = m;
  c.time_scale = s;
  c.kernel_factors = k;
  c.trace = t;
  c.replicas = r;
  c.replica_count = x.replicas[r];
  c.id = cell_id(x, m, x.time_scale_text[s], k, t, r);
  for (std::size_t a = 0; a < x.arms.size(); ++a)
    g.points.push_back(make_point(x, settings, a, c, g.cells.size(), x.time_scale[s]));
  set_budget(c, g.points.back());
  g.cells.push_back(std::move(c));
}

}  // namespace

compare_grid make_probe_grid(const experiment& x, const std::vector<std::string>& shared,
                             const std::vector<probe>& probes) {
  const po::variables_map settings = shared_settings(shared);
  compare_grid g;
  for (const probe& pr : probes) {
    cell c;
    c.memory = pr.memory;
    c.kernel_factors = pr.kernel_factors;
    c.trace = pr.trace;
    c.replicas = pr.replicas;
    c.replica_count = x.replicas[pr.replicas];
    c.id = cell_id(x, pr.memory, fmt::format("{}", pr.time_scale), pr.kernel_factors, pr.trace, pr.replicas);
    g.points.push_back(make_point(x, settings, pr.arm, c, g.cells.size(), pr.time_scale));
    set_budget(c, g.points.back());
    g.cells.push_back(std::move(c));
  }
  return g;
}

compare_grid make_grid(const experiment& x, const std::vector<std::string>& shared) {
  const po::variables_map settings = shared_settings(shared);
  compare_grid g;
  for (std::size_t t = 0; t < x.traces.size(); ++t) {
    for (std::size_t k = 0; k < x.kernel_factors.size(); ++k) {
      for (std::size_t r = 0; r < x.replicas.size(); ++r) {
        for (std::size_t s = 0; s < x.time_scale.size(); ++s) {
          for (std::size_t m = 0; m < x.memory.size(); ++m) add_cell(x, settings, m, s, k, t, r, g);
        }
      }
    }
  }
  return g;
}

}  // namespace vtensor::tools
