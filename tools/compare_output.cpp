// The outputs of `vtensor compare` (tools/compare_output.hpp).

#include "tools/compare_output.hpp"

#include "backends/units.hpp"
#include "tools/compare_eviction.hpp"
#include "tools/compare_verdict.hpp"
#include "traces/atomic_output_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <stdio.h>
#include <sys/stat.h>

#include <stdexcept>
#include <system_error>

namespace vtensor::tools {
namespace fs = std::filesystem;
namespace {

// The metrics of the table and of the ratios: key in the summary (as verdict_metrics(), which
// gives the label, the unit and which way is better), whether the '*' goes to the higher value,
// and the figure of a replay.
struct metric {
  const char* key;
  bool higher_better;
  double (*of)(const sim::replay_summary&);
};
const std::vector<metric> k_metrics = {
    {"prefix_hit_rate", true, [](const sim::replay_summary& s) { return s.hit_rate(); }},
    {"throughput_tokens_per_s", true, [](const sim::replay_summary& s) { return s.throughput_tokens_per_s(); }},
    {"ttft_p50_ms", false, [](const sim::replay_summary& s) { return s.ttft.p50; }},
    {"ttft_p99_ms", false, [](const sim::replay_summary& s) { return s.ttft.p99; }},
    {"tpot_p50_ms", false, [](const sim::replay_summary& s) { return s.tpot.p50; }},
    {"tpot_p99_ms", false, [](const sim::replay_summary& s) { return s.tpot.p99; }},
    {"preemptions", false, [](const sim::replay_summary& s) { return static_cast<double>(s.counters.preemptions); }},
    {"peak_physical_bytes", false,
     [](const sim::replay_summary& s) { return static_cast<double>(s.peak.memory.physical_bytes); }},
};

// The label and unit of metric `m` (verdict_metrics()).
const verdict_metric& described(const metric& m) {
  for (const verdict_metric& v : verdict_metrics()) {
    if (v.key == m.key) return v;
  }
  throw std::logic_error(fmt::format("compare: metric {} has no description", m.key));
}

double value_of(const metric& m, const point& p) { return m.of(p.result.summary); }

double safe_ratio(double a, double b) { return b == 0 ? 0.0 : a / b; }

// The points of cell `ci`, in arm order.
std::vector<const point*> points_in(const compare_grid& g, std::size_t ci) {
  std::vector<const point*> in;
  for (const point& p : g.points) {
    if (p.cell == ci) in.push_back(&p);
  }
  return in;
}

// The baseline arm's point among `in`; none when the baseline is not there.
const point* baseline_in(const experiment& x, const std::vector<const point*>& in) {
  const point* base = nullptr;
  for (const point* p : in) {
    if (x.arms[p->arm].name == x.baseline) base = p;
  }
  return base;
}

// Whether `v` is the best value of metric `m` in the cell `in`.
bool is_best(const metric& m, double v, const std::vector<const point*>& in) {
  for (const point* q : in) {
    const double w = value_of(m, *q);
    if (m.higher_better ? w > v : w < v) return false;
  }
  return true;
}

bool within_bound(const point& p, const cell& c) {
  return p.hit_rate() <= c.infinite_hit_rate && p.analysis.over_bound_requests == 0;
}

// ---- the table -------------------------------------------------------------------------------

// A metric's cell of the table: its value ('*': best) in a unit that keeps four digits or fewer,
// and its ratio to the baseline at three significant digits.
std::string table_value(const metric& m, const point& p, const std::vector<const point*>& in, const point* base) {
  const double v = value_of(m, p);
  const bool best = described(m).higher_better && is_best(m, v, in);  // peak memory: not judged
  const double b = base ? value_of(m, *base) : 0;
  const std::string ratio = b == 0 ? "(x -)" : fmt::format("(x{})", significant3(v / b));
  return fmt::format("{}{} {}", best ? "*" : "", quantity_text(v, described(m).unit), ratio);
}

// The bounds of a cell and each arm's misses by cause.
void print_bounds(std::ostream& out, const experiment& x, const cell& c, const std::vector<const point*>& in) {
  out << fmt::format("{:<14} infinite cache {:.4f}, offline (Belady, sequential) {:.4f}\n", "oracle",
                     c.infinite_hit_rate, c.offline_hit_rate);
  out << fmt::format(
      "{:<14} {:>9} {:>9} {:>12} | missed tokens {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "arm",
      "of inf", "of off", "<= infinite", "cold", "evicted", "granularity", "preempted", "in flight", "unpublished",
      "no cache", "total");
  for (const point* p : in) {
    const auto& m = p->analysis.misses;
    out << fmt::format(
        "{:<14} {:>9.4f} {:>9.4f} {:>12} | {:>13} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}\n",
        x.arms[p->arm].name, safe_ratio(p->hit_rate(), c.infinite_hit_rate),
        safe_ratio(p->hit_rate(), c.offline_hit_rate), within_bound(*p, c) ? "yes" : "NO (bug)", "", m.cold, m.evicted,
        m.granularity, m.preempted, m.in_flight, m.unpublished, m.no_cache, m.total);
  }
}

}  // namespace

void print_table(std::ostream& out, const experiment& x, const compare_grid& g,
                 const nlohmann::ordered_json& verdicts) {
  for (std::size_t ci = 0; ci < g.cells.size(); ++ci) {
    const cell& c = g.cells[ci];
    const std::vector<const point*> in = points_in(g, ci);
    const point* base = baseline_in(x, in);
    out << fmt::format("== {} (trace {})\n", c.id, x.traces[c.trace]);
    std::string head = fmt::format("{:<14}", "arm");
    for (const metric& m : k_metrics) head += fmt::format(" {:>22}", described(m).label);
    out << head << "\n";
    for (const point* p : in) {
      std::string row = fmt::format("{:<14}", x.arms[p->arm].name);
      for (const metric& m : k_metrics) row += fmt::format(" {:>22}", table_value(m, *p, in, base));
      out << row << "\n";
    }
    print_bounds(out, x, c, in);
    for (const auto& v : verdicts.at("items")) {
      if (v.at("cell") != c.id) continue;
      out << fmt::format("{:<14} against {}: {}\n", v.at("arm").get<std::string>(), x.baseline,
                         v.at("text").get<std::string>());
    }
    out << "\n";
  }
  out << "* best of the cell per judged metric; (xR) = value / baseline " << x.baseline
      << "'s; verdicts: a difference within " << significant3(verdicts.at("tie").get<double>() * 100)
      << "% is a tie (--tie), each run is one deterministic replay (no run-to-run spread); peak memory is not "
         "judged; misses by cause: docs/compare.md\n";
}

bool all_within_bound(const compare_grid& g) {
  for (const point& p : g.points) {
    if (p.analysis.over_bound_requests != 0) return false;
  }
  return true;
}

// ---- summary.json ------------------------------------------------------------------------------

namespace {

nlohmann::ordered_json histogram_json(const log_histogram& h) { return {{"edges", h.edges}, {"counts", h.counts}}; }

nlohmann::ordered_json misses_json(const miss_causes& m) {
  return {{"cold", m.cold},           {"evicted", m.evicted},     {"granularity", m.granularity},
          {"preempted", m.preempted}, {"in_flight", m.in_flight}, {"unpublished", m.unpublished},
          {"no_cache", m.no_cache},   {"total", m.total}};
}

// The shared settings of the summary (what every point's replica has in common).
nlohmann::ordered_json settings_json(const replay_options& o) {
  const sim::replay_config& c = o.config;
  nlohmann::ordered_json s;
  s["model"] = o.model.name;
  s["gpu"] = o.gpu.name;
  s["tp"] = o.model.tp;
  s["backend"] = "sim";
  add_replica_settings(s, c.replica, o.overhead_ms);
  s["sample_ms"] = o.sample_ms;
  s["max_requests"] = c.max_requests;
  s["seed"] = o.seed;
  s["kv_bytes_per_token_per_gpu"] = o.model.kv_bytes_per_token_per_gpu();
  s["calibration"] = o.policy.calibration_file;
  s["zero_latency"] = o.policy.zero_latency;
  return s;
}

nlohmann::ordered_json traces_json(const compare_traces& traces) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (std::size_t t = 0; t < traces.loaded.size(); ++t) {
    const traces::loaded_trace& trace = traces.loaded[t];
    std::uint64_t prompt = 0;
    for (const auto& r : trace.requests) prompt += r.input_tokens;
    j.push_back({{"index", t},
                 {"path", trace.path},
                 {"format", std::string(traces::to_string(trace.format))},
                 {"requests", trace.requests.size()},
                 {"prompt_tokens", prompt},
                 {"block_tokens", trace.block_tokens}});
  }
  return j;
}

nlohmann::ordered_json cell_json(const experiment& x, const cell& c) {
  return {{"id", c.id},
          {"memory", x.memory[c.memory]},
          {"memory_bytes", c.memory_bytes ? nlohmann::ordered_json(*c.memory_bytes) : nlohmann::ordered_json(nullptr)},
          {"time_scale", x.time_scale[c.time_scale]},
          {"kernel_factors", x.kernel_factors[c.kernel_factors]},
          {"trace", c.trace},
          {"bounds",
           {{"infinite_hit_rate", c.infinite_hit_rate},
            {"offline_hit_rate", c.offline_hit_rate},
            {"offline_model", "sequential, Belady on evictable leaves, capacity = budget in tokens"}}}};
}

// A point's ratios to the baseline and the metrics it is best at.
void add_ratios(nlohmann::ordered_json& e, const experiment& x, const compare_grid& g, const point& p) {
  const std::vector<const point*> in = points_in(g, p.cell);
  const point* base = baseline_in(x, in);
  nlohmann::ordered_json ratios = nlohmann::ordered_json::object();
  nlohmann::ordered_json best = nlohmann::ordered_json::array();
  for (const metric& m : k_metrics) {
    const double value = value_of(m, p);
    const double b = base ? value_of(m, *base) : 0;
    ratios[m.key] = b == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(value / b);
    if (is_best(m, value, in)) best.push_back(m.key);
  }
  e["ratios"] = ratios;
  e["best"] = best;
}

nlohmann::ordered_json point_json(const experiment& x, const compare_grid& g, const point& p,
                                  const compare_run_facts& facts) {
  static const std::vector<double> q = [] {
    std::vector<double> v(101);
    for (std::size_t k = 0; k <= 100; ++k) v[k] = static_cast<double>(k) / 100.0;
    return v;
  }();
  const cell& c = g.cells[p.cell];
  nlohmann::ordered_json e;
  e["id"] = p.id;
  e["arm"] = x.arms[p.arm].name;
  e["cell"] = c.id;
  e["summary"] = p.rendered ? p.rendered->result : replay_result_json(p.result);
  if (facts.with_wall) e["summary"]["wall_seconds"] = p.result.summary.wall_seconds;
  if (p.rendered && !p.rendered->cluster.is_null()) {
    e["summary"]["cluster"] = p.rendered->cluster;
  } else if (p.cluster) {
    e["summary"]["cluster"] = sim::cluster_json(*p.cluster);
  }
  e["hit_rate"] = p.hit_rate();
  e["of_infinite"] = safe_ratio(p.hit_rate(), c.infinite_hit_rate);
  e["of_offline"] = safe_ratio(p.hit_rate(), c.offline_hit_rate);
  e["within_infinite_bound"] = within_bound(p, c);
  e["misses"] = misses_json(p.analysis.misses);
  e["latency_quantiles"] = {{"q", q}, {"ttft_ms", p.analysis.ttft_ms}, {"tpot_ms", p.analysis.tpot_ms}};
  e["histograms"] = {{"reuse_distance_s", histogram_json(p.analysis.reuse_distance)},
                     {"cached_lifetime_s", histogram_json(p.analysis.cached_lifetime)}};
  add_ratios(e, x, g, p);
  e["timeseries"] =
      facts.timeseries ? nlohmann::ordered_json("timeseries/" + p.id + ".csv") : nlohmann::ordered_json(nullptr);
  return e;
}

}  // namespace

