#include "traces/atomic_output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <system_error>
#include <vector>

namespace vtensor::traces {
namespace {

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// Writes all of `bytes` to `fd`.
bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

std::string follow_symlinks(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  for (int depth = 0; depth < 40; ++depth) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p.string();
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) throw std::system_error(ec, path + ": cannot read the symlink");
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  errno = ELOOP;
  throw_errno(path + ": too many levels of symlinks");
}

atomic_output_file::atomic_output_file(std::string path, std::ostream* standard_output)
    : path_(std::move(path)), stdout_(standard_output) {
  if (path_.empty()) {
    errno = EINVAL;
    throw_errno("an empty output path");
  }
  if (to_stdout()) {
    in_memory_ = true;
    return;
  }
  target_ = follow_symlinks(path_);
  struct stat st {};
  const bool exists = ::stat(target_.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) {
    errno = EISDIR;
    throw_errno(path_ + ": cannot write the output");
  }
  if (exists && !S_ISREG(st.st_mode)) {  // a device or a FIFO: written in place at commit()
    in_memory_ = true;
    return;
  }
  // An unnamed file in the target's directory (O_TMPFILE): a process killed before commit()
  // leaves nothing behind. Filesystems without O_TMPFILE get a named temporary file instead.
  const std::string dir = std::filesystem::path(target_).parent_path().string();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::vector<char> name(target_.begin(), target_.end());
    const std::string suffix = ".tmp-XXXXXX";
    name.insert(name.end(), suffix.begin(), suffix.end());
    name.push_back('\0');
    fd = ::mkstemp(name.data());
    if (fd < 0) throw_errno(path_ + ": cannot create a temporary file beside it");
    temp_path_ = name.data();
  }
  ::fchmod(fd, exists ? (st.st_mode & 07777) : 0644);
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int saved = errno;
    ::close(fd);
    if (!temp_path_.empty()) std::remove(temp_path_.c_str());
    errno = saved;
    throw_errno(path_ + ": cannot open");
  }
  std::setvbuf(file_, nullptr, _IOFBF, std::size_t{1} << 20);
}

atomic_output_file::~atomic_output_file() {
  if (file_ != nullptr) {
    std::fclose(file_);
    if (!temp_path_.empty()) std::remove(temp_path_.c_str());
  }
}

void atomic_output_file::write(std::string_view bytes) {
  if (in_memory_) {
    held_.append(bytes);
    return;
  }
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
    throw_errno(path_ + ": write failed");
  }
}

void atomic_output_file::commit() {
  if (in_memory_) {
    if (to_stdout()) {
      std::ostream& out = stdout_ != nullptr ? *stdout_ : std::cout;
      out.write(held_.data(), static_cast<std::streamsize>(held_.size()));
      out.flush();
      if (!out) {
        errno = EIO;
        throw_errno("standard output: write failed");
      }
    } else {
      const int fd = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) throw_errno(path_ + ": cannot open");
      const bool ok = write_all(fd, held_);
      const int saved = errno;
      ::close(fd);
      errno = saved;
      if (!ok) throw_errno(path_ + ": write failed");
    }
    held_.clear();
    return;
  }
  std::FILE* file = file_;
  file_ = nullptr;
  bool ok = std::fflush(file) == 0 && std::ferror(file) == 0;
  int saved = errno;
  if (ok && temp_path_.empty()) {
    // Give the unnamed file a name beside the target, then rename it over the target.
    const std::string proc = "/proc/self/fd/" + std::to_string(::fileno(file));
    for (unsigned attempt = 0;; ++attempt) {
      std::string name = target_ + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(attempt);
      if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
        temp_path_ = std::move(name);
        break;
      }
      if (errno != EEXIST || attempt == 100) {
        ok = false;
        saved = errno;
        break;
      }
    }
  }
  if (std::fclose(file) != 0 || !ok) {
    if (!ok) errno = saved;
    if (!temp_path_.empty()) std::remove(temp_path_.c_str());
    throw_errno(path_ + ": write failed");
  }
  if (std::rename(temp_path_.c_str(), target_.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temp_path_.c_str());
    errno = rename_errno;
    throw_errno(path_ + ": cannot rename the temporary file onto it");
  }
}

}  // namespace vtensor::traces
