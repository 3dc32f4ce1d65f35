// `vtensor compare --plan / --run-point / --merge` (Note [Plans] in tools/compare_plan.cpp): the
// points run one by one in any order, or by GNU parallel from the emitted script, merge into
// exactly what one run writes; merge names what is missing and how to rerun it; a changed trace,
// another build, a used folder and bad indices are refused.

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/support/bundled_data.hpp"
#include "tests/support/cli_run.hpp"
#include "tests/support/scratch_dir.hpp"

namespace fs = std::filesystem;
using vtensor::testing::run_cli;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), p.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Every file under `a` is under `b` with the same bytes, and the other way round.
void check_same_tree(const fs::path& a, const fs::path& b) {
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(a)) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), a);
    CAPTURE(rel.string());
    REQUIRE(fs::is_regular_file(b / rel));
    CHECK(slurp(e.path()) == slurp(b / rel));
    ++files;
  }
  std::size_t other = 0;
  for (const auto& e : fs::recursive_directory_iterator(b)) other += e.is_regular_file() ? 1 : 0;
  CHECK(files == other);
  CHECK(files > 2);
}

// The experiment of these tests: two arms (one a two-replica cluster behind prefix-precise) at
// two budgets on 120 requests of the bundled excerpt.
std::vector<std::string> experiment(const std::string& trace) {
  return {"compare",        trace,
          "--arm",          "vt=vtensor",
          "--arm",          "pp=paged --router prefix-precise",
          "--memory",       "16GiB,unlimited",
          "--replicas",     "1,2",
          "--max-requests", "120",
          "--no-wall"};
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

}  // namespace

TEST_CASE("compare plan: points run one by one, in any order, merge into exactly what one run writes") {
  const fs::path dir = vtensor::testing::scratch_dir("plan_identity");
  const std::string trace = vtensor::testing::bundled_trace("mooncake_conversation_excerpt.jsonl");
  fs::create_directories(dir / "one");
  fs::create_directories(dir / "tasks");
  // One run, its outputs named as the merge names them (summary.json records the command).
  fs::current_path(dir / "one");
  const auto single = run_cli(with(experiment(trace), {"--out", "out", "--json", "s.json"}));
  REQUIRE_MESSAGE(single.code == 0, single.err);
  fs::current_path(dir / "tasks");
  const auto plan = run_cli(with(experiment(trace), {"--plan", "plan"}));
  REQUIRE_MESSAGE(plan.code == 0, plan.err);
  CHECK(plan.out.find("8 points") != std::string::npos);
  CHECK(fs::is_regular_file("plan/manifest.json"));
  CHECK(slurp("plan/points/5.json").find("\"replicas\": 2") != std::string::npos);
  for (const char* k : {"7", "2", "0", "5", "1", "3", "6", "4"}) {
    const auto r = run_cli({"compare", "--run-point", "plan", k});
    REQUIRE_MESSAGE(r.code == 0, r.err);
  }
  const auto again = run_cli({"compare", "--run-point", "plan", "3"});
  CHECK(again.code == 0);
  CHECK(again.out.find("done already") != std::string::npos);
  const auto merged = run_cli({"compare", "--merge", "plan", "--out", "out", "--json", "s.json"});
  REQUIRE_MESSAGE(merged.code == 0, merged.err);
  CHECK(merged.out == single.out);  // the table
  CHECK(slurp(dir / "tasks" / "s.json") == slurp(dir / "one" / "s.json"));
  check_same_tree(dir / "one" / "out", dir / "tasks" / "out");
  fs::current_path(VTENSOR_SOURCE_DIR);
}

