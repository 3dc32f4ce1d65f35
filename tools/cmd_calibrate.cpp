// `vtensor calibrate`: measures each VMM call on a GPU through the cuda backend and writes the
// calibration file the sim backend reads (Note [Calibration file format], latency_model.hpp).
// Needs the cuda backend only (host code over the driver), no kernels. With --compute it times
// the step cost's kernels instead (tools/calibrate_compute.cpp), which needs the GPU kernels.

#include "tools/calibrate_compute.hpp"
#include "tools/calibrate_transfer.hpp"
#include "tools/calibration.hpp"
#include "tools/cli.hpp"

#include "backends/latency_model.hpp"
#include "backends/units.hpp"
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

call_cost summarise(std::vector<std::uint64_t> ns) {
  if (ns.empty()) return {};
  std::sort(ns.begin(), ns.end());
  std::uint64_t sum = 0;
  for (std::uint64_t x : ns) sum += x;
  const std::size_t p99 = std::min(ns.size() - 1, static_cast<std::size_t>(static_cast<double>(ns.size()) * 0.99));
  return {sum / ns.size(), ns[ns.size() / 2], ns[p99]};
}

latency_model calibration_model(const call_samples& s, std::ostream& out) {
  latency_model model;
  const latency_model reference = latency_model::h200();
  out << "\nPer call, microseconds (p50 and p99 by nearest rank); last column: mean / built-in H200 mean\n\n"
         "| call | calls | mean | p50 | p99 | vs H200 |\n| --- | --- | --- | --- | --- | --- |\n";
  for (const vmm_call call : k_vmm_calls) {
    const std::vector<std::uint64_t>& one = s[static_cast<std::size_t>(call)];
    const call_cost c = summarise(one);
    model.set_cost(call, c);
    const double ref = static_cast<double>(reference.cost_ns(call));
    out << fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} |\n", to_string(call), one.size(),
                       static_cast<double>(c.mean_ns) / 1e3, static_cast<double>(c.p50_ns) / 1e3,
                       static_cast<double>(c.p99_ns) / 1e3, ref > 0 ? static_cast<double>(c.mean_ns) / ref : 0.0);
  }
  return model;
}

