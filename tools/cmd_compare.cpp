// `vtensor compare`: arms (named policies with their options) replayed over axes (memory
// budgets, time scales, kernel-factor sets, traces) in parallel, beside the bounds of each cell
// (infinite cache, offline Belady), with why each missed token missed. In parts: the experiment
// (arms, axes, experiment file), the points (one replay each, parsed with replay's options), the
// bounds, running the points, and the outputs (table, summary.json, arms.csv, time series).
// The output contract: docs/compare-output.md; the definitions: docs/compare.md.

#include "tools/cli.hpp"
#include "tools/compare_analysis.hpp"
#include "tools/replay_options.hpp"
#include "tools/report_render.hpp"

#include "sim/outputs.hpp"
#include "sim/replay.hpp"
#include "sim/step_log.hpp"
#include "traces/atomic_output_file.hpp"
#include "traces/memory_trace.hpp"
#include "traces/prefix_bounds.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <boost/make_shared.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

namespace vtensor::tools {
namespace po = boost::program_options;
namespace fs = std::filesystem;
namespace {

constexpr std::string_view name = "compare";

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

// The options of replay's table named in `names`, as a group.
po::options_description pick(const std::vector<std::string>& names, const char* caption) {
  const po::options_description all = replay_option_table();
  po::options_description o(caption);
  for (const std::string& n : names) o.add(boost::make_shared<po::option_description>(all.find(n, false)));
  return o;
}

po::options_description compare_options() {
  po::options_description o("experiment");
  o.add_options()("trace", po::value<std::vector<std::string>>()->composing(),
                  "trace file; several make the trace axis (default: the bundled Mooncake excerpt)")(
      "arm", po::value<std::vector<std::string>>()->composing(),
      "NAME='POLICY [options]': an arm, e.g. paged32='paged --block-tokens 32' (repeatable; options: the "
      "policy's own, as replay takes them)")("arms", po::value<std::string>(),
                                             "experiment file (JSON: arms and axes; docs/compare.md)")(
      "baseline", po::value<std::string>(), "the reference arm of the ratios (default: the first arm)")(
      "memory", po::value<std::vector<std::string>>()->composing(),
      "memory axis: budgets per GPU, comma-separated or repeated: default, 16GiB, unlimited (default: default)")(
      "time-scale", po::value<std::vector<std::string>>()->composing(),
      "time-scale axis: arrival x SCALE, comma-separated or repeated (default: 1)")(
      "kernel-factors", po::value<std::vector<std::string>>()->composing(),
      "kernel-factor axis: modern, 2024 or a JSON file, comma-separated or repeated (default: modern)")(
      "jobs", po::value<std::uint32_t>()->default_value(0), "points replayed at once (0: the machine's cores)")(
      "out", po::value<std::string>(),
      "write the comparison to folder DIR, whole or not at all (docs/compare-output.md)")(
      "json", po::value<std::string>(), "write summary.json to FILE too (- : standard output)")(
      "no-wall", po::bool_switch(), "leave wall_seconds and jobs out (byte-comparable runs)")(
      "report", po::bool_switch(),
      "also render DIR/report.html and DIR/figures/ (needs --out; matplotlib, as `vtensor report DIR`)")(
      "report-cell", po::value<std::string>(), "the cell of the figures drawn at one cell (default: the first)");
  return o;
}

po::options_description compare_table() {
  po::options_description all("options");
  all.add(compare_options()).add(pick(k_shared_options, "replica settings shared by every arm (as replay takes them)"));
  return all;
}

// ---- the experiment ------------------------------------------------------------------------

struct arm {
  std::string name;
  std::string policy;
  std::string options;        // as typed, after the policy
  sim::policy_choice choice;  // the policy with its options, parsed through its table
};

struct experiment {
  std::vector<arm> arms;
  std::vector<std::string> memory, kernel_factors, traces;
  std::vector<double> time_scale;
  std::vector<std::string> time_scale_text;
  std::string baseline;
};

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
  po::variables_map v;
  try {
    po::store(po::command_line_parser(tokens).options(policy_option_table("arm")).run(), v);
    po::notify(v);
  } catch (const po::error& e) {
    throw usage_error(
        fmt::format("{}: arm {}: {} (an arm takes its policy's options: --{}; shared settings go on the "
                    "command line)",
                    where, arm_name, e.what(), fmt::join(sim::kv_policy_option_names(a.policy), ", --")));
  }
  try {
    a.choice = parse_policy_choice(a.policy, v);
  } catch (const std::invalid_argument& e) {  // sim::option_error
    throw usage_error(fmt::format("{}: arm {}: {}", where, arm_name, e.what()));
  }
  return a;
}

// The experiment file (docs/compare.md, "Experiment file"); every error names the field.
void read_experiment_file(const std::string& path, experiment& x) {
  std::ifstream in(path);
  if (!in) throw usage_error(fmt::format("--arms {}: cannot open the file", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw usage_error(fmt::format("--arms {}: not JSON: {}", path, e.what()));
  }
  const auto bad = [&](const std::string& field, const std::string& why) {
    return usage_error(fmt::format("--arms {}: field '{}': {}", path, field, why));
  };
  if (!j.is_object()) throw bad("(top)", "expected an object with \"arms\" and axes");
  const std::set<std::string> known = {"arms", "baseline", "memory", "time_scale", "kernel_factors", "traces"};
  for (const auto& [key, value] : j.items()) {
    if (known.count(key) == 0)
      throw bad(key, "unknown field (known: arms, baseline, memory, time_scale, kernel_factors, traces)");
  }
  const auto strings = [&](const char* field) {
    std::vector<std::string> out;
    if (!j.contains(field)) return out;
    const auto& v = j[field];
    if (!v.is_array() || v.empty()) throw bad(field, "expected a non-empty array");
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i].is_string()) {
        out.push_back(v[i].get<std::string>());
      } else if (v[i].is_number() && std::string(field) == "time_scale") {
        out.push_back(v[i].dump());
      } else {
        throw bad(fmt::format("{}[{}]", field, i), "expected a string");
      }
    }
    return out;
  };
  if (j.contains("arms")) {
    const auto& arms = j["arms"];
    if (arms.is_object()) {
      for (const auto& [key, value] : arms.items()) {
        if (!value.is_string()) throw bad("arms." + key, "expected a string \"POLICY [options]\"");
        x.arms.push_back(make_arm(fmt::format("--arms {}: field 'arms.{}'", path, key), key, value.get<std::string>()));
      }
    } else if (arms.is_array()) {
      for (std::size_t i = 0; i < arms.size(); ++i) {
        const std::string field = fmt::format("arms[{}]", i);
        const auto& a = arms[i];
        if (!a.is_object()) throw bad(field, "expected an object {\"name\", \"policy\", \"options\"}");
        for (const auto& [key, value] : a.items()) {
          if (key != "name" && key != "policy" && key != "options") throw bad(field + "." + key, "unknown field");
        }
        for (const char* f : {"name", "policy"}) {
          if (!a.contains(f) || !a[f].is_string()) throw bad(field + "." + f, "expected a string");
        }
        if (a.contains("options") && !a["options"].is_string()) throw bad(field + ".options", "expected a string");
        const std::string spec = a["policy"].get<std::string>() + " " + a.value("options", std::string());
        x.arms.push_back(
            make_arm(fmt::format("--arms {}: field '{}'", path, field), a["name"].get<std::string>(), spec));
      }
    } else {
      throw bad("arms", "expected an object {NAME: \"POLICY [options]\"} or an array of {name, policy, options}");
    }
  }
  if (j.contains("baseline")) {
    if (!j["baseline"].is_string()) throw bad("baseline", "expected a string");
    x.baseline = j["baseline"].get<std::string>();
  }
  x.memory = strings("memory");
  x.kernel_factors = strings("kernel_factors");
  x.traces = strings("traces");
  for (const std::string& t : strings("time_scale")) {
    x.time_scale_text.push_back(t);
    x.time_scale.push_back(parse_time_scale(fmt::format("--arms {}: field 'time_scale'", path), t));
  }
}

