// `vtensor calibrate`: measures each VMM call on a GPU through the cuda backend and writes the
// calibration file the sim backend reads (Note [Calibration file format], latency_model.hpp).
// Needs the cuda backend only (host code over the driver), no kernels.

#include "tools/cli.hpp"

#include "backends/latency_model.hpp"
#include "backends/vmm_backend.hpp"

#if VTENSOR_HAVE_CUDA
#include "backends/cuda_backend.hpp"
#endif

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <ostream>
#include <string>
#include <vector>

namespace vtensor::tools {
namespace po = boost::program_options;
namespace {

constexpr std::string_view name = "calibrate";

#if VTENSOR_HAVE_CUDA

/// Per-call samples of one call kind, nanoseconds.
struct samples {
  std::vector<std::uint64_t> ns;
  /// Mean, and p50 / p99 by nearest rank (as the probes behind backends/calibration/h200.json did).
  [[nodiscard]] call_cost cost() {
    if (ns.empty()) return {};
    std::sort(ns.begin(), ns.end());
    std::uint64_t sum = 0;
    for (std::uint64_t x : ns) sum += x;
    const std::size_t p99 = std::min(ns.size() - 1, static_cast<std::size_t>(static_cast<double>(ns.size()) * 0.99));
    return {sum / ns.size(), ns[ns.size() / 2], ns[p99]};
  }
};

/// Runs `op` and returns the time the backend charged to `call` for it: the driver call alone,
/// without the backend's bookkeeping.
template <class F>
std::uint64_t charged(const vmm_backend& b, vmm_call call, F&& op) {
  const std::uint64_t before = b.counters().time_ns_of(call);
  op();
  return b.counters().time_ns_of(call) - before;
}

std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d", &tm);
  return text;
}

int calibrate(int device, std::uint64_t chunks, const std::string& out_file, const cli_streams& io) {
  cuda_backend b(device, chunks * k_chunk_bytes);
  if (b.capacity_chunks() < chunks) {
    throw std::runtime_error(fmt::format("{} has room for {} chunks only ({} asked)", b.device_name(),
                                         b.capacity_chunks(), chunks));
  }
  const int driver = b.driver_version();
  io.out << fmt::format("calibrate: {} (device {}, driver {}.{}), {} chunks of 2 MiB\n", b.device_name(), device,
                        driver / 1000, driver % 1000 / 10, chunks);
  std::array<samples, k_vmm_call_kinds> s;
  auto at = [&](vmm_call c) -> samples& { return s[static_cast<std::size_t>(c)]; };

  // Virtual ranges of several sizes: the cost does not depend on the size (calibration/README.md).
  constexpr int k_reps = 16;
  const std::vector<std::uint64_t> sizes{k_chunk_bytes, std::uint64_t{1} << 30, std::uint64_t{64} << 30,
                                         std::uint64_t{1} << 40, std::uint64_t{16} << 40};
  std::string by_size;
  for (std::uint64_t size : sizes) {
    samples reserve_one, free_one;
    for (int i = 0; i < k_reps; ++i) {
      device_addr base = 0;
      reserve_one.ns.push_back(charged(b, vmm_call::reserve, [&] { base = b.reserve(size); }));
      free_one.ns.push_back(charged(b, vmm_call::free_range, [&] { b.free_range(base); }));
    }
    at(vmm_call::reserve).ns.insert(at(vmm_call::reserve).ns.end(), reserve_one.ns.begin(), reserve_one.ns.end());
    at(vmm_call::free_range).ns.insert(at(vmm_call::free_range).ns.end(), free_one.ns.begin(), free_one.ns.end());
    const std::string label = size >= (std::uint64_t{1} << 40) ? fmt::format("{} TiB", size >> 40)
                              : size >= (std::uint64_t{1} << 30) ? fmt::format("{} GiB", size >> 30)
                                                                 : fmt::format("{} MiB", size >> 20);
    by_size += fmt::format("  reserve {:>7}: p50 {:7.1f} us, free p50 {:7.1f} us\n", label,
                           static_cast<double>(reserve_one.cost().p50_ns) / 1e3,
                           static_cast<double>(free_one.cost().p50_ns) / 1e3);
  }

  // The chunk lifecycle over `chunks` chunks mapped side by side in one range.
  const device_addr base = b.reserve(chunks * k_chunk_bytes);
  std::vector<chunk_handle> handles(chunks);
  for (std::uint64_t i = 0; i < chunks; ++i) {
    at(vmm_call::create).ns.push_back(charged(b, vmm_call::create, [&] {
      auto h = b.create_chunk();
      if (!h) throw std::runtime_error(fmt::format("out of memory after {} chunks", i));
      handles[i] = *h;
    }));
  }
  for (std::uint64_t i = 0; i < chunks; ++i) {
    at(vmm_call::map).ns.push_back(charged(b, vmm_call::map, [&] { b.map(base + i * k_chunk_bytes, handles[i]); }));
  }
  for (std::uint64_t i = 0; i < chunks; ++i) {
    at(vmm_call::set_access).ns.push_back(
        charged(b, vmm_call::set_access, [&] { b.set_access(base + i * k_chunk_bytes, k_chunk_bytes); }));
  }
  for (std::uint64_t i = 0; i < chunks; ++i) {
    at(vmm_call::unmap).ns.push_back(
        charged(b, vmm_call::unmap, [&] { b.unmap(base + i * k_chunk_bytes, k_chunk_bytes); }));
  }
  for (std::uint64_t i = 0; i < chunks; ++i) {
    at(vmm_call::release).ns.push_back(charged(b, vmm_call::release, [&] { b.release_chunk(handles[i]); }));
  }
  b.free_range(base);

  latency_model model;
  model.set_device(b.device_name());
  model.set_source(fmt::format("vtensor calibrate, {}, driver {}.{}, device {}, {} chunks of 2 MiB (create, map, "
                               "set_access, unmap, release: one call per chunk); reserve and free_range: {} calls "
                               "each over 2 MiB, 1 GiB, 64 GiB, 1 TiB and 16 TiB",
                               utc_date(), driver / 1000, driver % 1000 / 10, device, chunks, k_reps));
  const latency_model reference = latency_model::h200();
  io.out << "\nPer call, microseconds (p50 and p99 by nearest rank); last column: mean / built-in H200 mean\n\n"
            "| call | calls | mean | p50 | p99 | vs H200 |\n| --- | --- | --- | --- | --- | --- |\n";
  for (std::size_t k = 0; k < k_vmm_call_kinds; ++k) {
    const auto call = static_cast<vmm_call>(k);
    const std::size_t n = s[k].ns.size();
    const call_cost c = s[k].cost();
    model.set_cost(call, c);
    const double ref = static_cast<double>(reference.cost_ns(call));
    io.out << fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} |\n", to_string(call), n,
                          static_cast<double>(c.mean_ns) / 1e3, static_cast<double>(c.p50_ns) / 1e3,
                          static_cast<double>(c.p99_ns) / 1e3,
                          ref > 0 ? static_cast<double>(c.mean_ns) / ref : 0.0);
  }
  io.out << "\nReserve and free by size:\n" << by_size;
  const vmm_live left = b.live();
  if (left.chunks != 0 || left.ranges != 0 || left.mappings != 0) {
    throw std::logic_error("calibrate left memory in the backend");
  }
  model.save(out_file);
  io.out << fmt::format("\nwrote {}\n", out_file);
  return exit_success;
}

