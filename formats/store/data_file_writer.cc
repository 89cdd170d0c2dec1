// formats/store/data_file_writer.cc: DataFileWriter (§3.4; see ucm/format/data_file.h).
#include "ucm/format/data_file.h"
#include "ucm/format/layout.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include "format_internal.h"

namespace ucm::fmt {

using detail::at;

struct DataFileWriter::State {
  std::atomic<uint64_t> size{0};
  int dfd = -1;                      ///< O_DIRECT descriptor, -1 when the file system refuses it
  std::atomic<bool> direct{false};   ///< cleared when an O_DIRECT write fails with EINVAL
  std::atomic<bool> can_fallocate{true};
};

DataFileWriter::DataFileWriter(int fd, uint32_t id, std::string path, uint64_t size)
    : fd_(fd), file_id_(id), path_(std::move(path)), st_(new State) {
  st_->size = size;
  st_->dfd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
  st_->direct = st_->dfd >= 0;
}
DataFileWriter::~DataFileWriter() {
  if (st_->dfd >= 0) ::close(st_->dfd);
  if (fd_ >= 0) ::close(fd_);
}

Status DataFileWriter::Create(const std::string& store, uint32_t file_id, std::unique_ptr<DataFileWriter>* out,
                              uint32_t format_version) {
  std::string p = data_file_path(store, file_id);
  int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST)
      return Status::InvalidArgument("data file " + p + " already exists; the index's next_file_id is "
                                     "behind the data files: run `ucm build --rebuild-index`");
    return Status::FromErrno(errno, "create data file " + p);
  }
  alignas(16) uint8_t page[kPage];
  FileHeader h;
  h.format_version = format_version;
  h.file_id = file_id;
  h.created_ms = now_ms();
  encode_file_header(h, page);
  Status s = pwrite_full(fd, page, kPage, 0, p);
  if (s.ok() && ::fdatasync(fd) != 0) s = Status::FromErrno(errno, "fdatasync " + p);
  if (s.ok()) s = fsync_dir(data_dir(store));
  if (!s.ok()) {
    ::close(fd);
    ::unlink(p.c_str());
    return s;
  }
  out->reset(new DataFileWriter(fd, file_id, p, kPage));
  return Status::OK();
}

Status DataFileWriter::append(RecordHeader* h, const std::vector<std::pair<const void*, size_t>>& pieces,
                              uint64_t* offset) {
  static const std::vector<uint8_t> zeros(kPage, 0);
  XXH3_state_t xs;
  XXH3_64bits_reset(&xs);
  uint64_t len = 0;
  for (const auto& [p, n] : pieces) {
    XXH3_64bits_update(&xs, p, n);
    len += n;
  }
  h->payload_checksum = XXH3_64bits_digest(&xs);
  h->payload_length = len;
  if (h->created_ms == 0) h->created_ms = now_ms();
  alignas(64) uint8_t head[kPage];
  encode_record_header(*h, head);
  // One pwritev per record: header page, the caller's pieces, a shared zero tail.
  std::vector<iovec> iov;
  iov.reserve(pieces.size() + 2);
  iov.push_back({head, kPage});
  for (const auto& [p, n] : pieces)
    if (n) iov.push_back({const_cast<void*>(p), n});
  if (const size_t tail = round_up_page(len) - len) iov.push_back({const_cast<uint8_t*>(zeros.data()), tail});
  const uint64_t total = record_size(len);
  const uint64_t off = st_->size.fetch_add(total);
  uint64_t done = 0;
  size_t first = 0;
  while (done < total) {
    const int cnt = int(std::min<size_t>(iov.size() - first, IOV_MAX));
    ssize_t r = ::pwritev(fd_, iov.data() + first, cnt, off_t(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write " + path_ + " at offset " + std::to_string(off + done));
    }
    if (r == 0) return Status::IOError("write " + path_ + ": no progress at offset " + std::to_string(off + done));
    done += uint64_t(r);
    // Skip the iovecs written, trim a partly written one.
    size_t rem = size_t(r);
    while (first < iov.size() && rem >= iov[first].iov_len) rem -= iov[first++].iov_len;
    if (rem) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + rem;
      iov[first].iov_len -= rem;
    }
  }
  *offset = off;
  return Status::OK();
}

Status DataFileWriter::reserve(uint64_t bytes, uint64_t* offset) {
  const uint64_t off = st_->size.fetch_add(bytes);
  *offset = off;
  if (bytes && st_->can_fallocate.load(std::memory_order_relaxed)) {
    int rc;
    do rc = ::fallocate(fd_, 0, off_t(off), off_t(bytes));
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      if (errno == EOPNOTSUPP || errno == ENOSYS) st_->can_fallocate = false;
      else return Status::FromErrno(errno, "allocate " + std::to_string(bytes) + " bytes at offset " +
                                               std::to_string(off) + " of " + path_);
    }
  }
  return Status::OK();
}

Status DataFileWriter::write_at(const void* buf, size_t len, uint64_t offset) {
  const bool aligned = (reinterpret_cast<uintptr_t>(buf) % kPage) == 0 && len % kPage == 0 && offset % kPage == 0;
  if (aligned && st_->direct.load(std::memory_order_relaxed)) {
    size_t done = 0;
    while (done < len) {
      ssize_t r = ::pwrite(st_->dfd, static_cast<const uint8_t*>(buf) + done, len - done, off_t(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno == EINVAL && done == 0) {
        st_->direct = false;  // the file system refuses O_DIRECT here: buffered from now on
        break;
      }
      if (r < 0) return Status::FromErrno(errno, "write " + path_ + " at offset " + std::to_string(offset + done));
      if (r == 0 || size_t(r) % kPage) {
        // A short O_DIRECT write (e.g. the disk filled up): finish buffered.
        done += size_t(r);
        return pwrite_full(fd_, static_cast<const uint8_t*>(buf) + done, len - done, offset + done, path_);
      }
      done += size_t(r);
    }
    if (done == len) return Status::OK();
  }
  return pwrite_full(fd_, buf, len, offset, path_);
}

Status DataFileWriter::sync() {
  if (::fdatasync(fd_) != 0) return Status::FromErrno(errno, "fdatasync " + path_);
  return Status::OK();
}

uint64_t DataFileWriter::size() const { return st_->size.load(); }

}  // namespace ucm::fmt
