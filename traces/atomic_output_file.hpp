#pragma once

#include <cstdio>
#include <iosfwd>
#include <string>
#include <string_view>

namespace vtensor::traces {

/// An output that appears whole or not at all.
///
/// Note [Where an output goes]
/// - `-` is standard output (the stream given, else std::cout): the bytes are kept in memory
///   and written at commit(), so a failed run prints nothing of it.
/// - A path that is (or, through symlinks, leads to) a regular file or nothing: the bytes go to
///   an unnamed file in the final target's directory (O_TMPFILE, so a process killed before
///   commit() leaves nothing; a named temporary file beside the target where the filesystem
///   lacks O_TMPFILE) and commit() names it and renames it over that target (same directory,
///   so the rename is atomic). Symlinks are followed, never replaced: the link
///   stays and its target gets the new content. A file replaced keeps its permission bits.
/// - A path leading to something else (a character device such as /dev/null, a FIFO): it cannot
///   be renamed over, so the bytes are kept in memory and written to it at commit().
/// Destroyed uncommitted (an error, an exception), it removes the temporary file and the target
/// is left untouched. Throws std::system_error naming the path when a file operation fails.
class atomic_output_file {
 public:
  /// `standard_output`: where `-` goes (nullptr: std::cout).
  explicit atomic_output_file(std::string path, std::ostream* standard_output = nullptr);
  ~atomic_output_file();
  atomic_output_file(const atomic_output_file&) = delete;
  atomic_output_file& operator=(const atomic_output_file&) = delete;

  /// Appends `bytes`; buffered (1 MiB), or held in memory for `-` and special files.
  void write(std::string_view bytes);

  /// Flushes, closes and puts the bytes in place. Call once.
  void commit();

  [[nodiscard]] const std::string& path() const noexcept { return path_; }  ///< as given
  /// True when the output is standard output (`-`).
  [[nodiscard]] bool to_stdout() const noexcept { return path_ == "-"; }

 private:
  std::string path_;
  std::string target_;     // the final target, symlinks followed
  std::string temp_path_;  // beside target_, for regular files
  std::FILE* file_ = nullptr;
  bool in_memory_ = false;  // `-` or a special file
  std::string held_;        // the bytes, when in memory
  std::ostream* stdout_ = nullptr;
};

/// The final target of `path`: symlinks followed (relative ones against their directory), up to
/// 40 levels; `path` itself when it is no symlink. Throws std::system_error on a loop.
[[nodiscard]] std::string follow_symlinks(const std::string& path);

}  // namespace vtensor::traces
