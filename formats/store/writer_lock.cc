// formats/store/writer_lock.cc: the writer lock (§8; see ucm/format/writer_lock.h).
#include "ucm/format/writer_lock.h"
#include "ucm/format/io.h"
#include "ucm/format/layout.h"
#include "ucm/clock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace ucm::fmt {

Status WriterLock::Acquire(const std::string& store, std::unique_ptr<WriterLock>* out) {
  std::string p = lock_path(store);
  int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "open lock file " + p);
  int rc;
  do rc = ::flock(fd, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    std::string text(256, '\0');
    size_t got = 0;
    (void)pread_full(fd, text.data(), text.size(), 0, &got, p);
    ::close(fd);
    if (err != EWOULDBLOCK) return Status::FromErrno(err, "flock " + p);
    text.resize(got);
    std::string pid = "?", host = "?", since = "?";
    auto field = [&](const char* k) -> std::string {
      size_t a = text.find(k);
      if (a == std::string::npos) return "?";
      a += std::strlen(k);
      size_t b = text.find_first_of(" \n", a);
      return text.substr(a, b == std::string::npos ? std::string::npos : b - a);
    };
    pid = field("pid=");
    host = field("host=");
    since = field("since=");
    std::string since_text = since;
    if (since != "?") since_text = ucm::iso_time(std::strtoull(since.c_str(), nullptr, 10));
    return Status::Busy("store " + store + " is locked by pid " + pid + " on host " + host + " since " +
                        since_text + "; wait for it or stop it");
  }
  std::string text = "pid=" + std::to_string(::getpid()) + " host=" + host_name() +
                     " since=" + std::to_string(now_ms()) + "\n";
  if (::ftruncate(fd, 0) != 0 || !pwrite_full(fd, text.data(), text.size(), 0, p).ok()) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "write lock file " + p);
  }
  (void)::fdatasync(fd);
  out->reset(new WriterLock(fd));
  return Status::OK();
}

void WriterLock::touch() {
  if (fd_ >= 0) (void)::futimens(fd_, nullptr);
}

uint64_t lock_heartbeat_ns(const std::string& store) {
  struct stat st;
  if (::stat(lock_path(store).c_str(), &st) != 0) return 0;
  return uint64_t(st.st_mtim.tv_sec) * 1000000000ull + uint64_t(st.st_mtim.tv_nsec);
}

WriterLock::~WriterLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace ucm::fmt
