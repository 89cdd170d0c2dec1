// ucm/bench/index_bench.h: `ucm bench index` as a library call (docs/benchmarks.md, "index").
//
// The store's costs that grow with the number of blocks, without writing their payloads: a
// store of `blocks` blocks of the default model's shape is made by writing its index directly
// (real chained hashes, BlockRecords, file records, journal entries, namespace counters) over
// sparse data files of the right sizes (3.7 TB apparent at 10 M blocks, nothing on disk). Then:
//   open      a read-only handle's Store::Open: without the fingerprint table (rebuilt by a scan
//             of the blocks family, the cost before formats/store/fptable.md), with it (warm and
//             after dropping the index and table from the page cache), and with `replay` journal
//             entries behind it (the writer's save interval);
//   lookup    Store::lookup on one pinned thread, 64-hash chain prefixes of random chains;
//   inspect   `ucm inspect STORE --json` in a child process: wall time and peak RSS;
//   gc        `ucm gc STORE --max-bytes (1 - gc_fraction) x bytes` in a child process (LRU
//             eviction of gc_fraction of the blocks, access times spread over 30 days): wall
//             time and peak RSS; then the open that replays gc's removals.
// Targets (issue 13, at 10 M blocks): open <= 1 s, lookups >= 20 M/s on one core, gc peak
// memory <= 256 MiB (anonymous RSS: the ucm binary's shared libraries, libtorch among them,
// take ~170 MiB of file-backed RSS whatever the command; both figures are reported).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ucm/bench/store_bench.h"
#include "ucm/status.h"

namespace ucm::bench {

/// dir, keep: with keep, the store itself (must be missing or empty); without, the parent of a
/// temporary store ucm-bench-index-<pid>, removed at the end.
struct IndexBenchOptions : BenchStore {
  uint64_t blocks = 1000000;
  uint64_t block_bytes = 368640;  ///< apparent payload per block (sparse files)
  uint32_t chain_len = 64;        ///< blocks per hash chain
  uint64_t replay = 99000;        ///< journal entries behind the table for the replay open (a reader saves at 100,000)
  double lookup_seconds = 3.0;
  double gc_fraction = 0.1;       ///< share of the bytes gc evicts (0 skips gc)
  /// The ucm executable for the inspect and gc child runs; empty skips them.
  std::string ucm_exe;
  /// Extra arguments for the gc child (e.g. "--memory-budget 64MiB").
  std::vector<std::string> gc_args;
  uint64_t seed = 1;
  std::function<void(const std::string&)> progress;
};

struct ChildRun {
  double seconds = 0;
  uint64_t peak_rss_bytes = 0;   ///< VmHWM sampled every 5 ms: everything, the shared libraries' pages too
  uint64_t peak_anon_bytes = 0;  ///< RssAnon sampled every 5 ms: the command's own memory
  int exit_code = -1;
  std::string json;  ///< its stdout
};

struct IndexBenchReport : BenchTargets {
  std::string store_path;
  uint64_t blocks = 0, block_bytes = 0;
  double build_s = 0;              ///< writing the index (no payloads)
  double compact_s = 0;            ///< its full compaction (the steady state of a long-lived store)
  uint64_t index_bytes = 0;        ///< size of STORE/index on disk
  uint64_t fptable_bytes = 0;      ///< size of STORE/fptable
  double open_rebuild_s = 0;       ///< reader open without the table (scan + save)
  double open_warm_s = 0;          ///< reader open with the table, page cache warm
  double open_cold_s = 0;          ///< ... after dropping index and table from the page cache
  uint64_t replayed = 0;           ///< entries the replay open replayed
  double open_replay_s = 0;        ///< reader open with `replay` entries behind the table
  int lookup_cpu = -1;
  Figure lookup;                   ///< count = hashes probed
  uint64_t lookup_misses = 0;
  ChildRun baseline, inspect, gc;  ///< baseline: `ucm --version` (the binary's libraries alone)
  uint64_t gc_evicted = 0;
  uint64_t gc_replayed = 0;        ///< entries the open after gc replayed
  double open_after_gc_s = 0;
  double lookups_per_s() const { return lookup.seconds > 0 ? lookup.count / lookup.seconds : 0; }
  std::string to_json() const;
  std::string to_text() const;
};

Status run_index_bench(const IndexBenchOptions& opts, IndexBenchReport* report);

}  // namespace ucm::bench
