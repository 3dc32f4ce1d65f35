// `vtensor capacity`: the objective's grammar, the search against hand-worked sequences, and the
// command on the bundled excerpt (Note [Capacity search] in tools/capacity.cpp).

#include "tools/capacity.hpp"

#include "tests/support/cli_run.hpp"
#include "tests/support/scratch_dir.hpp"
#include "tools/cli.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

using namespace vtensor::tools;
using vtensor::testing::run_cli;

namespace {

// Runs a search against `meets` to its end; returns the loads tried, in order.
std::vector<double> drive(capacity_search& s, const std::function<bool(double)>& meets) {
  std::vector<double> tried;
  while (const auto load = s.next()) {
    tried.push_back(*load);
    s.record(*load, meets(*load));
    REQUIRE(tried.size() < 100);
  }
  return tried;
}

}  // namespace

TEST_CASE("capacity: an objective is clauses of a latency quantile at most a limit, in s, ms or us") {
  const slo o = parse_slo("ttft_p90<=5s, tpot_p99<100ms,e2e_p50<=250us");
  REQUIRE(o.clauses.size() == 3);
  CHECK(o.clauses[0].metric == "ttft");
  CHECK(o.clauses[0].quantile == "p90");
  CHECK(o.clauses[0].limit_ms == 5000);
  CHECK(o.clauses[1].metric == "tpot");
  CHECK(o.clauses[1].limit_ms == 100);
  CHECK(o.clauses[2].limit_ms == doctest::Approx(0.25));
  vtensor::sim::replay_summary s;
  s.ttft.p90 = 5000;
  s.tpot.p99 = 99;
  s.e2e.p50 = 0.25;
  CHECK(o.met(s));  // at the limit is within it
  s.tpot.p99 = 100.5;
  CHECK_FALSE(o.met(s));
  for (const std::string bad :
       {"ttft_p95<=5s", "ttft_p90>=5s", "ttft_p90<=5", "latency_p90<=5s", "ttft_p90<=0s", "ttft_p90<=5s,", ""}) {
    CAPTURE(bad);
    CHECK_THROWS_AS((void)parse_slo(bad), usage_error);
  }
  try {
    (void)parse_slo("ttft_p90<=5s,tpot_p99<=1h");
    FAIL("no error");
  } catch (const usage_error& e) {
    CHECK(std::string(e.what()).find("'tpot_p99<=1h'") != std::string::npos);  // names the clause
  }
}

TEST_CASE("capacity: the search doubles, halves and bisects to the tolerance - none and at least at the ends") {
  capacity_search s;  // tolerance 5%, loads 1/64 to 64
  const std::vector<double> tried = drive(s, [](double l) { return l <= 2.7; });
  // 1 and 2 meet, 4 fails; then geometric midpoints: 2.828 fails, 2.378 and 2.594 meet, 2.709
  // fails, and 2.709 is within 5% of 2.594.
  REQUIRE(tried.size() == 7);
  CHECK(tried[0] == 1);
  CHECK(tried[1] == 2);
  CHECK(tried[2] == 4);
  CHECK(tried[3] == doctest::Approx(2.8284).epsilon(1e-4));
  CHECK(tried[4] == doctest::Approx(2.3784).epsilon(1e-4));
  CHECK(tried[5] == doctest::Approx(2.5937).epsilon(1e-4));
  CHECK(tried[6] == doctest::Approx(2.7085).epsilon(1e-4));
  CHECK(s.status() == "found");
  CHECK(*s.met == doctest::Approx(2.5937).epsilon(1e-4));
  CHECK(*s.failed <= *s.met * 1.05);
  CHECK(s.replays == 7);

  capacity_search never;
  CHECK(drive(never, [](double) { return false; }) ==
        std::vector<double>{1, 0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625});
  CHECK(never.status() == "none");
  capacity_search always;
  CHECK(drive(always, [](double) { return true; }) == std::vector<double>{1, 2, 4, 8, 16, 32, 64});
  CHECK(always.status() == "at least");
}

TEST_CASE("capacity: the replica search doubles to a count that meets, then bisects to the fewest") {
  const auto drive_counts = [](replica_search& s, const std::function<bool(std::uint32_t)>& meets) {
    std::vector<std::uint32_t> tried;
    while (const auto n = s.next()) {
      tried.push_back(*n);
      s.record(*n, meets(*n));
      REQUIRE(tried.size() < 100);
    }
    return tried;
  };
  replica_search s;
  s.max_replicas = 16;
  // 1, 2 and 4 fail, 8 meets; then 6 fails and 7 meets: 7, with 6 failing.
  CHECK(drive_counts(s, [](std::uint32_t n) { return n >= 7; }) == std::vector<std::uint32_t>{1, 2, 4, 8, 6, 7});
  CHECK(s.status() == "found");
  CHECK(*s.met == 7);
  CHECK(*s.failed == 6);
  CHECK(s.replays == 6);
  replica_search one;
  CHECK(drive_counts(one, [](std::uint32_t) { return true; }) == std::vector<std::uint32_t>{1});
  CHECK(*one.met == 1);
  CHECK(!one.failed);
  replica_search capped;
  capped.max_replicas = 5;  // the doubling stops at the cap
  CHECK(drive_counts(capped, [](std::uint32_t n) { return n >= 5; }) == std::vector<std::uint32_t>{1, 2, 4, 5});
  CHECK(*capped.met == 5);
  replica_search never;
  never.max_replicas = 5;
  CHECK(drive_counts(never, [](std::uint32_t) { return false; }) == std::vector<std::uint32_t>{1, 2, 4, 5});
  CHECK(never.status() == "none");
}

