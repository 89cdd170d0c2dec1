// ucm/core/task_impl.h: ucm::Task as the store implements it: per-block statuses, a count of
// outstanding jobs, and a condition variable for wait(). Internal to libucm.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ucm/status.h"
#include "ucm/store.h"

namespace ucm::detail {

using Clock = std::chrono::steady_clock;

class TaskImpl : public Task {
 public:
  explicit TaskImpl(size_t n) : st_(n), written_(n, 0), remaining_(n) {}
  bool done() const override {
    std::lock_guard<std::mutex> g(mu_);
    return done_;
  }
  Status wait(int timeout_ms) override {
    std::unique_lock<std::mutex> l(mu_);
    if (timeout_ms < 0) cv_.wait(l, [&] { return done_; });
    else if (!cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return done_; }))
      return Status::Pending("task not finished after " + std::to_string(timeout_ms) + " ms");
    return result_;
  }
  const std::vector<Status>& block_status() const override { return st_; }
  const std::vector<uint8_t>& block_written() const override { return written_; }

  std::vector<Status>& statuses() { return st_; }
  /// Set before finish() (which publishes it to wait()ers).
  std::vector<uint8_t>& written() { return written_; }
  /// Marks one job finished; the caller that finishes the last runs `on_last` (if set) first.
  /// Returns true for that caller.
  bool job_done() { return remaining_.fetch_sub(1) == 1; }
  void finish(const Status& whole = Status::OK()) {
    std::lock_guard<std::mutex> g(mu_);
    result_ = whole;
    if (result_.ok())
      for (const auto& s : st_)
        if (!s.ok()) {
          result_ = s;
          break;
        }
    done_ = true;
    cv_.notify_all();
  }
  /// A finished task whose every block has `s`.
  static std::shared_ptr<TaskImpl> Failed(size_t n, const Status& s) {
    auto t = std::make_shared<TaskImpl>(n);
    for (auto& x : t->st_) x = s;
    t->finish(s);
    return t;
  }
  Clock::time_point t0 = Clock::now();

 private:
  std::vector<Status> st_;
  std::vector<uint8_t> written_;
  std::atomic<size_t> remaining_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status result_;
};

}  // namespace ucm::detail
