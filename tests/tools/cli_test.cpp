#include "tools/cli.hpp"
#include "tests/support/bundled_data.hpp"
#include "tests/support/cli_run.hpp"
#include "tests/support/scratch_dir.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace vtt = vtensor::tools;
namespace fs = std::filesystem;

namespace {

using result = vtensor::testing::cli_result;

result run(const std::vector<std::string>& args) { return vtensor::testing::run_cli(args); }

std::string data(const std::string& name) { return VTENSOR_SOURCE_DIR "/tests/data/traces/" + name; }
using vtensor::testing::bundled_trace;

fs::path temp_file(const std::string& name) {
  const fs::path dir = vtensor::testing::scratch_dir("cli");
  fs::create_directories(dir);
  return dir / name;
}

}  // namespace

TEST_CASE("vtensor --help lists the subcommands - unknown ones exit 2") {
  const auto help = run({"--help"});
  CHECK(help.code == 0);
  CHECK(help.out.find("inspect") != std::string::npos);
  CHECK(help.out.find("gen-trace") != std::string::npos);
  CHECK(run({}).code == 2);
  const auto unknown = run({"frobnicate"});
  CHECK(unknown.code == 2);
  CHECK(unknown.err.find("unknown command 'frobnicate'") != std::string::npos);
  CHECK(vtt::find_subcommand("inspect") != nullptr);
  CHECK(run({"help", "inspect"}).out.find("usage: vtensor inspect") != std::string::npos);
}

TEST_CASE("inspect prints the reference hit rate of the Mooncake conversation trace") {
  const fs::path json = temp_file("conversation.json");
  const auto r = run({"inspect", bundled_trace("mooncake_conversation_trace.jsonl"), "--json", json.string()});
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  CHECK(r.out.find("requests: 12,031") != std::string::npos);
  CHECK(r.out.find("prompt tokens: 144,793,823") != std::string::npos);
  CHECK(r.out.find("output tokens: 4,122,048") != std::string::npos);
  CHECK(r.out.find("prefix hit rate (infinite cache, sequential): 0.3736") != std::string::npos);
  std::ifstream in(json);
  const auto summary = nlohmann::json::parse(in);
  CHECK(summary["requests"] == 12031);
  CHECK(summary["prompt_tokens"] == 144793823);
  CHECK(summary["format"] == "mooncake");
  CHECK(summary["input_lengths"]["max"] == 126195);
}

TEST_CASE("inspect: --help, bad options and bad input") {
  const auto help = run({"inspect", "--help"});
  CHECK(help.code == 0);
  CHECK(help.out.find("--block-tokens") != std::string::npos);

  const auto missing = run({"inspect"});
  CHECK(missing.code == 2);
  CHECK(missing.err.rfind("vtensor inspect: ", 0) == 0);

  CHECK(run({"inspect", data("mooncake_small.jsonl"), "--bogus"}).code == 2);
  CHECK(run({"inspect", data("mooncake_small.jsonl"), "--format", "parquet"}).code == 2);
  CHECK(run({"inspect", data("mooncake_small.jsonl"), "--block-tokens", "abc"}).code == 2);

  const auto bad = run({"inspect", data("negative_length.jsonl")});
  CHECK(bad.code == 2);
  CHECK(bad.out.empty());
  CHECK(bad.err.find("vtensor inspect: ") == 0);
  CHECK(bad.err.find("negative_length.jsonl:2: field 'output_length': negative value -5") != std::string::npos);

  const auto absent = run({"inspect", data("no_such_file.jsonl")});
  CHECK(absent.code == 2);
  CHECK(absent.err.find("cannot open") != std::string::npos);

  const auto forced = run({"inspect", data("azure_small.csv"), "--format", "azure"});
  CHECK(forced.code == 0);
  CHECK(forced.out.find("prefix hit rate (infinite cache, sequential): 0.0000") != std::string::npos);
}

TEST_CASE("inspect --json to an unwritable place exits 1") {
  const auto r = run({"inspect", data("mooncake_small.jsonl"), "--json", "/nonexistent-dir/x.json"});
  CHECK(r.code == 1);
  CHECK(r.err.find("vtensor inspect: ") == 0);
}

TEST_CASE("gen-trace writes a trace that inspect reads - same seed, same bytes") {
  const fs::path a = temp_file("gen_a.jsonl");
  const fs::path b = temp_file("gen_b.jsonl");
  const auto first = run({"gen-trace", "--out", a.string(), "-n", "3000", "--seed", "42", "--fanout-prob", "0.1",
                          "--arrival", "gamma", "--cv", "2"});
  CHECK(first.code == 0);
  CHECK(first.out.find("wrote 3000 requests") != std::string::npos);
  CHECK(first.out.find("seed 42") != std::string::npos);
  CHECK(run({"gen-trace", "--out", b.string(), "-n", "3000", "--seed", "42", "--fanout-prob", "0.1", "--arrival",
             "gamma", "--cv", "2"})
            .code == 0);
  std::ifstream in_a(a, std::ios::binary);
  std::ifstream in_b(b, std::ios::binary);
  std::stringstream text_a;
  std::stringstream text_b;
  text_a << in_a.rdbuf();
  text_b << in_b.rdbuf();
  CHECK(text_a.str() == text_b.str());

  const auto inspected = run({"inspect", a.string()});
  CHECK(inspected.code == 0);
  CHECK(inspected.out.find("requests: 3,000") != std::string::npos);
  CHECK(inspected.out.find("(vtensor)") != std::string::npos);
}

