// `vtensor validate-gpu` and `vtensor calibrate` where tests run: option parsing, and the clean
// failure without a GPU (CI has none). On a GPU they are run by hand (results/gpu/).

#include "tools/cli.hpp"
#include "tests/support/backend_choice.hpp"
#include "tests/support/cli_run.hpp"
#include "tools/gpu_kernels.hpp"

#include "backends/latency_model.hpp"
#include "backends/vmm_backend.hpp"
#if VTENSOR_HAVE_CUDA
#include "backends/cuda_backend.hpp"
#endif

#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace vtt = vtensor::tools;
namespace fs = std::filesystem;

namespace {

using result = vtensor::testing::cli_result;

result run(const std::vector<std::string>& args) { return vtensor::testing::run_cli(args); }

using vtensor::testing::gpu_present;

}  // namespace

TEST_CASE("validate-gpu and calibrate are listed and have help") {
  const auto help = run({"--help"});
  CHECK(help.out.find("validate-gpu") != std::string::npos);
  CHECK(help.out.find("calibrate") != std::string::npos);
  const auto v = run({"validate-gpu", "--help"});
  CHECK(v.code == 0);
  CHECK(v.out.find("usage: vtensor validate-gpu") != std::string::npos);
  CHECK(v.out.find("--memory") != std::string::npos);
  CHECK(v.out.find("--layout") != std::string::npos);
  const auto c = run({"calibrate", "--help"});
  CHECK(c.code == 0);
  CHECK(c.out.find("--chunks") != std::string::npos);
  CHECK(c.out.find("--out") != std::string::npos);
}

TEST_CASE("validate-gpu: bad options exit 2 before touching a GPU") {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"validate-gpu", "--bogus"},
           {"validate-gpu", "--layout", "paged"},
           {"validate-gpu", "--memory", "lots"},
           {"validate-gpu", "--memory", "0"},
           {"validate-gpu", "--memory", "12PiB"},
           {"validate-gpu", "--device", "-1"},
           {"validate-gpu", "--device", "x"},
           {"validate-gpu", "--seed", "abc"},
           {"validate-gpu", "--context", "100"},
           {"validate-gpu", "--requests", "0"},
           {"validate-gpu", "--overhead", "-1MiB"},
           {"validate-gpu", "extra"},
       }) {
    INFO(args[1] << " " << (args.size() > 2 ? args[2] : ""));
    const auto r = run(args);
    CHECK(r.code == 2);
    CHECK(r.err.rfind("vtensor validate-gpu: ", 0) == 0);
  }
}

TEST_CASE("calibrate: bad options exit 2 before touching a GPU") {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"calibrate", "--bogus"},
           {"calibrate", "--chunks", "3"},
           {"calibrate", "--chunks", "many"},
           {"calibrate", "--device", "-2"},
           {"calibrate", "--out", ""},
       }) {
    INFO(args[1] << " " << (args.size() > 2 ? args[2] : ""));
    const auto r = run(args);
    CHECK(r.code == 2);
    CHECK(r.err.rfind("vtensor calibrate: ", 0) == 0);
  }
}

TEST_CASE("validate-gpu and calibrate fail cleanly without a GPU, naming the cuda backend") {
  if (gpu_present()) {
    MESSAGE("a GPU is present: the no-GPU failure is not tested here");
    return;
  }
  const auto v = run({"validate-gpu", "--memory", "1GiB"});
  CHECK(v.code == 1);
  CHECK(v.out.empty());
  CHECK(v.err.rfind("vtensor validate-gpu: ", 0) == 0);
  CHECK(v.err.find("cuda") != std::string::npos);
  if (!vtt::k_gpu_kernels_built) CHECK(v.err.find("built without CUDA kernels") != std::string::npos);

  const fs::path out = fs::temp_directory_path() / "vtensor_gpu_commands_test_calibration.json";
  fs::remove(out);
  const auto c = run({"calibrate", "--chunks", "64", "--out", out.string()});
  CHECK(c.code == 1);
  CHECK(c.err.rfind("vtensor calibrate: ", 0) == 0);
  CHECK(c.err.find("cuda") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("the validation pattern splits into chunk pieces that continue one pattern") {
  std::vector<vtt::gpu_segment> segments;
  vtt::append_segments(segments, 0x10000000, 5 * (std::uint64_t{1} << 20), 7, 0);
  REQUIRE(segments.size() == 3);
  CHECK(segments[1].addr == 0x10000000 + (std::uint64_t{2} << 20));
  CHECK(segments[1].first_word == (std::uint64_t{2} << 20) / 4);
  CHECK(segments[2].bytes == (std::uint64_t{1} << 20));
  CHECK(vtt::gpu_pattern_word(7, 0) != vtt::gpu_pattern_word(8, 0));
  CHECK(vtt::gpu_pattern_word(7, 0) != vtt::gpu_pattern_word(7, 1));
  CHECK(vtt::gpu_pattern_word(7, 5) == vtt::gpu_pattern_word(7, 5));
}

TEST_CASE("the calibration measured on the H200 by vtensor calibrate loads in the sim's latency model") {
  const auto model = vtensor::latency_model::load(VTENSOR_SOURCE_DIR "/results/gpu/h200-calibration.json");
  CHECK(model.device() == "NVIDIA H200");
  CHECK(model.cost_ns(vtensor::vmm_call::set_access) > 0);
  CHECK(model.cost(vtensor::vmm_call::create).p99_ns >= model.cost(vtensor::vmm_call::create).p50_ns);
}
