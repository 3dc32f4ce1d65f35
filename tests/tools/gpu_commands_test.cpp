// `vtensor validate-gpu` and `vtensor calibrate` where tests run: option parsing, and the clean
// failure without a GPU (CI has none). On a GPU they are run by hand (results/gpu/).

#include "tests/support/backend_choice.hpp"
#include "tests/support/cli_run.hpp"
#include "tests/support/scratch_dir.hpp"
#include "tools/calibration.hpp"
#include "tools/cli.hpp"
#include "tools/gpu_kernels.hpp"

#include "backends/latency_model.hpp"
#include "backends/vmm_backend.hpp"
#if VTENSOR_HAVE_CUDA
#include "backends/cuda_backend.hpp"
#endif

#include <doctest/doctest.h>

#include <filesystem>
#include <set>
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

  const fs::path out = vtensor::testing::scratch_dir("gpu_commands") / "calibration.json";
  fs::remove(out);
  const auto c = run({"calibrate", "--chunks", "64", "--out", out.string()});
  CHECK(c.code == 1);
  CHECK(c.err.rfind("vtensor calibrate: ", 0) == 0);
  CHECK(c.err.find("cuda") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("the validation pattern splits into chunk pieces that continue one pattern") {
  std::vector<vtt::gpu_segment> segments;
  vtt::append_segments(segments, 0x10000000, 5 * vtensor::k_mib, 7, 0);
  REQUIRE(segments.size() == 3);
  CHECK(segments[1].addr == 0x10000000 + 2 * vtensor::k_mib);
  CHECK(segments[1].first_word == 2 * vtensor::k_mib / 4);
  CHECK(segments[2].bytes == vtensor::k_mib);
  CHECK(vtt::gpu_pattern_word(7, 0) != vtt::gpu_pattern_word(8, 0));
  CHECK(vtt::gpu_pattern_word(7, 0) != vtt::gpu_pattern_word(7, 1));
}

TEST_CASE("the validation pattern is pinned: the kernels and the host compute these very words") {
  // splitmix64 of (seed, index), low 32 bits: a change here changes what validate-gpu writes.
  CHECK(vtt::gpu_pattern_word(7, 0) == 1943390u);
  CHECK(vtt::gpu_pattern_word(7, 5) == 2040365814u);
  CHECK(vtt::gpu_pattern_word(0xdeadbeefcafef00dULL, 123456789) == 3898267391u);
  // No short cycle: a chunk-sized piece's first 4096 words are all different.
  std::set<std::uint32_t> words;
  for (std::uint64_t i = 0; i < 4096; ++i) words.insert(vtt::gpu_pattern_word(1, i));
  CHECK(words.size() == 4096);
}

TEST_CASE("calibrate's summary of its samples is what the sim's latency model loads back") {
  vtt::call_samples samples;
  for (std::uint64_t i = 100; i >= 1; --i)
    samples[static_cast<std::size_t>(vtensor::vmm_call::map)].push_back(i * 1000);
  samples[static_cast<std::size_t>(vtensor::vmm_call::set_access)] = {30'000, 10'000, 20'000};
  std::ostringstream table;
  vtensor::latency_model model = vtt::calibration_model(samples, table);
  const vtensor::call_cost map = model.cost(vtensor::vmm_call::map);
  CHECK(map.mean_ns == 50'500);  // (1 + ... + 100) / 100 us
  CHECK(map.p50_ns == 51'000);   // element 50 of the sorted 100
  CHECK(map.p99_ns == 100'000);  // element 99
  CHECK(model.cost(vtensor::vmm_call::set_access) == vtensor::call_cost{20'000, 20'000, 30'000});
  CHECK(model.cost(vtensor::vmm_call::create) == vtensor::call_cost{});  // no samples
  CHECK(table.str().find("| map | 100 | 50.5 | 51.0 | 100.0 |") != std::string::npos);

  model.set_device("NVIDIA H200");
  model.set_source("gpu_commands_test");
  const fs::path file = vtensor::testing::scratch_dir("gpu_commands") / "model.json";
  model.save(file);
  const auto loaded = vtensor::latency_model::load(file);
  fs::remove(file);
  CHECK(loaded == model);
  CHECK(loaded.device() == "NVIDIA H200");
  CHECK(loaded.cost_ns(vtensor::vmm_call::map) == 50'500);
}