#endif

}  // namespace

int cmd_calibrate(std::span<const std::string> args, const cli_streams& io) {
  return guarded_run(name, io, [&] {
    po::options_description options("options");
    options.add_options()
        ("device", po::value<int>()->default_value(0), "CUDA device index")
        ("chunks", po::value<std::uint64_t>()->default_value(4096), "chunks to create, map, unmap and release")
        ("out", po::value<std::string>()->default_value("calibration.json"), "calibration file to write");
    const po::positional_options_description positional;
    const auto values = parse_command_line(
        name, "[--device N] [--chunks N] [--out FILE]",
        "Measures each VMM call on the GPU through the cuda backend (the driver call's wall time):\n"
        "reserve and free of ranges from 2 MiB to 16 TiB, then create, map, set-access, unmap and\n"
        "release of N chunks of 2 MiB, one call per chunk. Prints mean, p50 and p99 per call and\n"
        "writes them as the calibration file that the sim backend loads, whole or not at all. Exit 1 without a GPU or in a build without the cuda backend.",
        options, positional, args, io);
    if (!values) return exit_success;
    const int device = (*values)["device"].as<int>();
    if (device < 0) throw usage_error("--device must be 0 or more");
    const std::uint64_t chunks = (*values)["chunks"].as<std::uint64_t>();
    if (chunks < 16 || chunks > 1'000'000) throw usage_error("--chunks must be between 16 and 1000000");
    const std::string out_file = (*values)["out"].as<std::string>();
    if (out_file.empty()) throw usage_error("--out must name a file");
#if VTENSOR_HAVE_CUDA
    return calibrate(device, chunks, out_file, io);
#else
    throw std::runtime_error("built without the cuda backend (no CUDA toolkit at configure time): "
                             "nothing to calibrate");
#endif
  });
}

}  // namespace vtensor::tools
