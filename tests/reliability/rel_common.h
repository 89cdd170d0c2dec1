// tests/reliability/rel_common.h: the deterministic block generator and small helpers shared by
// the reliability tests and their helper binary `ucm_crash_child`.
//
// The generator: block i of a namespace is the first block of a token sequence whose 16 token
// ids are derived from i (so its hash is a real chained hash, store_v1.md §4.1, computed with
// ucm::hash_blocks), and its payload is a pseudo-random byte string seeded by the block hash.
// So any process that holds a block hash can check the bytes a load returned without knowing
// which index produced it.
#pragma once
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ucm/clock.h"
#include "ucm/hash.h"
#include "ucm/namespace.h"
#include "ucm/store.h"
#include "ucm/types.h"

namespace rel {

// Synthetic namespace: 4 layers, 2 KV heads, head_dim 16, block 16, bf16:
// payload = 4 * 2 * 16 * 2 * 16 * 2 = 8192 bytes (record 12 KiB on disk).
inline constexpr uint32_t kLayers = 4, kHeads = 2, kHeadDim = 16, kBlock = 16, kElem = 2;
inline constexpr size_t kPayload = size_t{kLayers} * 2 * kBlock * kHeads * kHeadDim * kElem;

/// `which` = "keep" (blocks whose presence the tests track) or "victim" (blocks gc may evict).
inline ucm::NamespaceDesc test_desc(const std::string& which = "keep") {
  ucm::NamespaceDesc d;
  d.model_id = "reliability-" + which;
  d.weights_digest = "00112233445566778899aabbccddeeff";
  d.dtype = ucm::DType::kBF16;
  d.block_size = kBlock;
  d.num_layers = kLayers;
  d.num_kv_heads = kHeads;
  d.head_dim = kHeadDim;
  d.name = "rel-" + which;
  return d;
}

inline uint64_t splitmix64(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Hash of generator block i in namespace ns (a chain of one block starting at root_hash(ns)).
inline ucm::BlockHash block_hash(const ucm::NamespaceId& ns, uint64_t i) {
  uint32_t tokens[kBlock];
  uint64_t s = i * 0x100000001B3ull + 7;
  for (uint32_t t = 0; t < kBlock; ++t) tokens[t] = static_cast<uint32_t>(splitmix64(&s) % 49152);
  std::vector<ucm::BlockHash> out;
  ucm::hash_blocks(ucm::root_hash(ns), tokens, kBlock, kBlock, &out);
  return out.at(0);
}

/// The payload of the block with hash h: kPayload bytes.
inline void fill_payload(const ucm::BlockHash& h, uint8_t* out) {
  uint64_t s;
  std::memcpy(&s, h.data(), 8);
  uint64_t s2;
  std::memcpy(&s2, h.data() + 8, 8);
  s ^= s2 * 31;
  for (size_t off = 0; off < kPayload; off += 8) {
    uint64_t v = splitmix64(&s);
    std::memcpy(out + off, &v, 8);
  }
}
inline std::vector<uint8_t> payload(const ucm::BlockHash& h) {
  std::vector<uint8_t> v(kPayload);
  fill_payload(h, v.data());
  return v;
}
inline bool check_payload(const ucm::BlockHash& h, const uint8_t* got) {
  std::vector<uint8_t> want = payload(h);
  return std::memcmp(want.data(), got, kPayload) == 0;
}
/// Expected bytes of the KV-head range [h0, h1) of block h, layout [L][2][T][h1-h0][D].
/// Opens the store at `path` read-write (created when missing) with 2 I/O threads.
inline ucm::Status open_rw(const std::string& path, std::unique_ptr<ucm::Store>* st) {
  ucm::OpenOptions o;
  o.mode = ucm::OpenOptions::Mode::kReadWrite;
  o.create_if_missing = true;
  o.io_threads = 2;
  return ucm::Store::Open(path, o, st);
}

/// A dump task of generator blocks [first, first+n) of ns (each the one block of a chain from the
/// namespace's root) and the payloads it reads.
struct Batch {
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<ucm::DumpItem> items;
  std::shared_ptr<ucm::Task> task;
};
inline void start_batch(ucm::Store* st, const ucm::NamespaceId& ns, uint64_t first, uint64_t n, Batch* b) {
  b->payloads.resize(n);
  b->items.resize(n);
  for (uint64_t k = 0; k < n; ++k) {
    ucm::DumpItem& it = b->items[k];
    it.hash = block_hash(ns, first + k);
    it.parent = ucm::root_hash(ns);
    it.token_count = kBlock;
    b->payloads[k] = payload(it.hash);
    it.kv = b->payloads[k].data();
  }
  b->task = st->dump(ns, b->items.data(), b->items.size());
}
/// start_batch, then the task's wait() status.
inline ucm::Status dump_batch(ucm::Store* st, const ucm::NamespaceId& ns, uint64_t first, uint64_t n) {
  Batch b;
  start_batch(st, ns, first, n, &b);
  return b.task->wait();
}

inline std::vector<uint8_t> payload_heads(const ucm::BlockHash& h, uint32_t h0, uint32_t h1) {
  std::vector<uint8_t> full = payload(h);
  std::vector<uint8_t> out;
  const size_t run = size_t{h1 - h0} * kHeadDim * kElem;
  for (uint32_t lk = 0; lk < kLayers * 2; ++lk)
    for (uint32_t t = 0; t < kBlock; ++t) {
      size_t off = ((size_t{lk} * kBlock + t) * kHeads + h0) * kHeadDim * kElem;
      out.insert(out.end(), full.begin() + off, full.begin() + off + run);
    }
  return out;
}

using ucm::now_ms;  // ucm/clock.h

/// Snapshot of a directory tree: relative path -> "d" for directories, "f <size> <xxh3>" for
/// files, "l <target>" for links. Equal snapshots = byte-identical trees. Missing root -> empty.
inline void snapshot_rec(const std::string& root, const std::string& rel,
                         std::map<std::string, std::string>* out) {
  std::string dir = rel.empty() ? root : root + "/" + rel;
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    std::string r = rel.empty() ? n : rel + "/" + n;
    std::string p = root + "/" + r;
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      (*out)[r] = "d";
      snapshot_rec(root, r, out);
    } else if (S_ISLNK(st.st_mode)) {
      char buf[4096];
      ssize_t k = readlink(p.c_str(), buf, sizeof buf);
      (*out)[r] = "l " + std::string(buf, k > 0 ? static_cast<size_t>(k) : 0);
    } else {
      std::string content;
      int fd = open(p.c_str(), O_RDONLY);
      if (fd >= 0) {
        char buf[65536];
        ssize_t k;
        while ((k = read(fd, buf, sizeof buf)) > 0) content.append(buf, static_cast<size_t>(k));
        close(fd);
      }
      (*out)[r] = "f " + std::to_string(content.size()) + " " +
                  std::to_string(XXH3_64bits(content.data(), content.size()));
    }
  }
  closedir(d);
}
inline std::map<std::string, std::string> snapshot(const std::string& root) {
  std::map<std::string, std::string> m;
  struct stat st;
  if (stat(root.c_str(), &st) == 0) m["."] = S_ISDIR(st.st_mode) ? "d" : "f";
  snapshot_rec(root, "", &m);
  return m;
}
/// Human-readable difference of two snapshots (empty when equal).
inline std::string snapshot_diff(const std::map<std::string, std::string>& a,
                                 const std::map<std::string, std::string>& b) {
  std::string out;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end()) out += "removed " + k + "\n";
    else if (it->second != v) out += "changed " + k + " (" + v + " -> " + it->second + ")\n";
  }
  for (const auto& [k, v] : b)
    if (!a.count(k)) out += "added " + k + "\n";
  return out;
}

/// Sum of the sizes of the regular files directly in `dir`.
inline uint64_t dir_bytes(const std::string& dir) {
  uint64_t total = 0;
  DIR* d = opendir(dir.c_str());
  if (!d) return 0;
  while (dirent* e = readdir(d)) {
    struct stat st;
    std::string p = dir + "/" + e->d_name;
    if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) total += static_cast<uint64_t>(st.st_size);
  }
  closedir(d);
  return total;
}

/// A fresh directory under $TMPDIR (or /tmp): "<prefix>-XXXXXX".
inline std::string make_temp_dir(const std::string& prefix) {
  const char* t = std::getenv("TMPDIR");
  std::string tmpl = std::string(t && *t ? t : "/tmp") + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) return {};
  return std::string(buf.data());
}

/// rm -rf (errors ignored).
inline void rm_rf(const std::string& p) {
  std::error_code ec;
  std::filesystem::remove_all(p, ec);
}

}  // namespace rel
