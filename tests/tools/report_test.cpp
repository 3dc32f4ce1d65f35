// The report of a comparison (`vtensor report DIR`, tools/report_render.hpp): rendered from the
// fixture tests/data/compare-fixture/ (a hand-made vtensor-compare folder around real replays), every
// figure exists as a valid PNG and SVG, and its data (NAME.json) holds the fixture's arms and
// series; bad folders exit 2, a missing interpreter or script exits 1, a failed render writes
// nothing. Needs Debian's python3-matplotlib (tools/install-deps.sh installs it): without it the
// rendering cases fail, as the report is part of what the suite guards.

#include "tools/report_render.hpp"

#include "tools/compare_verdict.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/cli_run.hpp"
#include "tests/support/eviction_fixture.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace vtensor::tools;

namespace {

const std::array<std::string, 9> k_figures{"memory_over_time",       "memory_breakdown", "hit_rate_vs_memory",
                                           "misses_by_cause",        "ttft_cdf",         "tpot_cdf",
                                           "throughput_preemptions", "reuse_distance",   "cached_lifetime"};
const std::vector<std::string> k_arms{"vtensor", "paged", "radix"};
const std::string k_cell8 = "memory=8GiB,time_scale=1,kernel_factors=modern,trace=0";
const std::string k_cell32 = "memory=32GiB,time_scale=1,kernel_factors=modern,trace=0";

/// A copy of the fixture (or an empty folder) in a scratch folder, removed at the end.
struct scratch_dir {
  fs::path root;
  fs::path dir;
  explicit scratch_dir(const std::string& tag, bool with_fixture = true) {
    static int serial = 0;
    root = fs::temp_directory_path() /
           ("vtensor-report-test-" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(serial++));
    fs::remove_all(root);
    dir = root / "cmp";
    fs::create_directories(root);
    if (with_fixture) {
      fs::copy(fs::path(VTENSOR_SOURCE_DIR) / "tests" / "data" / "compare-fixture", dir, fs::copy_options::recursive);
    } else {
      fs::create_directories(dir);
    }
  }
  ~scratch_dir() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

json read_json(const fs::path& path) { return json::parse(slurp(path)); }

/// Renders `dir`; the exit code, with what was printed in the test's log on failure.
int render(const fs::path& dir, const report_options& options = {}) {
  std::ostringstream out;
  std::ostringstream err;
  const int code = render_report(dir, {out, err}, options);
  INFO("stdout: " << out.str());
  INFO("stderr: " << err.str());
  CHECK(code == exit_success);
  return code;
}

/// Big-endian 32-bit value at `at`.
std::uint32_t be32(const std::string& s, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

void check_png(const fs::path& path) {
  CAPTURE(path.string());
  const std::string png = slurp(path);
  REQUIRE(png.size() > 33);
  CHECK(png.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) == 0);
  CHECK(png.compare(12, 4, "IHDR") == 0);  // the first chunk
  CHECK(be32(png, 16) > 0);                // width
  CHECK(be32(png, 20) > 0);                // height
  CHECK(png.compare(png.size() - 8, 4, "IEND") == 0);
}

void check_svg(const fs::path& path) {
  CAPTURE(path.string());
  boost::property_tree::ptree tree;
  REQUIRE_NOTHROW(boost::property_tree::read_xml(path.string(), tree));
  REQUIRE(tree.size() == 1);
  CHECK(tree.begin()->first == "svg");
}

std::vector<std::string> arms_of(const json& series) {
  std::vector<std::string> arms;
  for (const json& s : series) arms.push_back(s.at("arm").get<std::string>());
  return arms;
}

/// The point of `arm` at `cell` in summary.json.
const json& point_of(const json& summary, const std::string& arm, const std::string& cell) {
  for (const json& p : summary.at("points")) {
    if (p.at("arm") == arm && p.at("cell") == cell) return p;
  }
  FAIL("no point " << arm << " at " << cell);
  return summary;  // not reached
}

/// The first data row of a time-series CSV: column name to value.
std::map<std::string, double> first_row(const fs::path& csv) {
  std::ifstream in(csv);
  std::string header;
  std::string row;
  std::getline(in, header);
  std::getline(in, row);
  std::map<std::string, double> values;
  std::istringstream hs(header);
  std::istringstream rs(row);
  std::string name;
  std::string value;
  while (std::getline(hs, name, ',') && std::getline(rs, value, ',')) values[name] = std::stod(value);
  return values;
}

}  // namespace

TEST_SUITE("report") {
  TEST_CASE("report: the fixture renders every figure as PNG and SVG with its data - and the HTML") {
    const scratch_dir s("render");
    REQUIRE(render(s.dir) == exit_success);
    const json summary = read_json(s.dir / "summary.json");
    for (const std::string& name : k_figures) {
      CAPTURE(name);
      check_png(s.dir / "figures" / (name + ".png"));
      check_svg(s.dir / "figures" / (name + ".svg"));
      REQUIRE_NOTHROW((void)read_json(s.dir / "figures" / (name + ".json")));
    }
    const auto figure = [&](const std::string& name) { return read_json(s.dir / "figures" / (name + ".json")); };

    // One-cell figures are drawn at the first cell by default, one series per arm in arm order.
    const json mot = figure("memory_over_time");
    CHECK(mot.at("cell") == k_cell8);
    REQUIRE(arms_of(mot.at("series")) == k_arms);
    for (const json& series : mot.at("series")) {
      CAPTURE(series.at("arm").get<std::string>());
      const std::size_t n = series.at("time_s").size();
      CHECK(n > 10);
      for (const char* column : {"physical_bytes", "used_bytes", "cached_bytes"}) CHECK(series.at(column).size() == n);
      // The series starts with the CSV's first sample (the fixture's series are short: not reduced).
      const auto row =
          first_row(s.dir / point_of(summary, series.at("arm"), k_cell8).at("timeseries").get<std::string>());
      CHECK(series.at("time_s")[0].get<double>() == doctest::Approx(row.at("time_s")));
      CHECK(series.at("physical_bytes")[0].get<double>() == row.at("physical_bytes"));
      CHECK(series.at("used_bytes")[0].get<double>() == row.at("used_bytes"));
      CHECK(series.at("cached_bytes")[0].get<double>() == row.at("cached_bytes"));
    }

    const json breakdown = figure("memory_breakdown");
    CHECK(breakdown.at("cell") == k_cell8);
    REQUIRE(breakdown.at("arms") == json(k_arms));
    for (const char* part : {"used", "internal", "reserved_idle", "external", "cached", "free"}) {
      CAPTURE(part);
      REQUIRE(breakdown.at("parts").at(part).size() == k_arms.size());
      for (std::size_t i = 0; i < k_arms.size(); ++i) {
        CHECK(breakdown["parts"][part][i] ==
              point_of(summary, k_arms[i], k_cell8).at("summary").at("memory_breakdown").at("mean_bytes").at(part));
      }
    }

    const json hit = figure("hit_rate_vs_memory");
    REQUIRE(arms_of(hit.at("series")) == k_arms);
    for (const json& series : hit.at("series")) {
      CAPTURE(series.at("arm").get<std::string>());
      REQUIRE(series.at("cells") == json({k_cell8, k_cell32}));  // memory ascending
      CHECK(series.at("memory_bytes") == json({8ULL << 30, 32ULL << 30}));
      CHECK(series.at("hit_rate")[0] == point_of(summary, series.at("arm"), k_cell8).at("hit_rate"));
      CHECK(series.at("hit_rate")[1] == point_of(summary, series.at("arm"), k_cell32).at("hit_rate"));
    }
    for (const char* kind : {"infinite", "offline"}) {
      CAPTURE(kind);
      REQUIRE(hit.at("bounds").at(kind).size() == 2);
      for (std::size_t i = 0; i < 2; ++i) {
        const json& cell = summary.at("cells")[i];
        CHECK(hit["bounds"][kind][i].at("cell") == cell.at("id"));
        CHECK(hit["bounds"][kind][i].at("hit_rate") == cell.at("bounds").at(std::string(kind) + "_hit_rate"));
      }
    }

    const json misses = figure("misses_by_cause");
    REQUIRE(misses.at("points").size() == 6);
    for (std::size_t i = 0; i < 6; ++i) {
      CAPTURE(i);
      const json& p = summary.at("points")[i];
      CHECK(misses["points"][i] == p.at("id"));
      std::uint64_t sum = 0;
      for (const char* cause : {"cold", "evicted", "granularity", "preempted", "in_flight", "unpublished"}) {
        CHECK(misses.at("causes").at(cause)[i] == p.at("misses").at(cause));
        sum += misses["causes"][cause][i].get<std::uint64_t>();
      }
      CHECK(sum == misses.at("total")[i].get<std::uint64_t>());
    }

    for (const auto& [name, key] : {std::pair{"ttft_cdf", "ttft_ms"}, std::pair{"tpot_cdf", "tpot_ms"}}) {
      CAPTURE(name);
      const json cdf = figure(name);
      CHECK(cdf.at("cell") == k_cell8);
      REQUIRE(arms_of(cdf.at("series")) == k_arms);
      for (const json& series : cdf.at("series")) {
        const json& lq = point_of(summary, series.at("arm"), k_cell8).at("latency_quantiles");
        CHECK(series.at("q").size() == 101);
        CHECK(series.at("q") == lq.at("q"));
        CHECK(series.at("ms") == lq.at(key));
      }
    }

    const json tp = figure("throughput_preemptions");
    REQUIRE(tp.at("points").size() == 6);
    for (std::size_t i = 0; i < 6; ++i) {
      const json& p = summary.at("points")[i];
      CHECK(tp["points"][i] == p.at("id"));
      CHECK(tp.at("throughput_tokens_per_s")[i] == p.at("summary").at("throughput_tokens_per_s"));
      CHECK(tp.at("preemptions")[i] == p.at("summary").at("preemptions"));
    }

    for (const auto& [name, key] :
         {std::pair{"reuse_distance", "reuse_distance_s"}, std::pair{"cached_lifetime", "cached_lifetime_s"}}) {
      CAPTURE(name);
      const json h = figure(name);
      CHECK(h.at("cell") == k_cell8);
      REQUIRE(arms_of(h.at("series")) == k_arms);
      for (const json& series : h.at("series")) {
        const json& want = point_of(summary, series.at("arm"), k_cell8).at("histograms").at(key);
        CHECK(series.at("edges") == want.at("edges"));
        CHECK(series.at("counts") == want.at("counts"));
        CHECK(series.at("edges").size() == series.at("counts").size() + 1);
      }
    }

    // The HTML: names the command, opens from disk (relative images, no script, nothing fetched),
    // says per arm that its hit rate is within the infinite bound, and says who loses to the baseline.
    const std::string html = slurp(s.dir / "report.html");
    CHECK(html.find("make_fixture.py (a hand-made fixture") != std::string::npos);  // summary.json "command"
    CHECK(html.find("<script") == std::string::npos);
    CHECK(html.find("src=\"http") == std::string::npos);
    CHECK(html.find("href=\"http") == std::string::npos);
    for (const std::string& name : k_figures) {
      CHECK(html.find("src=\"figures/" + name + ".png\"") != std::string::npos);
    }
    for (const std::string& arm : k_arms) {
      CAPTURE(arm);
      CHECK(html.find(arm + ": hit rate at most the infinite bound in every cell (2 of 2)") != std::string::npos);
    }
    // The verdicts: vtensor's wording (tools/compare_verdict.hpp), judged from summary.json at 1%.
    // In the fixture, paged at 8 GiB hits 2% more than vtensor, preempts ten times as often, has
    // a 19% worse TPOT p99, and a throughput 0.6% below: a tie, not a loss.
    for (const verdict& v : judge(summary, k_default_tie)) {
      CAPTURE(v.arm);
      CAPTURE(v.cell);
      CHECK(html.find(verdict_text(v)) != std::string::npos);
    }
    CHECK(html.find("<b>paged</b> against vtensor: wins: hit rate 2.14% higher (1.02x); loses: preemptions 10.0x "
                    "higher, TPOT p99 19.1% higher (1.19x), TPOT p50 6.66% higher (1.07x); tie: throughput, TTFT "
                    "p50, TTFT p99") != std::string::npos);
    CHECK(html.find("differences within 1.00%") != std::string::npos);
    CHECK(html.find("0.999") == std::string::npos);  // no ratio at six digits
    CHECK(html.find("NO:") == std::string::npos);    // no arm above the bound
    // Nothing is left of the temporary folder.
    for (const auto& entry : fs::directory_iterator(s.dir))
      CHECK(entry.path().filename().string().rfind(".report-", 0) != 0);
    // No arms differ only in their eviction order: no eviction section, no eviction figure.
    CHECK(html.find("Eviction orders") == std::string::npos);
    CHECK_FALSE(fs::exists(s.dir / "figures" / "eviction_hit_rate_vs_memory.png"));
  }

  TEST_CASE("report: arms that differ only in --eviction get the eviction figure and table") {
    const scratch_dir s("eviction");
    vtensor::testing::add_eviction_arms(s.dir);
    REQUIRE(render(s.dir) == exit_success);
    const std::string name = "eviction_hit_rate_vs_memory";
    check_png(s.dir / "figures" / (name + ".png"));
    check_svg(s.dir / "figures" / (name + ".svg"));
    const json data = read_json(s.dir / "figures" / (name + ".json"));
    REQUIRE(data.at("panels").size() == 1);  // one group, one trace, no other axis
    const json& panel = data.at("panels")[0];
    CHECK(panel.at("policy") == "paged");
    CHECK(panel.at("floor") == "paged");
    CHECK(panel.at("ceiling") == "paged-offline");
    CHECK(panel.at("ceiling_kind") == "offline_arm");
    CHECK(panel.at("cells") == json({k_cell8, k_cell32}));  // by budget
    REQUIRE(arms_of(panel.at("series")) == std::vector<std::string>{"paged", "paged-fifo", "paged-offline"});
    for (std::size_t c = 0; c < 2; ++c) {
      CHECK(panel.at("series")[0].at("gap_closed")[c] == 0.0);
      CHECK(panel.at("series")[1].at("gap_closed")[c].get<double>() == doctest::Approx(-0.5));  // -0.1 / 0.2
      CHECK(panel.at("series")[2].at("gap_closed")[c] == 1.0);
    }
    CHECK(panel.at("offline_bound").size() == 2);
    CHECK(panel.at("infinite_bound").size() == 2);

    const std::string html = slurp(s.dir / "report.html");
    CHECK(html.find("<h2 id=\"eviction\">Eviction orders</h2>") != std::string::npos);
    CHECK(html.find("<img src=\"figures/" + name + ".png\"") != std::string::npos);
    CHECK(html.find("-0.500") != std::string::npos);
    CHECK(html.find("the group's offline arm <b>paged-offline</b>") != std::string::npos);
  }

  TEST_CASE("report: rendering again gives byte-identical files - and --cell moves the one-cell figures") {
    const scratch_dir s("again");
    REQUIRE(render(s.dir) == exit_success);
    std::map<std::string, std::string> first;
    for (const auto& entry : fs::recursive_directory_iterator(s.dir)) {
      if (entry.is_regular_file()) first[fs::relative(entry.path(), s.dir).string()] = slurp(entry.path());
    }
    REQUIRE(render(s.dir) == exit_success);
    for (const auto& [name, bytes] : first) {
      CAPTURE(name);
      CHECK(slurp(s.dir / name) == bytes);
    }

    // The command, with --cell: prints where the report is.
    const auto r = vtensor::testing::run_cli({"report", s.dir.string(), "--cell", k_cell32});
    INFO("stderr: " << r.err);
    REQUIRE(r.code == exit_success);
    CHECK(r.out == "report: " + (s.dir / "report.html").string() + "\n");
    CHECK(read_json(s.dir / "figures" / "memory_over_time.json").at("cell") == k_cell32);
    CHECK(read_json(s.dir / "figures" / "ttft_cdf.json").at("cell") == k_cell32);
  }

  TEST_CASE("report: --tie widens the ties of the verdicts") {
    const scratch_dir s("tie-wide");
    const auto r = vtensor::testing::run_cli({"report", s.dir.string(), "--tie", "25%"});
    INFO(r.err);
    REQUIRE(r.code == exit_success);
    const std::string html = slurp(s.dir / "report.html");
    CHECK(html.find("differences within 25.0%") != std::string::npos);
    CHECK(html.find("<b>paged</b> against vtensor: loses: preemptions 10.0x higher; tie: hit rate, throughput, TTFT "
                    "p50, TTFT p99, TPOT p50, TPOT p99") != std::string::npos);
  }

  TEST_CASE("report: a folder without a vtensor-compare summary.json exits 2 naming the file") {
    SUBCASE("no summary.json") {
      const scratch_dir s("none", false);
      const auto r = vtensor::testing::run_cli({"report", s.dir.string()});
      CHECK(r.code == exit_usage);
      CHECK(r.err.find((s.dir / "summary.json").string()) != std::string::npos);
      CHECK(r.err.find("not found") != std::string::npos);
    }
    SUBCASE("no folder") {
      const auto r = vtensor::testing::run_cli({"report", "/nonexistent/vtensor-report-dir"});
      CHECK(r.code == exit_usage);
      CHECK(r.err.find("/nonexistent/vtensor-report-dir: not a folder") != std::string::npos);
    }
    SUBCASE("not JSON") {
      const scratch_dir s("notjson", false);
      std::ofstream(s.dir / "summary.json") << "{\"format\": \"vtensor-compare\", ";
      const auto r = vtensor::testing::run_cli({"report", s.dir.string()});
      CHECK(r.code == exit_usage);
      CHECK(r.err.find("summary.json: not JSON") != std::string::npos);
    }
    SUBCASE("another format or version") {
      const scratch_dir s("format", false);
      for (const char* text : {R"({"format": "vtensor-compare", "version": 2})", R"({"requests": 3})", "[1, 2]"}) {
        CAPTURE(text);
        std::ofstream(s.dir / "summary.json") << text;
        const auto r = vtensor::testing::run_cli({"report", s.dir.string()});
        CHECK(r.code == exit_usage);
        CHECK(r.err.find("summary.json: not a vtensor-compare version 1 file") != std::string::npos);
      }
    }
    SUBCASE("an unknown --cell") {
      const scratch_dir s("cell");
      const auto r = vtensor::testing::run_cli({"report", s.dir.string(), "--cell", "memory=1GiB"});
      CHECK(r.code == exit_usage);
      CHECK(r.err.find("--cell memory=1GiB") != std::string::npos);
      CHECK(r.err.find(k_cell32) != std::string::npos);  // the message lists the cells
    }
    SUBCASE("a bad --tie") {
      const scratch_dir s("tie");
      for (const char* bad : {"x", "1", "-0.01", "200%"}) {
        CAPTURE(bad);
        const auto r = vtensor::testing::run_cli({"report", s.dir.string(), "--tie", bad});
        CHECK(r.code == exit_usage);
        CHECK(r.err.find(std::string("--tie ") + bad + ": not a tolerance") != std::string::npos);
      }
      CHECK(!fs::exists(s.dir / "report.html"));
    }
    SUBCASE("no DIR") {
      const auto r = vtensor::testing::run_cli({"report"});
      CHECK(r.code == exit_usage);
      CHECK(r.err.find("missing DIR") != std::string::npos);
    }
  }

  TEST_CASE("report: content the script cannot draw exits 2 and leaves the folder as it was") {
    const scratch_dir s("partial");
    // A report from before, and a point whose latency quantiles are broken: the script fails after
    // drawing the first four figures.
    fs::create_directories(s.dir / "figures");
    std::ofstream(s.dir / "figures" / "old.png") << "old figure";
    std::ofstream(s.dir / "report.html") << "old report";
    json summary = read_json(s.dir / "summary.json");
    summary["points"][1]["latency_quantiles"]["ttft_ms"] = json::array({1.0});
    std::ofstream(s.dir / "summary.json") << summary.dump();

    std::ostringstream out;
    std::ostringstream err;
    CHECK(render_report(s.dir, {out, err}) == exit_usage);
    CHECK(err.str().find(summary["points"][1]["id"].get<std::string>()) != std::string::npos);
    CHECK(err.str().find("latency_quantiles") != std::string::npos);
    CHECK(slurp(s.dir / "report.html") == "old report");
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(s.dir / "figures")) names.insert(entry.path().filename().string());
    CHECK(names == std::set<std::string>{"old.png"});
    for (const auto& entry : fs::directory_iterator(s.dir))
      CHECK(entry.path().filename().string().rfind(".report-", 0) != 0);
  }