std::vector<std::string> list_option(const po::variables_map& v, const char* option) {
  std::vector<std::string> out;
  if (v.count(option) == 0) return out;
  for (const std::string& text : v[option].as<std::vector<std::string>>()) {
    for (std::string& item : split_list(option, text)) out.push_back(std::move(item));
  }
  return out;
}

experiment read_experiment(const po::variables_map& v, const std::string& bundled) {
  experiment x;
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
  // Command-line axes replace the file's.
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
  for (const std::string& m : x.memory) {
    if (m != "default") (void)parse_size_option("--memory", m, size_rule::budget);
  }
  // Two equal values would give two points one id (and one time-series file).
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
  return x;
}

// ---- the points ----------------------------------------------------------------------------

struct cell {
  std::string id;
  std::size_t memory = 0, time_scale = 0, kernel_factors = 0, trace = 0;  // indices into the axes
  double infinite_hit_rate = 0, offline_hit_rate = 0;
  std::optional<std::uint64_t> memory_bytes;  // nullopt: unlimited
};

struct point {
  std::string id;
  std::size_t arm = 0, cell = 0;
  replay_options options;
  // Filled by the run:
  nlohmann::ordered_json summary;
  point_analysis analysis;
  double hit_rate = 0;
};

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

// ---- outputs -------------------------------------------------------------------------------

