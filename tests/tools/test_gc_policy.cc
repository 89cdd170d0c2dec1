// gc's policy against a reference: a random forest of chains (shared prefixes, branches), access
// times from access logs (with ties), corrupt blocks (found by --verify), orphans (a middle block
// deleted from the index), registered documents; gc runs with --max-bytes, with --max-age and
// --unreferenced, and as a dry run, and the blocks it removes are exactly those the reference
// removes. The reference is gc's policy written plainly in memory (the rules of docs/cli.md:
// corrupt, orphans, unreferenced, age with descendants, LRU by subtree recency, deepest first).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "ucm/admin.h"
#include "ucm/core/index.h"
#include "ucm/format/format.h"
#include "ucm/hash.h"
#include "ucm/store.h"
#include "store_blocks.h"

using namespace ucm;
using namespace ucm::admin;
namespace fs = std::filesystem;

namespace {

NamespaceDesc tiny_ns() { return test::test_ns("gc-policy", 1, 1, 8); }  // 512-byte payloads

struct Blk {
  BlockHash parent{};
  uint64_t access = 0, bytes = 0;
  bool corrupt = false;
};

std::unique_ptr<Store> open_store(const std::string& p, bool rw, bool create = false) {
  return test::open_test_store(p, rw, create);
}

struct Options {
  std::optional<uint64_t> max_bytes, max_age_ms;
  bool unreferenced = false;
  uint64_t now = 0;
};

/// gc's policy, in memory: the keys it removes.
std::set<BlockHash> reference(const std::map<BlockHash, Blk>& blocks, const BlockHash& root,
                              const std::vector<DocumentEntry>& docs, const Options& o) {
  std::map<BlockHash, std::vector<BlockHash>> children;
  for (const auto& [h, b] : blocks) children[b.parent].push_back(h);
  std::set<BlockHash> removed;
  for (const auto& [h, b] : blocks)
    if (b.corrupt) removed.insert(h);
  std::map<BlockHash, int64_t> depth;
  std::vector<std::pair<BlockHash, int64_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto [h, d] = stack.back();
    stack.pop_back();
    if (d > 0) depth[h] = d;
    for (const auto& c : children[h])
      if (!removed.count(c)) stack.push_back({c, d + 1});
  }
  for (const auto& [h, b] : blocks)
    if (!removed.count(h) && !depth.count(h)) removed.insert(h);  // orphans
  auto evict_subtree = [&](const BlockHash& h) {
    std::vector<BlockHash> st{h};
    while (!st.empty()) {
      BlockHash k = st.back();
      st.pop_back();
      if (!removed.insert(k).second) continue;
      for (const auto& c : children[k]) st.push_back(c);
    }
  };
  if (o.unreferenced) {
    std::set<BlockHash> referenced;
    for (const auto& d : docs)
      for (BlockHash h = d.last_block; blocks.count(h) && referenced.insert(h).second;) h = blocks.at(h).parent;
    for (const auto& [h, b] : blocks)
      if (!removed.count(h) && !referenced.count(h)) evict_subtree(h);
  }
  if (o.max_age_ms) {
    const uint64_t cutoff = o.now - *o.max_age_ms;
    for (const auto& [h, b] : blocks)
      if (!removed.count(h) && b.access < cutoff) evict_subtree(h);
  }
  if (o.max_bytes) {
    uint64_t cur = 0;
    std::vector<BlockHash> order;
    std::map<BlockHash, uint64_t> rec;
    for (const auto& [h, b] : blocks)
      if (!removed.count(h)) {
        cur += b.bytes;
        order.push_back(h);
        rec[h] = b.access;
      }
    auto by_depth = order;
    std::sort(by_depth.begin(), by_depth.end(), [&](auto& a, auto& b) { return depth[a] > depth[b]; });
    for (const auto& h : by_depth)
      if (rec.count(blocks.at(h).parent)) rec[blocks.at(h).parent] = std::max(rec[blocks.at(h).parent], rec[h]);
    std::sort(order.begin(), order.end(), [&](auto& a, auto& b) {
      if (rec[a] != rec[b]) return rec[a] < rec[b];
      if (depth[a] != depth[b]) return depth[a] > depth[b];
      return a < b;
    });
    for (const auto& h : order) {
      if (cur <= *o.max_bytes) break;
      if (removed.count(h)) continue;
      std::set<BlockHash> before = removed;
      evict_subtree(h);
      for (const auto& k : removed)
        if (!before.count(k)) cur -= blocks.at(k).bytes;
    }
  }
  return removed;
}

