#include "backends/latency_model.hpp"

#include <string>

#include <doctest/doctest.h>

#include "tests/backends/test_helpers.hpp"

namespace vtensor::backend_testing {
namespace {

constexpr std::string_view k_valid = R"({
  "format": "vtensor-calibration", "version": 1, "device": "test GPU", "source": "unit test",
  "notes": "ignored",
  "calls": {
    "reserve": {"mean_ns": 1}, "free_range": {"mean_ns": 2}, "create": {"mean_ns": 3},
    "release": {"mean_ns": 4}, "map": {"mean_ns": 5.6, "p50_ns": 5, "p99_ns": 9},
    "set_access": {"mean_ns": 6}, "unmap": {"mean_ns": 7}
  }
})";

/// Replaces the first occurrence of `from` in k_valid by `to`.
std::string variant(std::string_view from, std::string_view to) {
  std::string text(k_valid);
  const std::size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  return text;
}

/// Checks that loading `text` from a file fails naming the file, `key` and `why`.
void check_malformed(const std::string& text, const std::string& key, const std::string& why) {
  const temp_dir dir;
  const auto file = dir.write("bad.json", text);
  INFO("key " << key);
  try {
    (void)latency_model::load(file);
    FAIL("expected calibration_error");
  } catch (const calibration_error& e) {
    const std::string what = e.what();
    INFO("what(): " << what);
    CHECK(e.file() == file.string());
    CHECK(e.key() == key);
    CHECK(what.find(file.string()) != std::string::npos);
    CHECK(what.find(key) != std::string::npos);
    CHECK(what.find(why) != std::string::npos);
  }
}

TEST_SUITE("backends") {
  TEST_CASE("latency_model: H200 defaults are the calibration README's figures") {
    const latency_model m = latency_model::h200();
    CHECK(m.device() == "NVIDIA H200");
    CHECK(m.cost_ns(vmm_call::create) == 15'740);
    CHECK(m.cost_ns(vmm_call::map) == 2'340);
    CHECK(m.cost_ns(vmm_call::set_access) == 44'070);
    CHECK(m.cost_ns(vmm_call::unmap) == 29'520);
    CHECK(m.cost_ns(vmm_call::release) == 16'980);
    CHECK(m.cost_ns(vmm_call::reserve) == 4'360);
    CHECK(m.cost_ns(vmm_call::free_range) == 14'030);
    CHECK(m.cost(vmm_call::set_access).p99_ns == 629'320);
    for (std::size_t i = 0; i < k_vmm_call_kinds; ++i) {
      CHECK(latency_model::zero().cost_ns(static_cast<vmm_call>(i)) == 0);
    }
  }

  TEST_CASE("latency_model: the shipped h200.json equals the built-in H200 model") {
    const latency_model loaded =
        latency_model::load(std::string(VTENSOR_SOURCE_DIR) + "/backends/calibration/h200.json");
    CHECK(loaded == latency_model::h200());
  }

  TEST_CASE("latency_model: save then load gives the same model") {
    const temp_dir dir;
    latency_model m = latency_model::h200();
    m.set_cost(vmm_call::map, {1, 2, 3});
    m.set_source("round trip");
    m.save(dir.path() / "out.json");
    CHECK(latency_model::load(dir.path() / "out.json") == m);
    CHECK_FALSE(std::filesystem::exists(dir.path() / "out.json.tmp"));
    CHECK(latency_model::parse(m.to_json(), "<string>") == m);
    CHECK_THROWS_AS(m.save(dir.path() / "missing-dir" / "out.json"), calibration_error);
  }

  TEST_CASE("latency_model: a valid file loads - fractions round - optional fields default") {
    const latency_model m = latency_model::parse(k_valid, "<string>");
    CHECK(m.device() == "test GPU");
    CHECK(m.cost_ns(vmm_call::map) == 6);
    CHECK(m.cost(vmm_call::map).p99_ns == 9);
    CHECK(m.cost(vmm_call::unmap) == call_cost{7, 0, 0});
  }

  TEST_CASE("latency_model: malformed files name the file, the key and the reason") {
    check_malformed("{ not json", "", "not valid JSON");
    check_malformed("[1, 2]", "", "expected a JSON object");
    check_malformed(variant("\"vtensor-calibration\"", "\"other\""), "format", "expected \"vtensor-calibration\"");
    check_malformed(variant("\"version\": 1", "\"version\": 2"), "version", "expected 1");
    check_malformed(variant("\"calls\"", "\"kalls\""), "calls", "missing");
    check_malformed(variant("\"unmap\": {\"mean_ns\": 7}", "\"unmap\": 7"), "calls.unmap", "expected an object");
    check_malformed(variant("\"unmap\"", "\"unmapp\""), "calls.unmapp", "unknown call");
    check_malformed(variant("\"create\": {\"mean_ns\": 3}", "\"create\": {\"p50_ns\": 3}"), "calls.create.mean_ns",
                    "missing");
    check_malformed(variant("\"mean_ns\": 3", "\"mean_ns\": -3"), "calls.create.mean_ns", "non-negative");
    check_malformed(variant("\"mean_ns\": 3", "\"mean_ns\": \"3\""), "calls.create.mean_ns", "string");
    check_malformed(variant("\"p99_ns\": 9", "\"p99_ns\": null"), "calls.map.p99_ns", "null");
    check_malformed(variant("\"device\": \"test GPU\"", "\"device\": 5"), "device", "expected a string");

    check_malformed(variant("\"release\": {\"mean_ns\": 4},", ""), "calls.release", "missing");

    const temp_dir dir;
    const auto missing = dir.path() / "nope.json";
    CHECK_THROWS_WITH_AS((void)latency_model::load(missing),
                         doctest::Contains((missing.string() + ": cannot open").c_str()), calibration_error);
  }

}  // TEST_SUITE

}  // namespace
}  // namespace vtensor::backend_testing

TEST_CASE("latency model: a number too large for a double is a calibration error (fuzz finding)") {
  CHECK_THROWS_AS((void)vtensor::latency_model::parse(R"({"calls": {"map": {"mean_ns": 1e999}}})", "<test>"),
                  vtensor::calibration_error);
}
