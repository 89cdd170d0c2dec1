// formats/store/data_file_scanner.cc: DataFileScanner (§3.4; see ucm/format/data_file.h).
#include "ucm/format/data_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include "format_internal.h"

namespace ucm::fmt {

using detail::at;

// ---------------------------------------------------------------------------------------------
DataFileScanner::DataFileScanner(int fd, std::string path, uint64_t size, FileHeader h)
    : fd_(fd), path_(std::move(path)), size_(size), header_(h) {}
DataFileScanner::~DataFileScanner() {
  if (fd_ >= 0) ::close(fd_);
}

Status DataFileScanner::Open(const std::string& path, std::unique_ptr<DataFileScanner>* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open data file " + path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "stat " + path);
  }
  std::string page(kPage, '\0');
  size_t got = 0;
  Status s = pread_full(fd, page.data(), kPage, 0, &got, path);
  if (s.ok() && got < kPage)
    s = Status::Corruption("data file " + path + " is shorter than its 4096-byte header");
  FileHeader h;
  if (s.ok()) s = decode_file_header(reinterpret_cast<const uint8_t*>(page.data()), path, &h);
  if (!s.ok()) {
    ::close(fd);
    return s;
  }
  out->reset(new DataFileScanner(fd, path, uint64_t(st.st_size), h));
  return Status::OK();
}

bool DataFileScanner::next(ScannedRecord* rec, std::string* payload, bool verify_payload) {
  if (!status_.ok()) return false;
  *rec = ScannedRecord{};
  page_.resize(kPage);
  uint64_t bad_start = UINT64_MAX;
  std::string bad_error;
  while (pos_ < size_) {
    size_t got = 0;
    Status s = pread_full(fd_, page_.data(), kPage, pos_, &got, path_);
    if (!s.ok()) {
      status_ = s;
      return false;
    }
    RecordHeader h;
    Status hs = got < kPage ? Status::Corruption(at(path_, pos_) + ": partial page at end of file")
                            : decode_record_header(reinterpret_cast<const uint8_t*>(page_.data()),
                                                   at(path_, pos_), &h);
    if (!hs.ok()) {
      if (bad_start == UINT64_MAX) {
        bad_start = pos_;
        bad_error = hs.message();
      }
      pos_ += kPage;
      continue;
    }
    if (bad_start != UINT64_MAX) {
      // Report the bad run first; the good header is picked up by the next call.
      rec->state = ScannedRecord::State::kCorrupt;
      rec->offset = bad_start;
      rec->length = pos_ - bad_start;
      rec->error = bad_error;
      return true;
    }
    const uint64_t total = record_size(h.payload_length);
    rec->offset = pos_;
    rec->header = h;
    rec->header_ok = true;
    if (h.payload_length > size_ || pos_ + kPage + h.payload_length > size_) {
      rec->state = ScannedRecord::State::kTornTail;
      rec->length = size_ - pos_;
      rec->error = at(path_, pos_) + ": record runs past the end of the file (torn tail)";
      pos_ = size_;
      return true;
    }
    rec->length = total;
    if (verify_payload) {
      std::string local;
      std::string& buf = payload ? *payload : local;
      buf.resize(h.payload_length);
      size_t pg = 0;
      s = pread_full(fd_, buf.data(), h.payload_length, pos_ + kPage, &pg, path_);
      if (!s.ok()) {
        status_ = s;
        return false;
      }
      if (pg != h.payload_length || xxh3(buf.data(), h.payload_length) != h.payload_checksum) {
        rec->state = ScannedRecord::State::kCorrupt;
        rec->error = at(path_, pos_) + ": payload checksum mismatch";
        pos_ += std::min(total, size_ - pos_);
        return true;
      }
    }
    rec->state = ScannedRecord::State::kValid;
    pos_ += std::min(total, size_ - pos_);
    return true;
  }
  if (bad_start != UINT64_MAX) {
    rec->state = ScannedRecord::State::kTornTail;
    rec->offset = bad_start;
    rec->length = size_ - bad_start;
    rec->error = bad_error + " (no valid record after it: torn tail)";
    return true;
  }
  return false;
}

}  // namespace ucm::fmt
