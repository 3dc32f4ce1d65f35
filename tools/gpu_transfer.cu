// The GPU side of `vtensor calibrate --transfers` (tools/gpu_transfer.hpp): pinned host <-> device
// copies timed with CUDA events (Note [Transfer grid]).

#include "tools/gpu_transfer.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace vtensor::tools {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw gpu_error(std::string(what) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
}

struct host_free {
  void operator()(void* p) const { (void)cudaFreeHost(p); }
};
struct device_free {
  void operator()(void* p) const { (void)cudaFree(p); }
};
struct event_destroy {
  void operator()(cudaEvent_t e) const { (void)cudaEventDestroy(e); }
};
struct stream_destroy {
  void operator()(cudaStream_t s) const { (void)cudaStreamDestroy(s); }
};
using event_ptr = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, event_destroy>;
using stream_ptr = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, stream_destroy>;

event_ptr make_event() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreate(&e), "cudaEventCreate");
  return event_ptr(e);
}

// FNV-1a over a byte range: the check that what arrived is what was sent.
std::uint64_t fnv(const unsigned char* p, std::uint64_t n, std::uint64_t h = 1469598103934665603ull) {
  for (std::uint64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

std::vector<transfer_sample> measure_transfers(const transfer_options& o, transfer_device& device) {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (o.device >= count) throw gpu_error("no CUDA device " + std::to_string(o.device));
  check(cudaSetDevice(o.device), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties");
  device.name = prop.name;
  check(cudaDriverGetVersion(&device.driver_version), "cudaDriverGetVersion");
  check(cudaRuntimeGetVersion(&device.runtime_version), "cudaRuntimeGetVersion");

  // A batch's copies sit `stride` apart: twice the copy, 4 KiB aligned, so that no two copies are
  // adjacent (Note [Transfer grid]); the buffers hold the largest batch at that spacing.
  std::uint64_t span = 0;
  for (const std::uint64_t bytes : o.sizes) {
    for (const std::uint32_t n : o.copies) {
      if (bytes * n <= o.max_batch_bytes) span = std::max(span, 2 * bytes * n);
    }
  }
  if (span == 0) throw gpu_error("no point of the grid fits --max-batch-bytes");
  void* host_raw = nullptr;
  check(cudaHostAlloc(&host_raw, span, cudaHostAllocDefault), "cudaHostAlloc (pinned host buffer)");
  const std::unique_ptr<void, host_free> host(host_raw);
  void* back_raw = nullptr;
  check(cudaHostAlloc(&back_raw, span, cudaHostAllocDefault), "cudaHostAlloc (pinned host buffer, read back)");
  const std::unique_ptr<void, host_free> back(back_raw);
  void* dev_raw = nullptr;
  check(cudaMalloc(&dev_raw, span), "cudaMalloc (device buffer)");
  const std::unique_ptr<void, device_free> dev(dev_raw);
  auto* h = static_cast<unsigned char*>(host.get());
  auto* b = static_cast<unsigned char*>(back.get());
  auto* d = static_cast<unsigned char*>(dev.get());
  std::mt19937_64 rng(7);
  for (std::uint64_t i = 0; i + 8 <= span; i += 8) {
    const std::uint64_t w = rng();
    std::memcpy(h + i, &w, 8);
  }
  cudaStream_t s_raw = nullptr;
  check(cudaStreamCreateWithFlags(&s_raw, cudaStreamNonBlocking), "cudaStreamCreate");
  const stream_ptr stream(s_raw);
  const event_ptr start = make_event(), stop = make_event();

  std::vector<transfer_sample> out;
  for (const char* direction : {"h2d", "d2h"}) {
    const bool to_device = std::strcmp(direction, "h2d") == 0;
    if (!to_device) {  // the device holds the pattern the h2d runs sent; d2h reads it back
      check(cudaMemcpy(d, h, span, cudaMemcpyHostToDevice), "cudaMemcpy (d2h source)");
    }
    for (const std::uint64_t bytes : o.sizes) {
      for (const std::uint32_t n : o.copies) {
        if (bytes * n > o.max_batch_bytes) continue;
        const std::uint64_t stride = 2 * bytes;
        std::vector<float> times;
        for (int r = 0; r <= o.reps; ++r) {  // run 0 warms up
          if (!to_device) std::memset(b, 0, stride * n);
          check(cudaEventRecord(start.get(), stream.get()), "cudaEventRecord");
          for (std::uint32_t i = 0; i < n; ++i) {
            const std::uint64_t at = i * stride;
            const cudaError_t e = to_device
                                      ? cudaMemcpyAsync(d + at, h + at, bytes, cudaMemcpyHostToDevice, stream.get())
                                      : cudaMemcpyAsync(b + at, d + at, bytes, cudaMemcpyDeviceToHost, stream.get());
            check(e, "cudaMemcpyAsync");
          }
          check(cudaEventRecord(stop.get(), stream.get()), "cudaEventRecord");
          check(cudaEventSynchronize(stop.get()), "cudaEventSynchronize");
          float ms = 0;
          check(cudaEventElapsedTime(&ms, start.get(), stop.get()), "cudaEventElapsedTime");
          if (r > 0) times.push_back(ms * 1000.0f);
        }
        // What arrived is what was sent: the last run's copies, checksummed on both sides.
        std::uint64_t sent = 1469598103934665603ull, got = sent;
        if (to_device) {
          std::memset(b, 0, stride * n);
          check(cudaMemcpy(b, d, stride * n, cudaMemcpyDeviceToHost), "cudaMemcpy (check)");
        }
        for (std::uint32_t i = 0; i < n; ++i) {
          sent = fnv(h + i * stride, bytes, sent);
          got = fnv(b + i * stride, bytes, got);
        }
        if (sent != got) {
          throw gpu_error(std::string(direction) + " copies of " + std::to_string(bytes) + " bytes x " +
                          std::to_string(n) + ": the bytes that arrived differ from those sent");
        }
        std::sort(times.begin(), times.end());
        transfer_sample t;
        t.direction = direction;
        t.bytes = bytes;
        t.copies = n;
        t.median_us = times[times.size() / 2];
        t.min_us = times.front();
        t.p90_us = times[std::min(times.size() - 1, times.size() * 9 / 10)];
        out.push_back(t);
      }
    }
  }
  return out;
}

}  // namespace vtensor::tools