TEST_CASE("compare plan: merge names the points not done and how to rerun them, and rerunning those completes it") {
  const fs::path dir = vtensor::testing::scratch_dir("plan_missing");
  const std::string plan = (dir / "plan").string();
  REQUIRE(run_cli(with(experiment(vtensor::testing::bundled_trace("mooncake_conversation_excerpt.jsonl")),
                       {"--plan", plan}))
              .code == 0);
  for (int k = 0; k < 8; ++k) REQUIRE(run_cli({"compare", "--run-point", plan, std::to_string(k)}).code == 0);
  fs::remove(dir / "plan" / "results" / "2.json");
  {  // a task killed mid-write leaves no such file (the result is renamed into place); a torn copy is named all the
     // same
    const std::string whole = slurp(dir / "plan" / "results" / "6.json");
    std::ofstream(dir / "plan" / "results" / "6.json", std::ios::trunc) << whole.substr(0, whole.size() / 2);
  }
  const auto r = run_cli({"compare", "--merge", plan, "--json", (dir / "s.json").string()});
  CHECK(r.code == 1);
  CHECK(r.err.find("2 of 8 points are not done") != std::string::npos);
  CHECK(r.err.find("2 (vt@") != std::string::npos);
  CHECK(r.err.find("not run") != std::string::npos);
  CHECK(r.err.find("6 (vt@") != std::string::npos);
  CHECK(r.err.find("unreadable") != std::string::npos);
  CHECK(r.err.find("vtensor compare --run-point " + plan + " 2\n") != std::string::npos);
  CHECK(r.err.find("vtensor compare --run-point " + plan + " 6\n") != std::string::npos);
  CHECK(!fs::exists(dir / "s.json"));  // nothing half-written
  for (const char* k : {"2", "6"}) REQUIRE(run_cli({"compare", "--run-point", plan, k}).code == 0);
  const auto done = run_cli({"compare", "--merge", plan, "--json", (dir / "s.json").string()});
  CHECK_MESSAGE(done.code == 0, done.err);
  CHECK(fs::is_regular_file(dir / "s.json"));
}

TEST_CASE("compare plan: a changed trace, a used folder, a bad index or engine and foreign options are refused") {
  const fs::path dir = vtensor::testing::scratch_dir("plan_refusals");
  const fs::path trace = dir / "trace.jsonl";
  fs::copy_file(vtensor::testing::bundled_trace("mooncake_conversation_excerpt.jsonl"), trace);
  const std::string plan = (dir / "plan").string();
  REQUIRE(run_cli({"compare", trace.string(), "--arm", "vt=vtensor", "--max-requests", "50", "--plan", plan}).code ==
          0);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"compare", trace.string(), "--arm", "vt=vtensor", "--plan", plan}, "is not an empty folder"},
      {{"compare", trace.string(), "--arm", "vt=vtensor", "--plan", (dir / "p2").string(), "--out", "x"},
       "give --out to --merge"},
      {{"compare", trace.string(), "--arm", "vt=vtensor", "--plan", (dir / "p3").string(), "--emit", "condor"},
       "--emit condor"},
      {{"compare", "--run-point", plan, "1"}, "has points 0 to 0, not 1"},
      {{"compare", "--run-point", plan, "one"}, "'one' is not a point index"},
      {{"compare", "--run-point", plan}, "--run-point DIR K"},
      {{"compare", "--run-point", plan, "0", "--arm", "p=paged"}, "--arm is not one of its options"},
      {{"compare", "--merge", (dir / "nowhere").string()}, "no plan here"},
      {{"compare", trace.string(), "--arm", "vt=vtensor", "--emit", "parallel"}, "--emit needs --plan DIR"},
      {{"compare", trace.string(), "--arm", "vt=vtensor", "--force"}, "--force goes with --run-point"},
      {{"compare", trace.string(), "--arm", "vt=vtensor", "--plan", (dir / "p4").string(), "--emit", "parallel",
        "--array-throttle", "4"},
       "--array-throttle goes with --emit slurm"},
      {{"compare", trace.string(), "--arm", "vt=vtensor", "--plan", (dir / "p5").string(), "--emit", "slurm",
        "--array-throttle", "0"},
       "--array-throttle 0"},
  };
  for (const auto& [args, names] : cases) {
    CAPTURE(args);
    const auto r = run_cli(args);
    CHECK(r.code == 2);
    CHECK_MESSAGE(r.err.find(names) != std::string::npos, r.err);
  }
  CHECK(!fs::exists(dir / "p2"));
  CHECK(!fs::exists(dir / "p3"));
  CHECK(!fs::exists(dir / "p4"));
  CHECK(!fs::exists(dir / "p5"));
  std::ofstream(trace, std::ios::app) << "\n";  // the trace changes after planning
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"compare", "--run-point", plan, "0"}, {"compare", "--merge", plan}}) {
    const auto r = run_cli(args);
    CHECK(r.code == 2);
    CHECK_MESSAGE(r.err.find("trace " + trace.string() + " changed since it was planned") != std::string::npos, r.err);
  }
}