class GcPolicy : public ::testing::Test {
 protected:
  void SetUp() override {
    base = (fs::temp_directory_path() / ("ucm_gcpol_" + std::to_string(::getpid()))).string();
    fs::remove_all(base);
    const std::string p = base + "/store";
    std::mt19937 rng(1234);
    const NamespaceDesc d = tiny_ns();
    {
      auto s = open_store(p, true, true);
      ASSERT_TRUE(s->register_namespace(d, &ns).ok());
      root = root_hash(ns);
      std::vector<uint8_t> payload(d.payload_bytes(), 3);
      std::vector<BlockHash> all;
      for (int t = 0; t < 45; ++t) {
        const BlockHash parent = all.empty() || rng() % 3 == 0 ? root : all[rng() % all.size()];
        const size_t len = 1 + rng() % 6;
        std::vector<uint32_t> toks(len * 16);
        for (auto& x : toks) x = rng() % 49152;
        std::vector<BlockHash> hs;
        hash_blocks(parent, toks.data(), toks.size(), 16, &hs);
        std::vector<DumpItem> items(len);
        for (size_t i = 0; i < len; ++i) {
          items[i].hash = hs[i];
          items[i].parent = i ? hs[i - 1] : parent;
          items[i].token_count = 16;
          items[i].kv = payload.data();
          blocks[hs[i]].parent = items[i].parent;
          all.push_back(hs[i]);
        }
        ASSERT_TRUE(s->dump(ns, items.data(), len)->wait().ok());
        if (t % 4 == 0) {  // a registered document: the root's chain down to this extension's end
          DocumentEntry doc;
          doc.id = "doc" + std::to_string(t);
          doc.last_block = hs.back();
          BlockHash f = hs.back();
          uint32_t n = 1;
          while (blocks[f].parent != root) {
            f = blocks[f].parent;
            ++n;
          }
          doc.first_block = f;
          doc.blocks = n;
          doc.tokens = n * 16;
          ASSERT_TRUE(s->put_document(ns, doc).ok());
          docs.push_back(doc);
        }
      }
      for (auto& [h, b] : blocks) {
        BlockInfo bi;
        ASSERT_TRUE(s->get_block(ns, h, &bi).ok());
        b.access = bi.last_access_ms;
        b.bytes = bi.kv_length;
      }
    }
    // Access times: most blocks' index values set to one of 50 seconds ten hours ago (many
    // ties), the rest left at their dump time; access logs then raise some within that window
    // (gc takes the newest of the index value and the logs).
    now = fmt::now_ms();
    {
      std::unique_ptr<Index> ix;
      ASSERT_TRUE(Index::OpenPrimary(fmt::index_dir(p), false, &ix).ok());
      Index::Batch b;
      for (auto& [h, blk] : blocks) {
        if (rng() % 10 < 3) continue;
        fmt::BlockRecord r;
        ASSERT_TRUE(ix->get_block(ns, h, &r).ok());
        r.last_access_ms = blk.access = now - 36000000 + uint64_t(rng() % 50) * 1000;
        b.update_block(ns, h, r);
      }
      ASSERT_TRUE(ix->write(b, true).ok());
    }
    {
      std::ofstream log(p + "/access/somehost-1-000000000001.log", std::ios::binary);
      for (auto& [h, b] : blocks) {
        if (rng() % 10 < 6) continue;
        fmt::AccessRecord a;
        a.ns = ns;
        a.hash = h;
        a.access_ms = now - 36000000 + uint64_t(rng() % 50) * 1000;
        uint8_t rec[fmt::kAccessRecordSize];
        fmt::encode_access_record(a, rec);
        log.write(reinterpret_cast<const char*>(rec), sizeof rec);
        b.access = std::max(b.access, a.access_ms);
      }
    }
    // Corrupt payloads (found by --verify) and middle blocks deleted from the index (orphans).
    std::vector<BlockHash> keys;
    for (auto& [h, b] : blocks) keys.push_back(h);
    std::shuffle(keys.begin(), keys.end(), rng);
    {
      auto s = open_store(p, false);
      for (size_t i = 0; i < 4; ++i) {
        BlockInfo bi;
        ASSERT_TRUE(s->get_block(ns, keys[i], &bi).ok());
        std::fstream f(fmt::data_file_path(p, bi.kv_file), std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(std::streamoff(bi.kv_offset + fmt::kPage + 100));
        f.put(char(0x5a ^ 3));
        blocks[keys[i]].corrupt = true;
      }
    }
    {
      std::unique_ptr<Index> ix;
      ASSERT_TRUE(Index::OpenPrimary(fmt::index_dir(p), false, &ix).ok());
      Index::Batch b;
      for (size_t i = 4; i < 7; ++i) {
        b.delete_block(ns, keys[i]);
        b.add_ns_counters(ns, -1, -int64_t(blocks[keys[i]].bytes));
        blocks.erase(keys[i]);
      }
      ASSERT_TRUE(ix->write(b, true).ok());
    }
    ASSERT_GT(blocks.size(), 80u);
  }
  void TearDown() override { fs::remove_all(base); }

  /// Runs gc on a copy of the store; returns the blocks left.
  std::set<BlockHash> run(const std::string& tag, GcOptions o, GcReport* rep) {
    const std::string p = base + "/" + tag;
    fs::copy(base + "/store", p, fs::copy_options::recursive);
    o.verify = true;
    o.grace_ms = 0;
    o.memory_budget = 16ull << 20;
    Status st = gc(p, o, rep);
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::set<BlockHash> left;
    std::unique_ptr<Index> ix;
    EXPECT_TRUE(Index::OpenPrimary(fmt::index_dir(p), false, &ix).ok());
    EXPECT_TRUE(ix->for_each_block(nullptr, [&](const NamespaceId&, const BlockHash& h, const fmt::BlockRecord&) {
                    left.insert(h);
                    return true;
                  }).ok());
    return left;
  }
  std::set<BlockHash> expected_left(const Options& o) const {
    const auto removed = reference(blocks, root, docs, o);
    std::set<BlockHash> left;
    for (const auto& [h, b] : blocks)
      if (!removed.count(h)) left.insert(h);
    return left;
  }

  std::string base;
  NamespaceId ns{};
  BlockHash root{};
  std::map<BlockHash, Blk> blocks;
  std::vector<DocumentEntry> docs;
  uint64_t now = 0;
};

}  // namespace

