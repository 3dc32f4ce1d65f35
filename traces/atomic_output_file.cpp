#include "traces/atomic_output_file.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdlib>
#include <system_error>
#include <vector>

namespace vtensor::traces {
namespace {

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

}  // namespace

atomic_output_file::atomic_output_file(std::string path) : path_(std::move(path)) {
  std::vector<char> name(path_.begin(), path_.end());
  const std::string suffix = ".tmp-XXXXXX";
  name.insert(name.end(), suffix.begin(), suffix.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) throw_errno(path_ + ": cannot create a temporary file beside it");
  temp_path_ = name.data();
  ::fchmod(fd, 0644);
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int saved = errno;
    ::close(fd);
    std::remove(temp_path_.c_str());
    errno = saved;
    throw_errno(path_ + ": cannot open");
  }
  std::setvbuf(file_, nullptr, _IOFBF, std::size_t{1} << 20);
}

atomic_output_file::~atomic_output_file() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(temp_path_.c_str());
  }
}

void atomic_output_file::write(std::string_view bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
    throw_errno(temp_path_ + ": write failed");
  }
}

void atomic_output_file::commit() {
  std::FILE* file = file_;
  file_ = nullptr;
  const bool flushed = std::fflush(file) == 0 && std::ferror(file) == 0;
  const int saved = errno;
  if (std::fclose(file) != 0 || !flushed) {
    if (flushed) errno = saved;
    std::remove(temp_path_.c_str());
    throw_errno(temp_path_ + ": write failed");
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(temp_path_.c_str());
    errno = rename_errno;
    throw_errno(path_ + ": cannot rename the temporary file onto it");
  }
}

}  // namespace vtensor::traces
