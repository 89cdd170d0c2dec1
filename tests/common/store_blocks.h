// tests/common/store_blocks.h: what the store tests build blocks from: a small namespace,
// deterministic payloads derived from a block's hash, random token chains, open, lookup and
// checked-load helpers.
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

/// A namespace of `dtype` (bf16 unless given) with `block_size`-token blocks (16 unless given):
/// payload L*2*T*H*D*dtype_size bytes.
inline NamespaceDesc test_ns(const std::string& model_id, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
                             uint32_t block_size = 16, DType dtype = DType::kBF16) {
  NamespaceDesc d;
  d.model_id = model_id;
  d.weights_digest = "00ff";
  d.dtype = dtype;
  d.block_size = block_size;
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

/// Store::Open with `o`; EXPECTs success (null on failure).
inline std::unique_ptr<Store> open_with(const std::string& p, const OpenOptions& o) {
  std::unique_ptr<Store> s;
  Status st = Store::Open(p, o, &s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return s;
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
  return open_with(p, o);
}

/// Store::lookup of hs (EXPECTs success): 1 for each block present; *prefix: the present prefix.
inline std::vector<uint8_t> lookup_present(Store* s, const NamespaceId& ns, const std::vector<BlockHash>& hs,
                                           size_t* prefix = nullptr) {
  std::vector<uint8_t> present(hs.size());
  size_t pre = 0;
  EXPECT_TRUE(s->lookup(ns, hs.data(), hs.size(), present.data(), &pre).ok());
  if (prefix) *prefix = pre;
  return present;
}

/// How many of hs are present.
inline size_t present_count(Store* s, const NamespaceId& ns, const std::vector<BlockHash>& hs) {
  size_t n = 0;
  for (auto p : lookup_present(s, ns, hs)) n += p;
  return n;
}

/// A load of hs, each block into its own buffer: per block its status, and whether its bytes are
/// block_payload(h, payload_bytes) (false for a block that did not load).
struct CheckedLoad {
  std::vector<Status> status;
  std::vector<bool> payload_ok;
  Code code(size_t i) const { return status[i].code(); }
  std::vector<Code> codes() const {
    std::vector<Code> out;
    for (const auto& s : status) out.push_back(s.code());
    return out;
  }
};

inline CheckedLoad load_checked(Store* s, const NamespaceId& ns, const std::vector<BlockHash>& hs,
                                size_t payload_bytes) {
  std::vector<std::vector<uint8_t>> dst(hs.size(), std::vector<uint8_t>(payload_bytes, 0xEE));
  LoadDest ld;
  for (auto& v : dst) ld.ptrs.push_back(v.data());
  auto t = s->load(ns, hs.data(), hs.size(), ld);
  (void)t->wait();
  CheckedLoad r;
  r.status = t->block_status();
  for (size_t i = 0; i < hs.size(); ++i)
    r.payload_ok.push_back(r.status[i].ok() && dst[i] == block_payload(hs[i], payload_bytes));
  return r;
}

}  // namespace ucm::test