// The metrics of the table and of the ratios: key in the summary, label, whether higher is better.
struct metric {
  const char* key;
  const char* label;
  bool higher_better;
};
const std::vector<metric> k_metrics = {
    {"prefix_hit_rate", "hit rate", true}, {"throughput_tokens_per_s", "tok/s", true},
    {"ttft_p50_ms", "ttft p50 ms", false}, {"ttft_p99_ms", "ttft p99 ms", false},
    {"tpot_p50_ms", "tpot p50 ms", false}, {"tpot_p99_ms", "tpot p99 ms", false},
    {"preemptions", "preempt", false},     {"peak_physical_bytes", "peak GiB", false},
};

double metric_of(const nlohmann::ordered_json& s, const std::string& key) {
  if (key == "ttft_p50_ms") return s["ttft_ms"]["p50"].get<double>();
  if (key == "ttft_p99_ms") return s["ttft_ms"]["p99"].get<double>();
  if (key == "tpot_p50_ms") return s["tpot_ms"]["p50"].get<double>();
  if (key == "tpot_p99_ms") return s["tpot_ms"]["p99"].get<double>();
  return s[key].get<double>();
}

std::string shell_quoted(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./=,:@+%") ==
                        std::string::npos)
    return w;
  std::string out = "'";
  for (const char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

nlohmann::ordered_json histogram_json(const log_histogram& h) { return {{"edges", h.edges}, {"counts", h.counts}}; }

nlohmann::ordered_json misses_json(const miss_causes& m) {
  return {{"cold", m.cold},           {"evicted", m.evicted},     {"granularity", m.granularity},
          {"preempted", m.preempted}, {"in_flight", m.in_flight}, {"unpublished", m.unpublished},
          {"no_cache", m.no_cache},   {"total", m.total}};
}

double safe_ratio(double a, double b) { return b == 0 ? 0.0 : a / b; }

// Whole or not at all: a temporary folder beside DIR, renamed into place (an existing DIR is
// swapped out only once the new one is complete, then removed).
class output_folder {
 public:
  explicit output_folder(const std::string& target) : target_(fs::absolute(target)) {
    if (target == "-")
      throw usage_error("--out: '-' is not a folder (use --json - for summary.json on standard output)");
    const fs::path parent = target_.parent_path();
    if (!fs::is_directory(parent))
      throw usage_error(fmt::format("--out {}: the folder {} does not exist", target, parent.string()));
    if (fs::exists(target_) && !fs::is_directory(target_))
      throw usage_error(fmt::format("--out {}: exists and is not a folder", target));
    std::string templ = (parent / ("." + target_.filename().string() + ".tmp-XXXXXX")).string();
    if (mkdtemp(templ.data()) == nullptr)
      throw std::system_error(errno, std::generic_category(),
                              fmt::format("--out {}: cannot create a folder beside it", target));
    temp_ = templ;
    // mkdtemp makes it private (0700); the finished folder gets the permissions of any new folder.
    const mode_t mask = umask(0);
    umask(mask);
    fs::permissions(temp_, static_cast<fs::perms>(0777 & ~mask));
    fs::create_directory(temp_ / "timeseries");
  }
  ~output_folder() {
    std::error_code ignored;
    if (!temp_.empty()) fs::remove_all(temp_, ignored);
  }
  output_folder(const output_folder&) = delete;
  output_folder& operator=(const output_folder&) = delete;

  [[nodiscard]] const fs::path& temp() const { return temp_; }

  void commit() {
    if (fs::exists(target_)) {
      if (renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0)
        throw std::system_error(errno, std::generic_category(),
                                fmt::format("--out {}: cannot replace it", target_.string()));
      // temp_ now holds the old folder: removed by the destructor.
    } else {
      fs::rename(temp_, target_);
      temp_.clear();
    }
  }

 private:
  fs::path target_;
  fs::path temp_;
};

void write_file(const fs::path& path, const std::string& bytes) {
  traces::atomic_output_file f(path.string());
  f.write(bytes);
  f.commit();
}

std::string csv_number(double v) { return fmt::format("{}", v); }

std::string arms_csv(const experiment& x, const std::vector<cell>& cells, const std::vector<point>& points) {
  std::string out =
      "id,arm,policy,memory,time_scale,kernel_factors,trace,hit_rate,infinite_hit_rate,offline_hit_rate,of_infinite,"
      "of_offline,throughput_tokens_per_s,ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,preemptions,"
      "peak_physical_bytes,mean_used_bytes,mean_internal_bytes,mean_reserved_idle_bytes,mean_external_bytes,"
      "mean_cached_bytes,mean_free_bytes,vmm_critical_time_us,misses_cold,misses_evicted,misses_granularity,"
      "misses_preempted,misses_in_flight,misses_unpublished,misses_no_cache,throughput_ratio,hit_rate_ratio\n";
  for (const point& p : points) {
    const cell& c = cells[p.cell];
    const auto& s = p.summary;
    const auto& mb = s["memory_breakdown"]["mean_bytes"];
    const point* base = nullptr;
    for (const point& q : points) {
      if (q.cell == p.cell && x.arms[q.arm].name == x.baseline) base = &q;
    }
    const auto& m = p.analysis.misses;
    std::vector<std::string> row = {
        p.id,
        x.arms[p.arm].name,
        x.arms[p.arm].policy,
        x.memory[c.memory],
        x.time_scale_text[c.time_scale],
        x.kernel_factors[c.kernel_factors],
        std::to_string(c.trace),
        csv_number(p.hit_rate),
        csv_number(c.infinite_hit_rate),
        csv_number(c.offline_hit_rate),
        csv_number(safe_ratio(p.hit_rate, c.infinite_hit_rate)),
        csv_number(safe_ratio(p.hit_rate, c.offline_hit_rate)),
        csv_number(metric_of(s, "throughput_tokens_per_s")),
        csv_number(metric_of(s, "ttft_p50_ms")),
        csv_number(metric_of(s, "ttft_p99_ms")),
        csv_number(metric_of(s, "tpot_p50_ms")),
        csv_number(metric_of(s, "tpot_p99_ms")),
        std::to_string(s["preemptions"].get<std::uint64_t>()),
        std::to_string(s["peak_physical_bytes"].get<std::uint64_t>()),
        csv_number(mb["used"].get<double>()),
        csv_number(mb["internal"].get<double>()),
        csv_number(mb["reserved_idle"].get<double>()),
        csv_number(mb["external"].get<double>()),
        csv_number(mb["cached"].get<double>()),
        csv_number(mb["free"].get<double>()),
        csv_number(s["vmm_critical_time_us"].get<double>()),
        std::to_string(m.cold),
        std::to_string(m.evicted),
        std::to_string(m.granularity),
        std::to_string(m.preempted),
        std::to_string(m.in_flight),
        std::to_string(m.unpublished),
        std::to_string(m.no_cache),
        csv_number(safe_ratio(metric_of(s, "throughput_tokens_per_s"),
                              base ? metric_of(base->summary, "throughput_tokens_per_s") : 0)),
        csv_number(safe_ratio(p.hit_rate, base ? base->hit_rate : 0)),
    };
    for (std::string& f : row) {
      if (f.find_first_of(",\"\n") != std::string::npos) {
        std::string q = "\"";
        for (const char ch : f) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
        f = q + "\"";
      }
    }
    out += fmt::format("{}\n", fmt::join(row, ","));
  }
  return out;
}

// The table: per cell, each arm's metrics with the ratio to the baseline ('*': best of the
// cell), the bounds, and the misses by cause.
void print_table(std::ostream& out, const experiment& x, const std::vector<cell>& cells,
                 const std::vector<point>& points) {
  for (std::size_t ci = 0; ci < cells.size(); ++ci) {
    const cell& c = cells[ci];
    std::vector<const point*> in;
    for (const point& p : points) {
      if (p.cell == ci) in.push_back(&p);
    }
    const point* base = nullptr;
    for (const point* p : in) {
      if (x.arms[p->arm].name == x.baseline) base = p;
    }
    out << fmt::format("== {} (trace {})\n", c.id, x.traces[c.trace]);
    std::string head = fmt::format("{:<14}", "arm");
    for (const metric& m : k_metrics) head += fmt::format(" {:>20}", m.label);
    out << head << "\n";
    for (const point* p : in) {
      std::string row = fmt::format("{:<14}", x.arms[p->arm].name);
      for (const metric& m : k_metrics) {
        double v = metric_of(p->summary, m.key);
        bool best = true;
        for (const point* q : in) {
          const double w = metric_of(q->summary, m.key);
          if (m.higher_better ? w > v : w < v) best = false;
        }
        const double b = base ? metric_of(base->summary, m.key) : 0;
        const std::string ratio = b == 0 ? "(x -)" : fmt::format("(x{:.2f})", v / b);
        if (std::string(m.key) == "peak_physical_bytes") v /= static_cast<double>(k_gib);
        const std::string value = std::string(m.key) == "prefix_hit_rate" ? fmt::format("{:.4f}", v)
                                  : std::string(m.key) == "preemptions"   ? fmt::format("{:.0f}", v)
                                                                          : fmt::format("{:.1f}", v);
        row += fmt::format(" {:>20}", fmt::format("{}{} {}", best ? "*" : "", value, ratio));
      }
      out << row << "\n";
    }
    out << fmt::format("{:<14} infinite cache {:.4f}, offline (Belady, sequential) {:.4f}\n", "oracle",
                       c.infinite_hit_rate, c.offline_hit_rate);
    out << fmt::format(
        "{:<14} {:>9} {:>9} {:>12} | missed tokens {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "arm",
        "of inf", "of off", "<= infinite", "cold", "evicted", "granularity", "preempted", "in flight", "unpublished",
        "no cache", "total");
    for (const point* p : in) {
      const auto& m = p->analysis.misses;
      const bool within = p->hit_rate <= c.infinite_hit_rate && p->analysis.over_bound_requests == 0;
      out << fmt::format(
          "{:<14} {:>9.4f} {:>9.4f} {:>12} | {:>13} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}\n",
          x.arms[p->arm].name, safe_ratio(p->hit_rate, c.infinite_hit_rate),
          safe_ratio(p->hit_rate, c.offline_hit_rate), within ? "yes" : "NO (bug)", "", m.cold, m.evicted,
          m.granularity, m.preempted, m.in_flight, m.unpublished, m.no_cache, m.total);
    }
    out << "\n";
  }
  out << "* best of the cell per metric; (xR) = value / baseline " << x.baseline
      << "'s; misses by cause: docs/compare.md\n";
}

// ---- the run -------------------------------------------------------------------------------

// The shared settings of the summary (what every point's replica has in common).
nlohmann::ordered_json settings_json(const replay_options& o) {
  const sim::replay_config& c = o.config;
  nlohmann::ordered_json s;
  s["model"] = o.model.name;
  s["gpu"] = o.gpu.name;
  s["tp"] = o.model.tp;
  s["backend"] = "sim";
  s["token_budget"] = c.replica.token_budget;
  s["max_running"] = c.replica.max_running;
  s["chunked_prefill"] = c.replica.chunked_prefill;
  s["max_context_tokens"] = c.replica.max_context_tokens;
  s["over_context"] = std::string(sim::to_string(c.replica.over_context));
  s["step_overhead_ms"] = o.overhead_ms;
  s["sample_ms"] = o.sample_ms;
  s["max_requests"] = c.max_requests;
  s["seed"] = o.seed;
  s["kv_bytes_per_token_per_gpu"] = o.model.kv_bytes_per_token_per_gpu();
  s["calibration"] = o.policy.calibration_file;
  s["zero_latency"] = o.policy.zero_latency;
  return s;
}

struct run_context {
  const experiment& x;
  const std::vector<traces::loaded_trace>& traces;
  const std::vector<traces::prefix_index>& indexes;
  const std::vector<cell>& cells;
  const output_folder* folder;
  bool with_wall;
};

void run_point(const run_context& ctx, point& p) {
  const cell& c = ctx.cells[p.cell];
  const traces::loaded_trace& trace = ctx.traces[c.trace];
  const replay_options& o = p.options;
  const auto policy = sim::make_kv_policy(o.choice, o.policy);
  traces::memory_trace_reader reader(trace);
  sim::step_log log(*policy, false);
  point_recorder recorder(trace.requests.size());
  std::vector<sim::replica_observer*> observers{&log, &recorder};
  std::unique_ptr<sim::timeseries_writer> timeseries;
  if (ctx.folder != nullptr) {
    timeseries =
        std::make_unique<sim::timeseries_writer>((ctx.folder->temp() / "timeseries" / (p.id + ".csv")).string());
    observers.push_back(timeseries.get());
  }
  const sim::replay_summary summary = sim::run_replay(reader, *policy, o.config, observers);
  // The modelled figures only (the measured VMM block is wall time); wall_seconds apart.
  p.summary = replay_run_json(o, o.policy, *policy, summary, trace.format, log, std::nullopt, false);
  if (ctx.with_wall) p.summary["wall_seconds"] = summary.wall_seconds;
  p.hit_rate = p.summary["prefix_hit_rate"].get<double>();
  p.analysis = analyse_point(trace, ctx.indexes[c.trace], recorder.requests(), sim::policy_sharing(o.choice, o.policy),
                             summary.counters);
  if (timeseries) timeseries->commit();
}

// Runs every point on `jobs` threads; the first failure stops the others and is rethrown.
void run_points(const run_context& ctx, std::vector<point>& points, unsigned jobs, const cli_streams& io) {
  const bool tty = &io.err == &std::cerr && isatty(STDERR_FILENO) == 1;
  const auto start = std::chrono::steady_clock::now();
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::size_t done = 0;
  std::exception_ptr error;
  const auto worker = [&] {
    while (!failed) {
      const std::size_t i = next++;
      if (i >= points.size()) return;
      try {
        run_point(ctx, points[i]);
      } catch (...) {
        const std::lock_guard lock(mutex);
        if (!error) error = std::current_exception();
        failed = true;
        return;
      }
      const std::lock_guard lock(mutex);
      ++done;
      if (tty) {
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double left = elapsed / static_cast<double>(done) * static_cast<double>(points.size() - done);
        io.err << fmt::format("\rcompare: {}/{} points done, {:.0f} s elapsed, about {:.0f} s left   ", done,
                              points.size(), elapsed, left)
               << std::flush;
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned n = std::max(1u, std::min<unsigned>(jobs, static_cast<unsigned>(points.size())));
  threads.reserve(n);
  for (unsigned t = 0; t < n; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  if (tty) io.err << "\r" << std::string(80, ' ') << "\r" << std::flush;
  if (error) std::rethrow_exception(error);
}

int run_compare(const po::variables_map& v, const std::vector<std::string>& shared, const std::string& command,
                const cli_streams& given) {
  const experiment x = read_experiment(v, bundled_trace_path());
  const std::optional<std::string> json_path =
      v.count("json") != 0 ? std::optional(v["json"].as<std::string>()) : std::nullopt;
  const cli_streams io{json_path == "-" ? given.err : given.out, given.err};
  const bool with_wall = !v["no-wall"].as<bool>();
  unsigned jobs = v["jobs"].as<std::uint32_t>();
  if (jobs == 0) jobs = std::max(1u, std::thread::hardware_concurrency());
  std::unique_ptr<output_folder> folder;
  if (v["report"].as<bool>() && v.count("out") == 0) throw usage_error("--report needs --out DIR");
  if (v.count("out") != 0) folder = std::make_unique<output_folder>(v["out"].as<std::string>());

  // Every point's options, parsed and checked before any work.
  const po::variables_map settings = shared_settings(shared);
  std::vector<cell> cells;
  std::vector<point> points;
  for (std::size_t t = 0; t < x.traces.size(); ++t) {
    for (std::size_t k = 0; k < x.kernel_factors.size(); ++k) {
      for (std::size_t s = 0; s < x.time_scale.size(); ++s) {
        for (std::size_t m = 0; m < x.memory.size(); ++m) {
          cell c;
          c.memory = m;
          c.time_scale = s;
          c.kernel_factors = k;
          c.trace = t;
          c.id = sanitized(fmt::format("memory={},time_scale={},kernel_factors={},trace={}", x.memory[m],
                                       x.time_scale_text[s], x.kernel_factors[k], t));
          for (std::size_t a = 0; a < x.arms.size(); ++a) {
            point p;
            p.arm = a;
            p.cell = cells.size();
            p.id = sanitized(x.arms[a].name + "@" + c.id);
            const replay_axes axes{x.memory[m] == "default" ? std::nullopt : std::optional(x.memory[m]),
                                   x.time_scale[s], x.kernel_factors[k], x.traces[t]};
            p.options = point_options(settings, x.arms[a], axes);
            p.options.config.replica.measure_wall = false;  // a point reports no step wall time
            points.push_back(std::move(p));
          }
          const std::uint64_t bytes = points.back().options.policy.memory_bytes;
          if (bytes != std::numeric_limits<std::uint64_t>::max()) c.memory_bytes = bytes;
          cells.push_back(std::move(c));
        }
      }
    }
  }
  // Each trace read and checked once.
  const replay_options& first = points.front().options;
  std::vector<traces::loaded_trace> loaded;
  std::vector<traces::prefix_index> indexes;
  for (const std::string& path : x.traces) {
    loaded.push_back(traces::load_trace(path, first.format, first.config.max_requests));
    if (loaded.back().requests.empty()) throw usage_error(fmt::format("trace {}: no requests", path));
    indexes.push_back(traces::index_prefixes(loaded.back().requests));
  }
  // The bounds of each cell (the offline one once per trace and budget).
  std::map<std::pair<std::size_t, std::uint64_t>, std::uint64_t> offline;
  const std::uint64_t token_bytes = first.model.kv_bytes_per_token_per_gpu();
  for (cell& c : cells) {
    const traces::loaded_trace& t = loaded[c.trace];
    std::uint64_t prompt = 0, infinite = 0;
    for (const auto& r : t.requests) prompt += r.input_tokens;
    for (const std::uint64_t h : indexes[c.trace].infinite_hit) infinite += h;
    c.infinite_hit_rate = prefix_hit_rate(infinite, prompt);
    if (!c.memory_bytes || t.block_tokens == 0) {  // unlimited: the infinite bound (no keys: both 0)
      c.offline_hit_rate = c.infinite_hit_rate;
      continue;
    }
    const std::uint64_t blocks = *c.memory_bytes / token_bytes / t.block_tokens;
    const auto key = std::make_pair(c.trace, blocks);
    if (offline.count(key) == 0) offline[key] = traces::offline_hit_tokens(indexes[c.trace], t.requests, blocks);
    c.offline_hit_rate = prefix_hit_rate(offline[key], prompt);
  }

  const auto wall_start = std::chrono::steady_clock::now();
  const run_context ctx{x, loaded, indexes, cells, folder.get(), with_wall};
  run_points(ctx, points, jobs, io);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  // summary.json (docs/compare-output.md).
  nlohmann::ordered_json j;
  j["format"] = "vtensor-compare";
  j["version"] = 1;
  j["command"] = command;
  j["baseline"] = x.baseline;
  j["traces"] = nlohmann::ordered_json::array();
  for (std::size_t t = 0; t < loaded.size(); ++t) {
    std::uint64_t prompt = 0;
    for (const auto& r : loaded[t].requests) prompt += r.input_tokens;
    j["traces"].push_back({{"index", t},
                           {"path", loaded[t].path},
                           {"format", std::string(traces::to_string(loaded[t].format))},
                           {"requests", loaded[t].requests.size()},
                           {"prompt_tokens", prompt},
                           {"block_tokens", loaded[t].block_tokens}});
  }
  j["settings"] = settings_json(first);
  std::vector<nlohmann::ordered_json> trace_axis;
  for (std::size_t t = 0; t < x.traces.size(); ++t) trace_axis.emplace_back(t);
  j["axes"] = {
      {"memory", x.memory}, {"time_scale", x.time_scale}, {"kernel_factors", x.kernel_factors}, {"trace", trace_axis}};
  j["arms"] = nlohmann::ordered_json::array();
  for (const arm& a : x.arms) j["arms"].push_back({{"name", a.name}, {"policy", a.policy}, {"options", a.options}});
  j["cells"] = nlohmann::ordered_json::array();
  for (const cell& c : cells) {
    j["cells"].push_back(
        {{"id", c.id},
         {"memory", x.memory[c.memory]},
         {"memory_bytes", c.memory_bytes ? nlohmann::ordered_json(*c.memory_bytes) : nlohmann::ordered_json(nullptr)},
         {"time_scale", x.time_scale[c.time_scale]},
         {"kernel_factors", x.kernel_factors[c.kernel_factors]},
         {"trace", c.trace},
         {"bounds",
          {{"infinite_hit_rate", c.infinite_hit_rate},
           {"offline_hit_rate", c.offline_hit_rate},
           {"offline_model", "sequential, Belady on evictable leaves, capacity = budget in tokens"}}}});
  }
  j["points"] = nlohmann::ordered_json::array();
  std::vector<double> q(101);
  for (std::size_t k = 0; k <= 100; ++k) q[k] = static_cast<double>(k) / 100.0;
  for (const point& p : points) {
    const cell& c = cells[p.cell];
    const point* base = nullptr;
    std::vector<const point*> in;
    for (const point& o : points) {
      if (o.cell != p.cell) continue;
      in.push_back(&o);
      if (x.arms[o.arm].name == x.baseline) base = &o;
    }
    nlohmann::ordered_json ratios = nlohmann::ordered_json::object();
    nlohmann::ordered_json best = nlohmann::ordered_json::array();
    for (const metric& m : k_metrics) {
      const double value = metric_of(p.summary, m.key);
      const double b = base ? metric_of(base->summary, m.key) : 0;
      ratios[m.key] = b == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(value / b);
      bool is_best = true;
      for (const point* o : in) {
        const double w = metric_of(o->summary, m.key);
        if (m.higher_better ? w > value : w < value) is_best = false;
      }
      if (is_best) best.push_back(m.key);
    }
    nlohmann::ordered_json e;
    e["id"] = p.id;
    e["arm"] = x.arms[p.arm].name;
    e["cell"] = c.id;
    e["summary"] = p.summary;
    e["hit_rate"] = p.hit_rate;
    e["of_infinite"] = safe_ratio(p.hit_rate, c.infinite_hit_rate);
    e["of_offline"] = safe_ratio(p.hit_rate, c.offline_hit_rate);
    e["within_infinite_bound"] = p.hit_rate <= c.infinite_hit_rate && p.analysis.over_bound_requests == 0;
    e["misses"] = misses_json(p.analysis.misses);
    e["latency_quantiles"] = {{"q", q}, {"ttft_ms", p.analysis.ttft_ms}, {"tpot_ms", p.analysis.tpot_ms}};
    e["histograms"] = {{"reuse_distance_s", histogram_json(p.analysis.reuse_distance)},
                       {"cached_lifetime_s", histogram_json(p.analysis.cached_lifetime)}};
    e["ratios"] = ratios;
    e["best"] = best;
    e["timeseries"] = folder ? nlohmann::ordered_json("timeseries/" + p.id + ".csv") : nlohmann::ordered_json(nullptr);
    j["points"].push_back(e);
  }
  if (with_wall) {  // how the run went, not what it computed: left out by --no-wall
    j["wall_seconds"] = wall;
    j["jobs"] = jobs;
  }
  const std::string summary_text = j.dump(2) + "\n";

  print_table(io.out, x, cells, points);
  if (folder) {
    write_file(folder->temp() / "summary.json", summary_text);
    write_file(folder->temp() / "arms.csv", arms_csv(x, cells, points));
    // The report renders inside the temporary folder, so that DIR still appears whole or not at all.
    if (v["report"].as<bool>()) {
      report_options ro;
      if (v.count("report-cell") != 0) ro.cell = v["report-cell"].as<std::string>();
      if (const int rc = render_report(folder->temp(), io, ro); rc != exit_success) return rc;
    }
    folder->commit();
  }
  if (json_path) {
    traces::atomic_output_file f(*json_path, &given.out);
    f.write(summary_text);
    f.commit();
  }
  bool all_within = true;
  for (const point& p : points) all_within = all_within && p.analysis.over_bound_requests == 0;
  if (!all_within) {
    io.err << "vtensor compare: some point's hit exceeds the infinite-cache bound: a simulator bug (see the table)\n";
    return exit_failure;
  }
  return exit_success;
}

}  // namespace

int cmd_compare(std::span<const std::string> args, const cli_streams& io) {
  return guarded_run(name, io, [&] {
    po::positional_options_description positional;
    positional.add("trace", -1);
    const auto values = parse_command_line(
        name, "[TRACE...] --arm NAME='POLICY [options]' ... [options]",
        "Replays the same requests through several arms (named KV policies with their options)\n"
        "at every point of the axes (--memory, --time-scale, --kernel-factors, traces), in parallel,\n"
        "and prints per cell each arm's metrics with the ratio to the baseline arm, the best arm per\n"
        "metric, the bounds (infinite cache; offline Belady at the budget), each arm's hit rate as a\n"
        "fraction of both, and why each missed prompt token missed (docs/compare.md). Each trace is\n"
        "read once; results are identical whatever --jobs is (wall-clock fields aside).\n"
        "--out DIR writes summary.json, arms.csv and each point's time series, whole or not at all.\n"
        "Example: vtensor compare trace.jsonl --arm vt=vtensor --arm paged=paged --memory 16GiB,unlimited",
        compare_table(), positional, args, io);
    if (!values) return exit_success;
    // The shared settings as typed: replayed into every point's replay options.
    const std::vector<std::string> words(args.begin(), args.end());
    const po::parsed_options parsed =
        po::command_line_parser(words).options(compare_table()).positional(positional).run();
    std::vector<std::string> shared;
    for (const po::option& opt : parsed.options) {
      if (std::find(k_shared_options.begin(), k_shared_options.end(), opt.string_key) == k_shared_options.end())
        continue;
      shared.insert(shared.end(), opt.original_tokens.begin(), opt.original_tokens.end());
    }
    // --jobs changes no result: with --no-wall it leaves the command too, so that two runs compare
    // byte for byte whatever --jobs was.
    const bool no_wall = (*values)["no-wall"].as<bool>();
    std::string command = "vtensor compare";
    for (const po::option& opt : parsed.options) {
      if (no_wall && opt.string_key == "jobs") continue;
      for (const std::string& w : opt.original_tokens) command += " " + shell_quoted(w);
    }
    return run_compare(*values, shared, command, io);
  });
}

}  // namespace vtensor::tools