TEST_CASE("gen-trace: bad usage exits 2 and leaves no file") {
  const fs::path out = temp_file("gen_bad.jsonl");
  fs::remove(out);
  CHECK(run({"gen-trace"}).code == 2);
  CHECK(run({"gen-trace", "--out", out.string(), "--turns", "zipf:2"}).code == 2);
  CHECK(run({"gen-trace", "--out", out.string(), "--arrival", "weibull"}).code == 2);
  CHECK(run({"gen-trace", "--out", out.string(), "--rate", "0"}).code == 2);
  const auto both = run({"gen-trace", "--out", out.string(), "-n", "5", "--sessions", "5"});
  CHECK(both.code == 2);
  CHECK(both.err.find("vtensor gen-trace: ") == 0);
  CHECK_FALSE(fs::exists(out));
  CHECK(run({"gen-trace", "--help"}).out.find("--fanout-prob") != std::string::npos);
}

TEST_CASE("outputs: dash is standard output, the report then goes to standard error") {
  const fs::path cwd = fs::current_path();
  const fs::path dir = temp_file("dash_dir");
  fs::create_directories(dir);
  fs::current_path(dir);
  const result r = run({"replay", data("mooncake_small.jsonl"), "--json", "-", "--no-wall"});
  const bool dash_file = fs::exists(dir / "-");
  fs::current_path(cwd);
  REQUIRE(r.code == 0);
  CHECK_FALSE(dash_file);                       // never a file named "-"
  const auto j = nlohmann::json::parse(r.out);  // standard output is the JSON alone
  CHECK(j["requests"].get<int>() > 0);
  CHECK(r.err.find("prefix hit rate") != std::string::npos);
  const result csv = run({"replay", data("mooncake_small.jsonl"), "--timeseries", "-", "--no-wall"});
  REQUIRE(csv.code == 0);
  CHECK(csv.out.rfind("time_s,", 0) == 0);
  const result two = run({"replay", data("mooncake_small.jsonl"), "--json", "-", "--timeseries", "-"});
  CHECK(two.code == 2);
  CHECK(two.err.find("only one of them") != std::string::npos);
  const result inspect = run({"inspect", data("mooncake_small.jsonl"), "--json", "-"});
  REQUIRE(inspect.code == 0);
  CHECK(nlohmann::json::parse(inspect.out).contains("requests"));
}

TEST_CASE("outputs: replay writes through a symlink and keeps it") {
  const fs::path target = temp_file("link_target.json");
  const fs::path link = temp_file("link.json");
  fs::remove(link);
  std::ofstream(target) << "old";
  fs::create_symlink(target, link);
  const result r = run({"replay", data("mooncake_small.jsonl"), "--json", link.string(), "--no-wall"});
  REQUIRE(r.code == 0);
  CHECK(fs::is_symlink(link));
  std::ifstream in(target);
  CHECK(nlohmann::json::parse(in)["requests"].get<int>() > 0);
}

TEST_CASE("fuzz finding: an argument holding a %name% placeholder is a usage error, not a hang") {
  // Boost.Program_options looped forever substituting %canonical_option% into its own message.
  const result r = run({"replay", "--%canonical_option%", "--max-requests", "1"});
  CHECK(r.code == 2);
  CHECK(r.err.find("placeholder") != std::string::npos);
}

TEST_CASE("options: no memory, a negative count or a number that is not finite exits 2 naming the option") {
  const std::string t = data("mooncake_small.jsonl");
  struct bad {
    std::vector<std::string> args;
    const char* names;  // what the message must hold
  };
  for (const bad& b : std::vector<bad>{
           {{"replay", t, "--memory", "0"}, "--memory: '0'"},
           {{"replay", t, "--max-requests", "-1"}, "--max-requests: '-1' is negative"},
           {{"replay", t, "--tp", "-1"}, "--tp: '-1' is negative"},
           {{"replay", t, "--token-budget", "-8"}, "--token-budget: '-8' is negative"},
           {{"replay", t, "--seed", "-3"}, "--seed: '-3' is negative"},
           {{"replay", t, "--lookahead", "-1"}, "--lookahead: '-1'"},
           {{"replay", t, "--policy", "paged", "--block-tokens", "-16"}, "--block-tokens: '-16'"},
           {{"replay", t, "--policy", "paged", "--pipeline", "true"}, "--pipeline applies to policy vtensor"},
           {{"replay", t, "--time-scale", "inf"}, "--time-scale"},
           {{"replay", t, "--sample-ms", "inf"}, "--sample-ms"},
           {{"replay", t, "--step-overhead-ms", "nan"}, "--step-overhead-ms"},
           {{"compare", t, "--arm", "a=paged", "--memory", "0"}, "--memory: '0'"},
           {{"compare", t, "--arm", "a=paged", "--jobs", "-1"}, "--jobs: '-1' is negative"},
           {{"compare", t, "--arm", "a=paged --block-tokens -1"}, "arm a: --block-tokens: '-1'"},
           {{"gen-trace", "--requests", "-5", "--out", temp_file("never.jsonl").string()}, "--requests: '-5'"},
       }) {
    const result r = run(b.args);
    CAPTURE(b.names);
    CHECK(r.code == 2);
    CHECK(r.err.find(b.names) != std::string::npos);
  }
  CHECK_FALSE(fs::exists(temp_file("never.jsonl")));
}
