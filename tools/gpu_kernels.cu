// The kernels of `vtensor validate-gpu` (see tools/gpu_kernels.hpp, Note [Pattern segments]).
// Memory-bound and simple on purpose: one block per segment (segments are at most a chunk), each
// thread a strided run of 32-bit words; correctness, not speed, is what they are for.

#include "tools/gpu_kernels.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

namespace vtensor::tools {
namespace {

constexpr unsigned k_threads = 256;
constexpr unsigned k_max_blocks = 65535;

struct device_result {
  unsigned long long mismatches;
  unsigned long long words;
  unsigned long long first_bad;  // segment << 32 | word, min over mismatches
};

__global__ void fill_kernel(const gpu_segment* segments, unsigned long long count) {
  for (unsigned long long s = blockIdx.x; s < count; s += gridDim.x) {
    const gpu_segment seg = segments[s];
    auto* p = reinterpret_cast<std::uint32_t*>(seg.addr);
    const unsigned long long words = seg.bytes / 4;
    for (unsigned long long i = threadIdx.x; i < words; i += blockDim.x) {
      p[i] = gpu_pattern_word(seg.seed, seg.first_word + i);
    }
  }
}

__global__ void check_kernel(const gpu_segment* segments, unsigned long long count, device_result* result) {
  unsigned long long bad = 0;
  unsigned long long checked = 0;
  for (unsigned long long s = blockIdx.x; s < count; s += gridDim.x) {
    const gpu_segment seg = segments[s];
    const auto* p = reinterpret_cast<const std::uint32_t*>(seg.addr);
    const unsigned long long words = seg.bytes / 4;
    for (unsigned long long i = threadIdx.x; i < words; i += blockDim.x) {
      ++checked;
      if (p[i] != gpu_pattern_word(seg.seed, seg.first_word + i)) {
        ++bad;
        atomicMin(&result->first_bad, (s << 32) | (i & 0xffffffffULL));
      }
    }
  }
  if (bad != 0) atomicAdd(&result->mismatches, bad);
  atomicAdd(&result->words, checked);
}

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw gpu_error(std::string(what) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
}

unsigned blocks_for(std::size_t count) { return static_cast<unsigned>(std::min<std::size_t>(count, k_max_blocks)); }

}  // namespace

gpu_workspace::gpu_workspace(int device_index) : device_(device_index), batch_(std::size_t{1} << 17) {
  int count = 0;
  cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (device_index < 0 || device_index >= count) {
    throw gpu_error("CUDA runtime: no device " + std::to_string(device_index) + " (this machine has " +
                    std::to_string(count) + ")");
  }
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(cudaMalloc(&segments_, batch_ * sizeof(gpu_segment)), "cudaMalloc (segment list)");
  cuda_check(cudaMalloc(&result_, sizeof(device_result)), "cudaMalloc (check result)");
  // Load both kernels now (lazy module loading would allocate on first launch, after baselines).
  std::vector<gpu_segment> none;
  fill(none);
  (void)check(none);
}

gpu_workspace::~gpu_workspace() {
  cudaFree(segments_);
  cudaFree(result_);
}

void gpu_workspace::upload(const gpu_segment* segments, std::size_t count) {
  cuda_check(cudaMemcpy(segments_, segments, count * sizeof(gpu_segment), cudaMemcpyHostToDevice),
             "cudaMemcpy (segment list)");
}

void gpu_workspace::fill(const std::vector<gpu_segment>& segments) {
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  std::size_t done = 0;
  do {
    const std::size_t n = std::min(batch_, segments.size() - done);
    if (n > 0) upload(segments.data() + done, n);
    fill_kernel<<<std::max(1u, blocks_for(n)), k_threads>>>(static_cast<const gpu_segment*>(segments_), n);
    cuda_check(cudaGetLastError(), "fill kernel launch");
    cuda_check(cudaDeviceSynchronize(), "fill kernel");
    done += n;
  } while (done < segments.size());
}

gpu_check_result gpu_workspace::check(const std::vector<gpu_segment>& segments) {
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  gpu_check_result total;
  std::size_t done = 0;
  do {
    const std::size_t n = std::min(batch_, segments.size() - done);
    if (n > 0) upload(segments.data() + done, n);
    const device_result init{0, 0, ~0ULL};
    auto* result = static_cast<device_result*>(result_);
    cuda_check(cudaMemcpy(result, &init, sizeof init, cudaMemcpyHostToDevice), "cudaMemcpy (result)");
    check_kernel<<<std::max(1u, blocks_for(n)), k_threads>>>(static_cast<const gpu_segment*>(segments_), n, result);
    cuda_check(cudaGetLastError(), "check kernel launch");
    cuda_check(cudaDeviceSynchronize(), "check kernel");
    device_result got{};
    cuda_check(cudaMemcpy(&got, result, sizeof got, cudaMemcpyDeviceToHost), "cudaMemcpy (result)");
    total.words_checked += got.words;
    if (got.mismatches != 0 && total.mismatches == 0) {
      total.first_bad_segment = done + (got.first_bad >> 32);
      total.first_bad_word = got.first_bad & 0xffffffffULL;
    }
    total.mismatches += got.mismatches;
    done += n;
  } while (done < segments.size());
  return total;
}

void gpu_workspace::copy(std::uint64_t dst, std::uint64_t src, std::uint64_t bytes) {
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(
      cudaMemcpy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes, cudaMemcpyDeviceToDevice),
      "cudaMemcpy (device to device)");
  // A device-to-device cudaMemcpy may return before the copy ends; the caller unmaps next.
  cuda_check(cudaDeviceSynchronize(), "cudaMemcpy (device to device) completion");
}

}  // namespace vtensor::tools