TEST_CASE("capacity: --fewest-replicas finds a count that meets the objective where one fewer fails") {
  const std::filesystem::path dir = vtensor::testing::scratch_dir("capacity_fewest");
  const auto r = run_cli({"capacity", "--max-requests", "300", "--arm", "vtensor=vtensor --router least-loaded",
                          "--arm", "paged=paged --router least-loaded", "--slo", "ttft_p90<=2s", "--fewest-replicas",
                          "8", "--jobs", "2", "--no-wall", "--json", (dir / "fewest.json").string()});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find("the fewest replicas") != std::string::npos);
  std::ifstream in(dir / "fewest.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  CHECK(j["fewest_replicas"]["max_replicas"] == 8);
  for (const auto& a : j["cells"][0]["arms"]) {
    CAPTURE(a["arm"].get<std::string>());
    REQUIRE(a["status"] == "found");
    const auto fewest = a["replicas"].get<std::uint32_t>();
    CHECK(fewest > 1);  // one replica does not serve the excerpt at its own rate (its load is 1.88x)
    CHECK(a["failed_replicas"].get<std::uint32_t>() == fewest - 1);
    for (const auto& p : a["probes"]) {
      CHECK(p["load"] == 1.0);
      const auto n = p["replicas"].get<std::uint32_t>();
      CHECK(p["met"] == (p["ttft_p90_ms"].get<double>() <= 2000));
      if (n == fewest) CHECK(p["met"] == true);
      if (n == fewest - 1) CHECK(p["met"] == false);
    }
  }
}

TEST_CASE("capacity: on the excerpt each arm's capacity meets the objective and the next load tried fails") {
  const std::filesystem::path dir = vtensor::testing::scratch_dir("capacity");
  const auto run = [&](const std::string& jobs, const std::string& file) {
    return run_cli({"capacity", "--max-requests", "300", "--arm", "vtensor=vtensor", "--arm", "paged=paged", "--slo",
                    "ttft_p90<=10s,tpot_p90<=100ms", "--tolerance", "0.1", "--jobs", jobs, "--no-wall", "--json",
                    (dir / file).string()});
  };
  const auto r = run("2", "two.json");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find("vs baseline") != std::string::npos);
  std::ifstream in(dir / "two.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const auto& arms = j["cells"][0]["arms"];
  REQUIRE(arms.size() == 2);
  for (const auto& a : arms) {
    CAPTURE(a["arm"].get<std::string>());
    REQUIRE(a["status"] == "found");
    const double capacity = a["capacity"].get<double>(), failed = a["failed_load"].get<double>();
    CHECK(failed > capacity);
    CHECK(failed <= capacity * 1.1);
    bool saw_met = false, saw_failed = false;
    for (const auto& p : a["probes"]) {
      if (p["load"].get<double>() == capacity) {
        saw_met = true;
        CHECK(p["met"] == true);
        CHECK(p["ttft_p90_ms"].get<double>() <= 10000);
        CHECK(p["tpot_p90_ms"].get<double>() <= 100);
      }
      if (p["load"].get<double>() == failed) {
        saw_failed = true;
        CHECK(p["met"] == false);
      }
    }
    CHECK(saw_met);
    CHECK(saw_failed);
    CHECK(a["replays"].get<std::size_t>() == a["probes"].size());
  }
  // The searches do not depend on how many replays run at once.
  REQUIRE(run("1", "one.json").code == 0);
  std::ifstream a(dir / "two.json"), b(dir / "one.json");
  CHECK(nlohmann::json::parse(a) == nlohmann::json::parse(b));
}

