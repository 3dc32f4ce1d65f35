// `vtensor compare`: parsing, bad arms and experiment files, results independent of --jobs, the
// bounds beside the arms, miss causes that add up, and the output folder.

#include "tests/support/cli_run.hpp"
#include "tests/support/scratch_dir.hpp"
#include "tools/cli.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

using vtensor::testing::run_cli;

std::string small_trace() { return VTENSOR_SOURCE_DIR "/traces/data/mooncake_conversation_excerpt.jsonl"; }

fs::path temp_dir(const std::string& name) {
  const fs::path dir = vtensor::testing::scratch_dir("compare");
  fs::create_directories(dir);
  return dir / name;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Two arms, two budgets, 120 requests of the bundled excerpt: small enough for a unit test,
// large enough that the 2 GiB budget evicts.
std::vector<std::string> small_compare(std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "compare",  small_trace(), "--arm",    "vt=vtensor",     "--arm",          "paged=paged --block-tokens 32",
      "--arm",    "radix=radix", "--memory", "2GiB,unlimited", "--max-requests", "120",
      "--no-wall"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

TEST_CASE("compare: results are byte-identical whatever --jobs is") {
  const auto one = run_cli(small_compare({"--jobs", "1", "--json", "-"}));
  REQUIRE_MESSAGE(one.code == 0, one.err);
  const auto three = run_cli(small_compare({"--jobs", "3", "--json", "-"}));
  REQUIRE_MESSAGE(three.code == 0, three.err);
  // Byte for byte: with --no-wall the command leaves out the --jobs typed too.
  CHECK(one.out == three.out);
  const auto j = nlohmann::json::parse(one.out);
  CHECK(j["command"].get<std::string>().find("--jobs") == std::string::npos);
  // Without --no-wall the command keeps it.
  auto wall = small_compare({"--jobs", "2", "--json", "-"});
  std::erase(wall, std::string("--no-wall"));
  const auto w = run_cli(wall);
  REQUIRE_MESSAGE(w.code == 0, w.err);
  CHECK(nlohmann::json::parse(w.out)["command"].get<std::string>().find("--jobs 2") != std::string::npos);
  CHECK(one.err == three.err);  // the table, on standard error since --json is '-'

  CHECK(j["points"].size() == 6);
  CHECK(j["cells"].size() == 2);
}

TEST_CASE("compare: bounds beside the arms, every hit rate within the infinite bound, misses add up") {
  const auto r = run_cli(small_compare({"--jobs", "2", "--json", "-"}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["format"] == "vtensor-compare");
  CHECK(j["baseline"] == "vt");
  for (const auto& c : j["cells"]) {
    const double inf = c["bounds"]["infinite_hit_rate"].get<double>();
    const double off = c["bounds"]["offline_hit_rate"].get<double>();
    CHECK(inf > 0);
    CHECK(off <= inf);
    if (c["memory"] == "unlimited") CHECK(off == inf);
  }
  for (const auto& p : j["points"]) {
    CAPTURE(p["id"].get<std::string>());
    const auto& m = p["misses"];
    const std::uint64_t sum = m["cold"].get<std::uint64_t>() + m["evicted"].get<std::uint64_t>() +
                              m["granularity"].get<std::uint64_t>() + m["preempted"].get<std::uint64_t>() +
                              m["in_flight"].get<std::uint64_t>() + m["unpublished"].get<std::uint64_t>() +
                              m["no_cache"].get<std::uint64_t>();
    CHECK(sum == m["total"].get<std::uint64_t>());
    const auto& s = p["summary"];
    CHECK(m["total"].get<std::uint64_t>() == s["prompt_tokens"].get<std::uint64_t>() -
                                                 s["prefix_hit_tokens"].get<std::uint64_t>() +
                                                 s["recomputed_tokens"].get<std::uint64_t>());
    CHECK(p["within_infinite_bound"] == true);
    CHECK(p["of_infinite"].get<double>() <= 1.0);
    CHECK(p["latency_quantiles"]["ttft_ms"].size() == 101);
    CHECK(p["latency_quantiles"]["tpot_ms"].size() == 101);
    const auto& h = p["histograms"]["reuse_distance_s"];
    CHECK(h["edges"].size() == h["counts"].size() + 1);
    std::uint64_t reuse = 0;
    for (const auto& n : h["counts"]) reuse += n.get<std::uint64_t>();
    CHECK(reuse <= s["prefix_hit_tokens"].get<std::uint64_t>());
  }
  // vtensor shares at finish only: its misses include ones the others never have.
  CHECK(r.err.find("oracle") != std::string::npos);
  CHECK(r.err.find("<= infinite") != std::string::npos);
  // Three policies, no arms that differ only in their eviction order: no eviction analysis.
  CHECK_FALSE(j.contains("eviction"));
  CHECK(r.err.find("eviction: share") == std::string::npos);
}

// Three paged arms that differ only in --eviction (docs/compare.md, "Eviction orders"), on 300
// requests of a synthetic multi-turn trace (shared system prompts, growing conversations: reuse
// that eviction decides), at a budget where the offline order beats LRU and at unlimited. The
// bundled excerpt reuses too little for the orders to differ.
TEST_CASE("compare: arms that differ only in --eviction get the share of the LRU-to-offline gap each closes") {
  const fs::path trace = temp_dir("eviction-trace.jsonl");
  const auto made = run_cli({"gen-trace", "--out", trace.string(), "--requests", "300", "--seed", "1"});
  REQUIRE_MESSAGE(made.code == 0, made.err);
  const auto r = run_cli({"compare", trace.string(), "--arm", "p-lru=paged", "--arm", "p-fifo=paged --eviction fifo",
                          "--arm", "p-off=paged --eviction offline", "--memory", "4GiB,unlimited", "--no-wall",
                          "--jobs", "2", "--json", "-"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j.contains("eviction"));
  REQUIRE(j["eviction"].size() == 1);
  const auto& g = j["eviction"][0];
  CHECK(g["policy"] == "paged");
  CHECK(g["floor"] == "p-lru");
  CHECK(g["ceiling"] == "p-off");
  CHECK(g["ceiling_kind"] == "offline_arm");
  CHECK(g["arms"] == nlohmann::json::parse(R"([{"arm": "p-lru", "order": "lru"}, {"arm": "p-fifo", "order": "fifo"},
                                               {"arm": "p-off", "order": "offline"}])"));
  REQUIRE(g["cells"].size() == 2);
  const auto hit = [&](const std::string& arm, const std::string& cell) {
    for (const auto& p : j["points"]) {
      if (p["arm"] == arm && p["cell"] == cell) return p["hit_rate"].get<double>();
    }
    FAIL("no point " << arm << "@" << cell);
    return 0.0;
  };
  const auto& evicts = g["cells"][0];  // 4 GiB: the offline order beats LRU there
  const std::string cell = evicts["cell"];
  CAPTURE(cell);
  CHECK(evicts["memory"] == "4GiB");
  REQUIRE(hit("p-off", cell) > hit("p-lru", cell));
  CHECK(evicts["hit_rate"]["p-fifo"].get<double>() == hit("p-fifo", cell));
  CHECK(evicts["gap_closed"]["p-lru"].get<double>() == 0.0);
  CHECK(evicts["gap_closed"]["p-off"].get<double>() == 1.0);
  CHECK(evicts["gap_closed"]["p-fifo"].get<double>() ==
        doctest::Approx((hit("p-fifo", cell) - hit("p-lru", cell)) / (hit("p-off", cell) - hit("p-lru", cell))));
  CHECK(evicts["offline_bound"] == j["cells"][0]["bounds"]["offline_hit_rate"]);
  // Unlimited: nothing is evicted, every order hits the same, there is no gap to close.
  const auto& unlimited = g["cells"][1];
  CHECK(unlimited["memory_bytes"].is_null());
  for (const char* arm : {"p-lru", "p-fifo", "p-off"}) CHECK(unlimited["gap_closed"][arm].is_null());
  // The table after the main one says the same.
  CHECK(r.err.find("eviction: share of the LRU-to-offline gap closed") != std::string::npos);
  CHECK(r.err.find("ceiling p-off (the group's offline arm)") != std::string::npos);
  CHECK(r.err.find(fmt::format("0.000 ({:.4f})", hit("p-lru", cell))) != std::string::npos);
  CHECK(r.err.find(fmt::format("1.000 ({:.4f})", hit("p-off", cell))) != std::string::npos);
  CHECK(r.err.find("n/a (") != std::string::npos);
}

TEST_CASE("compare: --out writes summary.json, arms.csv and every time series, and replaces a folder whole") {
  const fs::path out = temp_dir("out");
  fs::remove_all(out);
  fs::create_directories(out);
  std::ofstream(out / "stale.txt") << "old";
  const auto r = run_cli(small_compare({"--jobs", "2", "--out", out.string()}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK_FALSE(fs::exists(out / "stale.txt"));
  const auto j = nlohmann::json::parse(read(out / "summary.json"));
  CHECK(j["points"].size() == 6);
  for (const auto& p : j["points"]) CHECK(fs::is_regular_file(out / p["timeseries"].get<std::string>()));
  std::istringstream csv(read(out / "arms.csv"));
  std::string line;
  std::getline(csv, line);
  CHECK(line.rfind("id,arm,policy,memory,", 0) == 0);
  std::size_t rows = 0;
  while (std::getline(csv, line)) ++rows;
  CHECK(rows == 6);
  for (const auto& e : fs::directory_iterator(out.parent_path())) {
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  }
  CHECK(r.out.find("hit rate") != std::string::npos);
}

TEST_CASE("compare: an experiment file gives arms and axes") {
  const fs::path file = temp_dir("experiment.json");
  std::ofstream(file) << R"({"arms": [{"name": "a", "policy": "paged", "options": "--block-tokens 16"},
                                     {"name": "b", "policy": "static"}],
                            "memory": ["4GiB"], "time_scale": [1, 2], "baseline": "b"})";
  const auto r = run_cli({"compare", small_trace(), "--arms", file.string(), "--max-requests", "40", "--no-wall",
                          "--json", "-", "--jobs", "2"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["baseline"] == "b");
  CHECK(j["points"].size() == 4);
  CHECK(j["points"][0]["id"] == "a@memory=4GiB,time_scale=1,kernel_factors=modern,trace=0");
  CHECK(j["points"][1]["ratios"]["prefix_hit_rate"].is_null());  // static hits nothing: no ratio to 0
}

TEST_CASE("compare: bad arms exit 2 naming the arm") {
  const auto other = run_cli({"compare", small_trace(), "--arm", "v=vtensor --block-tokens 32"});
  CHECK(other.code == 2);
  CHECK(other.err.find("arm v") != std::string::npos);
  CHECK(other.err.find("--block-tokens applies to policy paged") != std::string::npos);
  const auto shared = run_cli({"compare", small_trace(), "--arm", "p=paged --model yi-6b"});
  CHECK(shared.code == 2);
  CHECK(shared.err.find("arm p") != std::string::npos);
  const auto unknown = run_cli({"compare", small_trace(), "--arm", "x=nope"});
  CHECK(unknown.code == 2);
  CHECK(unknown.err.find("unknown policy 'nope'") != std::string::npos);
  CHECK(run_cli({"compare", small_trace(), "--arm", "novalue"}).code == 2);
  CHECK(run_cli({"compare", small_trace()}).code == 2);  // no arms
  const auto twice = run_cli({"compare", small_trace(), "--arm", "a=paged", "--arm", "a=radix"});
  CHECK(twice.code == 2);
  CHECK(twice.err.find("arm a is given twice") != std::string::npos);
  const auto base = run_cli({"compare", small_trace(), "--arm", "a=paged", "--baseline", "z"});
  CHECK(base.code == 2);
  CHECK(base.err.find("--baseline") != std::string::npos);
  CHECK(run_cli({"compare", small_trace(), "--arm", "a=paged", "--out", "-"}).code == 2);
  CHECK(run_cli({"compare", small_trace(), "--arm", "a=paged", "--memory", "lots"}).code == 2);
  CHECK(run_cli({"compare", small_trace(), "--arm", "a=paged", "--time-scale", "0"}).code == 2);
  const auto dup = run_cli({"compare", small_trace(), "--arm", "a=paged", "--memory", "4GiB,4GiB"});
  CHECK(dup.code == 2);
  CHECK(dup.err.find("'4GiB' is given twice") != std::string::npos);
}

TEST_CASE("compare: bad experiment files exit 2 naming the field") {
  const fs::path file = temp_dir("bad.json");
  const auto check = [&](const std::string& text, const std::string& field) {
    std::ofstream(file) << text;
    const auto r = run_cli({"compare", small_trace(), "--arms", file.string()});
    CHECK(r.code == 2);
    CHECK_MESSAGE(r.err.find(field) != std::string::npos, r.err);
  };
  check(R"({"arms": [{"name": "a"}]})", "arms[0].policy");
  check(R"({"arms": [{"name": "a", "policy": "paged", "colour": 1}]})", "arms[0].colour");
  check(R"({"arms": {"a": 3}})", "arms.a");
  check(R"({"arms": {"a": "paged"}, "memory": "16GiB"})", "'memory'");
  check(R"({"arms": {"a": "paged"}, "time_scale": [-1]})", "time_scale");
  check(R"({"arms": {"a": "paged"}, "tracez": []})", "'tracez'");
  check(R"({"arms": {"a": "paged --nope 1"}})", "arms.a");
  check("{not json", "not JSON");
}

// Issue 10's test of the report through the command itself: a small comparison rendered with
// --report, every figure present as PNG and SVG, and each figure's data naming the arms.
TEST_CASE("compare: --report renders every figure of a real comparison, with the arms in each figure's data") {
  const fs::path out = temp_dir("report");
  fs::remove_all(out);
  const auto r = run_cli(small_compare({"--jobs", "2", "--out", out.string(), "--report"}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(fs::is_regular_file(out / "report.html"));
  const std::string html = read(out / "report.html");
  CHECK(html.find("vtensor compare") != std::string::npos);  // the command that produced it
  for (const char* name : {"memory_over_time", "memory_breakdown", "hit_rate_vs_memory", "misses_by_cause", "ttft_cdf",
                           "tpot_cdf", "throughput_preemptions", "reuse_distance", "cached_lifetime"}) {
    CAPTURE(name);
    const std::string png = read(out / "figures" / (std::string(name) + ".png"));
    REQUIRE(png.size() > 24);
    CHECK(png.compare(1, 3, "PNG") == 0);
    CHECK(read(out / "figures" / (std::string(name) + ".svg")).find("<svg") != std::string::npos);
    const std::string data = read(out / "figures" / (std::string(name) + ".json"));
    REQUIRE_FALSE(data.empty());
    const auto j = nlohmann::json::parse(data);
    for (const char* arm : {"vt", "paged", "radix"})
      CHECK(j.dump().find(std::string("\"") + arm + "\"") != std::string::npos);
  }
  // The hit rate figure's bounds: one per memory budget.
  const auto hit = nlohmann::json::parse(read(out / "figures" / "hit_rate_vs_memory.json"));
  CHECK(hit.dump().find("infinite") != std::string::npos);
  CHECK(hit.dump().find("offline") != std::string::npos);
  // --report without --out is bad usage.
  CHECK(run_cli(small_compare({"--report"})).code == 2);
}

TEST_CASE("compare: each arm's verdict per cell, the same words in the table and in summary.json") {
  const fs::path out = temp_dir("verdicts");
  fs::remove_all(out);
  const auto r = run_cli(small_compare({"--jobs", "2", "--out", out.string(), "--tie", "2%"}));
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto j = nlohmann::json::parse(read(out / "summary.json"));
  const auto& v = j.at("verdicts");
  CHECK(v.at("tie") == doctest::Approx(0.02));
  CHECK(v.at("lower_is_better") ==
        nlohmann::json({"ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "preemptions"}));
  REQUIRE(v.at("items").size() == 4);  // paged and radix at each of two budgets; none for the baseline vt
  for (const auto& item : v.at("items")) {
    CAPTURE(item.dump());
    CHECK(item.at("arm") != "vt");
    const std::string text = item.at("text").get<std::string>();
    CHECK(!text.empty());
    CHECK(r.out.find(" against vt: " + text + "\n") != std::string::npos);
    // Wins and losses are beyond the tolerance, the largest first.
    for (const char* side : {"wins", "losses"}) {
      double last = 1e300;
      for (const auto& d : item.at(side)) {
        if (d.at("ratio").is_null()) continue;
        const double weight = std::abs(std::log(d.at("ratio").get<double>()));
        CHECK(std::abs(d.at("ratio").get<double>() - 1) > 0.02);
        CHECK(weight <= last);
        last = weight;
      }
    }
  }
  CHECK(r.out.find("a difference within 2.00% is a tie (--tie)") != std::string::npos);
}

TEST_CASE("compare: a bad --tie exits 2 naming the option, before any replay") {
  for (const char* bad : {"abc", "1.5", "-1%"}) {
    CAPTURE(bad);
    const auto r = run_cli(small_compare({"--tie", bad}));
    CHECK(r.code == 2);
    CHECK(r.err.find(std::string("--tie ") + bad + ": not a tolerance") != std::string::npos);
    CHECK(r.out.empty());
  }
}