nlohmann::ordered_json summary_json(const experiment& x, const compare_grid& g, const compare_traces& traces,
                                    const compare_run_facts& facts) {
  nlohmann::ordered_json j;
  j["format"] = "vtensor-compare";
  j["version"] = 1;
  j["command"] = facts.command;
  j["baseline"] = x.baseline;
  j["traces"] = traces_json(traces);
  j["settings"] = settings_json(g.points.front().options);
  std::vector<nlohmann::ordered_json> trace_axis;
  for (std::size_t t = 0; t < x.traces.size(); ++t) trace_axis.emplace_back(t);
  j["axes"] = {
      {"memory", x.memory}, {"time_scale", x.time_scale}, {"kernel_factors", x.kernel_factors}, {"trace", trace_axis}};
  j["arms"] = nlohmann::ordered_json::array();
  for (const arm& a : x.arms) j["arms"].push_back({{"name", a.name}, {"policy", a.policy}, {"options", a.options}});
  j["cells"] = nlohmann::ordered_json::array();
  for (const cell& c : g.cells) j["cells"].push_back(cell_json(x, c));
  j["points"] = nlohmann::ordered_json::array();
  for (const point& p : g.points) j["points"].push_back(point_json(x, g, p, facts));
  // Judged from the points as written, as `vtensor report` judges a saved folder.
  const nlohmann::json written = nlohmann::json::parse(j.dump());
  j["verdicts"] = verdicts_json(judge(written, facts.tie), facts.tie);
  // Only when some arms differ only in their eviction order: other comparisons' files are unchanged.
  if (const auto groups = eviction_groups(written); !groups.empty()) j["eviction"] = eviction_json(groups);
  if (facts.with_wall) {  // how the run went, not what it computed: left out by --no-wall
    j["wall_seconds"] = facts.wall_seconds;
    j["jobs"] = facts.jobs;
  }
  return j;
}

