// Where vtensor finds the data it ships (Note [Finding bundled data] in tools/bundled_data.hpp):
// the order of the folders, the first match winning, and an error that names every path tried.

#include "tools/bundled_data.hpp"
#include "tools/cli.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace vtensor::tools;

namespace {

/// A scratch tree: an install prefix with bin/, a source tree, a build folder inside it, a cwd.
struct scratch_tree {
  fs::path root = fs::temp_directory_path() / ("vtensor-bundled-data-test-" + std::to_string(::getpid()));
  fs::path prefix_bin = root / "prefix" / "bin";
  fs::path source = root / "src";
  fs::path build_bin = root / "src" / "build" / "bin";
  fs::path cwd = root / "cwd";
  scratch_tree() {
    for (const fs::path& d : {prefix_bin, source, build_bin, cwd}) fs::create_directories(d);
  }
  ~scratch_tree() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
  scratch_tree(const scratch_tree&) = delete;
  scratch_tree& operator=(const scratch_tree&) = delete;
  static void put(const fs::path& dir, const std::string& name) {
    fs::create_directories(dir);
    std::ofstream(dir / name) << name << '\n';
  }
};

}  // namespace

TEST_CASE("bundled data: installed share/ first, then the configured source tree, the build's tree, the cwd") {
  const scratch_tree t;
  const auto dirs = bundled_trace_dirs(t.prefix_bin, t.source, t.cwd);
  REQUIRE(dirs.size() == 4);
  CHECK(dirs[0] == (t.root / "prefix" / "share" / "vtensor" / "traces").lexically_normal());
  CHECK(dirs[1] == (t.source / "traces" / "data").lexically_normal());
  CHECK(dirs[2] == (t.root / "traces" / "data").lexically_normal());  // <exe dir>/../../traces/data
  CHECK(dirs[3] == (t.cwd / "traces" / "data").lexically_normal());
  // Unknown parts are left out, the rest keep their order.
  const auto no_source = bundled_trace_dirs(t.build_bin, fs::path{}, t.cwd);
  REQUIRE(no_source.size() == 3);
  CHECK(no_source[1] == (t.source / "traces" / "data").lexically_normal());  // the build's source tree
  CHECK(no_source[2] == (t.cwd / "traces" / "data").lexically_normal());
}

TEST_CASE("bundled data: the first folder holding the file wins, later ones are fallbacks") {
  const scratch_tree t;
  const std::string file = "excerpt.jsonl";
  const auto dirs = bundled_trace_dirs(t.prefix_bin, t.source, t.cwd);
  scratch_tree::put(t.cwd / "traces" / "data", file);
  CHECK(find_bundled(file, dirs) == dirs[3] / file);
  scratch_tree::put(t.source / "traces" / "data", file);
  CHECK(find_bundled(file, dirs) == dirs[1] / file);
  scratch_tree::put(t.root / "prefix" / "share" / "vtensor" / "traces", file);
  CHECK(find_bundled(file, dirs) == dirs[0] / file);
  // A folder of that name is not the file.
  fs::create_directories(t.cwd / "traces" / "data" / "other.jsonl");
  CHECK_THROWS_AS((void)find_bundled("other.jsonl", dirs), usage_error);
}

TEST_CASE("bundled data: a missing file names every path tried, in order") {
  const scratch_tree t;
  const auto dirs = bundled_trace_dirs(t.prefix_bin, t.source, t.cwd);
  try {
    (void)find_bundled("missing.jsonl", dirs);
    FAIL("expected usage_error");
  } catch (const usage_error& e) {
    const std::string what = e.what();
    CHECK(what.find("missing.jsonl is missing") != std::string::npos);
    std::size_t at = 0;
    for (const fs::path& d : dirs) {
      const std::size_t found = what.find((d / "missing.jsonl").string(), at);
      CHECK_MESSAGE(found != std::string::npos, d.string());
      at = found == std::string::npos ? at : found;
    }
  }
}

TEST_CASE("bundled data: this build finds the bundled excerpt through its source tree") {
  const auto dirs = bundled_trace_dirs();
  const fs::path source_data = fs::path(VTENSOR_SOURCE_DIR "/traces/data").lexically_normal();
  CHECK(std::find(dirs.begin(), dirs.end(), source_data) != dirs.end());
  CHECK(fs::is_regular_file(find_bundled("mooncake_conversation_excerpt.jsonl", dirs)));
}
