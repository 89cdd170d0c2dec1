// ucm/core/thread_pool.h: the fixed pool of I/O threads behind a store's load and dump tasks.
// Internal to libucm.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ucm::detail {

/// n threads (at least 1) running submitted jobs in FIFO order. shutdown() (and the destructor)
/// runs every queued job, then joins.
class ThreadPool {
 public:
  explicit ThreadPool(uint32_t n) {
    if (n == 0) n = 1;
    for (uint32_t i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
  }
  ~ThreadPool() { shutdown(); }
  void submit(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> g(mu_);
      q_.push_back(std::move(f));
    }
    cv_.notify_one();
  }
  /// Runs every queued job, then joins.
  void shutdown() {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        f = std::move(q_.front());
        q_.pop_front();
      }
      f();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

}  // namespace ucm::detail
