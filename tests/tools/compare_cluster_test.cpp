// compare and capacity over clusters (issue 34 part 4): the replicas axis, an arm's router, the
// cluster block of a point, the cluster's offline bound, and their bad inputs.

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/cli_run.hpp"
#include "tests/support/scratch_dir.hpp"

using vtensor::testing::run_cli;

namespace {

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

}  // namespace

// 60 requests: the comparison runs in the ASan stage too (300 took 232 s there).
TEST_CASE("compare --replicas: a cell per replica count, each arm behind its router, the cluster block per point") {
  const auto dir = vtensor::testing::scratch_dir("compare_cluster");
  std::filesystem::create_directories(dir);
  const auto r = run_cli({"compare", "--max-requests", "60", "--arm", "vt=vtensor --router prefix-precise", "--arm",
                          "paged=paged --router round-robin", "--replicas", "1,3", "--jobs", "2", "--no-wall", "--json",
                          (dir / "c.json").string()});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find(",replicas=1 (trace") != std::string::npos);
  CHECK(r.out.find(",replicas=3 (trace") != std::string::npos);
  const auto j = read_json(dir / "c.json");
  REQUIRE(j["points"].size() == 4);
  for (const auto& p : j["points"]) {
    const std::string cell = p["cell"];
    CAPTURE(cell);
    const bool cluster = cell.find("replicas=3") != std::string::npos;
    CHECK(p["summary"].contains("cluster") == cluster);
    CHECK(p["summary"]["requests"] == 60);
    if (cluster) {
      const auto& c = p["summary"]["cluster"];
      CHECK(c["replicas"] == 3);
      CHECK(c["router"] == (p["arm"] == "vt" ? "prefix-precise" : "round-robin"));
      std::uint64_t routed = 0;
      for (const auto& x : c["per_replica"]) routed += x["requests"].get<std::uint64_t>();
      CHECK(routed == 60);
      CHECK(p["hit_rate"].get<double>() <= c["bounds"]["split_infinite_hit_rate"].get<double>());
    }
  }

  // The one-replica cell is the comparison without the axis, figure for figure.
  const auto one =
      run_cli({"compare", "--max-requests", "60", "--arm", "vt=vtensor --router prefix-precise", "--arm",
               "paged=paged --router round-robin", "--jobs", "2", "--no-wall", "--json", (dir / "one.json").string()});
  REQUIRE_MESSAGE(one.code == 0, one.err);
  const auto k = read_json(dir / "one.json");
  REQUIRE(k["points"].size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(k["points"][i]["summary"]["ttft_ms"] == j["points"][i]["summary"]["ttft_ms"]);
    CHECK(k["points"][i]["hit_rate"] == j["points"][i]["hit_rate"]);
    CHECK(k["points"][i]["cell"].get<std::string>().find("replicas") == std::string::npos);
  }
}

TEST_CASE("compare --replicas: bad replica counts and bad router options exit 2 naming them") {
  struct bad {
    std::vector<std::string> args;
    std::string says;
  };
  for (const bad& b : std::vector<bad>{
           {{"compare", "--arm", "v=vtensor", "--replicas", "0"}, "--replicas: '0' is not a replica count"},
           {{"compare", "--arm", "v=vtensor", "--replicas", "2,2"}, "--replicas: '2' is given twice"},
           {{"compare", "--arm", "v=vtensor --router random", "--replicas", "2"}, "arm v: --router: unknown router"},
           {{"compare", "--arm", "v=vtensor --replicas 2"}, "arm v:"},
           {{"capacity", "--arm", "v=vtensor --router-temperature -2", "--replicas", "2", "--slo", "ttft_p90<=5s"},
            "arm v: --router round-robin: router option temperature is -2"},
       }) {
    CAPTURE(b.args);
    const auto r = run_cli(b.args);
    CHECK(r.code == 2);
    CHECK(r.err.find(b.says) != std::string::npos);
  }
}

TEST_CASE("capacity: on the excerpt two replicas behind a router serve more load than one") {
  const auto dir = vtensor::testing::scratch_dir("capacity_cluster");
  std::filesystem::create_directories(dir);
  const auto r = run_cli({"capacity", "--max-requests", "200", "--arm", "vt=vtensor --router least-loaded",
                          "--replicas", "1,2", "--slo", "ttft_p90<=10s", "--tolerance", "0.2", "--jobs", "2",
                          "--no-wall", "--json", (dir / "c.json").string()});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto j = read_json(dir / "c.json");
  REQUIRE(j["cells"].size() == 2);
  CHECK(j["cells"][0]["replicas"] == 1);
  CHECK(j["cells"][1]["replicas"] == 2);
  const double one = j["cells"][0]["arms"][0]["capacity"].get<double>();
  const double two = j["cells"][1]["arms"][0]["capacity"].get<double>();
  CHECK(two > one * 1.2);
}

TEST_CASE("capacity: on the excerpt with --goodput the objective is the share of requests within the limits") {
  const auto dir = vtensor::testing::scratch_dir("capacity_goodput");
  std::filesystem::create_directories(dir);
  const auto r = run_cli({"capacity", "--max-requests", "150", "--arm", "vt=vtensor", "--slo",
                          "ttft_p90<=10s,ttft_p50<=5s,tpot_p90<=100ms", "--goodput", "0.8", "--tolerance", "0.2",
                          "--jobs", "2", "--no-wall", "--json", (dir / "g.json").string()});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find("objective: goodput >= 0.8 within") != std::string::npos);
  const auto j = read_json(dir / "g.json");
  CHECK(j["goodput"] == 0.8);
  const auto& arm = j["cells"][0]["arms"][0];
  REQUIRE(arm["status"] == "found");
  for (const auto& p : arm["probes"]) {
    const double g = p["goodput"].get<double>();
    CHECK(g >= 0.0);
    CHECK(g <= 1.0);
    CHECK(p["met"].get<bool>() == (g >= 0.8));  // the quantile clauses do not decide
  }
  // Without --goodput the probes still carry it, and the quantiles decide.
  const auto q = run_cli({"capacity", "--max-requests", "150", "--arm", "vt=vtensor", "--slo", "ttft_p90<=10s",
                          "--tolerance", "0.2", "--jobs", "2", "--no-wall", "--json", (dir / "q.json").string()});
  REQUIRE_MESSAGE(q.code == 0, q.err);
  for (const auto& p : read_json(dir / "q.json")["cells"][0]["arms"][0]["probes"]) {
    CHECK(p.contains("goodput"));
    CHECK(p["met"].get<bool>() == (p["ttft_p90_ms"].get<double>() <= 10000));
  }
  for (const char* bad : {"0", "1.5", "-0.1"}) {
    const auto b = run_cli({"capacity", "--arm", "v=vtensor", "--slo", "ttft_p90<=5s", "--goodput", bad});
    CHECK(b.code == 2);
    CHECK(b.err.find("--goodput must be a fraction in (0, 1]") != std::string::npos);
  }
}