  TEST_CASE("report: no Python with matplotlib or no script exits 1 and writes nothing") {
    const scratch_dir s("env");
    report_environment env = default_report_environment();
    SUBCASE("no interpreter") {
      env.pythons = {"/nonexistent/python3", "/bin/false"};  // missing, and one that cannot import
      std::ostringstream out;
      std::ostringstream err;
      CHECK(render_report(s.dir, {out, err}, {}, env) == exit_failure);
      CHECK(err.str().find("no Python with matplotlib") != std::string::npos);
      CHECK(err.str().find("/nonexistent/python3: No such file or directory") != std::string::npos);
      CHECK(err.str().find("/bin/false") != std::string::npos);
    }
    SUBCASE("no script") {
      env.scripts = {s.root / "share" / "vtensor" / "compare_report.py", s.root / "tools" / "compare_report.py"};
      std::ostringstream out;
      std::ostringstream err;
      CHECK(render_report(s.dir, {out, err}, {}, env) == exit_failure);
      CHECK(err.str().find("compare_report.py is missing") != std::string::npos);
      CHECK(err.str().find((s.root / "tools" / "compare_report.py").string()) != std::string::npos);
    }
    SUBCASE("the script fails") {
      const fs::path failing = s.root / "failing.py";
      std::ofstream(failing) << "import sys\nprint('broken on purpose', file=sys.stderr)\nsys.exit(3)\n";
      env.scripts = {failing};
      std::ostringstream out;
      std::ostringstream err;
      CHECK(render_report(s.dir, {out, err}, {}, env) == exit_failure);
      CHECK(err.str().find("broken on purpose") != std::string::npos);  // what it printed is passed on
      CHECK(err.str().find("failed (exit status 3)") != std::string::npos);
    }
    CHECK_FALSE(fs::exists(s.dir / "report.html"));
    CHECK_FALSE(fs::exists(s.dir / "figures"));
  }

  TEST_CASE("report: the script is looked for in the installed share/ first - then the source trees - then the cwd") {
    const auto paths = report_script_paths("/p/bin", "/src", "/cwd");
    REQUIRE(paths.size() == 4);
    CHECK(paths[0] == fs::path("/p/share/vtensor/compare_report.py"));
    CHECK(paths[1] == fs::path("/src/tools/compare_report.py"));
    CHECK(paths[2] == fs::path("/tools/compare_report.py"));  // <exe dir>/../../tools
    CHECK(paths[3] == fs::path("/cwd/tools/compare_report.py"));
    // The default environment finds this source tree's script, and tries Debian's Python first.
    const report_environment env = default_report_environment();
    CHECK(std::find(env.scripts.begin(), env.scripts.end(),
                    (fs::path(VTENSOR_SOURCE_DIR) / "tools" / "compare_report.py").lexically_normal()) !=
          env.scripts.end());
    REQUIRE(env.pythons.size() == 2);
    CHECK(env.pythons[0] == "/usr/bin/python3");
    CHECK(env.pythons[1] == "python3");
  }
}
