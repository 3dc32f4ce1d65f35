#include "backends/registry.hpp"
#if VTENSOR_HAVE_CUDA
#include "backends/cuda_backend.hpp"
#endif

#include <algorithm>

#include <doctest/doctest.h>

#include "backends/latency_model.hpp"
#include "backends/sim_backend.hpp"
#include "tests/backends/test_helpers.hpp"

namespace vtensor::backend_testing {
namespace {

TEST_SUITE("backends") {
  TEST_CASE("registry: sim is always there and first") {
    const std::vector<std::string> names = backend_names();
    REQUIRE_FALSE(names.empty());
    CHECK(names.front() == "sim");
    for (const std::string& name : names) {
#if VTENSOR_HAVE_CUDA
      if (name == "cuda") {
        try {
          const auto backend = make_backend(name, backend_config{});
          CHECK(backend->name() == name);
        } catch (const cuda_unavailable& e) {
          // A build with the toolkit on a machine without a GPU: the message says so plainly.
          CHECK(std::string(e.what()).find("cuda backend: ") == 0);
        }
        continue;
      }
#endif
      CHECK(make_backend(name, backend_config{})->name() == name);
    }
  }

  TEST_CASE("registry: an unknown name lists the names this build has") {
    std::string expected = "unknown backend 'foo'; this build has: ";
    const std::vector<std::string> names = backend_names();
    for (std::size_t i = 0; i < names.size(); ++i) {
      expected += (i == 0 ? "" : ", ") + names[i];
    }
    CHECK_THROWS_WITH_AS((void)make_backend("foo", backend_config{}), expected.c_str(), unknown_backend_error);
    CHECK_THROWS_AS((void)make_backend("", backend_config{}), std::invalid_argument);
  }

  TEST_CASE("registry: sim takes capacity, latency and calibration file from the config") {
    backend_config config;
    config.capacity_bytes = 5 * k_mib;
    const auto h200 = make_backend("sim", config);
    CHECK(h200->capacity_chunks() == 2);
    CHECK(dynamic_cast<const sim_backend&>(*h200).model() == latency_model::h200());

    config.zero_latency = true;
    CHECK(dynamic_cast<const sim_backend&>(*make_backend("sim", config)).model() == latency_model::zero());

    const temp_dir dir;
    latency_model custom = latency_model::h200();
    custom.set_cost(vmm_call::map, {7, 7, 7});
    custom.save(dir.path() / "custom.json");
    config.zero_latency = false;
    config.calibration_file = (dir.path() / "custom.json").string();
    const auto loaded = make_backend("sim", config);
    CHECK(dynamic_cast<const sim_backend&>(*loaded).model() == custom);

    config.calibration_file = (dir.path() / "absent.json").string();
    CHECK_THROWS_AS((void)make_backend("sim", config), calibration_error);
  }

}  // TEST_SUITE

}  // namespace
}  // namespace vtensor::backend_testing
