// Whole replays: golden figures of a small trace, byte-identical JSON for the same input and
// seed, the Mooncake conversation trace against its infinite-cache bound, the Azure trace
// (no prefix identity) at 0, and `vtensor replay` options, errors and outputs.

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include "tests/support/bundled_data.hpp"
#include "tests/support/cli_run.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/sim/sim_test_support.hpp"
#include "tools/cli.hpp"
#include "traces/trace_stats.hpp"

using namespace vtensor;
using namespace vtensor::sim_testing;
namespace fs = std::filesystem;

namespace {

using vtensor::testing::cli_result;

cli_result run(const std::vector<std::string>& args) { return vtensor::testing::run_cli(args); }

std::string golden_trace() { return VTENSOR_SOURCE_DIR "/tests/data/sim/mooncake_first_100.jsonl"; }
using vtensor::testing::bundled_trace;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

double infinite_cache_bound(const std::string& path) {
  auto reader = traces::open_trace(path, std::nullopt);
  return traces::compute_trace_stats(*reader).prefix_hit_rate;
}

}  // namespace

TEST_CASE("replay golden: the first 100 Mooncake requests, unlimited memory and 8 GiB") {
  const fs::path json = temp_file("golden_unlimited.json");
  auto r = run({"replay", "--trace", golden_trace(), "--memory", "unlimited", "--no-wall", "--json", json.string()});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(r.out.find("prefix hit rate: 0.0329") != std::string::npos);
  auto j = nlohmann::json::parse(slurp(json));
  const double bound = infinite_cache_bound(golden_trace());
  CHECK(j["requests"] == 100);
  CHECK(j["completed"] == 100);
  CHECK(j["rejected"] == 0);
  CHECK(j["preemptions"] == 0);
  CHECK(j["prompt_tokens"] == 1524742);
  CHECK(j["output_tokens"] == 36758);
  CHECK(j["prefix_hit_tokens"] == 50176);  // eager publication (the default): 2,560 more than at release
  CHECK(j["steps"] == 972);                // pipelined admission (the default): arrivals during a step wait one more
                                           // unless admitted late; token-major (the default layout): 971 in kv-fused
  CHECK(j["prefix_hit_rate"].get<double>() <= bound);
  CHECK(j["prefix_hit_rate"].get<double>() > bound - 0.005);
  CHECK_FALSE(j.contains("wall_seconds"));
  CHECK(j["config"]["memory"] == "unlimited");

  // A finite budget: 3 prompts longer than 8 GiB of KV are rejected, the prefix cache is evicted.
  const fs::path small = temp_file("golden_8g.json");
  r = run({"replay", golden_trace(), "--memory", "8GiB", "--no-wall", "--json", small.string()});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  j = nlohmann::json::parse(slurp(small));
  CHECK(j["completed"] == 97);
  CHECK(j["rejected_memory"] == 3);
  CHECK(j["prefix_hit_tokens"] == 48640);
  CHECK(j["steps"] == 10250);  // token-major (the default layout); 10282 in kv-fused
  CHECK(j["peak_physical_bytes"] == 8ull << 30);
  CHECK(j["evictions"].get<int>() > 0);
  CHECK(j["prefix_hit_rate"].get<double>() <= bound);
}

