#pragma once
// The data vtensor ships (the traces of traces/data/, installed under share/vtensor/traces/),
// found wherever the binary was built or installed.
//
// Note [Finding bundled data]
// A binary runs from its build folder (in or outside the source tree), from an install prefix, or
// from somewhere else entirely; the data must be found in each case without a flag. The folders are
// tried in this order, first match wins:
//   1. <exe dir>/../share/vtensor/traces/  an installed binary (cmake --install puts it there);
//   2. <source dir>/traces/data/           the source tree this binary was configured from (baked
//                                          in at configure time: any build folder, while the
//                                          sources stay where they were);
//   3. <exe dir>/../../traces/data/        a build folder inside a source tree moved since;
//   4. ./traces/data/                      the working directory, a source tree's root.
// An installed copy comes first so an installed binary never reads a source tree that changed
// after the install. When none holds the file, the error names every path tried.

#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace vtensor::tools {

/// The folders bundled traces are looked for in, in order (Note [Finding bundled data]), for an
/// executable in `exe_dir`, sources configured at `source_dir` (empty: none known) and the working
/// directory `cwd`.
[[nodiscard]] std::vector<std::filesystem::path> bundled_trace_dirs(const std::filesystem::path& exe_dir,
                                                                    const std::filesystem::path& source_dir,
                                                                    const std::filesystem::path& cwd);

/// The same for this process: its executable (/proc/self/exe), the source dir this build was
/// configured from, and the working directory.
[[nodiscard]] std::vector<std::filesystem::path> bundled_trace_dirs();

/// `dir/name` for the first of `dirs` that holds `name`, normalised. Throws usage_error naming the
/// file and every path tried.
[[nodiscard]] std::filesystem::path find_bundled(std::string_view name, std::span<const std::filesystem::path> dirs);

}  // namespace vtensor::tools
