// ucm/format/writer_lock.h: the writer lock (§8).
// The contract is formats/store/store_v1.md; section numbers refer to it. Pure format code:
// no RocksDB, no threads; thread-safe unless noted.
#pragma once
#include <memory>
#include <string>

#include "ucm/format/common.h"

namespace ucm::fmt {

// Writer lock (§8): flock(LOCK_EX|LOCK_NB) on STORE/LOCK, holder text "pid=P host=H since=T\n".
/// LOCK's mtime as nanoseconds since the epoch (0 when it cannot be read): the heartbeat.
uint64_t lock_heartbeat_ns(const std::string& store);
class WriterLock {
 public:
  /// Takes the lock. Busy: "store STORE is locked by pid P on host H since T; wait for it or stop
  /// it" (T = ISO-8601 UTC time).
  static Status Acquire(const std::string& store, std::unique_ptr<WriterLock>* out);
  ~WriterLock();  ///< releases (closes the fd; the text is left, it is informational)
  /// The writer's heartbeat (§11.3): sets LOCK's mtime to now. Writers call it every second, so
  /// that gc on another node can tell a live writer whose flock a shared file system lost (a
  /// GlusterFS brick restart drops every lock) from a dead one. Best effort.
  void touch();
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  explicit WriterLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace ucm::fmt