TEST_CASE("replay: the same input and seed give byte-identical JSON, time series and Chrome trace") {
  std::vector<std::string> texts;
  for (const char* tag : {"a", "b"}) {
    const fs::path json = temp_file(std::string("same_") + tag + ".json");
    const fs::path csv = temp_file(std::string("same_") + tag + ".csv");
    const fs::path chrome = temp_file(std::string("same_") + tag + ".trace.json");
    const auto r =
        run({"replay", golden_trace(), "--memory", "8GiB", "--seed", "7", "--no-wall", "--json", json.string(),
             "--timeseries", csv.string(), "--chrome-trace", chrome.string(), "--sample-ms", "500"});
    REQUIRE_MESSAGE(r.code == 0, r.err);
    texts.push_back(slurp(json) + slurp(csv) + slurp(chrome));
    if (std::string(tag) == "a") {
      const auto j = nlohmann::json::parse(slurp(json));
      CHECK(j["seed"] == 7);
      // The time series has a header and one row per 0.5 simulated seconds.
      const std::string series = slurp(csv);
      CHECK(series.rfind("time_s,physical_bytes,mapped_bytes", 0) == 0);
      const auto rows = std::count(series.begin(), series.end(), '\n') - 1;
      CHECK(rows == static_cast<long>(j["simulated_seconds"].get<double>() / 0.5) + 1);
      // The Chrome trace is valid JSON with steps and request spans.
      const auto t = nlohmann::json::parse(slurp(chrome));
      int steps = 0, begins = 0, ends = 0;
      for (const auto& e : t["traceEvents"]) {
        if (e["name"] == "step") ++steps;
        if (e["name"] == "request" && e["ph"] == "b") ++begins;
        if (e["name"] == "request" && e["ph"] == "e") ++ends;
      }
      CHECK(steps == j["steps"].get<int>());
      CHECK(begins == 97);
      CHECK(ends == 97);
    }
  }
  CHECK(texts[0] == texts[1]);
  // With wall_seconds the JSON has it; removing it gives the same bytes as --no-wall.
  const fs::path with_wall = temp_file("with_wall.json");
  REQUIRE(run({"replay", golden_trace(), "--memory", "8GiB", "--seed", "7", "--sample-ms", "500", "--json",
               with_wall.string()})
              .code == 0);
  auto j = nlohmann::ordered_json::parse(slurp(with_wall));
  CHECK(j["wall_seconds"].get<double>() > 0);
  j.erase("wall_seconds");
  CHECK(j.contains("measured"));  // the wall-clock block of the VMM split, left out by --no-wall too
  j.erase("measured");
  CHECK(j.dump(2) + "\n" == slurp(temp_file("same_a.json")));
}

TEST_CASE("replay: the whole Mooncake conversation trace with unlimited memory stays under the infinite-cache bound") {
  const std::string path = bundled_trace("mooncake_conversation_trace.jsonl");
  const double bound = infinite_cache_bound(path);
  CHECK(bound == doctest::Approx(0.3736).epsilon(1e-4));
  // Slowed 4x the trace fits one H200: turns arrive after the previous one finished and the hit
  // rate meets the bound; at the cluster's own pace (time scale 1) queueing delays turns past the
  // arrival of the next, and the rate is lower (0.3318 measured, distance 0.042).
  auto cfg = llama_replay();
  cfg.replica.check_every_step = false;
  cfg.time_scale = 4;
  const auto s = replay_file(path, llama_policy(k_unlimited), cfg);
  const double rate = static_cast<double>(s.counters.hit_tokens) / static_cast<double>(s.counters.prompt_tokens);
  MESSAGE("prefix hit rate " << rate << ", bound " << bound << ", distance " << bound - rate);
  CHECK(s.counters.completed == 12031);
  CHECK(s.counters.prompt_tokens == 144793823);
  CHECK(s.counters.output_tokens == 4122048);
  CHECK(rate <= bound);
  CHECK(bound - rate < 0.001);
}

TEST_CASE("replay: the Azure trace, without prefix identity, has a hit rate of 0") {
  const std::string trace = bundled_trace("AzureLLMInferenceTrace_conv.csv");
  const fs::path json = temp_file("azure.json");
  const auto r = run({"replay", trace, "--max-requests", "3000", "--no-wall", "--json", json.string()});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto j = nlohmann::json::parse(slurp(json));
  CHECK(j["prefix_hit_rate"] == 0.0);
  CHECK(j["prefix_hit_tokens"] == 0);
  CHECK(j["completed"].get<int>() + j["rejected"].get<int>() == j["requests"].get<int>());
  CHECK(j["config"]["format"] == "azure");
}

