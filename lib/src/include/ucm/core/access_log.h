// ucm/core/access_log.h: a store handle's access log (store_v1.md §6): 40-byte records of
// (namespace, block hash, access time), buffered and appended at most once a second.
// Internal to libucm.
#pragma once
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ucm/format/format.h"
#include "ucm/status.h"
#include "ucm/types.h"

namespace ucm::detail {

/// The handle's access log (store_v1.md §6).
class AccessLog {
 public:
  ~AccessLog() { close(); }
  Status open(const std::string& store, const std::string& name) {
    std::string dir = fmt::access_dir(store);
    Status s = fmt::make_dirs(dir);
    if (!s.ok()) return s;
    path_ = dir + "/" + name + ".log";
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) return Status::FromErrno(errno, "create access log " + path_);
    int rc;
    do rc = ::flock(fd_, LOCK_SH);
    while (rc != 0 && errno == EINTR);
    return Status::OK();
  }
  void add(const NamespaceId& ns, const BlockHash& h, uint64_t ms) {
    uint8_t rec[fmt::kAccessRecordSize];
    fmt::encode_access_record({ns, h, ms}, rec);
    std::lock_guard<std::mutex> g(mu_);
    buf_.insert(buf_.end(), rec, rec + sizeof rec);
  }
  /// Writes buffered records (whole records only, so a torn write is at most the last one).
  void flush() {
    std::lock_guard<std::mutex> g(mu_);
    if (fd_ < 0 || buf_.empty()) return;
    size_t done = 0;
    while (done < buf_.size()) {
      ssize_t r = ::write(fd_, buf_.data() + done, buf_.size() - done);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;  // recency is best effort: a full disk must not fail loads
      done += size_t(r);
    }
    buf_.clear();
  }
  void close() {
    flush();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  std::mutex mu_;
  std::vector<uint8_t> buf_;
  std::string path_;
  int fd_ = -1;
};

}  // namespace ucm::detail
