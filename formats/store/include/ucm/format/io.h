// ucm/format/io.h: page-aligned buffers and whole-range pread / pwrite for data files (§3).
// The contract is formats/store/store_v1.md; section numbers refer to it. Pure format code:
// no RocksDB, no threads; thread-safe unless noted.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "ucm/format/common.h"

namespace ucm::fmt {

/// A page-aligned heap buffer (for O_DIRECT). Grows, never shrinks; contents not preserved.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  /// Ensures capacity >= n (rounded up to a page). Returns false on allocation failure.
  bool reserve(size_t n);
  uint8_t* data() { return p_; }
  size_t capacity() const { return cap_; }

 private:
  uint8_t* p_ = nullptr;
  size_t cap_ = 0;
};

/// pread until `len` bytes or EOF, retrying EINTR and short reads. *got = bytes read; when the OS
/// fails the read, *os_errno (if given) gets its errno (0 otherwise).
Status pread_full(int fd, void* buf, size_t len, uint64_t offset, size_t* got, const std::string& where,
                  int* os_errno = nullptr);
/// pwrite all of `len` bytes, retrying EINTR and short writes. ENOSPC/EDQUOT -> NoSpace.
Status pwrite_full(int fd, const void* buf, size_t len, uint64_t offset, const std::string& where);

}  // namespace ucm::fmt
