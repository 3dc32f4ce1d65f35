#include "tools/report_render.hpp"

#include "tools/compare_eviction.hpp"
#include "tools/compare_verdict.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <ostream>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

extern char** environ;  // NOLINT: POSIX's, passed on to the interpreter

namespace vtensor::tools {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view k_script = "compare_report.py";

/// How a child process ended, and what it printed (stdout and stderr together).
struct process_result {
  bool started = false;  ///< false: it could not be started (`error` says why)
  std::string error;     ///< why it could not be started
  int exit_code = -1;    ///< its exit status, or -1 when a signal ended it
  int signal = 0;        ///< the signal that ended it, or 0
  std::string output;    ///< what it printed
};

/// Owns a file descriptor.
class fd_guard {
 public:
  explicit fd_guard(int fd = -1) : fd_(fd) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() { reset(); }
  [[nodiscard]] int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

/// Runs argv[0] (a path, or a bare name searched in PATH) with `argv`, no shell, stdin from
/// /dev/null, stdout and stderr captured; waits for it.
process_result run_process(const std::vector<std::string>& argv) {
  process_result result;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    result.error = fmt::format("pipe: {}", std::strerror(errno));
    return result;
  }
  fd_guard read_end(fds[0]);
  fd_guard write_end(fds[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 2);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));  // NOLINT: POSIX's signature
  args.push_back(nullptr);
  pid_t pid = 0;
  const bool bare = argv[0].find('/') == std::string::npos;
  const int rc = bare ? ::posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ)
                      : ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    result.error = std::strerror(rc);
    return result;
  }
  result.started = true;
  write_end.reset();  // the child holds the only write end now: EOF when it exits
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(read_end.get(), buffer, sizeof buffer);
    if (n > 0) {
      result.output.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      result.error = fmt::format("waitpid: {}", std::strerror(errno));
      return result;
    }
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

/// The last line of `text`, trimmed: a one-line reason (Python prints the error last).
std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

/// Checks DIR/summary.json and reads it into `summary`; returns a message when it is not a usable
/// vtensor-compare v1 file.
std::optional<std::string> check_summary(const fs::path& dir, const report_options& options, nlohmann::json& summary) {
  const fs::path path = dir / "summary.json";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return fmt::format("{}: not a folder (a `vtensor compare --out` folder)", dir.string());
  if (!fs::is_regular_file(path, ec)) {
    return fmt::format("{}: not found ({} is not a `vtensor compare --out` folder)", path.string(), dir.string());
  }
  std::ifstream in(path);
  if (!in) return fmt::format("{}: cannot be read", path.string());
  try {
    summary = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    return fmt::format("{}: not JSON: {}", path.string(), error.what());
  }
  const auto is = [&](const char* key, const auto& value) {
    return summary.is_object() && summary.contains(key) && summary[key] == value;
  };
  if (!is("format", "vtensor-compare") || !is("version", 1)) {
    return fmt::format("{}: not a vtensor-compare version 1 file (\"format\": \"vtensor-compare\", \"version\": 1)",
                       path.string());
  }
  if (options.cell) {
    std::vector<std::string> ids;
    if (summary.contains("cells") && summary["cells"].is_array()) {
      for (const auto& cell : summary["cells"]) {
        if (cell.is_object() && cell.contains("id") && cell["id"].is_string()) ids.push_back(cell["id"]);
      }
    }
    if (std::find(ids.begin(), ids.end(), *options.cell) == ids.end()) {
      return fmt::format("--cell {}: {} has no such cell (cells: {})", *options.cell, path.string(),
                         fmt::join(ids, ", "));
    }
  }
  return std::nullopt;
}

/// A file in the temporary folder, removed with its owner.
class temp_file {
 public:
  explicit temp_file(const std::string& contents) {
    std::string templ = (fs::temp_directory_path() / "vtensor-verdicts-XXXXXX").string();
    const int fd = ::mkstemp(templ.data());
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot create a temporary file");
    path_ = templ;
    const fd_guard guard(fd);
    for (std::size_t done = 0; done < contents.size();) {
      const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::system_error(errno, std::generic_category(), "cannot write " + path_.string());
      done += static_cast<std::size_t>(n);
    }
  }
  ~temp_file() {
    std::error_code ignored;
    fs::remove(path_, ignored);
  }
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

/// The verdicts of `summary` as summary.json's "verdicts" (tools/compare_verdict.hpp): at
/// options.tie, else the tolerance the comparison was judged at, else the default.
std::string verdicts_text(const nlohmann::json& summary, const report_options& options) {
  double tie = k_default_tie;
  if (options.tie) {
    tie = *options.tie;
  } else if (summary.contains("verdicts") && summary["verdicts"].is_object() && summary["verdicts"].contains("tie") &&
             summary["verdicts"]["tie"].is_number()) {
    tie = summary["verdicts"]["tie"].get<double>();
  }
  return verdicts_json(judge(summary, tie), tie).dump(2) + "\n";
}

}  // namespace