// ---- arms.csv ----------------------------------------------------------------------------------

namespace {

std::string csv_number(double v) { return fmt::format("{}", v); }

std::string csv_field(const std::string& f) {
  if (f.find_first_of(",\"\n") == std::string::npos) return f;
  std::string q = "\"";
  for (const char ch : f) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

// The row of point `p` (the columns of arms_csv()'s header).
std::vector<std::string> csv_row(const experiment& x, const compare_grid& g, const point& p) {
  const cell& c = g.cells[p.cell];
  const sim::replay_summary& s = p.result.summary;
  const sim::memory_breakdown_means& mb = s.mean_breakdown;
  const point* base = baseline_in(x, points_in(g, p.cell));
  const auto& m = p.analysis.misses;
  return {
      p.id,
      x.arms[p.arm].name,
      x.arms[p.arm].policy,
      x.memory[c.memory],
      x.time_scale_text[c.time_scale],
      x.kernel_factors[c.kernel_factors],
      std::to_string(c.trace),
      csv_number(p.hit_rate()),
      csv_number(c.infinite_hit_rate),
      csv_number(c.offline_hit_rate),
      csv_number(safe_ratio(p.hit_rate(), c.infinite_hit_rate)),
      csv_number(safe_ratio(p.hit_rate(), c.offline_hit_rate)),
      csv_number(s.throughput_tokens_per_s()),
      csv_number(s.ttft.p50),
      csv_number(s.ttft.p99),
      csv_number(s.tpot.p50),
      csv_number(s.tpot.p99),
      std::to_string(s.counters.preemptions),
      std::to_string(s.peak.memory.physical_bytes),
      csv_number(mb.used),
      csv_number(mb.internal),
      csv_number(mb.reserved_idle),
      csv_number(mb.external),
      csv_number(mb.cached),
      csv_number(mb.free),
      csv_number(s.vmm_critical_time_us()),
      std::to_string(m.cold),
      std::to_string(m.evicted),
      std::to_string(m.granularity),
      std::to_string(m.preempted),
      std::to_string(m.in_flight),
      std::to_string(m.unpublished),
      std::to_string(m.no_cache),
      csv_number(safe_ratio(s.throughput_tokens_per_s(), base ? base->result.summary.throughput_tokens_per_s() : 0)),
      csv_number(safe_ratio(p.hit_rate(), base ? base->hit_rate() : 0)),
  };
}

}  // namespace

std::string arms_csv(const experiment& x, const compare_grid& g) {
  std::string out =
      "id,arm,policy,memory,time_scale,kernel_factors,trace,hit_rate,infinite_hit_rate,offline_hit_rate,of_infinite,"
      "of_offline,throughput_tokens_per_s,ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,preemptions,"
      "peak_physical_bytes,mean_used_bytes,mean_internal_bytes,mean_reserved_idle_bytes,mean_external_bytes,"
      "mean_cached_bytes,mean_free_bytes,vmm_critical_time_us,misses_cold,misses_evicted,misses_granularity,"
      "misses_preempted,misses_in_flight,misses_unpublished,misses_no_cache,throughput_ratio,hit_rate_ratio\n";
  for (const point& p : g.points) {
    std::vector<std::string> row = csv_row(x, g, p);
    for (std::string& f : row) f = csv_field(f);
    out += fmt::format("{}\n", fmt::join(row, ","));
  }
  return out;
}

// ---- the folder --------------------------------------------------------------------------------

output_folder::output_folder(const std::string& target) : target_(fs::absolute(target)) {
  if (target == "-") throw usage_error("--out: '-' is not a folder (use --json - for summary.json on standard output)");
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

output_folder::~output_folder() {
  std::error_code ignored;
  if (!temp_.empty()) fs::remove_all(temp_, ignored);
}

void output_folder::commit() {
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

void write_file(const fs::path& path, const std::string& bytes) {
  traces::atomic_output_file f(path.string());
  f.write(bytes);
  f.commit();
}

}  // namespace vtensor::tools
