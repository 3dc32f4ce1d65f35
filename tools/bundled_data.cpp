#include "tools/bundled_data.hpp"

#include <string>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tools/cli.hpp"

namespace vtensor::tools {

namespace fs = std::filesystem;

std::vector<fs::path> bundled_trace_dirs(const fs::path& exe_dir, const fs::path& source_dir, const fs::path& cwd) {
  std::vector<fs::path> dirs;
  if (!exe_dir.empty()) dirs.push_back(exe_dir / ".." / "share" / "vtensor" / "traces");
  if (!source_dir.empty()) dirs.push_back(source_dir / "traces" / "data");
  if (!exe_dir.empty()) dirs.push_back(exe_dir / ".." / ".." / "traces" / "data");
  if (!cwd.empty()) dirs.push_back(cwd / "traces" / "data");
  for (fs::path& dir : dirs) dir = dir.lexically_normal();
  return dirs;
}

std::vector<fs::path> bundled_trace_dirs() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path exe_dir = ec ? fs::path{} : exe.parent_path();
  const fs::path cwd = fs::current_path(ec);
  return bundled_trace_dirs(exe_dir, fs::path{VTENSOR_SOURCE_DIR}, ec ? fs::path{} : cwd);
}

fs::path find_bundled(std::string_view name, std::span<const fs::path> dirs) {
  std::vector<std::string> tried;
  for (const fs::path& dir : dirs) {
    const fs::path candidate = (dir / name).lexically_normal();
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec)) return candidate;
    tried.push_back(candidate.string());
  }
  throw usage_error(fmt::format("the bundled file {} is missing (looked in: {})", name, fmt::join(tried, ", ")));
}

}  // namespace vtensor::tools
