// The compute calibration (sim/compute_calibration.hpp): the file's reader, the interpolation
// and the measured step cost.

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "sim/compute_calibration.hpp"
#include "tests/support/scratch_dir.hpp"

using namespace vtensor::sim;

namespace {

// A small valid file: two linear points, two decode points, block sizes 1 and 16.
nlohmann::json valid() {
  return nlohmann::json::parse(R"({
    "format": "vtensor-compute-calibration", "version": 1, "device": "NVIDIA H200",
    "source": "test", "model": "llama-3-8b", "tp": 1, "copy_bandwidth": 4.0e12,
    "linear": [{"tokens": 1, "seconds": 0.002, "flops": 1.6e10, "bytes": 1.6e10},
               {"tokens": 16, "seconds": 0.002, "flops": 2.56e11, "bytes": 1.6e10},
               {"tokens": 4096, "seconds": 0.1, "flops": 6.5e13, "bytes": 1.7e10}],
    "decode_attention": {"block_tokens": [1, 16], "points": [
      {"batch": 1, "context": 512, "kv_bytes": 1.0e6, "contiguous_s": 1.0e-5,
       "paged_s": {"1": 1.3e-5, "16": 1.1e-5}},
      {"batch": 8, "context": 8192, "kv_bytes": 1.0e9, "contiguous_s": 4.0e-4,
       "paged_s": {"1": 5.0e-4, "16": 4.2e-4}},
      {"batch": 32, "context": 8192, "kv_bytes": 4.0e9, "contiguous_s": 1.25e-3,
       "paged_s": {"1": 1.5e-3, "16": 1.5e-3}}]},
    "prefill_attention": "not measured"})");
}

