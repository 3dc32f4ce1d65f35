#pragma once
/// The CUDA kernels that `vtensor validate-gpu` checks memory with: fill device ranges with a
/// seeded pattern, check them against it, copy device to device. The only nvcc-compiled code of
/// the project (tools/gpu_kernels.cu, built when CMake finds nvcc); this header is plain C++ so
/// host code includes it without the toolkit, and `gpu_kernels_available()` says whether the
/// build has them.
///
/// Note [Pattern segments]
/// Memory is described as segments: `bytes` at device address `addr`, whose 32-bit word i holds
/// pattern(seed, first_word + i). `first_word` lets one logical range (a tensor, written at its
/// offset in the tensor) be cut into pieces of at most a chunk, for load balance, and still hold
/// one continuous pattern; a check over a range written as one segment therefore also proves that
/// the range is contiguous memory, not only that each piece holds data. Distinct seeds give
/// unrelated words, so a byte written through the wrong pointer shows up wherever it lands.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/units.hpp"

namespace vtensor::tools {

/// A CUDA runtime error or a kernel launch failure (message names the call and the error).
class gpu_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One piece of patterned memory (Note [Pattern segments]).
struct gpu_segment {
  std::uint64_t addr = 0;        ///< device address, 4-byte aligned
  std::uint64_t bytes = 0;       ///< length, a multiple of 4
  std::uint64_t seed = 0;        ///< pattern seed
  std::uint64_t first_word = 0;  ///< pattern index of the segment's first word
};

/// What a check found.
struct gpu_check_result {
  std::uint64_t words_checked = 0;      ///< words compared
  std::uint64_t mismatches = 0;         ///< words that differ from the pattern
  std::uint64_t first_bad_segment = 0;  ///< index of the first segment with a mismatch (if any)
  std::uint64_t first_bad_word = 0;     ///< word index inside that segment of its first mismatch
  [[nodiscard]] bool ok() const { return mismatches == 0; }
};

#if defined(__CUDACC__)
#define VTENSOR_HOST_DEVICE __host__ __device__
#else
#define VTENSOR_HOST_DEVICE
#endif

/// True when this build has the kernels (nvcc was found at configure time).
#if VTENSOR_HAVE_GPU_KERNELS
inline constexpr bool k_gpu_kernels_built = true;
#else
inline constexpr bool k_gpu_kernels_built = false;
#endif

/// The value of pattern word `index` under `seed` (splitmix64 of both, low 32 bits); the kernels
/// use this very function.
[[nodiscard]] inline VTENSOR_HOST_DEVICE std::uint32_t gpu_pattern_word(std::uint64_t seed,
                                                                        std::uint64_t index) noexcept {
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ULL + index + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<std::uint32_t>(z ^ (z >> 31));
}

/// Splits `[addr, addr + bytes)` into segments of at most `piece_bytes`, continuing one pattern
/// from word `first_word`, and appends them to `out`.
inline void append_segments(std::vector<gpu_segment>& out, std::uint64_t addr, std::uint64_t bytes, std::uint64_t seed,
                            std::uint64_t first_word, std::uint64_t piece_bytes = 2 * k_mib) {
  for (std::uint64_t off = 0; off < bytes; off += piece_bytes) {
    const std::uint64_t len = bytes - off < piece_bytes ? bytes - off : piece_bytes;
    out.push_back({addr + off, len, seed, first_word + off / 4});
  }
}

/// Device-side buffers and kernels on one device (defined only when k_gpu_kernels_built), through the CUDA runtime
/// (which works in the device's primary context, the one the cuda backend uses). The constructor allocates its buffers
/// and runs every kernel once, so that after it the runtime allocates no device memory: take memory baselines after
/// constructing it. Throws gpu_error (no kernels in this build, no device, or a runtime failure). Not thread-safe.
class gpu_workspace {
 public:
  explicit gpu_workspace(int device_index);
  ~gpu_workspace();
  gpu_workspace(const gpu_workspace&) = delete;
  gpu_workspace& operator=(const gpu_workspace&) = delete;

  /// Writes every segment's pattern; returns when the writes are done.
  void fill(const std::vector<gpu_segment>& segments);
  /// Compares every segment with its pattern.
  [[nodiscard]] gpu_check_result check(const std::vector<gpu_segment>& segments);
  /// Copies `bytes` from `src` to `dst` on the device (cudaMemcpy device to device) and waits
  /// for it: the caller may unmap either side right after.
  void copy(std::uint64_t dst, std::uint64_t src, std::uint64_t bytes);

 private:
  void upload(const gpu_segment* segments, std::size_t count);

  int device_ = 0;
  std::size_t batch_ = 0;     // segments the buffers hold per launch (longer lists go in several)
  void* segments_ = nullptr;  // device array of batch_ gpu_segment
  void* result_ = nullptr;    // device counters: mismatches, first bad (segment << 32 | word)
};

}  // namespace vtensor::tools
