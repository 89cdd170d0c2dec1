#include "ucm/model/crew.h"

#include <algorithm>
#include <thread>

namespace ucm::model {
namespace {
thread_local Crew* t_crew = nullptr;
std::atomic<int64_t> g_helped{0};
std::atomic<bool> g_strict{false};
}  // namespace

void crew_strict_for_tests(bool on) { g_strict.store(on, std::memory_order_relaxed); }
bool crew_strict() { return g_strict.load(std::memory_order_relaxed); }

void Crew::wait_for_idle(int n) const {
  while (idle_helpers() < n) std::this_thread::yield();
}

Crew* this_crew() { return t_crew; }
int64_t crew_helped_parts_total() { return g_helped.load(std::memory_order_relaxed); }

CrewMember::CrewMember(Crew* crew) : was_(t_crew) { t_crew = crew; }
CrewMember::~CrewMember() { t_crew = was_; }

Crew::Crew(int workers) : workers_(std::max(1, workers)) {}

void Crew::run_part(Task& t, int p, bool helper) {
  std::exception_ptr err;
  try {
    (*t.fn)(p, t.parts);
  } catch (...) {
    err = std::current_exception();
  }
  if (helper) {
    helped_.fetch_add(1, std::memory_order_relaxed);
    g_helped.fetch_add(1, std::memory_order_relaxed);
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (err && !t.err) t.err = err;
  if (--t.left == 0) done_cv_.notify_all();
}

void Crew::share(int max_parts, const std::function<void(int, int)>& fn) {
  int parts = 1;
  if (max_parts > 1) {
    std::lock_guard<std::mutex> lk(mu_);
    parts = std::min(max_parts, 1 + idle_);
  }
  if (parts <= 1) {
    fn(0, 1);
    return;
  }
  Task t{&fn, parts, 0, parts, nullptr};
  {
    std::lock_guard<std::mutex> lk(mu_);
    tasks_.push_back(&t);
  }
  work_cv_.notify_all();
  // This thread takes parts too: the task ends even if every helper is busy elsewhere (in the
  // tests' strict mode one part only: the helpers idle when it was posted take the rest).
  const bool strict = g_strict.load(std::memory_order_relaxed);
  for (;;) {
    int p;
    {
      std::lock_guard<std::mutex> lk(mu_);
      p = claim(t);
      if (p < 0 || t.next == t.parts) tasks_.remove(&t);
    }
    if (p < 0) break;
    run_part(t, p, false);
    if (strict) break;
  }
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [&] { return t.left == 0; });
  if (t.err) std::rethrow_exception(t.err);
}

void Crew::help_until_done() {
  std::unique_lock<std::mutex> lk(mu_);
  if (++done_ == workers_) {
    work_cv_.notify_all();
    return;
  }
  for (;;) {
    if (!tasks_.empty()) {
      Task& t = *tasks_.front();
      const int p = claim(t);
      if (t.next == t.parts) tasks_.pop_front();
      if (p < 0) continue;
      lk.unlock();
      run_part(t, p, true);
      lk.lock();
      continue;
    }
    if (done_ == workers_) return;
    ++idle_;
    work_cv_.wait(lk, [&] { return !tasks_.empty() || done_ == workers_; });
    --idle_;
  }
}

}  // namespace ucm::model
