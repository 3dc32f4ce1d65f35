// GPU and model presets and the roofline step cost (Note [Roofline step cost]).

#include <doctest/doctest.h>

#include <fstream>

#include <stdexcept>

#include "sim/presets.hpp"
#include "tests/sim/sim_test_support.hpp"

using namespace vtensor::sim;

TEST_CASE("presets: GPUs by name, measured ceilings") {
  const auto h200 = gpu_by_name("h200");
  REQUIRE(h200);
  CHECK(h200->flop_rate == doctest::Approx(790e12));
  CHECK(h200->bandwidth == doctest::Approx(4.3e12));
  CHECK(h200->memory_bytes == 71'313ull * 2 * 1024 * 1024);
  const auto a100 = gpu_by_name("a100-80gb");
  REQUIRE(a100);
  CHECK(a100->flop_rate < 312e12);
  CHECK(a100->memory_bytes == 80ull << 30);
  CHECK_FALSE(gpu_by_name("h100"));
  CHECK(gpu_names().size() == 2);
}

TEST_CASE("presets: models, tensor parallelism divides weights and KV heads") {
  const auto m = model_compute_preset("llama-3-8b");
  CHECK(m.layers == 32);
  CHECK(m.hidden == 4096);
  CHECK(m.kv_bytes_per_token_per_gpu() == 128 * 1024);
  CHECK(m.weight_bytes_per_gpu() == doctest::Approx(16.06e9).epsilon(1e-3));
  const auto big = model_compute_preset("llama-3-70b", 4);
  CHECK(big.kv.kv_heads == 2);
  CHECK(big.kv_bytes_per_token_per_gpu() == 80 * 2 * 2 * 128 * 2);
  CHECK(big.weight_bytes_per_gpu() == doctest::Approx(70.554e9 * 2 / 4).epsilon(1e-6));
  CHECK(model_compute_preset("yi-6b").kv.kv_heads == 4);
  CHECK(model_compute_preset("yi-34b").hidden == 7168);
  CHECK_THROWS_AS((void)model_compute_preset("llama-3-70b", 3), std::invalid_argument);
  CHECK_THROWS_AS((void)model_compute_preset("llama-3-70b", 0), std::invalid_argument);
  CHECK_THROWS_AS((void)model_compute_preset("gpt-2"), std::invalid_argument);
  CHECK(vtensor::model_preset_names().size() == 4);
}

TEST_CASE("roofline: one decode token is bound by streaming the weights") {
  const auto m = model_compute_preset("llama-3-8b");
  const auto gpu = *gpu_by_name("h200");
  step_work w;
  w.add_sequence(0, 1, true);
  const step_cost c = roofline(m, gpu, w, 0);
  CHECK_FALSE(c.compute_bound());
  CHECK(c.linear.memory_s == doctest::Approx(8.030e9 * 2 / 4.3e12));
  CHECK(c.linear.compute_s == doctest::Approx(2 * 8.030e9 / 790e12));
  CHECK(c.decode_attention.memory_s == doctest::Approx(2.0 * 128 * 1024 / 4.3e12));  // reads 1, writes 1
  CHECK(c.decode_attention.compute_s == doctest::Approx(4.0 * 32 * 4096 / 790e12));
  CHECK(c.prefill_attention.bound_s() == 0);
  CHECK(c.total_s() == doctest::Approx(c.linear.memory_s + c.decode_attention.memory_s));
  CHECK(roofline(m, gpu, w, 1e-3).total_s() == doctest::Approx(c.total_s() + 1e-3));
}

TEST_CASE("roofline: a long prefill is compute bound - attention grows with the context") {
  const auto m = model_compute_preset("llama-3-8b");
  const auto gpu = *gpu_by_name("h200");
  step_work w;
  w.add_sequence(0, 8192, false);
  CHECK(w.prefill.attended_pairs == 8192ull * 8193 / 2);
  CHECK(w.decode.attended_pairs == 0);
  const step_cost c = roofline(m, gpu, w, 0);
  CHECK(c.compute_bound());
  CHECK(c.linear.compute_s == doctest::Approx(2 * 8.030e9 * 8192 / 790e12));
  CHECK(c.prefill_attention.compute_s == doctest::Approx(4.0 * 32 * 4096 * (8192.0 * 8193 / 2) / 790e12));
  CHECK(c.total_s() == doctest::Approx(c.linear.compute_s + c.prefill_attention.compute_s));
  // The same 8192 tokens after 8192 cached ones attend twice as far on average.
  step_work later;
  later.add_sequence(8192, 8192, false);
  CHECK(later.prefill.attended_pairs == 8192ull * 8192 + 8192ull * 8193 / 2);
  CHECK(roofline(m, gpu, later, 0).compute_s() > c.compute_s());
}

TEST_CASE("roofline: decode batch reads every sequence's context") {
  const auto m = model_compute_preset("llama-3-8b");
  const auto gpu = *gpu_by_name("a100-80gb");
  step_work w;
  for (int i = 0; i < 100; ++i) w.add_sequence(10000, 1, true);
  CHECK(w.computed_tokens == 100);
  CHECK(w.decode.kv_read_tokens == 100 * 10001);
  CHECK(w.decode.kv_write_tokens == 100);
  const step_cost c = roofline(m, gpu, w, 0);
  CHECK(c.memory_s() == doctest::Approx((8.030e9 * 2 + 128.0 * 1024 * (100 * 10001 + 100)) / 1.9e12));
  // Tensor parallelism over 8 GPUs of a 70B model divides both sides.
  const auto big1 = model_compute_preset("llama-3-70b", 1);
  const auto big8 = model_compute_preset("llama-3-70b", 8);
  CHECK(roofline(big8, gpu, w, 0).memory_s() == doctest::Approx(roofline(big1, gpu, w, 0).memory_s() / 8));
  CHECK(roofline(big8, gpu, w, 0).compute_s() == doctest::Approx(roofline(big1, gpu, w, 0).compute_s() / 8));
}

TEST_CASE("roofline: kernel factors multiply the attention of their phase only") {
  const auto m = model_compute_preset("llama-3-8b");
  const auto gpu = *gpu_by_name("h200");
  step_work w;
  for (int i = 0; i < 64; ++i) w.add_sequence(4000, 1, true);
  w.add_sequence(1000, 2048, false);
  const step_cost plain = roofline(m, gpu, w, 1e-3);
  const step_cost paged = roofline(m, gpu, w, 1e-3, {1.5, 2.0});
  CHECK(paged.linear.bound_s() == doctest::Approx(plain.linear.bound_s()));
  CHECK(paged.total_s() - plain.total_s() ==
        doctest::Approx(0.5 * plain.prefill_attention.bound_s() + 1.0 * plain.decode_attention.bound_s()));
  CHECK(plain.attention_s() == doctest::Approx(plain.prefill_attention.bound_s() + plain.decode_attention.bound_s()));
  // The parts add up: linear, attention and overhead, each kernel at its own bound.
  CHECK(plain.total_s() == doctest::Approx(plain.linear.bound_s() + plain.attention_s() + 1e-3));
}

TEST_CASE("kernel factors: the built-in sets, their sources, and files that override them") {
  const auto& sets = builtin_kernel_factor_sets();
  REQUIRE(sets.size() == 2);
  CHECK(sets[0].name == "modern");
  CHECK(sets[1].name == "2024");
  for (const auto& s : sets) {
    for (const auto& [policy, f] : s.factors) {
      CHECK(f.prefill >= 1.0);
      CHECK(f.decode >= 1.0);
      CHECK(s.sources.count(policy) == 1);  // every figure has a source
    }
    CHECK(s.of("vtensor") == attention_factors{});  // contiguous layouts pay 1
    CHECK(s.of("static") == attention_factors{});
    CHECK(s.of("vattention") == attention_factors{});
  }
  CHECK(load_kernel_factors("2024").of("paged") == attention_factors{3.15, 1.23});
  CHECK(load_kernel_factors("modern").of("radix") == attention_factors{1.11, 1.11});
  // A set written out and read back is the same set.
  const kernel_factor_set back = kernel_factors_from_json(nlohmann::json::parse(sets[1].to_json().dump()), "x");
  CHECK(back.factors == sets[1].factors);
  CHECK(back.name == "2024");
  // A file: missing decode means 1; unknown fields, factors below 1 and bad JSON are refused.
  const auto path = vtensor::sim_testing::temp_file("factors.json").string();
  { std::ofstream(path) << R"({"name": "mine", "factors": {"paged": {"prefill": 1.3}}})"; }
  const kernel_factor_set mine = load_kernel_factors(path);
  CHECK(mine.name == "mine");
  CHECK(mine.of("paged") == attention_factors{1.3, 1.0});
  CHECK(mine.of("radix") == attention_factors{});
  const auto refused = [&](const std::string& text, const std::string& needle) {
    { std::ofstream(path) << text; }
    try {
      (void)load_kernel_factors(path);
      FAIL("accepted " << text);
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
      CHECK(std::string(e.what()).find(path) != std::string::npos);
    }
  };
  refused(R"({"factors": {"paged": {"prefill": 0.5}}})", "factors.paged.prefill");
  refused(R"({"factors": {"paged": {"prefil": 1.5}}})", "unknown field 'prefil'");
  refused(R"({"factors": {"paged": {"decode": "fast"}}})", "not a number");
  refused(R"({"factor": {}})", "missing object 'factors'");
  refused(R"({"factors": )", "bad JSON");
  try {
    (void)load_kernel_factors("/no/such/file.json");
    FAIL("accepted a missing file");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("modern, 2024") != std::string::npos);
  }
}
