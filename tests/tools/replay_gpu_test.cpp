// `vtensor replay` over the cuda backend where tests run: the new options' parsing, the
// comparison of two backends (sim against sim must be identical), and the clean failure without
// a GPU (CI has none). On a GPU the cuda replays run by hand (results/gpu/).

#include "tests/support/backend_choice.hpp"
#include "tests/support/cli_run.hpp"
#include "tests/support/scratch_dir.hpp"

#include "backends/vmm_backend.hpp"
#if VTENSOR_HAVE_CUDA
#include "backends/cuda_backend.hpp"
#endif

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

using result = vtensor::testing::cli_result;

result run(const std::vector<std::string>& args) { return vtensor::testing::run_cli(args); }

std::string golden_trace() { return VTENSOR_SOURCE_DIR "/tests/data/sim/mooncake_first_100.jsonl"; }

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path temp(const std::string& name) {
  const auto dir = vtensor::testing::scratch_dir("replay_gpu");
  fs::create_directories(dir);
  return dir / name;
}

using vtensor::testing::gpu_present;

}  // namespace

TEST_CASE("replay: the GPU options are in the help") {
  const auto r = run({"replay", "--help"});
  CHECK(r.code == 0);
  for (const char* o : {"--device", "--compare-backends", "--async-lookahead", "--create-ahead", "--emulate-steps",
                        "--step-time-scale", "--warmup-fraction"}) {
    CHECK_MESSAGE(r.out.find(o) != std::string::npos, o);
  }
  // The map-overhead measurement is the vtensor_map_overhead benchmark now, not a replay option.
  CHECK(r.out.find("--map-overhead") == std::string::npos);
}

TEST_CASE("replay: bad GPU options exit 2 before any replay") {
  const std::vector<std::vector<std::string>> bad{
      {"--compare-backends", "sim"},
      {"--compare-backends", "sim,"},
      {"--compare-backends", "sim,sim,sim"},
      {"--compare-backends", "sim,nope"},
      {"--compare-backends", "sim,sim", "--backend", "sim"},
      {"--backend", "nope"},
      {"--step-time-scale", "0"},
      {"--warmup-fraction", "1.5"},
      {"--device", "-1"},
      {"--async-lookahead", "maybe"},
  };
  for (const auto& extra : bad) {
    std::vector<std::string> args{"replay", golden_trace(), "--max-requests", "3"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run(args);
    const std::string what = extra.front() + " " + (extra.size() > 1 ? extra[1] : std::string()) + ": " + r.err;
    CHECK_MESSAGE(r.code == 2, what);
    CHECK(r.out.empty());
  }
}

TEST_CASE("replay --compare-backends sim,sim: identical step by step, VMM time x1, JSON with both runs") {
  for (const char* create_ahead : {"0", "16"}) {
    const fs::path json = temp(std::string("compare_") + create_ahead + ".json");
    const auto r = run({"replay", golden_trace(), "--max-requests", "40", "--memory", "8GiB", "--lookahead", "2",
                        "--create-ahead", create_ahead, "--compare-backends", "sim,sim", "--json", json.string()});
    REQUIRE_MESSAGE(r.code == 0, r.err);
    CHECK(r.out.find("compare sim vs sim: identical over") != std::string::npos);
    CHECK(r.out.find("== run 2: backend sim") != std::string::npos);
    const auto j = nlohmann::json::parse(slurp(json));
    CHECK(j["compare"]["identical"] == true);
    CHECK(j["compare"]["first_mismatch"].is_null());
    CHECK(j["compare"]["steps"].get<int>() > 0);
    CHECK(j["compare"]["vmm_ratio"].get<double>() == doctest::Approx(1.0));
    CHECK(j["runs"].size() == 2);
    CHECK(j["runs"][0]["steps"] == j["runs"][1]["steps"]);
    CHECK(j["runs"][0]["vmm_model"]["critical_us"] == j["runs"][1]["vmm_model"]["critical_us"]);
    CHECK(j["runs"][0]["config"]["policy_options"]["async_lookahead"] == true);
  }
}

TEST_CASE("replay: chunk creation after warm-up and the VMM split are reported") {
  const fs::path json = temp("split.json");
  const auto r = run({"replay", golden_trace(), "--max-requests", "40", "--memory", "4GiB", "--lookahead", "2",
                      "--warmup-fraction", "0.2", "--json", json.string()});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto j = nlohmann::json::parse(slurp(json));
  const auto& c = j["chunk_creation"];
  CHECK(c["creates_total"] == 2048);      // the 4 GiB cap is reached...
  CHECK(c["creates_after_warmup"] == 0);  // ...early: lazy deallocation and eviction recycle chunks after
  CHECK(c["warmup_steps"].get<std::uint64_t>() > 0);
  CHECK(j["vmm_model"]["worker_jobs"].get<int>() > 0);
  CHECK(j["vmm_model"]["worker_time_us"].get<double>() > 0);
  CHECK(j["vmm_model"]["critical_us"].get<double>() < j["vmm_time_us"].get<double>());
  CHECK(j["measured"]["step_wall_ms"].get<double>() > 0);
  CHECK(j["measured"]["worker_calls"]["map"].get<int>() > 0);
}

TEST_CASE("replay --backend cuda and --compare-backends sim,cuda fail cleanly without a GPU, naming cuda") {
  if (gpu_present()) {
    MESSAGE("a GPU is present: the no-GPU failure cannot be shown here");
    return;
  }
  const fs::path json = temp("no_gpu.json");
  fs::remove(json);
  for (const std::vector<std::string>& mode :
       {std::vector<std::string>{"--backend", "cuda"}, std::vector<std::string>{"--compare-backends", "sim,cuda"}}) {
    std::vector<std::string> args{"replay", golden_trace(), "--max-requests", "3", "--json", json.string()};
    args.insert(args.end(), mode.begin(), mode.end());
    const auto r = run(args);
    CHECK(r.code == 1);
    CHECK(r.err.find("vtensor replay: ") == 0);
    CHECK(r.err.find("cuda") != std::string::npos);
    CHECK_FALSE(fs::exists(json));
  }
  const auto m = run({"replay", golden_trace(), "--max-requests", "3", "--map-overhead", "256"});
  CHECK(m.code == 2);
  CHECK(m.err.find("map-overhead") != std::string::npos);
}
