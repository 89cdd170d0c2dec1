// ucm/bench/store_bench_phases.h: run_store_bench (`ucm bench store`) in the phases it runs, in
// order: prepare (options, the store's place, open), raw_write, dump, raw_reads, load_passes
// (load_pass each), lookup (build_lookup_index, then the timed loop), set_targets. Internal to
// ucm_bench (not installed); the reliability tests may run the phases one by one.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ucm/bench/bench_util.h"
#include "ucm/bench/raw_io.h"
#include "ucm/bench/store_bench.h"
#include "ucm/namespace.h"
#include "ucm/store.h"

namespace ucm::bench {

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
/// A 4096-aligned heap buffer (O_DIRECT sources and destinations).
using AlignedBuf = std::unique_ptr<uint8_t, AlignedFree>;

/// The --device pass's paged KV cache in GPU memory (store_bench.cc).
struct DeviceCache;

/// One run's state, shared by the phases. Destroyed in reverse order: the stores close before
/// the scratch file is unlinked and the temporary store removed.
struct StoreBenchRun {
  StoreBenchRun(const StoreBenchOptions& o, StoreBenchReport* r) : o(o), r(r) {}
  struct UnlinkGuard {  ///< unlinks the raw passes' scratch file
    std::string path;
    ~UnlinkGuard();
  };
  const StoreBenchOptions& o;
  StoreBenchReport* r;
  RemoveGuard guard;  ///< removes the temporary store on every exit path unless disarmed
  UnlinkGuard unlink_scratch;
  std::string path;     ///< the store
  std::string scratch;  ///< the raw passes' file, in the store's tmp/
  uint64_t seed = 0;
  std::mt19937_64 rng;
  OpenOptions wopts, ropts;
  std::unique_ptr<Store> store;  ///< the writer, while one is open
  RawIoEngine eng;
  NamespaceDesc desc;  ///< namespace "bench"
  NamespaceId ns{};
  std::vector<BlockHash> hashes, parents;
  std::vector<AlignedBuf> src;  ///< pool_n source payloads, block i uses src[i % pool_n]
  uint64_t pool_n = 0;
  double last_progress = 0;
  void progress(const std::string& m) const {
    if (o.progress) o.progress(m);
  }
};

namespace store_phases {
/// Checks the options (InvalidArgument), resets the report, picks the store's path (refusing an
/// existing temporary one), seeds the generator and opens the writer.
Status prepare(StoreBenchRun* b);
/// Raw O_DIRECT sequential write of the scratch file: blocks x block_bytes at the queue depth.
Status raw_write(StoreBenchRun* b);
/// Registers namespace "bench", dumps every block (chains of 64) and closes the writer.
Status dump(StoreBenchRun* b);
/// Page cache dropped; raw random reads of the scratch file (queue depth, deep, buffered), then
/// the scratch file is unlinked.
Status raw_reads(StoreBenchRun* b);
/// One load pass: every block once, random order, from a read-only handle opened with `lo`,
/// page cache dropped first; the first block of each task is compared with its source.
/// dev: into a paged KV cache on that CUDA device (nullptr: host memory).
Status load_pass(StoreBenchRun* b, const OpenOptions& lo, Figure* out, DeviceCache* dev = nullptr);
/// The load passes the options ask for: O_DIRECT, device, deep queue, buffered.
Status load_passes(StoreBenchRun* b);
/// Dumps the lookup index (namespace "bench-lookup", tiny payloads, chains of `chain`).
Status build_lookup_index(StoreBenchRun* b, uint32_t chain, NamespaceId* lns, std::vector<BlockHash>* lh,
                          std::vector<BlockHash>* lp);
/// --lookup-blocks > 0: builds the index, then lookup_seconds of prefix lookups on one pinned thread.
Status lookup(StoreBenchRun* b);
/// The pass / fail targets from the figures.
void set_targets(StoreBenchRun* b);
}  // namespace store_phases

}  // namespace ucm::bench
