// ucm/bench/store_bench.h: `ucm bench store` as a library call (docs/benchmarks.md, "store").
//
// Measures, in one run and in one directory:
//   raw   the disk's own rate for the block size: O_DIRECT sequential write and random read of a
//         scratch file, queue depth 16 (io_uring, or 16 threads when io_uring is unavailable);
//   dump  durable store dumps (Store::dump, fsync'd + index synced) of `blocks` blocks of
//         `block_bytes` payload bytes in namespace "bench", GB/s of payload;
//   load  verified store loads (Store::load, checksum checked) of the same blocks in random
//         order from a read-only handle with O_DIRECT, after the data files were dropped from the
//         page cache (posix_fadvise DONTNEED; residency is measured with mincore and reported);
//   lookup  Store::lookup on one thread pinned to one CPU, over an index of `lookup_blocks`
//         blocks (namespace "bench-lookup", tiny payloads), in prefix batches of `lookup_batch`
//         chained hashes of random present chains, like a server probing a prompt.
// Targets: dump >= 0.8 x raw sequential write, load >= 0.8 x raw random read,
// lookups >= 1,000,000 per second.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ucm/bench/common.h"
#include "ucm/status.h"

namespace ucm::bench {

/// dir, keep: with keep, the store itself (created when missing or empty), left with its blocks
/// (namespaces "bench" and "bench-lookup") in place; without, the parent of a temporary store
/// ucm-bench-<pid> that is removed at the end.
struct StoreBenchOptions : BenchStore {
  /// Blocks dumped and loaded; also the raw passes' I/O count. Payload bytes = blocks * block_bytes.
  uint64_t blocks = 16384;
  /// Payload bytes per block; default: SmolLM2-135M, bf16, 16 tokens (368,640). Must be a
  /// multiple of 4096 (raw O_DIRECT passes use the same size).
  uint64_t block_bytes = 368640;
  /// Raw passes: I/Os in flight.
  uint32_t queue_depth = 16;
  /// Store I/O threads of both handles (OpenOptions::io_threads); default = queue_depth.
  uint32_t io_threads = 0;
  /// The other raw random-read modes measured in the same run, and the load modes that match
  /// them: O_DIRECT at this deeper queue depth (load: direct_io, io_threads = it), and buffered
  /// reads from this many threads on a dropped page cache (load: direct_io off, io_threads = it).
  uint32_t deep_queue_depth = 64;
  uint32_t buffered_threads = 128;
  /// Blocks per dump / load task, and tasks kept in flight.
  uint32_t batch = 64;
  uint32_t inflight = 4;
  /// Blocks in the lookup index (0 skips the lookup benchmark).
  uint64_t lookup_blocks = 1000000;
  /// Hashes per lookup call (a chain prefix); capped at lookup_blocks.
  uint32_t lookup_batch = 64;
  /// Seconds the lookup loop runs.
  double lookup_seconds = 3.0;
  /// Seed of tokens and orders; 0 = random (so repeated --keep runs write new blocks).
  uint64_t seed = 0;
  /// >= 0: also load every block into a paged KV cache on this CUDA device (ucm_store_load_ex's
  /// device path, NHD pages), cold as the first load pass, and report it against that pass.
  int device = -1;
  /// Progress lines (stderr in the CLI). Null = silent.
  std::function<void(const std::string&)> progress;
};

struct Figure {
  double seconds = 0;
  uint64_t bytes = 0;   ///< payload bytes (store) or transferred bytes (raw)
  uint64_t count = 0;   ///< blocks / I/Os / lookups
  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

struct StoreBenchReport : BenchTargets {
  std::string store_path;
  bool kept = false;
  uint64_t blocks = 0, block_bytes = 0;
  uint32_t queue_depth = 0, io_threads = 0, batch = 0, inflight = 0;
  std::string raw_engine;        ///< "io_uring" or "threads"
  Figure raw_seq_write, raw_rand_read;
  Figure raw_rand_read_deep;              ///< O_DIRECT at deep_queue_depth
  Figure raw_rand_read_buffered;          ///< buffered from buffered_threads threads, readahead off
  Figure raw_rand_read_buffered_readahead;  ///< the same with the kernel's default readahead
  uint32_t deep_queue_depth = 0, buffered_threads = 0;
  Figure dump, load;
  Figure load_deep, load_buffered;  ///< loads in the modes of the two raw passes above
  Figure load_device;               ///< --device: the first pass's load into GPU memory
  std::string device_path;          ///< --device: "copies" or "kernel" (the scatter's path)
  /// The best raw random-read rate and the best load rate of the run, with their modes' names.
  double raw_best_gbps() const;
  double load_best_gbps() const;
  std::string raw_best_mode() const;
  std::string load_best_mode() const;
  uint64_t dump_disk_bytes = 0;  ///< bytes of the data files the dump added (records + headers)
  /// Page-cache policy, e.g. "posix_fadvise(DONTNEED) on the data files after the dump; loads
  /// with O_DIRECT (direct_io=on)".
  std::string cache_policy;
  double resident_before_load = 0;  ///< fraction of data-file pages in the page cache, [0,1]
  uint64_t load_verified_samples = 0;  ///< loaded blocks byte-compared with their source
  // lookup
  uint64_t lookup_index_blocks = 0;
  double lookup_index_build_s = 0;  ///< dumping the lookup index
  double lookup_open_s = 0;         ///< opening the read-only handle over it
  uint32_t lookup_batch = 0;
  int lookup_cpu = -1;              ///< CPU the lookup thread was pinned to (-1: not pinned)
  Figure lookup;                    ///< count = hashes probed
  double lookup_cpu_s = 0;          ///< thread CPU time of the lookup loop
  uint64_t lookup_misses = 0;       ///< probes of present hashes that missed (must be 0)
  double lookups_per_s() const { return lookup.seconds > 0 ? lookup.count / lookup.seconds : 0; }
  double lookups_per_cpu_s() const { return lookup_cpu_s > 0 ? lookup.count / lookup_cpu_s : 0; }
  double dump_ratio() const;
  double load_ratio() const;

  /// Every figure, ratio and target, as one JSON object (units in key names: _s, _bytes, _gbps).
  std::string to_json() const;
  /// Human table.
  std::string to_text() const;
};

/// Runs the benchmark. Errors: InvalidArgument (bad sizes; O_DIRECT unsupported where the store
/// is; --keep on a non-empty non-store directory; namespace "bench" taken by another
/// fingerprint), IOError / NoSpace, and any store error, with the phase named.
/// A missed target is not an error: see report->targets.
Status run_store_bench(const StoreBenchOptions& opts, StoreBenchReport* report);

}  // namespace ucm::bench
