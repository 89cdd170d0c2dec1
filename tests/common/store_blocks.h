// tests/common/store_blocks.h: what the store tests build blocks from: a small namespace,
// deterministic payloads derived from a block's hash, random token chains, and an open helper.
// Header-only; links with ucm_core (ucm/store.h, ucm/hash.h, ucm/format).
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ucm/format/format.h"
#include "ucm/hash.h"
#include "ucm/store.h"

namespace ucm::test {

/// A bf16 namespace with 16-token blocks: payload L*2*16*H*D*2 bytes.
inline NamespaceDesc test_ns(const std::string& model_id, uint32_t layers, uint32_t kv_heads, uint32_t head_dim) {
  NamespaceDesc d;
  d.model_id = model_id;
  d.weights_digest = "00ff";
  d.dtype = DType::kBF16;
  d.block_size = 16;
  d.num_layers = layers;
  d.num_kv_heads = kv_heads;
  d.head_dim = head_dim;
  return d;
}

/// Deterministic payload of a block: n bytes from an LCG seeded with XXH3(hash).
inline std::vector<uint8_t> block_payload(const BlockHash& h, size_t n) {
  std::vector<uint8_t> v(n);
  uint64_t x = fmt::xxh3(h.data(), 16);
  for (size_t j = 0; j < n; ++j) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v[j] = uint8_t(x >> 56);
  }
  return v;
}

/// Block hashes of `blocks` 16-token blocks of random tokens (seeded), chained from `parent`.
inline std::vector<BlockHash> random_chain(const BlockHash& parent, size_t blocks, uint32_t seed) {
  std::vector<uint32_t> toks(blocks * 16);
  std::mt19937 rng(seed);
  for (auto& t : toks) t = rng() % 49152;
  std::vector<BlockHash> hs;
  hash_blocks(parent, toks.data(), toks.size(), 16, &hs);
  return hs;
}

/// Store::Open with io_threads; EXPECTs success (null on failure).
/// `shard`: read-write, the writer shard (store_v1.md §11; creating a missing store with one makes
/// it sharded).
inline std::unique_ptr<Store> open_test_store(const std::string& p, bool rw, bool create = false,
                                              uint32_t io_threads = 2, const std::string& shard = "") {
  OpenOptions o;
  o.mode = rw ? OpenOptions::Mode::kReadWrite : OpenOptions::Mode::kReadOnly;
  o.create_if_missing = create;
  o.io_threads = io_threads;
  o.shard = shard;
  std::unique_ptr<Store> s;
  Status st = Store::Open(p, o, &s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return s;
}

}  // namespace ucm::test
