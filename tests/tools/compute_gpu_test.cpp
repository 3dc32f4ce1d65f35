// The decode-attention kernels of `calibrate --compute` on a real GPU (Note [Decode attention
// kernels], Note [Layout addressing]): contiguous KV in each layout and paged KV give the same
// output on the same KV, and match a float64 reference. Timing is not tested.

#include <doctest/doctest.h>

#include <vector>

#include "tests/support/backend_choice.hpp"
#include "tools/gpu_compute.hpp"

TEST_CASE("decode attention: contiguous, paged and every layout's kernel compute the same result on the same KV" *
          doctest::test_suite("gpu")) {
#if VTENSOR_HAVE_GPU_KERNELS
  if (!vtensor::testing::gpu_present()) {
    MESSAGE("GPU_SKIP: no GPU here");
    return;
  }
  vtensor::tools::gpu_compute gpu(0);
  // Contexts that end inside a block, a partition (256 tokens), exactly on both, and a single token.
  const std::vector<std::uint32_t> contexts{1, 17, 256, 300, 1000, 4097};
  struct shape {
    std::uint32_t q_heads, kv_heads, block;
  };
  for (const shape s : {shape{32, 8, 16}, shape{32, 8, 1}, shape{32, 4, 16}, shape{28, 4, 32}, shape{8, 8, 16}}) {
    INFO("q heads ", s.q_heads, ", kv heads ", s.kv_heads, ", block ", s.block);
    for (const std::uint64_t seed : {1ULL, 2ULL}) {
      const auto r = gpu.check_decode(contexts, s.q_heads, s.kv_heads, s.block, seed);
      CHECK(r.elements == contexts.size() * s.q_heads * 128);
      CHECK(r.differing == 0);  // the same arithmetic in the same order: bitwise equal
      CHECK(r.max_abs_diff_paged == 0);
      CHECK(r.differing_layouts == 0);        // kv-fused and token-major addressing: bitwise equal to kv-split
      CHECK(r.max_rel_err_reference < 1e-2);  // bf16 output against float64
    }
  }
#else
  MESSAGE("GPU_SKIP: this build has no CUDA kernels");
#endif
}