std::vector<fs::path> report_script_paths(const fs::path& exe_dir, const fs::path& source_dir, const fs::path& cwd) {
  std::vector<fs::path> paths;
  if (!exe_dir.empty()) paths.push_back(exe_dir / ".." / "share" / "vtensor" / k_script);
  if (!source_dir.empty()) paths.push_back(source_dir / "tools" / k_script);
  if (!exe_dir.empty()) paths.push_back(exe_dir / ".." / ".." / "tools" / k_script);
  if (!cwd.empty()) paths.push_back(cwd / "tools" / k_script);
  for (fs::path& p : paths) p = p.lexically_normal();
  return paths;
}

report_environment default_report_environment() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path exe_dir = ec ? fs::path{} : exe.parent_path();
  const fs::path cwd = fs::current_path(ec);
  return {report_script_paths(exe_dir, fs::path{VTENSOR_SOURCE_DIR}, ec ? fs::path{} : cwd),
          {"/usr/bin/python3", "python3"}};
}

int render_report(const fs::path& dir, const cli_streams& io, const report_options& options) {
  return render_report(dir, io, options, default_report_environment());
}

int render_report(const fs::path& dir, const cli_streams& io, const report_options& options,
                  const report_environment& env) {
  const auto fail = [&](int code, const std::string& message) {
    io.err << "vtensor report: " << message << '\n';
    return code;
  };
  try {
    nlohmann::json summary;
    if (const auto bad = check_summary(dir, options, summary)) return fail(exit_usage, *bad);
    std::string verdicts;
    try {
      verdicts = verdicts_text(summary, options);
    } catch (const std::exception& error) {  // nlohmann's or judge()'s: the content is bad
      return fail(exit_usage, fmt::format("{}: no verdicts: {}", (dir / "summary.json").string(), error.what()));
    }
    std::vector<eviction_group> eviction;
    try {
      eviction = eviction_groups(summary);
    } catch (const std::exception&) {  // content the script then names (it checks the keys it reads)
      eviction.clear();
    }

    fs::path script;
    std::vector<std::string> tried;
    for (const fs::path& candidate : env.scripts) {
      std::error_code ec;
      if (fs::is_regular_file(candidate, ec)) {
        script = candidate;
        break;
      }
      tried.push_back(candidate.string());
    }
    if (script.empty()) {
      return fail(exit_failure,
                  fmt::format("the report script {} is missing (looked in: {})", k_script, fmt::join(tried, ", ")));
    }

    std::string python;
    std::vector<std::string> reasons;
    for (const std::string& candidate : env.pythons) {
      const process_result probe = run_process({candidate, "-c", "import matplotlib"});
      const std::string where = candidate.find('/') == std::string::npos ? candidate + " (PATH)" : candidate;
      if (!probe.started) {
        reasons.push_back(fmt::format("{}: {}", where, probe.error));
      } else if (probe.exit_code != 0) {
        const std::string why = last_line(probe.output);
        reasons.push_back(fmt::format("{}: {}", where, why.empty() ? "cannot import matplotlib" : why));
      } else {
        python = candidate;
        break;
      }
    }
    if (python.empty()) {
      return fail(exit_failure, fmt::format("no Python with matplotlib ({}); install Debian's python3-matplotlib "
                                            "(tools/install-deps.sh)",
                                            fmt::join(reasons, "; ")));
    }

    const temp_file verdicts_file(verdicts);
    std::vector<std::string> argv{python, script.string(), "--quiet", "--verdicts", verdicts_file.path().string()};
    const temp_file eviction_file(eviction_json(eviction).dump(2) + "\n");  // [] : no eviction section
    argv.emplace_back("--eviction");
    argv.push_back(eviction_file.path().string());
    if (options.cell) {
      argv.emplace_back("--cell");
      argv.push_back(*options.cell);
    }
    argv.emplace_back("--");  // DIR may start with '-'
    argv.push_back(dir.string());
    const process_result run = run_process(argv);
    io.err << run.output;
    if (!run.started) return fail(exit_failure, fmt::format("cannot start {}: {}", python, run.error));
    if (run.signal != 0) {
      return fail(exit_failure, fmt::format("{} {} was ended by signal {} (a {}/.report-* folder it leaves is "
                                            "safe to delete)",
                                            python, script.string(), run.signal, dir.string()));
    }
    if (run.exit_code == exit_usage) {
      return fail(exit_usage,
                  fmt::format("{} holds something the report cannot draw (above); it is unchanged", dir.string()));
    }
    if (run.exit_code != 0) {
      return fail(exit_failure, fmt::format("{} {} failed (exit status {}); {} is unchanged", python, script.string(),
                                            run.exit_code, dir.string()));
    }
    return exit_success;
  } catch (const std::exception& error) {
    return fail(exit_failure, error.what());
  }
}

}  // namespace vtensor::tools
