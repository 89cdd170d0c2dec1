// ucm/bench/raw_io.h: the disk's raw rate, measured like fio does (O_DIRECT, fixed queue depth), so
// that `ucm bench store` can state the store's dump and load throughput as a fraction of it.
// Internal to ucm_bench.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/status.h"

namespace ucm::bench {

/// Result of one raw I/O pass.
struct RawIoResult {
  uint64_t ios = 0;       ///< I/Os completed
  uint64_t bytes = 0;     ///< bytes transferred
  double seconds = 0;     ///< wall time, submission of the first I/O to the last completion
                          ///< (the sequential write also includes the final fdatasync)
  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }  ///< 10^9 bytes/s
};

/// I/O engine used by the raw passes: "io_uring" (liburing) when the kernel allows it, else
/// "threads" (queue_depth threads doing pread/pwrite).
struct RawIoEngine {
  bool force_threads = false;  ///< skip io_uring even when available (tests)
};

/// Creates `path` (truncating it), preallocates blocks * block_bytes bytes (fallocate, like
/// fio's default), then writes it sequentially in block_bytes-sized O_DIRECT writes with
/// `queue_depth` in flight, and fdatasyncs it. block_bytes must be a multiple of 4096.
/// *engine_used receives "io_uring" or "threads".
/// Errors: InvalidArgument (block size not a multiple of 4096; O_DIRECT unsupported by the file
/// system: the message says to pick a directory on a disk file system), IOError / NoSpace.
Status raw_seq_write(const std::string& path, uint64_t block_bytes, uint64_t blocks,
                     uint32_t queue_depth, const RawIoEngine& engine, RawIoResult* out,
                     std::string* engine_used);

/// The offsets of `reads` random reads of whole blocks from a file of `nblocks` blocks: every
/// block once in a random order (a permutation seeded by `seed`), then again in a new order if
/// reads > nblocks. Distinct blocks, as a load of distinct blocks reads them: a repeated offset
/// could be served by the page cache (buffered) or the host's cache and overstate the disk.
std::vector<uint64_t> distinct_block_offsets(uint64_t nblocks, uint64_t reads, uint64_t block_bytes, uint64_t seed);

/// Reads `reads` blocks of block_bytes at random block-aligned offsets (offset = k *
/// block_bytes, k in [0, file_size / block_bytes), from distinct_block_offsets) of the existing
/// file `path`, O_DIRECT, `queue_depth` in flight. `seed` makes the offsets reproducible.
Status raw_rand_read(const std::string& path, uint64_t block_bytes, uint64_t reads,
                     uint32_t queue_depth, uint64_t seed, const RawIoEngine& engine,
                     RawIoResult* out, std::string* engine_used);

/// The same reads through the page cache: the file's cached pages are dropped first
/// (posix_fadvise DONTNEED), then `threads` threads pread blocks of block_bytes at the offsets of
/// distinct_block_offsets (each thread takes the next offset of one shared plan). readahead
/// false: posix_fadvise(POSIX_FADV_RANDOM) first, so the kernel reads only the requested pages;
/// true: the kernel's default readahead (read_ahead_kb of the device), as UCM's PosixStore reads.
Status raw_rand_read_buffered(const std::string& path, uint64_t block_bytes, uint64_t reads, uint32_t threads,
                              bool readahead, uint64_t seed, RawIoResult* out);

}  // namespace ucm::bench
