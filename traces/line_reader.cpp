#include "traces/line_reader.hpp"

#include "traces/trace_error.hpp"

#include <sys/stat.h>
#include <cerrno>
#include <cstring>

namespace vtensor::traces {
namespace {

constexpr std::size_t initial_buffer_bytes = std::size_t{1} << 20;

}  // namespace

line_reader::line_reader(std::string path)
    : path_(std::move(path)), file_(std::fopen(path_.c_str(), "rb")), buffer_(initial_buffer_bytes) {
  if (!file_) throw trace_error(path_, 0, "", std::string("cannot open: ") + std::strerror(errno));
  struct stat info {};
  if (::fstat(::fileno(file_.get()), &info) == 0 && S_ISDIR(info.st_mode)) {
    throw trace_error(path_, 0, "", "cannot read: is a directory");
  }
}

bool line_reader::refill() {
  if (eof_) return false;
  if (begin_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buffer_.size()) buffer_.resize(buffer_.size() * 2);
  const std::size_t got = std::fread(buffer_.data() + end_, 1, buffer_.size() - end_, file_.get());
  end_ += got;
  if (got == 0) {
    if (std::ferror(file_.get())) {
      throw trace_error(path_, line_number_ + 1, "", std::string("read error: ") + std::strerror(errno));
    }
    eof_ = true;
    return false;
  }
  return true;
}

std::optional<std::string_view> line_reader::next() {
  std::size_t scanned = begin_;
  for (;;) {
    const void* newline = std::memchr(buffer_.data() + scanned, '\n', end_ - scanned);
    if (newline != nullptr) {
      const std::size_t stop = static_cast<std::size_t>(static_cast<const char*>(newline) - buffer_.data());
      std::string_view line(buffer_.data() + begin_, stop - begin_);
      begin_ = stop + 1;
      ++line_number_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      return line;
    }
    const std::size_t scanned_bytes = end_ - begin_;
    if (!refill()) {
      if (begin_ == end_) return std::nullopt;
      std::string_view line(buffer_.data() + begin_, end_ - begin_);
      begin_ = end_;
      ++line_number_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      return line;
    }
    scanned = begin_ + scanned_bytes;
  }
}

}  // namespace vtensor::traces
