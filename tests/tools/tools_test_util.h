// tests/tools/tools_test_util.h: tiny stores for the admin tests.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "ucm/admin.h"
#include "ucm/format/format.h"
#include "ucm/hash.h"
#include "ucm/namespace.h"
#include "ucm/store.h"
#include "store_blocks.h"

namespace ucm::test {

/// A fresh directory under the system temp dir, removed on destruction.
struct TempDir {
  std::string path;
  TempDir() {
    static int n = 0;
    path = (std::filesystem::temp_directory_path() /
            ("ucm-tools-" + std::to_string(::getpid()) + "-" + std::to_string(n++)))
               .string();
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string sub(const std::string& s) const { return path + "/" + s; }
};

/// L=2, H=1, D=4, T=4: 64 elements, 128 bytes of bf16 per block.
inline NamespaceDesc tiny_desc(const std::string& model = "tiny-model", DType dt = DType::kBF16) {
  NamespaceDesc d;
  d.model_id = model;
  d.weights_digest = "00112233445566778899aabbccddeeff";
  d.dtype = dt;
  d.block_size = 4;
  d.num_layers = 2;
  d.num_kv_heads = 1;
  d.head_dim = 4;
  return d;
}

inline std::unique_ptr<Store> open_store(const std::string& path, bool rw, bool create = false) {
  OpenOptions o;
  o.mode = rw ? OpenOptions::Mode::kReadWrite : OpenOptions::Mode::kReadOnly;
  o.create_if_missing = create;
  o.io_threads = 2;
  o.direct_io = false;
  o.refresh_interval_ms = 0;
  return open_with(path, o);
}

/// admin::inspect of `p` with `o`; EXPECTs success.
inline admin::InspectReport must_inspect(const std::string& p, const admin::InspectOptions& o = {}) {
  admin::InspectReport r;
  Status st = admin::inspect(p, o, &r);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return r;
}

/// `ucm build --rebuild-index` of the store at `p` into *br; ASSERTs success.
inline void rebuild_index(const std::string& p, admin::BuildReport* br) {
  admin::BuildOptions bo;
  bo.rebuild_index = true;
  Status st = admin::build(p, bo, br);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

/// Deterministic payload of a block: bytes derived from the hash.
inline std::string payload_for(const NamespaceDesc& d, const BlockHash& h) {
  std::string p(d.payload_bytes(), '\0');
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<char>(h[i % 16] ^ (i * 7));
  return p;
}

struct Chain {
  std::vector<BlockHash> hashes;
  std::vector<uint32_t> tokens;
};

/// Dumps a chain of `n` blocks (tokens start at `first_token`) into `ns`, each with its token ids
/// (store_v1.md §3.2); with repr when asked.
inline Chain dump_chain(Store* s, const NamespaceId& ns, const NamespaceDesc& d, uint32_t first_token,
                        size_t n, bool with_repr = false) {
  Chain c;
  for (size_t i = 0; i < n * d.block_size; ++i) c.tokens.push_back(first_token + static_cast<uint32_t>(i));
  hash_blocks(root_hash(ns), c.tokens.data(), c.tokens.size(), d.block_size, &c.hashes);
  std::vector<std::string> kv(n), repr(n);
  std::vector<DumpItem> items(n);
  for (size_t i = 0; i < n; ++i) {
    kv[i] = payload_for(d, c.hashes[i]);
    items[i].hash = c.hashes[i];
    items[i].parent = i == 0 ? root_hash(ns) : c.hashes[i - 1];
    items[i].token_count = d.block_size;
    items[i].kv = kv[i].data();
    items[i].tokens = c.tokens.data() + i * d.block_size;
    if (with_repr) {
      repr[i] = "repr-of-" + std::to_string(i) + std::string(100, static_cast<char>('a' + i));
      items[i].repr = repr[i].data();
      items[i].repr_len = repr[i].size();
    }
  }
  auto t = s->dump(ns, items.data(), items.size());
  Status st = t->wait();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return c;
}

/// The registry entry of a document `id` whose blocks are chain c's (first to last).
inline DocumentEntry document_of(const std::string& id, const Chain& c) {
  DocumentEntry d;
  d.id = id;
  d.first_block = c.hashes.front();
  d.last_block = c.hashes.back();
  d.blocks = static_cast<uint32_t>(c.hashes.size());
  return d;
}

/// Loads one block (all heads) into a string; the Status of the block.
inline Status load_block(Store* s, const NamespaceId& ns, const NamespaceDesc& d, const BlockHash& h,
                         std::string* out) {
  out->assign(d.payload_bytes(), '\0');
  LoadDest dest;
  dest.kind = LoadDest::Kind::kContiguous;
  dest.ptrs.push_back(out->data());
  auto t = s->load(ns, &h, 1, dest);
  return t->wait();
}

/// Flips bits `mask` of byte `at` of the KV payload of `h` (the record's payload starts one page
/// after its offset), so that its checksum fails. False when the block or file is not found.
inline bool spoil_payload_byte(const std::string& store, const NamespaceId& ns, const BlockHash& h,
                               uint64_t at = 1, int mask = 0x40) {
  BlockInfo bi;
  {
    OpenOptions o;
    o.refresh_interval_ms = 0;
    std::unique_ptr<Store> s;
    if (!Store::Open(store, o, &s).ok() || !s->get_block(ns, h, &bi).ok()) return false;
  }
  std::FILE* f = std::fopen(fmt::data_file_path(store, bi.kv_file).c_str(), "r+b");
  if (!f) return false;
  const long off = static_cast<long>(bi.kv_offset + fmt::kPage + at);
  std::fseek(f, off, SEEK_SET);
  const int ch = std::fgetc(f);
  std::fseek(f, off, SEEK_SET);
  std::fputc(ch ^ mask, f);
  return std::fclose(f) == 0;
}

inline std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace ucm::test