std::string error_of(const nlohmann::json& j) {
  try {
    (void)compute_calibration_from_json(j, "cal.json");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("compute calibration: interpolation is linear in log tokens and flat beyond the ends") {
  const std::vector<std::pair<double, double>> pts{{1, 10}, {4, 30}, {64, 50}};
  CHECK(interpolate_log_linear(pts, 1) == doctest::Approx(10));
  CHECK(interpolate_log_linear(pts, 4) == doctest::Approx(30));
  CHECK(interpolate_log_linear(pts, 2) == doctest::Approx(20));   // ln 2 is half of ln 4
  CHECK(interpolate_log_linear(pts, 16) == doctest::Approx(40));  // half way from 4 to 64 in log
  CHECK(interpolate_log_linear(pts, 0.5) == doctest::Approx(10));
  CHECK(interpolate_log_linear(pts, 1e6) == doctest::Approx(50));
  CHECK(interpolate_log_linear({{8, 3}}, 100) == doctest::Approx(3));
}

TEST_CASE("compute calibration: rates by size from the file's points") {
  const compute_calibration c = compute_calibration_from_json(valid(), "cal.json");
  CHECK(c.linear_flop_rate(1) == doctest::Approx(8e12));
  CHECK(c.linear_flop_rate(16) == doctest::Approx(1.28e14));
  CHECK(c.linear_flop_rate(4) == doctest::Approx((8e12 + 1.28e14) / 2));  // ln 4 = half of ln 16
  CHECK(c.linear_flop_rate(100000) == doctest::Approx(6.5e14));
  CHECK(c.decode_bandwidth(1e6) == doctest::Approx(1e11));
  CHECK(c.decode_bandwidth(4e9) == doctest::Approx(3.2e12));
  CHECK(c.decode_bandwidth(2e9) == doctest::Approx(2.5e12 + 0.7e12 / 2));
  // Medians of paged / contiguous: block 16 -> 1.1, 1.05, 1.2; block 1 -> 1.3, 1.25, 1.2.
  CHECK(c.paged_decode_factor(16) == doctest::Approx(1.1));
  CHECK(c.paged_decode_factor(1) == doctest::Approx(1.25));
  CHECK(c.nearest_block(32) == 16);
  CHECK(c.nearest_block(2) == 1);
  CHECK(c.nearest_block(8) == 16);
  const attention_factors paged = calibrated_factors({2.0, 1.5}, {true, 16}, c);
  CHECK(paged.prefill == 2.0);  // prefill is not measured: the set's factor stays
  CHECK(paged.decode == doctest::Approx(1.1));
  CHECK(calibrated_factors({2.0, 1.5}, {false, 0}, c) == attention_factors{2.0, 1.5});
}

// valid() as version 2, with kv-fused measured at every point and token-major at the first two.
nlohmann::json with_layouts() {
  nlohmann::json j = valid();
  j["version"] = 2;
  j["decode_attention"]["layouts"] = {"kv-fused", "token-major"};
  auto& pts = j["decode_attention"]["points"];
  pts[0]["layout_s"] = {{"kv-fused", 1.0e-5}, {"token-major", 1.5e-5}};
  pts[1]["layout_s"] = {{"kv-fused", 4.4e-4}, {"token-major", 5.2e-4}};
  pts[2]["layout_s"] = {{"kv-fused", 1.5e-3}};  // token-major's pool did not fit here
  return j;
}

TEST_CASE("compute calibration: a layout's decode factor is the median of its measured ratios to kv-split") {
  const compute_calibration c = compute_calibration_from_json(with_layouts(), "cal.json");
  CHECK(c.layouts == std::vector<std::string>{"kv-fused", "token-major"});
  // kv-fused: 1.0, 1.1, 1.2 -> 1.1; token-major: 1.5, 1.3 (two points) -> 1.4.
  CHECK(c.layout_ratios(vtensor::kv_layout::kv_fused).size() == 3);
  CHECK(*c.layout_decode_factor(vtensor::kv_layout::kv_fused) == doctest::Approx(1.1));
  CHECK(*c.layout_decode_factor(vtensor::kv_layout::token_major) == doctest::Approx(1.4));
  CHECK(*c.layout_decode_factor(vtensor::kv_layout::kv_split) == 1.0);
  using vtensor::kv_layout;
  // A contiguous policy in a measured layout gets its factor; kv-split keeps the set's.
  CHECK(calibrated_factors({2.0, 1.0}, {false, 0, kv_layout::token_major}, c) == attention_factors{2.0, 1.4});
  CHECK(calibrated_factors({2.0, 1.0}, {false, 0, kv_layout::kv_split}, c) == attention_factors{2.0, 1.0});
  CHECK(calibrated_factors({2.0, 1.0}, {true, 16, kv_layout::token_major}, c).decode == doctest::Approx(1.1));
  // A version 1 file measures no layout: the set's factor stays.
  const compute_calibration v1 = compute_calibration_from_json(valid(), "cal.json");
  CHECK_FALSE(v1.layout_decode_factor(kv_layout::kv_fused).has_value());
  CHECK(calibrated_factors({1.0, 1.0}, {false, 0, kv_layout::kv_fused}, v1) == attention_factors{1.0, 1.0});
  // Round trip.
  const compute_calibration d = compute_calibration_from_json(nlohmann::json::parse(c.to_json().dump()), "again");
  CHECK(d.to_json() == c.to_json());
}

TEST_CASE("compute calibration: bad layouts are refused naming the key") {
  struct bad {
    const char* pointer;
    nlohmann::json value;
    const char* key;
  };
  const bad cases[] = {
      {"/decode_attention/layouts/0", "kv-split", "key 'decode_attention.layouts[0]'"},
      {"/decode_attention/layouts/1", "kv-fused", "key 'decode_attention.layouts[1]'"},
      {"/decode_attention/layouts/1", 7, "key 'decode_attention.layouts[1]'"},
      {"/decode_attention/layouts", "kv-fused", "key 'decode_attention.layouts'"},
      {"/decode_attention/points/1/layout_s/kv-fused", 0, "key 'decode_attention.points[1].layout_s.kv-fused'"},
      {"/decode_attention/points/0/layout_s/kv-split", 1e-5, "key 'decode_attention.points[0].layout_s.kv-split'"},
      {"/decode_attention/points/2/layout_s", 1, "key 'decode_attention.points[2].layout_s'"},
      {"/version", 1, "key 'decode_attention.layouts'"},  // version 1 has no layouts
  };
  for (const bad& b : cases) {
    nlohmann::json j = with_layouts();
    j[nlohmann::json::json_pointer(b.pointer)] = b.value;
    const std::string e = error_of(j);
    INFO(b.pointer, " -> ", e);
    CHECK(e.find("cal.json: ") == 0);
    CHECK(e.find(b.key) != std::string::npos);
  }
  nlohmann::json no_layouts = with_layouts();
  no_layouts["decode_attention"].erase("layouts");
  CHECK(error_of(no_layouts).find("key 'decode_attention.layouts': missing") != std::string::npos);
}

TEST_CASE("compute calibration: the file round-trips through to_json") {
  const compute_calibration c = compute_calibration_from_json(valid(), "cal.json");
  const compute_calibration d = compute_calibration_from_json(nlohmann::json::parse(c.to_json().dump()), "again");
  CHECK(d.to_json() == c.to_json());
  CHECK(d.decode.size() == 3);
  CHECK(d.block_tokens == std::vector<std::uint32_t>{1, 16});
}

TEST_CASE("compute calibration: bad files are refused naming the key") {
  struct bad {
    const char* pointer;  // JSON pointer to change
    nlohmann::json value;
    const char* key;  // expected in the message
  };
  const bad cases[] = {
      {"/format", "vtensor-calibration", "key 'format'"},
      {"/version", 3, "key 'version'"},
      {"/version", 0, "key 'version'"},
      {"/device", "", "key 'device'"},
      {"/tp", 0, "key 'tp'"},
      {"/copy_bandwidth", -1, "key 'copy_bandwidth'"},
      {"/linear", nlohmann::json::array(), "key 'linear'"},
      {"/linear/1/tokens", 1, "key 'linear[1].tokens'"},
      {"/linear/2/seconds", "fast", "key 'linear[2].seconds'"},
      {"/linear/0/flops", 0, "key 'linear[0].flops'"},
      {"/linear/0/extra", 1, "key 'linear[0].extra'"},
      {"/decode_attention/block_tokens/1", 12, "key 'decode_attention.block_tokens[1]'"},
      {"/decode_attention/block_tokens/1", 1, "key 'decode_attention.block_tokens[1]'"},
      {"/decode_attention/points/2/contiguous_s", nullptr, "key 'decode_attention.points[2].contiguous_s'"},
      {"/decode_attention/points/0/paged_s/32", 1e-5, "key 'decode_attention.points[0].paged_s.32'"},
      {"/decode_attention/points/1/batch", 1.5, "key 'decode_attention.points[1].batch'"},
      {"/prefill_attention", 3, "key 'prefill_attention'"},
      {"/surprise", true, "key 'surprise'"},
  };
  for (const bad& b : cases) {
    nlohmann::json j = valid();
    j[nlohmann::json::json_pointer(b.pointer)] = b.value;
    const std::string e = error_of(j);
    INFO(b.pointer, " -> ", e);
    CHECK(e.find("cal.json: ") == 0);
    CHECK(e.find(b.key) != std::string::npos);
  }
  nlohmann::json missing = valid();
  missing["decode_attention"]["points"][1]["paged_s"].erase("16");
  CHECK(error_of(missing).find("key 'decode_attention.points[1].paged_s.16': missing") != std::string::npos);
  nlohmann::json no_model = valid();
  no_model.erase("model");
  CHECK(error_of(no_model).find("key 'model': missing") != std::string::npos);
  CHECK(error_of(nlohmann::json::array()).find("expected a JSON object") != std::string::npos);
}

TEST_CASE("compute calibration: an unreadable or malformed file names the file") {
  const auto dir = vtensor::testing::scratch_dir("compute_calibration");
  const std::string path = (dir / "vtensor-compute-calibration-test.json").string();
  {
    std::ofstream out(path);
    out << "{ not json";
  }
  CHECK_THROWS_WITH_AS(load_compute_calibration(path), doctest::Contains("not valid JSON"), std::invalid_argument);
  std::filesystem::remove(path);
  CHECK_THROWS_WITH_AS(load_compute_calibration(path), doctest::Contains("cannot open"), std::invalid_argument);
}

TEST_CASE("measured step cost: linear and decode attention priced at the measured rates, prefill on the roofline") {
  const compute_calibration c = compute_calibration_from_json(valid(), "cal.json");
  const model_compute m = model_compute_preset("llama-3-8b");
  const gpu_preset gpu = *gpu_by_name("h200");
  step_work w;
  w.add_sequence(8191, 1, true);  // a decode over 8 Ki tokens of context
  w.add_sequence(0, 3, false);    // and a 3-token prefill
  const step_cost r = roofline(m, gpu, w, 1e-3, {1.0, 1.2});
  const step_cost s = measured_step_cost(m, gpu, w, 1e-3, {1.0, 1.2}, c);
  const double linear = 2.0 * m.params * 4 / c.linear_flop_rate(4);
  CHECK(s.linear.bound_s() == doctest::Approx(linear));
  const double bytes = static_cast<double>(m.kv_bytes_per_token_per_gpu()) * (8192 + 1);
  CHECK(s.decode_attention.bound_s() == doctest::Approx(bytes / c.decode_bandwidth(bytes / m.layers)));
  CHECK(s.prefill_attention.compute_s == doctest::Approx(r.prefill_attention.compute_s));
  CHECK(s.prefill_attention.memory_s == doctest::Approx(r.prefill_attention.memory_s));
  // Sides scaled together: the roofline's classification of each part stays.
  CHECK((s.linear.compute_s >= s.linear.memory_s) == (r.linear.compute_s >= r.linear.memory_s));
  CHECK(s.linear.compute_s / s.linear.memory_s == doctest::Approx(r.linear.compute_s / r.linear.memory_s));
  CHECK(s.total_s() == doctest::Approx(s.linear.bound_s() + s.prefill_attention.bound_s() +
                                       1.2 * s.decode_attention.bound_s() + 1e-3));
}
