// `vtensor calibrate --transfers` (tools/calibrate_transfer.hpp).

#include "tools/calibrate_transfer.hpp"

#include "tools/calibrate_compute.hpp"
#include "traces/atomic_output_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

// Note [Transfer model]
// A host tier's batch of n copies of S bytes each is priced n x (a + S / B): a per-copy cost a
// (the call, the DMA engine's set-up, the PCIe round trip of a small copy) and a streaming rate
// B. vLLM's offloading connector measured the same shape from the other side (about 50 GB/s one
// way at 2 MB blocks, poor at small blocks), which is why it moved to 0.4-2.5 MB transfers; the
// fit here finds a and B per direction from the grid of Note [Transfer grid], minimising the
// relative error (a 4 KiB copy's microseconds weigh as much as a 1 GiB batch's milliseconds),
// and the file keeps every measured point beside it with the fit's largest relative error, so a
// reader sees where the two-parameter model is off (a batch overlaps its copies' set-up, so many
// small copies run faster than n single ones: the fit then overestimates them, the safe side for
// a tier's cost).

namespace vtensor::tools {

double transfer_fit::batch_us(std::uint64_t bytes, std::uint32_t copies) const {
  return copies * (per_copy_us + static_cast<double>(bytes) / bytes_per_us);
}

transfer_fit fit_transfers(const std::vector<transfer_sample>& samples, const std::string& direction) {
  // Relative least squares: minimise sum ((a n + c S n) / t - 1)^2 over a and c = 1 / B.
  double uu = 0, uv = 0, vv = 0, u1 = 0, v1 = 0;
  std::set<std::uint64_t> sizes;
  for (const transfer_sample& s : samples) {
    if (s.direction != direction || !(s.median_us > 0)) continue;
    const double u = s.copies / s.median_us, v = static_cast<double>(s.bytes) * s.copies / s.median_us;
    uu += u * u;
    uv += u * v;
    vv += v * v;
    u1 += u;
    v1 += v;
    sizes.insert(s.bytes);
  }
  if (sizes.size() < 2)
    throw std::invalid_argument(fmt::format("{}: the samples do not span two copy sizes: nothing to fit", direction));
  const double det = uu * vv - uv * uv;
  transfer_fit f;
  f.per_copy_us = (u1 * vv - v1 * uv) / det;
  const double c = (uu * v1 - uv * u1) / det;
  if (!(c > 0)) throw std::invalid_argument(fmt::format("{}: the fit's rate is not positive", direction));
  f.bytes_per_us = 1 / c;
  for (const transfer_sample& s : samples) {
    if (s.direction != direction || !(s.median_us > 0)) continue;
    f.max_error = std::max(f.max_error, std::abs(f.batch_us(s.bytes, s.copies) - s.median_us) / s.median_us);
  }
  return f;
}

nlohmann::ordered_json transfer_calibration_json(const transfer_device& device,
                                                 const std::vector<transfer_sample>& samples,
                                                 const std::string& source) {
  nlohmann::ordered_json j = {{"format", "vtensor-transfer-calibration"},
                              {"version", 1},
                              {"device", device.name},
                              {"driver_version", device.driver_version},
                              {"runtime_version", device.runtime_version},
                              {"source", source}};
  nlohmann::ordered_json fits = nlohmann::ordered_json::object();
  for (const char* direction : {"h2d", "d2h"}) {
    const transfer_fit f = fit_transfers(samples, direction);
    fits[direction] = {
        {"per_copy_us", f.per_copy_us}, {"gb_per_s", f.bytes_per_us * 1e6 / 1e9}, {"max_relative_error", f.max_error}};
  }
  j["model"] = std::move(fits);
  nlohmann::ordered_json points = nlohmann::ordered_json::array();
  for (const transfer_sample& s : samples) {
    points.push_back({{"direction", s.direction},
                      {"bytes", s.bytes},
                      {"copies", s.copies},
                      {"median_us", s.median_us},
                      {"min_us", s.min_us},
                      {"p90_us", s.p90_us},
                      {"gb_per_s", static_cast<double>(s.bytes) * s.copies / s.median_us * 1e6 / 1e9}});
  }
  j["samples"] = std::move(points);
  return j;
}

#if VTENSOR_HAVE_GPU_KERNELS

int calibrate_transfers(const transfer_options& o, const cli_streams& io) {
  transfer_device device;
  const std::vector<transfer_sample> samples = measure_transfers(o, device);
  io.out << fmt::format("calibrate --transfers: {} (device {}), pinned host memory, one stream, median of {} runs\n",
                        device.name, o.device, o.reps);
  io.out << fmt::format("{:<5}{:>12}{:>8}{:>14}{:>12}{:>10}\n", "dir", "bytes", "copies", "batch median", "per copy",
                        "GB/s");
  for (const transfer_sample& s : samples) {
    io.out << fmt::format("{:<5}{:>12}{:>8}{:>11.1f} us{:>9.2f} us{:>10.2f}\n", s.direction, s.bytes, s.copies,
                          s.median_us, s.median_us / s.copies,
                          static_cast<double>(s.bytes) * s.copies / s.median_us * 1e6 / 1e9);
  }
  const std::string source = fmt::format(
      "vtensor calibrate --transfers, {}, {}: cudaMemcpyAsync between cudaHostAlloc'd (pinned) host memory and "
      "cudaMalloc'd device memory on one non-blocking stream, CUDA events around each batch, copies 2x their size "
      "apart, median of {} runs after a warm-up, every batch's bytes checked on arrival (tools/gpu_transfer.cu)",
      utc_date(), device.name, o.reps);
  const nlohmann::ordered_json j = transfer_calibration_json(device, samples, source);
  for (const char* direction : {"h2d", "d2h"}) {
    const auto& m = j["model"][direction];
    io.out << fmt::format("model {}: {:.2f} us per copy + bytes at {:.1f} GB/s (largest error over the grid {:.0f}%)\n",
                          direction, m["per_copy_us"].get<double>(), m["gb_per_s"].get<double>(),
                          100 * m["max_relative_error"].get<double>());
  }
  traces::atomic_output_file out(o.out_file, &io.out);
  out.write(j.dump(2) + "\n");
  out.commit();
  if (o.out_file != "-") io.out << fmt::format("wrote {}\n", o.out_file);
  return exit_success;
}

#endif

}  // namespace vtensor::tools
