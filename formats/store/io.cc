// formats/store/io.cc: aligned buffers, pread_full and pwrite_full (see ucm/format/io.h).
#include "ucm/format/io.h"

#include <unistd.h>
#include <cerrno>
#include <cstdlib>

#include "format_internal.h"

namespace ucm::fmt {

using detail::at;

AlignedBuffer::~AlignedBuffer() { std::free(p_); }
bool AlignedBuffer::reserve(size_t n) {
  if (n <= cap_) return true;
  size_t c = round_up_page(n);
  void* np = nullptr;
  if (posix_memalign(&np, kPage, c) != 0) return false;
  std::free(p_);
  p_ = static_cast<uint8_t*>(np);
  cap_ = c;
  return true;
}

Status pread_full(int fd, void* buf, size_t len, uint64_t offset, size_t* got, const std::string& where,
                  int* os_errno) {
  if (os_errno) *os_errno = 0;
  size_t done = 0;
  auto* b = static_cast<uint8_t*>(buf);
  while (done < len) {
    ssize_t r = ::pread(fd, b + done, len - done, off_t(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      *got = done;
      if (os_errno) *os_errno = err;
      return Status::FromErrno(err, "read " + at(where, offset + done));
    }
    if (r == 0) break;
    done += size_t(r);
    // O_DIRECT reads past EOF return short counts that are not page multiples: stop at EOF.
  }
  *got = done;
  return Status::OK();
}

Status pwrite_full(int fd, const void* buf, size_t len, uint64_t offset, const std::string& where) {
  size_t done = 0;
  auto* b = static_cast<const uint8_t*>(buf);
  while (done < len) {
    ssize_t r = ::pwrite(fd, b + done, len - done, off_t(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write " + at(where, offset + done));
    }
    if (r == 0) return Status::IOError("write " + at(where, offset + done) + " wrote nothing");
    done += size_t(r);
  }
  return Status::OK();
}

}  // namespace ucm::fmt
