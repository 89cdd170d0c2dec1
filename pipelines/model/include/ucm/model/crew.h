// pipelines/model/include/ucm/model/crew.h: the prefill workers of one batched prefill (LlamaModel::forward_packed)
// as a crew. Each worker runs its own sequences; a worker whose sequences are done, or one that was
// dealt none, helps those still running: it takes parts of their GEMMs (row pieces), attention
// (units) and row kernels (row ranges). Without it a batch's shorter half left a core idle while
// the longest sequence finished (a batch of 1,616 and 1,168 tokens: a core idle for the last 448
// tokens), and a batch of one sequence ran its GEMMs on OpenBLAS's threads, which spin between
// GEMMs beside the attention threads, and its row kernels on one thread (docs/benchmarks.md,
// "The prefill's crew": 1.05x on 2K-token pages, 1.13x on whole pages, 2 cores).
// No libtorch: the ops that share (cpu_fp32_ops.cc, cpu_bf16_ops.cc) split their own work, row
// ranges through share_rows(), GEMMs through detail::for_gemm_pieces (attn_ops.h). Internal to
// ucm_model.
//
// Bits: a row kernel's part is a row range (ucm's row kernels compute each row alone), a GEMM's
// parts are pieces fixed by its row count alone (a BLAS may give a row other bits in another call
// shape: OpenBLAS's Haswell kernels do), attention's a dealing of units (each unit computed alone:
// tested), so the results do not depend on how many workers there are or which were idle.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <list>
#include <mutex>

namespace ucm::model {

class Crew {
 public:
  /// A crew of `workers` threads (>= 1), none of them helping yet.
  explicit Crew(int workers);
  Crew(const Crew&) = delete;
  Crew& operator=(const Crew&) = delete;

  /// Runs fn(p, parts) for every p in [0, parts), parts = min(max_parts, 1 + the helpers idle
  /// now) (1 with max_parts <= 1): the calling thread runs the parts no helper has taken, then waits
  /// for the others. Rethrows the first exception a part threw (after every part has ended).
  void share(int max_parts, const std::function<void(int part, int parts)>& fn);

  /// Called once by each worker whose own work is done (also when it threw): helps the others
  /// until every worker has called it, then returns.
  void help_until_done();

  /// Helpers waiting for work now.
  int idle_helpers() const {
    std::lock_guard<std::mutex> lk(mu_);
    return idle_;
  }
  /// Blocks until at least n helpers wait for work (tests: crew_strict()).
  void wait_for_idle(int n) const;
  /// Parts run by a helper since the crew was made.
  int64_t helped_parts() const { return helped_.load(std::memory_order_relaxed); }

 private:
  struct Task {
    const std::function<void(int, int)>* fn;
    int parts, next = 0, left;
    std::exception_ptr err;
  };
  // Claims a part of t (mu_ held): its index, or -1 if none is left.
  static int claim(Task& t) { return t.next < t.parts ? t.next++ : -1; }
  void run_part(Task& t, int p, bool helper);

  const int workers_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // helpers: a task posted, or every worker done
  std::condition_variable done_cv_;  // posters: a part ended
  std::list<Task*> tasks_;           // tasks with parts not yet claimed
  int idle_ = 0;                     // helpers waiting for work
  int done_ = 0;                     // workers that called help_until_done()
  std::atomic<int64_t> helped_{0};
};

/// The crew of the calling thread while a CrewMember is alive on it, else nullptr.
Crew* this_crew();

/// Parts run by a helper in every crew of this process so far (tests: that a prefill shared).
int64_t crew_helped_parts_total();

/// Tests only: with `on`, a poster runs one part of each task it shares and leaves the others to
/// the helpers that were idle when it posted (they are bound to take them), so that tests can
/// assert that helpers ran parts; without it (the default) the poster runs every part no helper
/// has taken yet, which on a loaded machine can be all of them.
void crew_strict_for_tests(bool on);
/// Whether the strict mode is on (forward_packed then also starts a worker's sequences only once
/// the workers dealt none are idle, so that they are sure to help).
bool crew_strict();

/// Makes `crew` the calling thread's crew while alive (restores the one before).
class CrewMember {
 public:
  explicit CrewMember(Crew* crew);
  ~CrewMember();
  CrewMember(const CrewMember&) = delete;
  CrewMember& operator=(const CrewMember&) = delete;

 private:
  Crew* was_;
};

/// The split points of rows [0, n) into `parts` ranges with starts on multiples of `align`
/// (the last range takes the rest): part p is [split_at(n, p, parts, align), split_at(n, p + 1, ...)).
inline int64_t split_at(int64_t n, int p, int parts, int64_t align) {
  if (p >= parts) return n;
  return n * p / parts / align * align;
}

/// Runs fn(r0, r1) over row ranges that cover [0, R) once, on the calling thread's crew
/// (Crew::share): at most R / min_rows parts (and 64), starts on multiples of `align`, no range
/// empty. Returns false, running nothing, where the calling thread has no crew or R < 2 min_rows
/// (the caller then runs the rows its own way).
template <class F>
bool share_rows(int64_t R, int64_t min_rows, int64_t align, const F& fn) {
  Crew* c = this_crew();
  if (!c || R < 2 * min_rows) return false;
  c->share(int(R / min_rows < 64 ? R / min_rows : 64), [&](int p, int n) {
    const int64_t r0 = split_at(R, p, n, align), r1 = split_at(R, p + 1, n, align);
    if (r1 > r0) fn(r0, r1);
  });
  return true;
}

}  // namespace ucm::model