TEST_CASE("capacity: bad objectives and options exit 2 naming what is wrong") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"capacity", "--arm", "vt=vtensor"}, "--slo is required"},
      {{"capacity", "--arm", "vt=vtensor", "--slo", "ttft_p90<=5parsecs"}, "'ttft_p90<=5parsecs'"},
      {{"capacity", "--arm", "vt=vtensor", "--slo", "ttft_p90<=5s", "--tolerance", "0"}, "--tolerance"},
      {{"capacity", "--arm", "vt=vtensor", "--slo", "ttft_p90<=5s", "--max-load", "0.5"}, "--max-load"},
      {{"capacity", "--arm", "vt=vtensor", "--slo", "ttft_p90<=5s", "--time-scale", "2"}, "time-scale"},
      {{"capacity", "--arm", "vt=nosuchpolicy", "--slo", "ttft_p90<=5s"}, "nosuchpolicy"},
      {{"capacity", "--arm", "vt=vtensor", "--slo", "ttft_p90<=5s", "--fewest-replicas", "0"}, "--fewest-replicas"},
      {{"capacity", "--arm", "vt=vtensor", "--slo", "ttft_p90<=5s", "--fewest-replicas", "4", "--replicas", "2"},
       "drop --replicas"},
      {{"capacity", "--arm", "vt=vtensor", "--slo", "ttft_p90<=5s", "--fewest-replicas", "4", "--max-load", "8"},
       "--max-load"},
  };
  for (const auto& [args, names] : cases) {
    CAPTURE(args);
    const auto r = run_cli(args);
    CHECK(r.code == 2);
    CHECK_MESSAGE(r.err.find(names) != std::string::npos, r.err);
  }
}

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), p.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

// `capacity --plan` (Note [Plans] in tools/compare_plan.cpp): one task per search, run in any
// order, merged into exactly what one run prints and writes, for a load search and a replica
// search; merge names a lost search and the command that reruns it.
TEST_CASE("capacity plan: searches run one by one in any order, merge into exactly what one run writes") {
  const std::filesystem::path dir = vtensor::testing::scratch_dir("capacity_plan");
  const std::vector<std::vector<std::string>> runs = {
      {"capacity", "--max-requests", "150", "--arm", "vt=vtensor", "--arm", "paged=paged", "--memory",
       "16GiB,unlimited", "--slo", "ttft_p90<=4s", "--no-wall"},
      {"capacity", "--max-requests", "150", "--arm", "vt=vtensor --router least-loaded", "--slo", "ttft_p90<=2s",
       "--fewest-replicas", "4", "--no-wall"},
  };
  int n = 0;
  for (std::vector<std::string> args : runs) {
    CAPTURE(args);
    const std::string tag = std::to_string(n++), plan = (dir / ("plan" + tag)).string();
    std::vector<std::string> single = args;
    single.insert(single.end(), {"--jobs", "2", "--json", (dir / ("one" + tag + ".json")).string()});
    const auto one = run_cli(single);
    REQUIRE_MESSAGE(one.code == 0, one.err);
    args.insert(args.end(), {"--plan", plan});
    REQUIRE(run_cli(args).code == 0);
    const std::size_t searches = tag == "0" ? 4 : 1;
    for (std::size_t k = searches; k-- > 0;) {  // backwards: the order does not matter
      const auto r = run_cli({"capacity", "--run-point", plan, std::to_string(k)});
      REQUIRE_MESSAGE(r.code == 0, r.err);
      CHECK(r.out.find("searched in") != std::string::npos);
    }
    CHECK(run_cli({"capacity", "--run-point", plan, "0"}).out.find("done already") != std::string::npos);
    const std::string merged_json = (dir / ("two" + tag + ".json")).string();
    const auto two = run_cli({"capacity", "--merge", plan, "--json", merged_json});
    REQUIRE_MESSAGE(two.code == 0, two.err);
    CHECK(one.out == two.out);
    CHECK(slurp(dir / ("one" + tag + ".json")) == slurp(merged_json));
    if (tag != "0") continue;
    std::filesystem::remove(std::filesystem::path(plan) / "results" / "1.json");
    const auto lost = run_cli({"capacity", "--merge", plan});
    CHECK(lost.code == 1);
    CHECK(lost.err.find("1 of 4 points are not done") != std::string::npos);
    CHECK(lost.err.find("  vtensor capacity --run-point " + plan + " 1\n") != std::string::npos);
  }
  // Refusals: a plan's options where they do not apply, a compare plan given to capacity.
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"capacity", "--slo", "ttft_p90<=2s", "--plan", (dir / "p").string(), "--json", "x"}, "give --json to --merge"},
      {{"capacity", "--run-point", (dir / "plan0").string(), "0", "--jobs", "2"}, "--jobs is not one of its options"},
      {{"capacity", "--slo", "ttft_p90<=2s", "--emit", "slurm"}, "--emit needs --plan DIR"},
      {{"capacity", "--run-point", (dir / "plan0").string(), "4"}, "has points 0 to 3, not 4"},
  };
  for (const auto& [args, names] : bad) {
    CAPTURE(args);
    const auto r = run_cli(args);
    CHECK(r.code == 2);
    CHECK_MESSAGE(r.err.find(names) != std::string::npos, r.err);
  }
  REQUIRE(run_cli({"compare", "--max-requests", "20", "--arm", "vt=vtensor", "--plan", (dir / "cmp").string()}).code ==
          0);
  const auto foreign = run_cli({"capacity", "--merge", (dir / "cmp").string()});
  CHECK(foreign.code == 2);
  CHECK(foreign.err.find("not a vtensor capacity plan") != std::string::npos);
}
