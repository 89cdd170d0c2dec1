// lib/src/sharded_task.cc: a task over several shards (see run_over_shards in sharded_store.h).
#include <chrono>

#include "ucm/core/sharded_store.h"
#include "ucm/clock.h"
#include "ucm/core/task_impl.h"

namespace ucm::detail {

namespace {

constexpr int64_t kAwayMs = 10000;  // a shard with an I/O error is skipped by lookups this long

class ShardedTask : public Task {
 public:
  ShardedTask(ShardList shards, std::vector<std::vector<uint8_t>> present, size_t n, ShardLaunch launch)
      : shards_(std::move(shards)), present_(std::move(present)), launch_(std::move(launch)), st_(n),
        written_(n, 0), tried_(n, SIZE_MAX) {}

  void start() {
    std::lock_guard<std::mutex> g(mu_);
    std::vector<std::vector<size_t>> by_shard(shards_.size());
    for (size_t i = 0; i < st_.size(); ++i) {
      const size_t s = next_shard(i, 0);
      if (s == SIZE_MAX) {
        st_[i] = Status::NotFound("block not in any shard");
        continue;
      }
      tried_[i] = s;
      by_shard[s].push_back(i);
    }
    launch_all(&by_shard);
    advance_locked();
  }

  bool done() const override {
    std::lock_guard<std::mutex> g(mu_);
    const_cast<ShardedTask*>(this)->advance_locked();
    return done_;
  }

  Status wait(int timeout_ms) override {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
    for (;;) {
      std::shared_ptr<Task> pending;
      {
        std::lock_guard<std::mutex> g(mu_);
        advance_locked();
        if (done_) return result_;
        for (const auto& s : subs_)
          if (!s.collected && !s.task->done()) {
            pending = s.task;
            break;
          }
      }
      if (!pending) continue;  // a sub finished meanwhile: collect it
      int left = -1;
      if (timeout_ms >= 0) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (ms <= 0) return Status::Pending("task not finished after " + std::to_string(timeout_ms) + " ms");
        left = int(ms);
      }
      Status w = pending->wait(left);
      if (w.code() == Code::kPending)
        return Status::Pending("task not finished after " + std::to_string(timeout_ms) + " ms");
    }
  }

  const std::vector<Status>& block_status() const override { return st_; }
  const std::vector<uint8_t>& block_written() const override { return written_; }

 private:
  struct Sub {
    size_t shard;
    std::vector<size_t> idx;
    std::shared_ptr<Task> task;
    bool collected = false;
  };

  size_t next_shard(size_t i, size_t from) const {
    for (size_t s = from; s < shards_.size(); ++s)
      if (present_[s][i]) return s;
    return SIZE_MAX;
  }

  void launch_all(std::vector<std::vector<size_t>>* by_shard) {
    for (size_t s = 0; s < by_shard->size(); ++s) {
      if ((*by_shard)[s].empty()) continue;
      Sub sub{s, std::move((*by_shard)[s]), nullptr};
      sub.task = launch_(*shards_[s], sub.idx);
      subs_.push_back(std::move(sub));
    }
  }

  void advance_locked() {
    if (done_) return;
    std::vector<std::vector<size_t>> retry(shards_.size());
    bool open = false;
    for (auto& sub : subs_) {
      if (sub.collected) continue;
      if (!sub.task->done()) {
        open = true;
        continue;
      }
      sub.collected = true;
      const auto& bs = sub.task->block_status();
      for (size_t k = 0; k < sub.idx.size(); ++k) {
        const size_t i = sub.idx[k];
        const Status s = k < bs.size() ? bs[k] : Status::Internal("shard task returned too few statuses");
        st_[i] = s;
        // Only what another shard can mend is tried there (bad arguments, or a visitor's own
        // error, would fail again).
        if (s.code() != Code::kNotFound && s.code() != Code::kCorruption && s.code() != Code::kIOError) continue;
        if (s.code() == Code::kIOError)
          shards_[sub.shard]->away_until_ms.store(steady_ms() + kAwayMs, std::memory_order_relaxed);
        const size_t next = next_shard(i, sub.shard + 1);
        if (next != SIZE_MAX) {
          tried_[i] = next;
          retry[next].push_back(i);
        }
      }
    }
    bool relaunched = false;
    for (const auto& r : retry) relaunched |= !r.empty();
    if (relaunched) {
      launch_all(&retry);
      open = true;
    }
    if (open) return;
    for (auto& s : st_)
      if (s.code() == Code::kIOError) s = Status::NotFound("miss: the shard holding the block is unreachable (" +
                                                           s.message() + ")");
    result_ = Status::OK();
    for (const auto& s : st_)
      if (!s.ok()) {
        result_ = s;
        break;
      }
    done_ = true;
  }

  ShardList shards_;
  std::vector<std::vector<uint8_t>> present_;
  ShardLaunch launch_;
  mutable std::mutex mu_;
  std::vector<Status> st_;
  std::vector<uint8_t> written_;
  std::vector<size_t> tried_;
  std::vector<Sub> subs_;
  bool done_ = false;
  Status result_;
};

}  // namespace

std::shared_ptr<Task> run_over_shards(const ShardList& shards, const std::vector<std::vector<uint8_t>>& present,
                                      size_t n, ShardLaunch launch) {
  auto t = std::make_shared<ShardedTask>(shards, present, n, std::move(launch));
  t->start();
  return t;
}

}  // namespace ucm::detail
