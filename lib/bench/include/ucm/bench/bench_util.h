// ucm/bench/bench_util.h: helpers shared by the store and index benchmarks.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ucm/bench/common.h"
#include "ucm/namespace.h"
#include "ucm/types.h"

namespace ucm::bench {

/// Monotonic clock, seconds.
double now_s();
/// CPU time of the calling thread, seconds.
double thread_cpu_s();
/// Pins the calling thread to the last CPU of its affinity set; returns it (-1: not pinned).
int pin_to_one_cpu();
/// Real chained hashes (ucm::hash_blocks) of random token sequences: chains of `chain_len`
/// blocks, `n` blocks in all. parents[i] is the previous block's hash or root_hash(ns).
/// tokens (may be null): the blocks' ids, block i at [i * block_size, (i + 1) * block_size).
void make_chains(const NamespaceId& ns, uint64_t n, uint32_t chain_len, uint32_t block_size, std::mt19937_64& rng,
                 std::vector<BlockHash>* hashes, std::vector<BlockHash>* parents,
                 std::vector<uint32_t>* tokens = nullptr);

/// A bf16 namespace whose payload is exactly `block_bytes`: SmolLM2-135M's dims (30 layers x 16
/// tokens x 3 KV heads x 64) for 368,640, else 1 layer x 16 tokens x 1 head x (block_bytes / 64).
NamespaceDesc payload_namespace(uint64_t block_bytes, const std::string& model_id, const std::string& name);

/// The store a bench writes: s.dir itself with s.keep (and a dir), else the temporary
/// <dir, or $TMPDIR, or .>/<prefix><pid>.
std::string bench_store_path(const BenchStore& s, const std::string& prefix);

/// Removes the tree at `path` when it goes out of scope, if armed (the temporary store).
struct RemoveGuard {
  std::string path;
  bool armed = false;
  ~RemoveGuard();
};

}  // namespace ucm::bench
