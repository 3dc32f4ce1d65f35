// The map-overhead measurement (bench/map_overhead, the `vtensor_map_overhead` driver) on a real
// GPU: a short run whose structure must hold (the ratios themselves are figures for results/gpu/,
// not assertions: timing is not tested).

#include <doctest/doctest.h>

#include <sstream>
#include <string>

#include "tests/support/backend_choice.hpp"

#if VTENSOR_HAVE_MAP_OVERHEAD
#include "bench/map_overhead/map_overhead.hpp"
#endif

using namespace vtensor;

TEST_CASE("map overhead on cuda: no create or reserve while timing, every variant measured" *
          doctest::test_suite("gpu")) {
#if VTENSOR_HAVE_MAP_OVERHEAD
  if (!vtensor::testing::gpu_present()) {
    MESSAGE("GPU_SKIP: no GPU here");
    return;
  }
  std::ostringstream out;
  const auto j = bench::measure_map_overhead({0, kv_layout::kv_split, 256, 2, true}, out);
  CHECK(j["cuMemCreate_in_timed_rounds"].get<std::uint64_t>() == 0);
  CHECK(j["reserve_in_timed_rounds"].get<std::uint64_t>() == 0);
  CHECK(j["block_chunks"].get<std::uint64_t>() == 256);
  CHECK(j["raw_us_per_chunk"].get<double>() > 0);
  CHECK(j["variants"].size() == 17);  // 9 of the manager and its calls, 8 address patterns
  for (const auto& [key, v] : j["variants"].items()) {
    INFO(key);
    CHECK(v["us_per_chunk"].get<double>() > 0);
    CHECK(v["quartet_ratios"].size() == 2);
  }
  const auto& d = j["manager_create_decomposition"];
  CHECK(d["driver_us_per_chunk"].get<double>() > 0);
  CHECK(d["driver_us_per_chunk"].get<double>() < d["total_us_per_chunk"].get<double>());
  CHECK(d["host_on_sim_us_per_chunk"].get<double>() > 0);
  CHECK(out.str().find("target <= 1.05 x raw") != std::string::npos);
#else
  MESSAGE("GPU_SKIP: this build has no cuda backend");
#endif
}