TEST_CASE("replay: the default is the bundled excerpt with Llama-3-8B on an H200") {
  const fs::path json = temp_file("default.json");
  const auto r = run({"replay", "--max-requests", "50", "--json", json.string()});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto j = nlohmann::json::parse(slurp(json));
  CHECK(j["requests"] == 50);
  const std::string trace = j["config"]["trace"];
  CHECK(trace.find("traces/data/mooncake_conversation_excerpt.jsonl") != std::string::npos);
  CHECK(j["config"]["model"] == "llama-3-8b");
  CHECK(j["config"]["gpu"] == "h200");
  CHECK(j["config"]["policy_options"]["layout"] == "token-major");  // Note [Default layout]
  CHECK(j["config"]["time_scale"] == 3.0);                          // Note [The main job's operating point]
  CHECK(r.out.rfind("operating point: the bundled excerpt at 1/3 of its arrival rate", 0) == 0);
  // Default memory: the H200's memory minus Llama-3-8B's weights.
  CHECK(j["config"]["memory"].get<std::uint64_t>() == 71'313ull * 2 * 1024 * 1024 - 16'060'000'000ull);
  for (const char* key : {"requests",
                          "completed",
                          "rejected",
                          "preemptions",
                          "prompt_tokens",
                          "output_tokens",
                          "prefix_hit_rate",
                          "peak_physical_bytes",
                          "peak_mapped_bytes",
                          "mean_internal_fragmentation",
                          "peak_internal_fragmentation",
                          "mean_sharing_saving",
                          "cow_bytes",
                          "vmm_calls",
                          "vmm_time_us",
                          "ttft_ms",
                          "tpot_ms",
                          "e2e_ms",
                          "throughput_tokens_per_s",
                          "simulated_seconds",
                          "wall_seconds",
                          "seed",
                          "config"}) {
    CHECK_MESSAGE(j.contains(key), key);
  }
  CHECK(j["vmm_calls"].contains("map"));
  CHECK(j["ttft_ms"].contains("p99"));
  CHECK(r.out.find("prefix hit rate") != std::string::npos);
  CHECK(r.err.empty());  // no progress line when stderr is not a terminal

  // A trace or a time scale given: the run is the user's, no operating point is chosen.
  const auto given = run({"replay", "--max-requests", "50", "--time-scale", "1", "--json", json.string()});
  REQUIRE_MESSAGE(given.code == 0, given.err);
  CHECK(nlohmann::json::parse(slurp(json))["config"]["time_scale"] == 1.0);
  CHECK(given.out.find("operating point") == std::string::npos);
}

TEST_CASE("replay: bad options and bad input exit 2 and write nothing") {
  const fs::path json = temp_file("bad.json");
  fs::remove(json);
  const std::string t = golden_trace();
  const fs::path bad_calibration = temp_file("bad_calibration.json");
  {
    std::ofstream(bad_calibration) << R"({"format": "vtensor-calibration"})";  // no version, no calls
  }
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"replay", t, "--memory", "lots", "--json", json.string()},
           {"replay", t, "--memory", "12XB", "--json", json.string()},
           {"replay", t, "--layout", "diagonal", "--json", json.string()},
           {"replay", t, "--gpu", "h100", "--json", json.string()},
           {"replay", t, "--model", "gpt-2", "--json", json.string()},
           {"replay", t, "--model", "llama-3-70b", "--tp", "3", "--json", json.string()},
           {"replay", t, "--model", "llama-3-70b", "--gpu", "a100-80gb", "--json", json.string()},  // weights > GPU
           {"replay", t, "--policy", "magic", "--json", json.string()},
           {"replay", t, "--backend", "abacus", "--json", json.string()},
           {"replay", t, "--eviction", "random-ish", "--json", json.string()},
           {"replay", t, "--partial", "maybe", "--json", json.string()},
           {"replay", t, "--time-scale", "0", "--json", json.string()},
           {"replay", t, "--token-budget", "0", "--json", json.string()},
           {"replay", t, "--format", "parquet", "--json", json.string()},
           {"replay", t, "--frobnicate"},
           {"replay", VTENSOR_SOURCE_DIR "/tests/data/traces/bad_json.jsonl", "--json", json.string()},
           {"replay", "/nonexistent/trace.jsonl", "--json", json.string()},
           {"replay", t, "--calibration", bad_calibration.string(), "--json", json.string()},
           {"replay", t, "--calibration", "/nonexistent/cal.json", "--json", json.string()},
       }) {
    const auto r = run(args);
    std::string words;
    for (const auto& a : args) words += a + " ";
    CHECK_MESSAGE(r.code == 2, words);
    CHECK(r.err.rfind("vtensor replay: ", 0) == 0);
    CHECK_FALSE(fs::exists(json));
  }
  // A bad trace line mid-replay leaves no partial output behind either.
  const auto bad = write_trace("bad_mid.jsonl", {mooncake_line(0, 100, 2, 1), mooncake_line(5, 100, 2, 2), "{oops"});
  const fs::path csv = temp_file("bad_mid.csv");
  fs::remove(csv);
  const auto r = run({"replay", bad, "--json", json.string(), "--timeseries", csv.string()});
  CHECK(r.code == 2);
  CHECK(r.err.find("bad_mid.jsonl:3") != std::string::npos);
  CHECK_FALSE(fs::exists(json));
  CHECK_FALSE(fs::exists(csv));
  // An unwritable output is a failure (1), not bad usage.
  CHECK(run({"replay", t, "--max-requests", "5", "--json", "/nonexistent/dir/out.json"}).code == 1);
  CHECK(run({"replay", "--help"}).out.find("--time-scale") != std::string::npos);
}

