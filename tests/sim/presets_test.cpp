// GPU and model presets and the roofline step cost (Note [Roofline step cost]).

#include <doctest/doctest.h>

#include <stdexcept>

#include "sim/presets.hpp"

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
  w.add_sequence(0, 1);
  const step_cost c = roofline(m, gpu, w, 0);
  CHECK_FALSE(c.compute_bound());
  CHECK(c.memory_s == doctest::Approx((8.030e9 * 2 + 128 * 1024) / 4.3e12));
  CHECK(c.compute_s == doctest::Approx((2 * 8.030e9 + 4.0 * 32 * 4096) / 790e12));
  CHECK(c.total_s() == doctest::Approx(c.memory_s));
  CHECK(roofline(m, gpu, w, 1e-3).total_s() == doctest::Approx(c.memory_s + 1e-3));
}

TEST_CASE("roofline: a long prefill is compute bound - attention grows with the context") {
  const auto m = model_compute_preset("llama-3-8b");
  const auto gpu = *gpu_by_name("h200");
  step_work w;
  w.add_sequence(0, 8192);
  CHECK(w.attended_pairs == 8192ull * 8193 / 2);
  const step_cost c = roofline(m, gpu, w, 0);
  CHECK(c.compute_bound());
  const double flops = 2 * 8.030e9 * 8192 + 4.0 * 32 * 4096 * (8192.0 * 8193 / 2);
  CHECK(c.compute_s == doctest::Approx(flops / 790e12));
  // The same 8192 tokens after 8192 cached ones attend twice as far on average.
  step_work later;
  later.add_sequence(8192, 8192);
  CHECK(later.attended_pairs == 8192ull * 8192 + 8192ull * 8193 / 2);
  CHECK(roofline(m, gpu, later, 0).compute_s > c.compute_s);
}

TEST_CASE("roofline: decode batch reads every sequence's context") {
  const auto m = model_compute_preset("llama-3-8b");
  const auto gpu = *gpu_by_name("a100-80gb");
  step_work w;
  for (int i = 0; i < 100; ++i) w.add_sequence(10000, 1);
  CHECK(w.computed_tokens == 100);
  CHECK(w.kv_read_tokens == 100 * 10001);
  CHECK(w.kv_write_tokens == 100);
  const step_cost c = roofline(m, gpu, w, 0);
  CHECK(c.memory_s == doctest::Approx((8.030e9 * 2 + 128.0 * 1024 * (100 * 10001 + 100)) / 1.9e12));
  // Tensor parallelism over 8 GPUs of a 70B model divides both sides.
  const auto big1 = model_compute_preset("llama-3-70b", 1);
  const auto big8 = model_compute_preset("llama-3-70b", 8);
  CHECK(roofline(big8, gpu, w, 0).memory_s == doctest::Approx(roofline(big1, gpu, w, 0).memory_s / 8));
  CHECK(roofline(big8, gpu, w, 0).compute_s == doctest::Approx(roofline(big1, gpu, w, 0).compute_s / 8));
}
