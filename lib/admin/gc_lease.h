// lib/admin/gc_lease.h: the gc lease of a sharded store (store_v1.md §11.3): one gc at a time
// over the whole store, taken over once its holder stops renewing it. Internal to lib/admin.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ucm/admin.h"
#include "ucm/status.h"

namespace ucm::admin {

class GcLease {
 public:
  /// Takes the lease of sharded store `root` for `ttl_ms`, waiting up to `wait_ms` for another
  /// holder's lease to be released or to expire. Busy names the holder and when its lease
  /// expires. *taken_from: the expired holder this lease replaced ("" if none). A thread renews
  /// the lease every ttl/4 until destruction, which releases it.
  static Status Acquire(const std::string& root, uint64_t ttl_ms, uint64_t wait_ms, const ProgressFn& progress,
                        std::unique_ptr<GcLease>* out, std::string* taken_from);
  ~GcLease();
  GcLease(const GcLease&) = delete;
  GcLease& operator=(const GcLease&) = delete;

  /// False once a renewal found the lease held by someone else (this process stalled past the
  /// ttl and another gc took over): the run must stop at the next shard.
  bool held() const { return !lost_.load(); }
  const std::string& holder() const { return holder_; }

 private:
  GcLease(std::string root, std::string holder, uint64_t ttl_ms)
      : root_(std::move(root)), holder_(std::move(holder)), ttl_ms_(ttl_ms) {}
  void renew_loop();

  std::string root_, holder_;
  uint64_t ttl_ms_;
  std::atomic<bool> lost_{false};
  std::thread renew_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

}  // namespace ucm::admin