TEST_CASE("compare plan: GNU parallel runs the emitted script, a second run does nothing, the merge is --jobs 2's") {
  if (std::system("command -v parallel >/dev/null 2>&1") != 0) {
    MESSAGE("PARALLEL_SKIP: GNU parallel is not installed (tools/install-deps.sh installs it)");
    return;
  }
  const fs::path dir = vtensor::testing::scratch_dir("plan_parallel");
  const std::string bin = VTENSOR_BINARY,
                    trace = vtensor::testing::bundled_trace("mooncake_conversation_excerpt.jsonl");
  const std::string args = " compare " + trace +
                           " --arm vt=vtensor --arm paged=paged --memory 16GiB,64GiB,unlimited --max-requests 120 "
                           "--no-wall";
  const std::string d = dir.string();
  // The real binary plans and merges (the script runs it; a plan is the build's that made it).
  REQUIRE(std::system(("cd " + d + " && mkdir -p one && cd one && " + bin + args +
                       " --jobs 2 --out out --json s.json > table.txt")
                          .c_str()) == 0);
  REQUIRE(std::system(("cd " + d + " && " + bin + args + " --plan plan --emit parallel > /dev/null").c_str()) == 0);
  REQUIRE(std::system(("sh " + d + "/plan/run-parallel.sh --jobs 2 > " + d + "/first.log 2>&1").c_str()) == 0);
  CHECK(slurp(dir / "first.log").find("replayed") != std::string::npos);
  REQUIRE(std::system(("sh " + d + "/plan/run-parallel.sh --jobs 2 > " + d + "/second.log 2>&1").c_str()) == 0);
  CHECK(slurp(dir / "second.log").find("replayed") == std::string::npos);  // the job log: nothing left to run
  REQUIRE(std::system(("cd " + d + " && mkdir -p two && cd two && " + bin + " compare --merge " + d +
                       "/plan --out out --json s.json > table.txt")
                          .c_str()) == 0);
  CHECK(slurp(dir / "one" / "table.txt") == slurp(dir / "two" / "table.txt"));
  CHECK(slurp(dir / "one" / "s.json") != "");
  // summary.json names the command: the run's has --jobs left out (--no-wall), the merge's is the
  // plan's arguments; both then name the same outputs.
  CHECK(slurp(dir / "one" / "s.json") == slurp(dir / "two" / "s.json"));
  check_same_tree(dir / "one" / "out", dir / "two" / "out");
}

