// `vtensor calibrate --transfers` (tools/calibrate_transfer.hpp): the fit of Note [Transfer
// model] against hand-made samples, the file it writes, its bad options; and on a real GPU the
// measurement itself (Note [Transfer grid]): every point timed, the bytes checked on arrival.

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "tests/support/backend_choice.hpp"
#include "tests/support/cli_run.hpp"
#include "tests/support/scratch_dir.hpp"
#include "tools/calibrate_transfer.hpp"

using namespace vtensor::tools;
using vtensor::testing::run_cli;

namespace {

// Samples that follow the model exactly: n x (a + S / B).
std::vector<transfer_sample> exact(double a, double bytes_per_us) {
  std::vector<transfer_sample> s;
  for (const char* d : {"h2d", "d2h"}) {
    for (const std::uint64_t bytes : {4096ULL, 65536ULL, 2097152ULL}) {
      for (const std::uint32_t n : {1U, 8U, 64U}) {
        const double t = n * (a + static_cast<double>(bytes) / bytes_per_us);
        s.push_back({d, bytes, n, t, t, t});
      }
    }
  }
  return s;
}

}  // namespace

TEST_CASE("transfers: the fit recovers a per-copy cost and a rate from samples that follow them") {
  // 2 us a copy, 50 GB/s = 50,000 bytes per us: a 2 MiB copy takes 2 + 41.9 us.
  const transfer_fit f = fit_transfers(exact(2.0, 50000.0), "h2d");
  CHECK(f.per_copy_us == doctest::Approx(2.0).epsilon(1e-9));
  CHECK(f.bytes_per_us == doctest::Approx(50000.0).epsilon(1e-9));
  CHECK(f.max_error < 1e-9);
  CHECK(f.batch_us(2097152, 8) == doctest::Approx(8 * (2.0 + 2097152 / 50000.0)));
}

TEST_CASE("transfers: a batch faster than its copies alone shows as the fit's error, not hidden") {
  std::vector<transfer_sample> s = exact(5.0, 25000.0);
  for (transfer_sample& t : s) {
    if (t.copies == 64 && t.bytes == 4096) t.median_us *= 0.5;  // set-up overlapped within a batch
  }
  const transfer_fit f = fit_transfers(s, "d2h");
  CHECK(f.max_error > 0.2);  // the two-parameter model cannot follow it, and says by how much
  CHECK(f.bytes_per_us > 0);
}

TEST_CASE("transfers: the calibration file holds each direction's model beside every sample") {
  const transfer_device device{"NVIDIA H200", 13000, 13000};
  const auto j = transfer_calibration_json(device, exact(3.0, 40000.0), "hand-made");
  CHECK(j["format"] == "vtensor-transfer-calibration");
  CHECK(j["device"] == "NVIDIA H200");
  CHECK(j["samples"].size() == 18);
  CHECK(j["model"]["h2d"]["per_copy_us"].get<double>() == doctest::Approx(3.0));
  CHECK(j["model"]["d2h"]["gb_per_s"].get<double>() == doctest::Approx(40.0));
  CHECK(j["samples"][0]["gb_per_s"].get<double>() == doctest::Approx(4096.0 / (3.0 + 4096.0 / 40000.0) * 1e6 / 1e9));
}

TEST_CASE("transfers: samples of one size, and bad options, are refused") {
  std::vector<transfer_sample> one = exact(1.0, 1000.0);
  std::erase_if(one, [](const transfer_sample& t) { return t.bytes != 4096; });
  CHECK_THROWS_AS((void)fit_transfers(one, "h2d"), std::invalid_argument);
  for (const std::vector<std::string>& args : {std::vector<std::string>{"calibrate", "--transfers", "--compute"},
                                               {"calibrate", "--transfers", "--chunks", "64"},
                                               {"calibrate", "--transfers", "--reps", "0"},
                                               {"calibrate", "--reps", "5"}}) {
    CAPTURE(args);
    const auto r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(r.err.find("vtensor calibrate: ") == 0);
  }
}

TEST_CASE("transfers: on the GPU every point is timed and every batch's bytes arrive intact" *
          doctest::test_suite("gpu")) {
#if VTENSOR_HAVE_GPU_KERNELS
  if (!vtensor::testing::gpu_present()) {
    MESSAGE("GPU_SKIP: no GPU here");
    return;
  }
  transfer_options o;
  o.sizes = {4096, 65536, 2 << 20};
  o.copies = {1, 16};
  o.reps = 3;
  transfer_device device;
  const std::vector<transfer_sample> s = measure_transfers(o, device);  // throws on a checksum mismatch
  CHECK(s.size() == 12);
  CHECK(!device.name.empty());
  for (const transfer_sample& t : s) {
    CAPTURE(t.direction);
    CAPTURE(t.bytes);
    CHECK(t.median_us > 0);
    CHECK(t.min_us <= t.median_us);
    CHECK(t.median_us <= t.p90_us);
  }
  for (const char* d : {"h2d", "d2h"}) {
    const transfer_fit f = fit_transfers(s, d);
    MESSAGE(d << ": " << f.per_copy_us << " us per copy, " << f.bytes_per_us / 1000 << " GB/s");
    CHECK(f.bytes_per_us > 1000);     // more than 1 GB/s over PCIe or NVLink-C2C
    CHECK(f.bytes_per_us < 1000000);  // less than 1 TB/s
  }
  const std::filesystem::path out = vtensor::testing::scratch_dir("transfers") / "t.json";
  const auto r = run_cli({"calibrate", "--transfers", "--reps", "3", "--out", out.string()});
  CHECK_MESSAGE(r.code == 0, r.err);
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  CHECK(j["format"] == "vtensor-transfer-calibration");
  CHECK(j["samples"].size() == 48);  // 6 sizes x 4 batch counts x 2 directions, all within 1 GiB
#else
  MESSAGE("GPU_SKIP: this build has no CUDA kernels");
#endif
}
