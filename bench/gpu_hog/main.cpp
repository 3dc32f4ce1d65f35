// vtensor_gpu_hog: another process that takes GPU memory away from a running replay, for the
// memory-pressure check of tools/gpu-pressure.sh (issue 12). It allocates with cudaMalloc (a
// plain allocation, as any other tenant of the GPU would), in 256 MiB pieces until only
// `--leave` bytes are free, holds them for `--hold` seconds and frees them. `--report` prints the
// device's free and total bytes as one JSON line and exits, so a script can compare the driver's
// used memory before and after a replay.

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <thread>
#include <vector>

#include "sim/replay.hpp"  // parse_byte_size

namespace po = boost::program_options;

namespace {

struct device_memory {
  std::size_t free = 0;
  std::size_t total = 0;
};

[[noreturn]] void fail(const char* what, cudaError_t e) {
  std::cerr << fmt::format("vtensor_gpu_hog: {}: {} ({})\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
  std::exit(1);
}

device_memory memory() {
  device_memory m;
  if (const cudaError_t e = cudaMemGetInfo(&m.free, &m.total); e != cudaSuccess) fail("cudaMemGetInfo", e);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    po::options_description options("vtensor_gpu_hog options");
    std::string leave_text = "2GiB";
    double hold_s = 30;
    double after_s = 0;
    int device = 0;
    options.add_options()("help,h", "print this help")("device", po::value(&device)->default_value(0), "CUDA device")(
        "leave", po::value(&leave_text)->default_value("2GiB"), "bytes to leave free")(
        "after", po::value(&after_s)->default_value(0), "seconds to wait before taking the memory")(
        "hold", po::value(&hold_s)->default_value(30), "seconds to hold it")(
        "report", "print {\"free_bytes\", \"total_bytes\", \"used_bytes\"} and exit");
    po::variables_map v;
    po::store(po::parse_command_line(argc, argv, options), v);
    po::notify(v);
    if (v.count("help") != 0U) {
      std::cout << "usage: vtensor_gpu_hog [--report | --leave SIZE --after S --hold S]\n" << options;
      return 0;
    }
    if (hold_s < 0 || after_s < 0) {
      std::cerr << "vtensor_gpu_hog: --hold and --after must be at least 0\n";
      return 2;
    }
    const std::uint64_t leave = vtensor::sim::parse_byte_size(leave_text);
    if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) fail("cudaSetDevice", e);
    const device_memory start = memory();
    if (v.count("report") != 0U) {
      std::cout << fmt::format(R"({{"device": {}, "free_bytes": {}, "total_bytes": {}, "used_bytes": {}}})", device,
                               start.free, start.total, start.total - start.free)
                << '\n';
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(after_s));
    constexpr std::size_t k_piece = std::size_t{256} << 20;
    std::vector<void*> pieces;
    std::size_t taken = 0;
    for (device_memory m = memory(); m.free > leave + k_piece; m = memory()) {
      void* p = nullptr;
      if (cudaMalloc(&p, k_piece) != cudaSuccess) break;  // someone else took it first
      pieces.push_back(p);
      taken += k_piece;
    }
    std::cout << fmt::format("vtensor_gpu_hog: took {:.2f} GiB, {:.2f} GiB left free; holding {} s\n",
                             static_cast<double>(taken) / (1ull << 30),
                             static_cast<double>(memory().free) / (1ull << 30), hold_s)
              << std::flush;
    std::this_thread::sleep_for(std::chrono::duration<double>(hold_s));
    for (void* p : pieces) {
      if (const cudaError_t e = cudaFree(p); e != cudaSuccess) fail("cudaFree", e);
    }
    std::cout << fmt::format("vtensor_gpu_hog: freed {:.2f} GiB\n", static_cast<double>(taken) / (1ull << 30));
    return 0;
  } catch (const po::error& e) {
    std::cerr << "vtensor_gpu_hog: " << e.what() << '\n';
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "vtensor_gpu_hog: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "vtensor_gpu_hog: " << e.what() << '\n';
    return 1;
  }
}
