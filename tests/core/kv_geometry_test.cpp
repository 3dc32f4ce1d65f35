#include "core/kv_geometry.hpp"

#include <doctest/doctest.h>

using namespace vtensor;

TEST_CASE("geometry: Llama-3-8B in the three layouts") {
  const model_spec llama = *model_preset("llama-3-8b");
  CHECK(llama.kv_bytes_per_token() == 128 * 1024);

  const kv_geometry split(llama, kv_layout::kv_split);
  CHECK(split.tensors() == 64);
  CHECK(split.bytes_per_token_per_tensor() == 2048);
  CHECK(split.tokens_per_chunk() == 1024);
  CHECK(split.bytes_per_token() == 128 * 1024);

  const kv_geometry fused(llama, kv_layout::kv_fused);
  CHECK(fused.tensors() == 32);
  CHECK(fused.bytes_per_token_per_tensor() == 4096);
  CHECK(fused.tokens_per_chunk() == 512);

  const kv_geometry major(llama, kv_layout::token_major);
  CHECK(major.tensors() == 1);
  CHECK(major.bytes_per_token_per_tensor() == 128 * 1024);
  CHECK(major.tokens_per_chunk() == 16);
}

TEST_CASE("geometry: pages, spans and layer addressing") {
  const model_spec llama = *model_preset("llama-3-8b");
  const kv_geometry split(llama, kv_layout::kv_split);
  CHECK(split.pages_for_tokens(0) == 0);
  CHECK(split.pages_for_tokens(1) == 1);
  CHECK(split.pages_for_tokens(1024) == 1);
  CHECK(split.pages_for_tokens(1025) == 2);
  const std::uint64_t span = split.tensor_span_bytes(131072);
  CHECK(span == 128 * k_chunk_bytes);
  CHECK(split.vtensor_bytes(131072) == 64 * span);
  // kv-split: K of layer l is tensor 2l, V tensor 2l+1.
  const auto l3 = split.layer(3, span);
  CHECK(l3.k_offset_bytes == 6 * span);
  CHECK(l3.v_offset_bytes == 7 * span);
  CHECK(l3.token_stride_bytes == 2048);

  const kv_geometry fused(llama, kv_layout::kv_fused);
  const auto f2 = fused.layer(2, span);
  CHECK(f2.k_offset_bytes == 2 * span);
  CHECK(f2.v_offset_bytes == 2 * span + 2048);
  CHECK(f2.token_stride_bytes == 4096);

  const kv_geometry major(llama, kv_layout::token_major);
  const auto m5 = major.layer(5, span);
  CHECK(m5.k_offset_bytes == 5 * 4096);
  CHECK(m5.v_offset_bytes == 5 * 4096 + 2048);
  CHECK(m5.token_stride_bytes == 128 * 1024);
  CHECK_THROWS_AS((void)major.layer(32, span), std::out_of_range);
}

TEST_CASE("geometry: presets, names and bad models") {
  CHECK(model_preset("yi-34b")->layers == 60);
  CHECK_FALSE(model_preset("gpt-5").has_value());
  CHECK(model_preset_names().size() >= 4);
  CHECK(kv_layout_from_string("kv-fused") == kv_layout::kv_fused);
  CHECK_FALSE(kv_layout_from_string("paged").has_value());
  // Yi-34B token-major: 240 KiB a token does not divide 2 MiB; tokens straddle pages.
  const kv_geometry yi(*model_preset("yi-34b"), kv_layout::token_major);
  CHECK(yi.bytes_per_token_per_tensor() == 240 * 1024);
  CHECK(yi.tokens_per_chunk() == 8);
  CHECK(yi.pages_for_tokens(9) == 2);
  CHECK_THROWS_AS(kv_geometry(model_spec{"broken", 0, 8, 128, 2}, kv_layout::kv_split), std::invalid_argument);
}