TEST_F(GcPolicy, MaxBytesRemovesWhatTheReferenceRemoves) {
  uint64_t total = 0;
  for (const auto& [h, b] : blocks) total += b.bytes;
  for (double share : {0.8, 0.5, 0.2}) {
    SCOPED_TRACE(share);
    Options o;
    o.max_bytes = uint64_t(double(total) * share);
    const auto want = expected_left(o);
    GcOptions g;
    g.max_bytes = o.max_bytes;
    GcReport rep;
    const auto left = run("bytes" + std::to_string(int(share * 10)), g, &rep);
    EXPECT_EQ(left, want);
    EXPECT_EQ(rep.corrupt_removed, 4u);
    EXPECT_GT(rep.orphans_removed, 0u);
    EXPECT_EQ(rep.blocks_after, want.size());
    EXPECT_LT(want.size(), blocks.size() - 4);  // something was evicted besides the corrupt
  }
}

TEST_F(GcPolicy, MaxAgeAndUnreferencedRemoveWhatTheReferenceRemoves) {
  Options o;
  o.now = now;
  o.max_age_ms = 36000000 - 25500;  // the logged accesses of the first 25 of the 50 seconds are older
  {
    GcOptions g;
    g.max_age_ms = o.max_age_ms;
    GcReport rep;
    const auto left = run("age", g, &rep);
    EXPECT_EQ(left, expected_left(o));
    EXPECT_GT(rep.evicted_blocks, 0u);
  }
  o.unreferenced = true;
  {
    GcOptions g;
    g.max_age_ms = o.max_age_ms;
    g.unreferenced = true;
    GcReport rep;
    const auto left = run("ageunref", g, &rep);
    EXPECT_EQ(left, expected_left(o));
    EXPECT_GT(rep.unreferenced_removed, 0u);
  }
}

TEST_F(GcPolicy, DryRunListsWhatTheRunRemoves) {
  uint64_t total = 0;
  for (const auto& [h, b] : blocks) total += b.bytes;
  Options o;
  o.max_bytes = total / 2;
  o.unreferenced = true;
  const auto want = expected_left(o);
  GcOptions g;
  g.max_bytes = o.max_bytes;
  g.unreferenced = true;
  g.dry_run = true;
  GcReport rep;
  const auto left = run("dry", g, &rep);
  EXPECT_EQ(left.size(), blocks.size());  // nothing changed
  std::set<std::string> listed(rep.would_evict.begin(), rep.would_evict.end());
  std::set<std::string> want_listed;
  for (const auto& [h, b] : blocks)
    if (!want.count(h)) want_listed.insert(to_hex(ns) + ":" + to_hex(h));
  EXPECT_EQ(listed, want_listed);
  EXPECT_EQ(rep.blocks_after, want.size());
}
