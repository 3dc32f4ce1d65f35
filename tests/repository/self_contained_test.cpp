// The repository stands on its own: nothing in the source tree names the folder of internal
// briefing notes that sat beside the first checkouts (users who clone the repository do not have
// it), and the data the tests and the README use is shipped in traces/data/.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// Build folders (any folder holding a CMakeCache.txt) and git's own folder are not sources.
bool skipped_dir(const fs::path& dir) {
  const std::string name = dir.filename().string();
  return name == ".git" || fs::exists(dir / "CMakeCache.txt");
}

std::vector<fs::path> source_files(const fs::path& root) {
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_directory() && skipped_dir(it->path())) {
      it.disable_recursion_pending();
    } else if (it->is_regular_file()) {
      files.push_back(it->path());
    }
  }
  return files;
}

}  // namespace

TEST_CASE("repository: no source file names the briefing folder beside the clone") {
  // Spelt in two pieces so that this file does not name it either.
  const std::string needle = std::string("../") + "shared";
  const auto files = source_files(VTENSOR_SOURCE_DIR);
  REQUIRE(files.size() > 100);  // the walk saw the tree
  std::vector<std::string> offenders;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (text.find(needle) != std::string::npos) offenders.push_back(fs::relative(f, VTENSOR_SOURCE_DIR).string());
  }
  std::string list;
  for (const auto& o : offenders) list += "\n  " + o;
  CHECK_MESSAGE(offenders.empty(), "files naming " << needle << ":" << list);
}

TEST_CASE("repository: the traces the tests and the README use are shipped with their licence note") {
  const fs::path data = fs::path(VTENSOR_SOURCE_DIR) / "traces" / "data";
  for (const char* name :
       {"mooncake_conversation_trace.jsonl", "mooncake_conversation_excerpt.jsonl", "mooncake_synthetic_trace.jsonl",
        "AzureLLMInferenceTrace_conv.csv", "AzureLLMInferenceTrace_code.csv", "LICENSE-NOTE.md"}) {
    CAPTURE(name);
    REQUIRE(fs::is_regular_file(data / name));
    CHECK(fs::file_size(data / name) > 0);
  }
  std::ifstream note(data / "LICENSE-NOTE.md");
  const std::string text{std::istreambuf_iterator<char>(note), std::istreambuf_iterator<char>()};
  CHECK(text.find("Apache-2.0") != std::string::npos);
  CHECK(text.find("CC-BY-4.0") != std::string::npos);
}

TEST_CASE("repository: no test case name holds a semicolon (CTest would split it and run nothing)") {
  // doctest_discover_tests hands the names to CMake as a list: a ';' cuts a name in two, and
  // each half, run as a --test-case filter, matches no test case and "passes".
  std::vector<std::string> offenders;
  for (const auto& f : source_files(fs::path(VTENSOR_SOURCE_DIR) / "tests")) {
    if (f.extension() != ".cpp") continue;
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line)) {
      const auto at = line.find("TEST_CASE(\"");
      if (at == std::string::npos) continue;
      const auto end = line.find('"', at + 11);
      if (line.substr(at + 11, end == std::string::npos ? std::string::npos : end - at - 11).find(';') !=
          std::string::npos) {
        offenders.push_back(fs::relative(f, VTENSOR_SOURCE_DIR).string() + ": " + line);
      }
    }
  }
  std::string list;
  for (const auto& o : offenders) list += "\n  " + o;
  CHECK_MESSAGE(offenders.empty(), "test case names with ';':" << list);
}
