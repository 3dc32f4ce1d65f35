// Outputs that appear whole or not at all, written through symlinks and into special files
// (traces/atomic_output_file.hpp, Note [Where an output goes]).

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "tests/support/scratch_dir.hpp"
#include "traces/atomic_output_file.hpp"

namespace fs = std::filesystem;
using vtensor::traces::atomic_output_file;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = vtensor::testing::scratch_dir("output") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_whole(const std::string& path, const std::string& text) {
  atomic_output_file f(path);
  f.write(text);
  f.commit();
}

}  // namespace

TEST_SUITE("outputs") {
  TEST_CASE("an output replaces its file whole, or leaves it untouched when not committed") {
    const fs::path dir = fresh_dir("whole");
    const fs::path p = dir / "out.json";
    std::ofstream(p) << "old";
    ::chmod(p.c_str(), 0600);
    {
      atomic_output_file f(p.string());
      f.write("half");
      CHECK(read(p) == "old");  // nothing appears before commit
    }                           // destroyed uncommitted
    CHECK(read(p) == "old");
    CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);  // no temporary left
    write_whole(p.string(), "new");
    CHECK(read(p) == "new");
    CHECK((fs::status(p).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
  }

  TEST_CASE("an output writes through symlinks and keeps them") {
    const fs::path dir = fresh_dir("symlink");
    fs::create_directories(dir / "real");
    std::ofstream(dir / "real" / "target.json") << "old";
    fs::create_symlink("real/target.json", dir / "link.json");  // relative
    fs::create_symlink(dir / "link.json", dir / "link2.json");  // absolute, to a link
    write_whole((dir / "link2.json").string(), "through two links");
    CHECK(fs::is_symlink(dir / "link.json"));
    CHECK(fs::is_symlink(dir / "link2.json"));
    CHECK(read(dir / "real" / "target.json") == "through two links");
    // A dangling link: its target is created, the link stays.
    fs::create_symlink("real/new.json", dir / "dangling.json");
    write_whole((dir / "dangling.json").string(), "created");
    CHECK(fs::is_symlink(dir / "dangling.json"));
    CHECK(read(dir / "real" / "new.json") == "created");
    // A loop is refused naming the path.
    fs::create_symlink("loop_b", dir / "loop_a");
    fs::create_symlink("loop_a", dir / "loop_b");
    CHECK_THROWS_WITH_AS(atomic_output_file((dir / "loop_a").string()), doctest::Contains("loop_a"), std::system_error);
  }

  TEST_CASE("an output into a special file writes in place and never replaces it") {
    write_whole("/dev/null", "discarded");
    CHECK(fs::is_character_file("/dev/null"));
    const fs::path dir = fresh_dir("special");
    CHECK_THROWS_WITH_AS(atomic_output_file(dir.string()), doctest::Contains(dir.string().c_str()), std::system_error);
    CHECK_THROWS_AS(atomic_output_file((dir / "no" / "such" / "dir.json").string()), std::system_error);
    CHECK_THROWS_AS(atomic_output_file(""), std::system_error);
  }

  TEST_CASE("dash is standard output") {
    const atomic_output_file f("-");
    CHECK(f.to_stdout());
    CHECK_FALSE(atomic_output_file("/dev/null").to_stdout());
  }

  TEST_CASE("a process killed mid-write leaves the old file and nothing else") {
    const fs::path dir = fresh_dir("killed");
    const fs::path p = dir / "out.json";
    std::ofstream(p) << "old";
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      atomic_output_file f(p.string());
      f.write(std::string(std::size_t{4} << 20, 'x'));  // past the buffer: bytes reach the disk
      ::raise(SIGKILL);
      ::_exit(3);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(read(p) == "old");
    CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);
  }

  TEST_CASE("a disk that fills mid-write fails naming the path and leaves the old file and nothing else") {
    const fs::path dir = fresh_dir("full");
    const fs::path p = dir / "out.json";
    std::ofstream(p) << "old";
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // a file-size limit stands in for a full disk: writes past it fail (EFBIG)
      ::signal(SIGXFSZ, SIG_IGN);
      const rlimit limit{rlim_t{1} << 20, rlim_t{1} << 20};
      ::setrlimit(RLIMIT_FSIZE, &limit);
      try {
        atomic_output_file f(p.string());
        f.write(std::string(std::size_t{4} << 20, 'x'));
        f.commit();
      } catch (const std::system_error& e) {
        ::_exit(std::string(e.what()).find(p.string()) != std::string::npos ? 0 : 4);
      }
      ::_exit(5);  // no error: the limit did not bite
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(read(p) == "old");
    CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);
  }
}
