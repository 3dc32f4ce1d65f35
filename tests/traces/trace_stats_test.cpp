#include "traces/trace_stats.hpp"
#include "tests/support/bundled_data.hpp"
#include "traces/infinite_prefix_cache.hpp"
#include "traces/trace_reader.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

namespace vt = vtensor::traces;

namespace {

vt::trace_stats stats_of(const std::string& path) {
  auto reader = vt::open_trace(path, std::nullopt);
  return vt::compute_trace_stats(*reader);
}

using vtensor::testing::bundled_trace;
std::string data(const std::string& name) { return VTENSOR_SOURCE_DIR "/tests/data/traces/" + name; }

std::string four_decimals(double value) { return fmt::format("{:.4f}", value); }

}  // namespace

TEST_CASE("infinite prefix cache: leading matches only, capped at input - 1") {
  vt::infinite_prefix_cache cache;
  vt::trace_request request;
  request.block_tokens = 4;
  request.input_tokens = 10;
  request.block_keys = {1, 2, 3};
  CHECK(cache.serve(request) == 0);
  CHECK(cache.serve(request) == 9);
  request.block_keys = {1, 5, 3};
  CHECK(cache.serve(request) == 4);
  request.block_keys = {7, 2, 3};  // equal keys under another prefix do not match
  CHECK(cache.serve(request) == 0);
  CHECK(cache.cached_blocks() == 8);
  const std::vector<std::uint64_t> probe{1, 5, 9};
  CHECK(cache.match_blocks(probe) == 2);
}

TEST_CASE("infinite prefix cache grows past its first table") {
  vt::infinite_prefix_cache cache;
  vt::trace_request request;
  request.block_tokens = 1;
  request.input_tokens = 5000;
  request.block_keys.resize(5000);
  for (std::uint64_t i = 0; i < 5000; ++i) request.block_keys[i] = i;
  CHECK(cache.serve(request) == 0);
  CHECK(cache.serve(request) == 4999);
  CHECK(cache.cached_blocks() == 5000);
}

TEST_CASE("percentiles are nearest-rank") {
  std::vector<std::uint32_t> values{5, 1, 4, 2, 3, 10, 9, 8, 7, 6};
  const auto p = vt::compute_percentiles(values);
  CHECK(p.p50 == 5);
  CHECK(p.p90 == 9);
  CHECK(p.p99 == 10);
  CHECK(p.max == 10);
  CHECK(p.mean == doctest::Approx(5.5));
  std::vector<std::uint32_t> empty;
  CHECK(vt::compute_percentiles(empty).max == 0);
}

TEST_CASE("stats of the small crafted traces") {
  const auto mooncake = stats_of(data("mooncake_small.jsonl"));
  CHECK(mooncake.requests == 4);
  CHECK(mooncake.prompt_tokens == 4348);
  CHECK(mooncake.output_tokens == 36);
  CHECK(mooncake.prefix_hit_tokens == 1024 + 511);
  CHECK(mooncake.duration_s == doctest::Approx(2.0005));
  CHECK(mooncake.block_tokens == 512);

  const auto own = stats_of(data("vtensor_small.jsonl"));
  CHECK(own.requests == 3);
  CHECK(own.sessions == 2);
  CHECK(own.max_turn == 1);
  CHECK(own.prefix_hit_tokens == 4);
  CHECK(own.prefix_hit_rate == doctest::Approx(4.0 / 22.0));
}

TEST_CASE("mooncake conversation trace: reference figures") {
  const auto stats = stats_of(bundled_trace("mooncake_conversation_trace.jsonl"));
  CHECK(stats.requests == 12'031);
  CHECK(stats.prompt_tokens == 144'793'823);
  CHECK(stats.output_tokens == 4'122'048);
  CHECK(four_decimals(stats.prefix_hit_rate) == "0.3736");
  CHECK(stats.prefix_hit_rate == doctest::Approx(0.3736229).epsilon(1e-6));
}

TEST_CASE("mooncake synthetic trace: reference figures") {
  const auto stats = stats_of(bundled_trace("mooncake_synthetic_trace.jsonl"));
  CHECK(stats.requests == 3'993);
  CHECK(stats.prompt_tokens == 61'194'628);
  CHECK(stats.output_tokens == 595'432);
  CHECK(four_decimals(stats.prefix_hit_rate) == "0.6512");
  CHECK(stats.prefix_hit_rate == doctest::Approx(0.6512410).epsilon(1e-6));
}

TEST_CASE("azure traces: no prefix identity, zero hit rate") {
  for (const char* name : {"AzureLLMInferenceTrace_conv.csv", "AzureLLMInferenceTrace_code.csv"}) {
    CAPTURE(name);
    const auto stats = stats_of(bundled_trace(name));
    CHECK(stats.prefix_hit_rate == 0.0);
    CHECK(stats.requests_with_keys == 0);
  }
  const auto conv = stats_of(bundled_trace("AzureLLMInferenceTrace_conv.csv"));
  CHECK(conv.requests == 19'366);
  CHECK(conv.prompt_tokens == 22'361'870);
  CHECK(conv.output_tokens == 4'088'665);
  CHECK(conv.duration_s == doctest::Approx(3501.7219370));
  const auto code = stats_of(bundled_trace("AzureLLMInferenceTrace_code.csv"));
  CHECK(code.requests == 8'819);
  CHECK(code.prompt_tokens == 18'059'974);
  CHECK(code.output_tokens == 245'896);
}