// A local Slurm cluster (tools/slurm-local.sh: Debian's slurmctld, slurmd and munge, started as
// root and stopped by their pids) runs the emitted job array; a point lost afterwards is named by
// the merge with the sbatch line that reruns it alone, and that line completes the merge, which
// is then --jobs 2's single run byte for byte; a capacity plan's array merges into its single run.
TEST_CASE(
    "compare plan: a local Slurm runs the emitted job arrays of compare and capacity, a lost point is rerun alone") {
  if (std::system("command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1") != 0 ||
      ::geteuid() != 0) {
    MESSAGE("SLURM_SKIP: needs root and Slurm with munge (tools/install-deps.sh --fuzz installs them)");
    return;
  }
  const fs::path dir = vtensor::testing::scratch_dir("plan_slurm");
  const std::string d = dir.string(), bin = VTENSOR_BINARY, source = VTENSOR_SOURCE_DIR,
                    trace = vtensor::testing::bundled_trace("mooncake_conversation_excerpt.jsonl");
  const std::string script = source + "/tools/slurm-local.sh", state = d + "/slurm-state";
  // The daemons are stopped however the test ends.
  struct cluster {
    std::string stop;
    ~cluster() { (void)std::system(stop.c_str()); }
  } const up{script + " stop " + state + " > /dev/null 2>&1"};
  REQUIRE(std::system((script + " start " + state + " > " + d + "/start.log 2>&1").c_str()) == 0);
  const std::string env = "SLURM_CONF=" + state + "/slurm.conf ";
  const std::string args =
      " compare " + trace + " --arm vt=vtensor --arm paged=paged --memory 16GiB,unlimited --max-requests 120 --no-wall";
  REQUIRE(std::system(("cd " + d + " && mkdir -p one && cd one && " + bin + args +
                       " --jobs 2 --out out --json s.json > table.txt")
                          .c_str()) == 0);
  REQUIRE(std::system(
              ("cd " + d + " && " + bin + args + " --plan plan --emit slurm --array-throttle 2 > plan.txt").c_str()) ==
          0);
  const std::string sbatch = slurp(dir / "plan" / "run-slurm.sbatch");
  CHECK(sbatch.find("#SBATCH --array=0-3%2\n") != std::string::npos);
  CHECK(sbatch.find("#SBATCH --time=5\n") != std::string::npos);  // point 0 takes well under 100 s
  CHECK(sbatch.find("#SBATCH --mem=") != std::string::npos);
  CHECK(fs::is_regular_file(dir / "plan" / "results" / "0.json"));  // measured while planning, kept
  // sbatch --wait returns when every task has ended, non-zero when one failed.
  REQUIRE(std::system((env + "sbatch --wait " + d + "/plan/run-slurm.sbatch > " + d + "/sbatch.log 2>&1").c_str()) ==
          0);
  for (int k = 0; k < 4; ++k) CHECK(fs::is_regular_file(dir / "plan" / "results" / (std::to_string(k) + ".json")));
  std::size_t logs = 0;
  for (const auto& e : fs::directory_iterator(dir / "plan" / "slurm")) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("measured")) continue;
    ++logs;
    if (name.ends_with("_0.out")) CHECK(slurp(e.path()).find("done already") != std::string::npos);
  }
  CHECK(logs == 4);

  fs::remove(dir / "plan" / "results" / "3.json");
  // The real binary merges (a plan is the build's that made it).
  CHECK(std::system(
            (bin + " compare --merge " + d + "/plan --json " + d + "/lost.json 2> " + d + "/lost.txt").c_str()) != 0);
  CHECK(slurp(dir / "lost.txt").find("sbatch --array=3 " + d + "/plan/run-slurm.sbatch\n") != std::string::npos);
  CHECK(!fs::exists(dir / "lost.json"));
  REQUIRE(std::system(
              (env + "sbatch --wait --array=3 " + d + "/plan/run-slurm.sbatch > " + d + "/sbatch2.log 2>&1").c_str()) ==
          0);
  CHECK(fs::is_regular_file(dir / "plan" / "results" / "3.json"));
  REQUIRE(std::system(("cd " + d + " && mkdir -p two && cd two && " + bin + " compare --merge " + d +
                       "/plan --out out --json s.json > table.txt")
                          .c_str()) == 0);
  CHECK(slurp(dir / "one" / "table.txt") == slurp(dir / "two" / "table.txt"));
  CHECK(slurp(dir / "one" / "s.json") == slurp(dir / "two" / "s.json"));
  check_same_tree(dir / "one" / "out", dir / "two" / "out");

  // capacity plans the same way: one search per task.
  const std::string cap =
      " capacity " + trace + " --arm vt=vtensor --arm paged=paged --slo ttft_p90\\<=4s --max-requests 150 --no-wall";
  REQUIRE(std::system(("cd " + d + " && " + bin + cap + " --json cap-one.json > cap-one.txt").c_str()) == 0);
  REQUIRE(std::system(("cd " + d + " && " + bin + cap + " --plan cap --emit slurm > cap-plan.txt").c_str()) == 0);
  CHECK(slurp(dir / "cap" / "run-slurm.sbatch").find(" capacity --run-point ") != std::string::npos);
  REQUIRE(std::system((env + "sbatch --wait " + d + "/cap/run-slurm.sbatch > " + d + "/sbatch3.log 2>&1").c_str()) ==
          0);
  REQUIRE(std::system(("cd " + d + " && " + bin + " capacity --merge cap --json cap-two.json > cap-two.txt").c_str()) ==
          0);
  CHECK(slurp(dir / "cap-one.txt") == slurp(dir / "cap-two.txt"));
  CHECK(slurp(dir / "cap-one.json") == slurp(dir / "cap-two.json"));
}
