// ucm/core/metrics.h: counters and latency histograms of a store handle, rendered as Prometheus
// text exposition format 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/).
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "ucm/status.h"

namespace ucm {

/// A fixed-bucket latency histogram (seconds). Lock-free.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 14> kBounds = {1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3,
                                                    5e-3, 1e-2, 5e-2, 0.1,  0.5,  1.0,  5.0};
  void observe_ns(uint64_t ns);
  /// Appends "# HELP", "# TYPE" and the _bucket/_sum/_count lines of `name`.
  void render(std::string* out, const char* name, const char* help) const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};  // last = +Inf
  std::atomic<uint64_t> sum_ns_{0};
  std::atomic<uint64_t> count_{0};
};

struct Metrics {
  std::atomic<uint64_t> lookups{0}, lookup_hits{0};
  std::atomic<uint64_t> blocks_loaded{0}, bytes_loaded{0};
  std::atomic<uint64_t> blocks_dumped{0}, bytes_dumped{0}, dump_skipped{0};
  std::atomic<uint64_t> refreshes{0};
  // gc requests a live writer applied / refused, and the blocks they removed (store_v1.md §11.5)
  std::atomic<uint64_t> gc_requests_applied{0}, gc_requests_refused{0}, gc_blocks_removed{0};
  std::atomic<uint64_t> corrupt_reported{0}, corrupt_removed{0}, corrupt_dropped{0};  // store_v1.md 11.6
  std::atomic<uint64_t> fptable_loaded{0};    // 1: the open used STORE/fptable; 0: it rebuilt the table
  std::atomic<uint64_t> fptable_replayed{0};  // journal entries replayed into it at open
  std::array<std::atomic<uint64_t>, 11> errors{};  // by ucm::Code
  LatencyHistogram load_task, dump_task, lookup;

  void count_error(Code c) {
    if (c != Code::kOk) errors[static_cast<int>(c) % errors.size()].fetch_add(1, std::memory_order_relaxed);
  }
  /// Full exposition; `index_blocks` is the lookup table's size (a gauge).
  std::string render(uint64_t index_blocks) const;
};

}  // namespace ucm
