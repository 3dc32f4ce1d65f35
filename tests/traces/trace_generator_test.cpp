#include "traces/trace_generator.hpp"
#include "tests/support/scratch_dir.hpp"
#include "traces/distribution.hpp"
#include "traces/trace_stats.hpp"
#include "traces/vtensor_reader.hpp"
#include "traces/vtensor_writer.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace vt = vtensor::traces;
namespace fs = std::filesystem;

namespace {

fs::path temp_file(const std::string& name) {
  const fs::path dir = vtensor::testing::scratch_dir("traces");
  fs::create_directories(dir);
  return dir / name;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_trace(vt::generator_params params, const fs::path& path) {
  vt::trace_generator generator(params);
  vt::vtensor_writer writer(path.string(), params.block_tokens, {{"generator", params.to_json()}});
  vt::trace_request request;
  while (generator.next(request)) writer.write(request);
  writer.commit();
}

}  // namespace

TEST_CASE("distribution specs parse, print and sample") {
  vt::random_engine engine(1);
  CHECK(vt::int_distribution::parse("17").sample(engine) == 17);
  CHECK(vt::int_distribution::parse("const:5").to_string() == "const:5");
  const auto uniform = vt::int_distribution::parse("uniform:2:4");
  for (int i = 0; i < 100; ++i) {
    const auto value = uniform.sample(engine);
    CHECK((value >= 2 && value <= 4));
  }
  const auto geometric = vt::int_distribution::parse("geometric:3");
  double sum = 0;
  for (int i = 0; i < 20000; ++i) sum += static_cast<double>(geometric.sample(engine));
  CHECK(sum / 20000 == doctest::Approx(3.0).epsilon(0.05));
  const auto lognormal = vt::int_distribution::parse("lognormal:400:1");
  CHECK(lognormal.mean() == doctest::Approx(400 * std::exp(0.5)));
  CHECK_THROWS_AS((void)vt::int_distribution::parse("lognormal:400"), std::invalid_argument);
  CHECK_THROWS_AS((void)vt::int_distribution::parse("zipf:1"), std::invalid_argument);
  CHECK_THROWS_AS((void)vt::int_distribution::parse("uniform:5:2"), std::invalid_argument);
  CHECK_THROWS_AS((void)vt::int_distribution::parse("exp:x"), std::invalid_argument);
}

TEST_CASE("generator: same seed, byte-identical file - another seed, another file") {
  vt::generator_params params;
  params.requests = 2000;
  params.fanout_probability = 0.2;
  params.fanout_suffix_tokens = vt::int_distribution::parse("uniform:0:300");
  params.arrival = vt::arrival_process::gamma;
  params.arrival_cv = 2.0;
  write_trace(params, temp_file("a.jsonl"));
  write_trace(params, temp_file("b.jsonl"));
  params.seed = 2;
  write_trace(params, temp_file("c.jsonl"));
  const std::string a = slurp(temp_file("a.jsonl"));
  CHECK(a.size() > 10000);
  CHECK(a == slurp(temp_file("b.jsonl")));
  CHECK(a != slurp(temp_file("c.jsonl")));
}

TEST_CASE("generator: turns extend the previous context's full blocks - reader accepts it") {
  vt::generator_params params;
  params.requests = 0;
  params.sessions = 300;
  params.block_tokens = 64;
  params.turns = vt::int_distribution::parse("uniform:1:6");
  params.max_context_tokens = 8192;
  params.system_prompts = 4;
  params.system_tokens = vt::int_distribution::parse("const:200");
  write_trace(params, temp_file("turns.jsonl"));

  vt::vtensor_reader reader(temp_file("turns.jsonl").string());
  CHECK(reader.block_tokens() == 64);
  std::map<std::uint64_t, vt::trace_request> last_turn;
  std::uint64_t requests = 0;
  std::uint64_t continued = 0;
  vt::trace_request request;
  while (reader.next(request)) {
    ++requests;
    CHECK(request.input_tokens + request.output_tokens <= 8192);
    const auto previous = last_turn.find(request.session);
    if (previous == last_turn.end()) {
      CHECK(request.turn == 0);
      CHECK(request.block_keys.size() >= 3);  // the 200-token system prompt's 3 full blocks
    } else {
      ++continued;
      const vt::trace_request& before = previous->second;
      CHECK(request.turn == before.turn + 1);
      const std::uint64_t context = std::uint64_t{before.input_tokens} + before.output_tokens;
      CHECK(request.input_tokens > context);
      const std::size_t full_prompt_blocks = before.input_tokens / 64;
      for (std::size_t i = 0; i < full_prompt_blocks; ++i) {
        CHECK(request.block_keys[i] == before.block_keys[i]);
      }
      // A block the previous turn had partial is extended now: it must not keep its key.
      if (before.input_tokens % 64 != 0) {
        CHECK(request.block_keys[full_prompt_blocks] != before.block_keys[full_prompt_blocks]);
      }
    }
    last_turn[request.session] = request;
  }
  CHECK(last_turn.size() == 300);
  CHECK(continued > 300);
  CHECK(requests == last_turn.size() + continued);
}

TEST_CASE("generator: fan-out siblings arrive together and share the prompt") {
  vt::generator_params params;
  params.requests = 500;
  params.turns = vt::int_distribution::parse("const:1");
  params.fanout_probability = 1.0;
  params.fanout = vt::int_distribution::parse("const:3");
  vt::trace_generator generator(params);
  std::vector<vt::trace_request> requests;
  vt::trace_request request;
  while (generator.next(request)) requests.push_back(request);
  REQUIRE(requests.size() == 500);
  for (std::size_t i = 0; i + 2 < requests.size(); i += 3) {
    CHECK(requests[i].arrival_us == requests[i + 2].arrival_us);
    CHECK(requests[i].session == requests[i + 2].session);
    CHECK(requests[i].block_keys == requests[i + 1].block_keys);
  }
}

TEST_CASE("generator: bad parameters are refused") {
  vt::generator_params params;
  params.sessions = 10;  // and requests = 1000 by default
  CHECK_THROWS_AS(vt::trace_generator{params}, std::invalid_argument);
  params.sessions = 0;
  params.session_rate_per_s = 0;
  CHECK_THROWS_AS(vt::trace_generator{params}, std::invalid_argument);
}

TEST_CASE("writer: nothing at the target until commit") {
  const fs::path path = temp_file("uncommitted.jsonl");
  fs::remove(path);
  {
    vt::vtensor_writer writer(path.string(), 512);
    vt::trace_request request;
    request.input_tokens = 10;
    request.output_tokens = 1;
    writer.write(request);
  }
  CHECK_FALSE(fs::exists(path));
  for (const auto& entry : fs::directory_iterator(path.parent_path())) {
    CHECK(entry.path().filename().string().find("uncommitted.jsonl.tmp") == std::string::npos);
  }
}