namespace {

constexpr std::string_view name = "calibrate";

#if VTENSOR_HAVE_CUDA

/// Runs `op` and returns the time the backend charged to `call` for it: the driver call alone,
/// without the backend's bookkeeping.
template <class F>
std::uint64_t charged(const vmm_backend& b, vmm_call call, F&& op) {
  const std::uint64_t before = b.counters().time_ns_of(call);
  op();
  return b.counters().time_ns_of(call) - before;
}

std::vector<std::uint64_t>& of(call_samples& s, vmm_call call) { return s[static_cast<std::size_t>(call)]; }

constexpr int k_reps = 16;  // reserve and free_range calls per range size

// Reserve and free of ranges of several sizes (the cost does not depend on the size:
// backends/calibration/README.md). Returns the table by size.
std::string measure_ranges(cuda_backend& b, call_samples& s) {
  const std::vector<std::uint64_t> sizes{k_chunk_bytes, k_gib, 64 * k_gib, 1024 * k_gib, 16 * 1024 * k_gib};
  std::string by_size;
  for (std::uint64_t size : sizes) {
    std::vector<std::uint64_t> reserve_one, free_one;
    for (int i = 0; i < k_reps; ++i) {
      device_addr base = 0;
      reserve_one.push_back(charged(b, vmm_call::reserve, [&] { base = b.reserve(size); }));
      free_one.push_back(charged(b, vmm_call::free_range, [&] { b.free_range(base); }));
    }
    auto& reserves = of(s, vmm_call::reserve);
    auto& frees = of(s, vmm_call::free_range);
    reserves.insert(reserves.end(), reserve_one.begin(), reserve_one.end());
    frees.insert(frees.end(), free_one.begin(), free_one.end());
    const std::string label = size >= 1024 * k_gib ? fmt::format("{} TiB", size / (1024 * k_gib))
                              : size >= k_gib      ? fmt::format("{} GiB", size / k_gib)
                                                   : fmt::format("{} MiB", size / k_mib);
    by_size += fmt::format("  reserve {:>7}: p50 {:7.1f} us, free p50 {:7.1f} us\n", label,
                           static_cast<double>(summarise(reserve_one).p50_ns) / 1e3,
                           static_cast<double>(summarise(free_one).p50_ns) / 1e3);
  }
  return by_size;
}

// The chunk lifecycle over `chunks` chunks mapped side by side in one range, one call per chunk.
void measure_chunks(cuda_backend& b, std::uint64_t chunks, call_samples& s) {
  const device_addr base = b.reserve(chunks * k_chunk_bytes);
  std::vector<chunk_handle> handles(chunks);
  const auto each = [&](vmm_call call, const auto& op) {
    for (std::uint64_t i = 0; i < chunks; ++i) of(s, call).push_back(charged(b, call, [&] { op(i); }));
  };
  each(vmm_call::create, [&](std::uint64_t i) {
    auto h = b.create_chunk();
    if (!h) throw std::runtime_error(fmt::format("out of memory after {} chunks", i));
    handles[i] = *h;
  });
  each(vmm_call::map, [&](std::uint64_t i) { b.map(base + i * k_chunk_bytes, handles[i]); });
  each(vmm_call::set_access, [&](std::uint64_t i) { b.set_access(base + i * k_chunk_bytes, k_chunk_bytes); });
  each(vmm_call::unmap, [&](std::uint64_t i) { b.unmap(base + i * k_chunk_bytes, k_chunk_bytes); });
  each(vmm_call::release, [&](std::uint64_t i) { b.release_chunk(handles[i]); });
  b.free_range(base);
}

int calibrate(int device, std::uint64_t chunks, const std::string& out_file, const cli_streams& io) {
  cuda_backend b(device, chunks * k_chunk_bytes);
  if (b.capacity_chunks() < chunks) {
    throw std::runtime_error(
        fmt::format("{} has room for {} chunks only ({} asked)", b.device_name(), b.capacity_chunks(), chunks));
  }
  const int driver = b.driver_version();
  io.out << fmt::format("calibrate: {} (device {}, driver {}.{}), {} chunks of 2 MiB\n", b.device_name(), device,
                        driver / 1000, driver % 1000 / 10, chunks);
  call_samples s;
  const std::string by_size = measure_ranges(b, s);
  measure_chunks(b, chunks, s);
  latency_model model = calibration_model(s, io.out);
  model.set_device(b.device_name());
  model.set_source(
      fmt::format("vtensor calibrate, {}, driver {}.{}, device {}, {} chunks of 2 MiB (create, map, "
                  "set_access, unmap, release: one call per chunk); reserve and free_range: {} calls "
                  "each over 2 MiB, 1 GiB, 64 GiB, 1 TiB and 16 TiB",
                  utc_date(), driver / 1000, driver % 1000 / 10, device, chunks, k_reps));
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
    options.add_options()("device", po::value<int>()->default_value(0), "CUDA device index")(
        "chunks", po::value<std::uint64_t>()->default_value(4096), "chunks to create, map, unmap and release")(
        "out", po::value<std::string>(),
        "calibration file to write (default calibration.json; with --compute, compute-calibration.json; with "
        "--transfers, transfer-calibration.json)")("compute", po::bool_switch(),
                                                   "time the step cost's kernels instead of the VMM calls")(
        "transfers", po::bool_switch(),
        "time copies between pinned host memory and the GPU instead (a host tier's costs; tools/gpu_transfer.hpp)")(
        "model", po::value<std::string>()->default_value("llama-3-8b"),
        "--compute: model whose shapes are timed (llama-3-8b, yi-6b, yi-34b, llama-3-70b)")(
        "tp", po::value<std::uint32_t>()->default_value(1), "--compute: tensor-parallel degree (shapes per GPU)")(
        "token-budget", po::value<std::uint32_t>()->default_value(8192),
        "--compute: largest token count of the GEMM grid")(
        "reps", po::value<int>()->default_value(20),
        "--compute, --transfers: timed runs per point (their median is kept)");
    const po::positional_options_description positional;
    const auto values =
        parse_command_line(name,
                           "[--device N] [--chunks N] [--out FILE] | --compute [--model M] [--tp N] [--out FILE] | "
                           "--transfers [--out FILE]",
                           "Measures each VMM call on the GPU through the cuda backend (the driver call's wall time):\n"
                           "reserve and free of ranges from 2 MiB to 16 TiB, then create, map, set-access, unmap and\n"
                           "release of N chunks of 2 MiB, one call per chunk. Prints mean, p50 and p99 per call and\n"
                           "writes them as the calibration file that the sim backend loads, whole or not at all. Exit "
                           "1 without a GPU or in a build without the cuda backend.\n"
                           "With --compute: times the step cost's kernels instead (docs/kernel-factors.md): the\n"
                           "model's linear layers as cuBLAS bf16 GEMMs over token counts 1 to --token-budget, and\n"
                           "decode attention over contiguous KV in each vtensor layout (kv-split, kv-fused,\n"
                           "token-major) and behind a block table of 1- and 16-token blocks, over batch sizes and\n"
                           "context lengths; writes the compute calibration that replay reads\n"
                           "(--compute-calibration). Exit 1 without a GPU, cuBLAS or a build with the kernels.\n"
                           "With --transfers: times copies between pinned host memory and the GPU, each way, copy\n"
                           "sizes 4 KiB to 2 MiB in batches of 1 to 512 copies, checks the bytes that arrive, and\n"
                           "fits the per-copy cost and streaming rate a host tier's copies are priced with.",
                           options, positional, args, io);
    if (!values) return exit_success;
    const int device = (*values)["device"].as<int>();
    if (device < 0) throw usage_error("--device must be 0 or more");
    const bool compute = (*values)["compute"].as<bool>();
    const bool transfers = (*values)["transfers"].as<bool>();
    if (compute && transfers) throw usage_error("--compute and --transfers are two calibrations: give one");
    for (const char* key : {"model", "tp", "token-budget"}) {
      if (!compute && !(*values)[key].defaulted()) throw usage_error(fmt::format("--{} needs --compute", key));
    }
    if (!compute && !transfers && !(*values)["reps"].defaulted())
      throw usage_error("--reps needs --compute or --transfers");
    if (transfers) {
      if (!(*values)["chunks"].defaulted()) throw usage_error("--chunks does not apply to --transfers");
      transfer_options t;
      t.device = device;
      t.reps = (*values)["reps"].as<int>();
      if (t.reps < 1 || t.reps > 1000) throw usage_error("--reps must be between 1 and 1000");
      if (values->count("out") != 0) t.out_file = (*values)["out"].as<std::string>();
      if (t.out_file.empty()) throw usage_error("--out must name a file");
#if VTENSOR_HAVE_GPU_KERNELS
      return calibrate_transfers(t, io);
#else
      throw std::runtime_error("built without the CUDA kernels (no nvcc at configure time): nothing to time");
#endif
    }
    if (compute && !(*values)["chunks"].defaulted()) throw usage_error("--chunks does not apply to --compute");
    if (compute) {
      compute_options c;
      c.device = device;
      c.model = (*values)["model"].as<std::string>();
      c.tp = (*values)["tp"].as<std::uint32_t>();
      try {
        (void)layer_gemm_shapes(c.model, c.tp);
      } catch (const std::invalid_argument& e) {
        throw usage_error(fmt::format("--model {} --tp {}: {}", c.model, c.tp, e.what()));
      }
      c.token_budget = (*values)["token-budget"].as<std::uint32_t>();
      if (c.token_budget < 1 || c.token_budget > 65536) throw usage_error("--token-budget must be between 1 and 65536");
      c.reps = (*values)["reps"].as<int>();
      if (c.reps < 1 || c.reps > 1000) throw usage_error("--reps must be between 1 and 1000");
      if (values->count("out") != 0) c.out_file = (*values)["out"].as<std::string>();
      if (c.out_file.empty()) throw usage_error("--out must name a file");
#if VTENSOR_HAVE_GPU_KERNELS
      return calibrate_compute(c, io);
#else
      throw std::runtime_error("built without the CUDA kernels (no nvcc at configure time): nothing to time");
#endif
    }
    const std::uint64_t chunks = (*values)["chunks"].as<std::uint64_t>();
    if (chunks < 16 || chunks > 1'000'000) throw usage_error("--chunks must be between 16 and 1000000");
    const std::string out_file = values->count("out") != 0 ? (*values)["out"].as<std::string>() : "calibration.json";
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
