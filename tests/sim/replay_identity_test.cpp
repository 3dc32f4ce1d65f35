// Replays of the bundled excerpt, byte for byte against the goldens in tests/data/golden/: a
// refactoring must not change a single decision. The goldens were written by the binary before
// the redesign of the sim/core interface (commit 368cc99), with
// `tools/replay-identity.sh write BINARY`; a change that means to alter replays rewrites them the
// same way and says why in its commit.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/sim/sim_test_support.hpp"
#include "tests/support/cli_run.hpp"

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void check_identical(const std::string& layout, const std::string& lookahead) {
  const fs::path golden =
      fs::path(VTENSOR_SOURCE_DIR) / "tests/data/golden" / ("replay-" + layout + "-lookahead" + lookahead + ".json");
  const fs::path out = vtensor::sim_testing::temp_file("identity-" + layout + "-" + lookahead + ".json");
  // The trace is named relative to the source tree, as in the goldens' "config".
  const auto r =
      vtensor::testing::run_cli({"replay", "--trace", "traces/data/mooncake_conversation_excerpt.jsonl", "--layout",
                                 layout, "--lookahead", lookahead, "--no-wall", "--json", out.string()});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const std::string expected = slurp(golden);
  const std::string got = slurp(out);
  CHECK_MESSAGE(got == expected, "replay differs from " << golden << "; diff it against " << out);
}

// The Chrome trace of a short replay under memory pressure (rejections, a preemption for paged,
// decode stretches): every step, request and sample event, in the order an observer sees them.
void check_chrome_identical(const std::string& policy) {
  const fs::path golden = fs::path(VTENSOR_SOURCE_DIR) / "tests/data/golden" / ("chrome-" + policy + ".json");
  const fs::path out = vtensor::sim_testing::temp_file("identity-chrome-" + policy + ".json");
  const auto r = vtensor::testing::run_cli({"replay", "--trace", "traces/data/mooncake_conversation_excerpt.jsonl",
                                            "--max-requests", "20", "--memory", "1GiB", "--policy", policy, "--no-wall",
                                            "--json", "-", "--chrome-trace", out.string()});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK_MESSAGE(slurp(out) == slurp(golden), "the Chrome trace differs from " << golden << "; diff it against " << out);
}

}  // namespace

TEST_SUITE("replay_identity") {
  TEST_CASE("replay identity: Chrome trace, vtensor") { check_chrome_identical("vtensor"); }
  TEST_CASE("replay identity: Chrome trace, paged") { check_chrome_identical("paged"); }
  TEST_CASE("replay identity: kv-split, no lookahead") { check_identical("kv-split", "0"); }
  TEST_CASE("replay identity: kv-split, lookahead 2") { check_identical("kv-split", "2"); }
  TEST_CASE("replay identity: kv-fused, no lookahead") { check_identical("kv-fused", "0"); }
  TEST_CASE("replay identity: kv-fused, lookahead 2") { check_identical("kv-fused", "2"); }
  TEST_CASE("replay identity: token-major, no lookahead") { check_identical("token-major", "0"); }
  TEST_CASE("replay identity: token-major, lookahead 2") { check_identical("token-major", "2"); }
}
