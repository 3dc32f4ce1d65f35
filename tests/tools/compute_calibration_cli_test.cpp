// `calibrate --compute` and `replay --compute-calibration` where tests run (no GPU): the shapes
// it times, its option checks, and the replay reading a calibration file.

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/model_presets.hpp"
#include "tests/support/cli_run.hpp"
#include "tests/support/scratch_dir.hpp"
#include "tools/calibrate_compute.hpp"

namespace vtt = vtensor::tools;
using vtensor::testing::run_cli;

TEST_CASE("calibrate --compute: the linear shapes add up to each preset's parameters") {
  for (const auto& preset : vtensor::model_presets()) {
    INFO(preset.kv.name);
    double weights = 0;
    for (const auto& s : vtt::layer_gemm_shapes(preset.kv.name, 1)) weights += static_cast<double>(s.out) * s.in;
    const auto head = vtt::lm_head_shape(preset.kv.name, 1);
    const double total = weights * preset.kv.layers + static_cast<double>(head.out) * head.in +
                         static_cast<double>(vtt::embedding_params(preset.kv.name));
    CHECK(total == doctest::Approx(preset.params).epsilon(1e-3));
    // Tensor parallelism splits every matrix.
    double split = 0;
    for (const auto& s : vtt::layer_gemm_shapes(preset.kv.name, 2)) split += static_cast<double>(s.out) * s.in;
    CHECK(split == doctest::Approx(weights / 2));
  }
  CHECK_THROWS_AS((void)vtt::layer_gemm_shapes("llama-3-8b", 3), std::invalid_argument);
  CHECK_THROWS_AS((void)vtt::layer_gemm_shapes("gpt-2", 1), std::invalid_argument);
}

TEST_CASE("calibrate --compute: the token grid runs from 1 to the budget, increasing") {
  const auto g = vtt::token_grid(8192);
  CHECK(g.front() == 1);
  CHECK(g.back() == 8192);
  for (std::size_t i = 1; i < g.size(); ++i) CHECK(g[i] > g[i - 1]);
  CHECK(std::find(g.begin(), g.end(), 384u) != g.end());
  CHECK(vtt::token_grid(1) == std::vector<std::uint32_t>{1});
  CHECK(vtt::token_grid(100).back() == 100);
}

TEST_CASE("calibrate --compute: bad options exit 2 before touching a GPU") {
  for (const auto& args : std::vector<std::vector<std::string>>{{"calibrate", "--compute", "--model", "gpt-2"},
                                                                {"calibrate", "--compute", "--tp", "3"},
                                                                {"calibrate", "--compute", "--token-budget", "0"},
                                                                {"calibrate", "--compute", "--reps", "0"},
                                                                {"calibrate", "--compute", "--out", ""},
                                                                {"calibrate", "--compute", "--chunks", "64"},
                                                                {"calibrate", "--model", "yi-6b"},
                                                                {"calibrate", "--reps", "5"}}) {
    INFO(args[1], " ", args[2]);
    const auto r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(r.err.find("vtensor calibrate") != std::string::npos);
  }
}

TEST_CASE("replay --compute-calibration: a bad file exits 2 naming the key, a good one prices the steps") {
  const auto dir = vtensor::testing::scratch_dir("compute_calibration_cli");
  const std::string path = (dir / "vtensor-replay-compute-cal.json").string();
  nlohmann::json j = nlohmann::json::parse(R"({
    "format": "vtensor-compute-calibration", "version": 1, "device": "NVIDIA H200",
    "source": "test", "model": "llama-3-8b", "tp": 1, "copy_bandwidth": 4.0e12,
    "linear": [{"tokens": 1, "seconds": 0.004, "flops": 1.6e10, "bytes": 1.6e10},
               {"tokens": 8192, "seconds": 0.2, "flops": 1.3e14, "bytes": 1.7e10}],
    "decode_attention": {"block_tokens": [16], "points": [
      {"batch": 8, "context": 8192, "kv_bytes": 1.0e9, "contiguous_s": 5.0e-4, "paged_s": {"16": 6.0e-4}}]},
    "prefill_attention": "not measured"})");
  const auto write = [&](const nlohmann::json& doc) {
    std::ofstream out(path);
    out << doc.dump();
  };
  const std::vector<std::string> base{"replay", "--max-requests", "30",   "--no-wall", "--json",
                                      "-",      "--policy",       "paged"};
  auto with = base;
  with.insert(with.end(), {"--compute-calibration", path});

  nlohmann::json broken = j;
  broken["linear"][1]["seconds"] = -1;
  write(broken);
  const auto bad = run_cli(with);
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--compute-calibration") != std::string::npos);
  CHECK(bad.err.find("key 'linear[1].seconds'") != std::string::npos);

  write(j);
  const auto good = run_cli(with);
  REQUIRE(good.code == 0);
  const auto plain = run_cli(base);
  REQUIRE(plain.code == 0);
  const auto g = nlohmann::json::parse(good.out);
  const auto p = nlohmann::json::parse(plain.out);
  CHECK(g["config"]["compute_calibration"]["device"] == "NVIDIA H200");
  CHECK(g["config"]["kernel_factors"]["decode"].get<double>() == doctest::Approx(1.2));   // 6 / 5, measured
  CHECK(p["config"]["kernel_factors"]["decode"].get<double>() == doctest::Approx(1.11));  // the modern set
  CHECK(g["config"]["kernel_factors"]["prefill"] == p["config"]["kernel_factors"]["prefill"]);
  CHECK_FALSE(p["config"].contains("compute_calibration"));
  // These rates are far below the roofline's: the same requests take longer.
  CHECK(g["simulated_seconds"].get<double>() > p["simulated_seconds"].get<double>());
  std::filesystem::remove(path);
  const auto gone = run_cli(with);
  CHECK(gone.code == 2);
  CHECK(gone.err.find("cannot open") != std::string::npos);
}
