// The report in a real browser: the fixture's report.html (tests/data/compare-fixture/, rendered as
// `vtensor report` does) opened in headless Chromium by tests/tools/report_in_browser.py, which
// checks that every image loads, that the page logs no console error and makes no network request,
// and keeps a screenshot of the first screen under the build folder
// (test-artefacts/report-first-screen.png). A second page, broken on purpose, shows that each check
// can fail; the fixture with arms that differ only in --eviction shows the eviction figure loads
// too. Without a browser that starts (Debian's chromium: tools/install-deps.sh), the cases
// print BROWSER_SKIP and CTest reports them skipped (tests/CMakeLists.txt).

#include "tools/report_render.hpp"

#include "tests/support/eviction_fixture.hpp"

#include <doctest/doctest.h>

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace fs = std::filesystem;
using namespace vtensor::tools;

namespace {

/// A copy of the fixture in a scratch folder, removed at the end.
struct fixture_copy {
  fs::path root;
  fs::path dir;
  explicit fixture_copy(const std::string& tag) {
    root = fs::temp_directory_path() / ("vtensor-browser-test-" + std::to_string(::getpid()) + "-" + tag);
    fs::remove_all(root);
    dir = root / "cmp";
    fs::create_directories(root);
    fs::copy(fs::path(VTENSOR_SOURCE_DIR) / "tests" / "data" / "compare-fixture", dir, fs::copy_options::recursive);
  }
  ~fixture_copy() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
  fixture_copy(const fixture_copy&) = delete;
  fixture_copy& operator=(const fixture_copy&) = delete;
};

/// What a command printed (stdout and stderr) and its exit status.
struct command_result {
  int code = -1;
  std::string output;
};

command_result run_command(const std::string& command) {
  command_result r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  while (const std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) r.output.append(buffer, n);
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

/// The build folder: this test binary lives in <build>/bin.
fs::path build_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::temp_directory_path() : exe.parent_path().parent_path();
}

/// The browser check of `page`, its screenshot at `screenshot`.
command_result check_in_browser(const fs::path& page, const fs::path& screenshot, int images = 9) {
  const fs::path script = fs::path(VTENSOR_SOURCE_DIR) / "tests" / "tools" / "report_in_browser.py";
  return run_command("python3 " + quoted(script) + " " + quoted(page) + " " + quoted(screenshot) + " --expect-images " +
                     std::to_string(images));
}

constexpr int k_browser_skip = 77;

}  // namespace

TEST_SUITE("report") {
  TEST_CASE("report: in a real browser every image loads, no console error, no network request - screenshot kept") {
    const fixture_copy s("page");
    std::ostringstream out;
    std::ostringstream err;
    const int rendered = render_report(s.dir, {out, err});
    INFO("stderr: " << err.str());
    REQUIRE(rendered == exit_success);

    const fs::path screenshot = build_dir() / "test-artefacts" / "report-first-screen.png";
    fs::remove(screenshot);
    const command_result r = check_in_browser(s.dir / "report.html", screenshot);
    if (r.code == k_browser_skip) {
      MESSAGE(r.output);  // starts with BROWSER_SKIP: CTest reports the case skipped
      return;
    }
    INFO("report_in_browser.py: " << r.output);
    CHECK(r.code == 0);
    CHECK(r.output.find("9 images, 9 loaded; 0 console errors; 0 network requests") != std::string::npos);
    REQUIRE(fs::is_regular_file(screenshot));
    std::ifstream png(screenshot, std::ios::binary);
    const std::string head(std::istreambuf_iterator<char>(png), {});
    CHECK(head.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) == 0);
    MESSAGE("screenshot of the report's first screen: " << screenshot.string());
  }

  TEST_CASE("report: in a real browser the eviction figure loads too (arms that differ only in --eviction)") {
    const fixture_copy s("eviction");
    vtensor::testing::add_eviction_arms(s.dir);
    std::ostringstream out;
    std::ostringstream err;
    const int rendered = render_report(s.dir, {out, err});
    INFO("stderr: " << err.str());
    REQUIRE(rendered == exit_success);
    const command_result r = check_in_browser(s.dir / "report.html", s.root / "eviction.png", 10);
    if (r.code == k_browser_skip) {
      MESSAGE(r.output);
      return;
    }
    INFO("report_in_browser.py: " << r.output);
    CHECK(r.code == 0);
    CHECK(r.output.find("10 images, 10 loaded; 0 console errors; 0 network requests") != std::string::npos);
  }

  TEST_CASE("report: the browser check fails a page with a missing image, a console error and a network request") {
    const fixture_copy s("broken");
    std::ostringstream out;
    std::ostringstream err;
    REQUIRE(render_report(s.dir, {out, err}) == exit_success);
    // Break the page three ways: a figure gone, an error logged, an image fetched over the network
    // (port 9 of this machine: refused, and never fetched at all by Chromium, but still requested).
    fs::remove(s.dir / "figures" / "ttft_cdf.png");
    const fs::path page = s.dir / "report.html";
    std::string html;
    {
      std::ifstream in(page);
      html.assign(std::istreambuf_iterator<char>(in), {});
    }
    const std::string planted =
        "<img src=\"http://127.0.0.1:9/planted.png\"><script>console.error(\"planted error\")</script>";
    html.insert(html.rfind("</body>"), planted);
    std::ofstream(page) << html;

    const command_result r = check_in_browser(page, s.root / "broken.png");
    if (r.code == k_browser_skip) {
      MESSAGE(r.output);
      return;
    }
    INFO("report_in_browser.py: " << r.output);
    CHECK(r.code == 1);
    CHECK(r.output.find("FAIL: image did not load (naturalWidth 0): figures/ttft_cdf.png") != std::string::npos);
    CHECK(r.output.find("FAIL: console.error: planted error") != std::string::npos);
    CHECK(r.output.find("FAIL: network request: http://127.0.0.1:9/planted.png") != std::string::npos);
  }
}
