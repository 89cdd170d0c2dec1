// ucm/bench/common.h: what the `ucm bench` benchmarks share: the store a bench writes, and the
// targets of a run, met or missed (every report holds them).
#pragma once
#include <string>
#include <vector>

namespace ucm::bench {

/// The store a bench writes (bench_store_path): with keep, `dir` itself; without, a temporary
/// store under `dir` (empty: $TMPDIR, else "."), removed at the end.
struct BenchStore {
  std::string dir;
  bool keep = false;
};

struct Target {
  std::string name;       ///< "dump", "load", "lookup", "quest scan @ 8192 blocks"
  std::string rule;       ///< e.g. "dump >= 0.80 x raw sequential write"
  double value = 0;       ///< the measured ratio (dump, load, scan) or lookups/s
  double threshold = 0;
  bool pass = false;
};

/// A report's targets; all_pass(): every one was met (--fail-on-miss exits 1 otherwise).
struct BenchTargets {
  std::vector<Target> targets;
  bool all_pass() const;
};

}  // namespace ucm::bench