TEST_CASE("replay: byte sizes") {
  CHECK(sim::parse_byte_size("80GiB") == 80ull << 30);
  CHECK(sim::parse_byte_size("500MiB") == 500ull << 20);
  CHECK(sim::parse_byte_size("1.5GB") == 1'500'000'000ull);
  CHECK(sim::parse_byte_size("1e9") == 1'000'000'000ull);
  CHECK(sim::parse_byte_size("4096") == 4096);
  CHECK(sim::parse_byte_size("unlimited") == k_unlimited);
  CHECK_THROWS_AS((void)sim::parse_byte_size(""), std::invalid_argument);
  CHECK_THROWS_AS((void)sim::parse_byte_size("GiB"), std::invalid_argument);
  CHECK_THROWS_AS((void)sim::parse_byte_size("-5GiB"), std::invalid_argument);
  CHECK_THROWS_AS((void)sim::parse_byte_size("5 parsecs"), std::invalid_argument);
}

TEST_CASE("replay: the load report flags an overloaded replica and estimates the time scale that keeps up") {
  // 40 requests of 4,000 prompt tokens and 200 output tokens. Packed one millisecond apart they
  // arrive far faster than an H200 serves them; spread 20 s apart each finds the replica idle.
  std::vector<std::string> dense, sparse;
  for (std::uint64_t i = 0; i < 40; ++i) {
    dense.push_back(mooncake_line(i, 4000, 200, 1000 * (i + 1)));
    sparse.push_back(mooncake_line(i * 20'000, 4000, 200, 1000 * (i + 1)));
  }
  const auto config = llama_replay();
  const sim::replay_summary d = replay_file(write_trace("load_dense.jsonl", dense), llama_policy(k_unlimited), config);
  const sim::load_report ld = sim::load_of(d, 1.0);
  CHECK(ld.arrival_span_seconds == doctest::Approx(0.039));
  CHECK(ld.overloaded);
  CHECK(ld.offered_load > 1);
  CHECK(ld.keep_up_time_scale == doctest::Approx(ld.offered_load));
  CHECK(d.queue.count == 40);
  CHECK(d.queue.p50 > 0);

  const sim::replay_summary s =
      replay_file(write_trace("load_sparse.jsonl", sparse), llama_policy(k_unlimited), config);
  const sim::load_report ls = sim::load_of(s, 1.0);
  CHECK(ls.arrival_span_seconds == doctest::Approx(780.0));
  CHECK_FALSE(ls.overloaded);
  CHECK(ls.offered_load < 0.1);
  CHECK(s.queue.p99 == 0);  // every request is admitted the instant it arrives
  const auto j = sim::summary_json(s, {{"time_scale", 1.0}}, 0, false);
  CHECK(j["load"]["overloaded"] == false);
  CHECK(j["queue_ms"]["count"] == 40);
}
