// Sharded stores (formats/store/store_v1.md §11): writer shards, the union for readers, gc
// across shards with its lease, retirement, the upgrade of a single store, migrate and inspect.
// Every check reads real bytes back from the store; payloads are derived from the block hash.
#include <fcntl.h>
#include <sys/stat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "ucm/admin.h"
#include "ucm/format/format.h"
#include "ucm/hash.h"
#include "ucm/store.h"
#include "ucm/ucm.h"
#include "store_blocks.h"
#include "temp_dir.h"

using namespace ucm;
namespace fs = std::filesystem;

namespace {

struct TempDir : test::TaggedTempDir {
  explicit TempDir(const std::string& tag) : TaggedTempDir("ucm_shard_", tag) {}
};

/// `ucm build --sharded` of a new root; its report.
admin::BuildReport build_sharded(const std::string& root) {
  admin::BuildOptions bo;
  bo.sharded = true;
  admin::BuildReport br;
  Status s = admin::build(root, bo, &br);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return br;
}

NamespaceDesc small_ns() { return test::test_ns("test-model", 3, 4, 8); }  // 6144-byte payloads
std::vector<uint8_t> payload_for(const BlockHash& h, size_t n) { return test::block_payload(h, n); }
std::vector<BlockHash> chain_from(const BlockHash& parent, size_t blocks, uint32_t seed) {
  return test::random_chain(parent, blocks, seed);
}

Status dump_chain(Store* s, const NamespaceId& ns, const BlockHash& parent, const std::vector<BlockHash>& hs) {
  const size_t n = small_ns().payload_bytes();
  std::vector<std::vector<uint8_t>> keep(hs.size());
  std::vector<DumpItem> items(hs.size());
  for (size_t i = 0; i < hs.size(); ++i) {
    keep[i] = payload_for(hs[i], n);
    items[i].hash = hs[i];
    items[i].parent = i ? hs[i - 1] : parent;
    items[i].token_count = 16;
    items[i].kv = keep[i].data();
  }
  return s->dump(ns, items.data(), items.size())->wait();
}

std::unique_ptr<Store> open_rw(const std::string& root, const std::string& shard, bool create = true) {
  return test::open_test_store(root, /*rw=*/true, create, 2, shard);
}

std::unique_ptr<Store> open_ro(const std::string& root, uint32_t refresh_ms = 0) {
  OpenOptions o;
  o.io_threads = 2;
  o.refresh_interval_ms = refresh_ms;
  return test::open_with(root, o);
}

/// Loads every block and compares it with its derived payload; returns how many matched.
size_t load_and_check(Store* s, const NamespaceId& ns, const std::vector<BlockHash>& hs, std::vector<Status>* st = nullptr) {
  const test::CheckedLoad r = test::load_checked(s, ns, hs, small_ns().payload_bytes());
  if (st) *st = r.status;
  size_t ok = 0;
  for (size_t i = 0; i < hs.size(); ++i)
    if (r.status[i].ok()) {
      EXPECT_TRUE(r.payload_ok[i]) << "block " << i << " loaded wrong bytes";
      ok += r.payload_ok[i];
    }
  return ok;
}

using test::present_count;

NamespaceId reg(Store* s) {
  NamespaceId id{};
  EXPECT_TRUE(s->register_namespace(small_ns(), &id).ok());
  return id;
}

/// Writers of shards `older` and `newer` register the namespace (in that order); `older` dumps a
/// 2-block chain (seed `seed`) from the root, then, `pause_ms` later, `newer` one (seed `seed + 1`).
NamespaceId dump_two_shards(const std::string& root, const std::string& older, const std::string& newer,
                            int pause_ms, uint32_t seed, std::vector<BlockHash>* older_chain,
                            std::vector<BlockHash>* newer_chain) {
  auto a = open_rw(root, older), b = open_rw(root, newer);
  const NamespaceId ns = reg(a.get());
  reg(b.get());
  *older_chain = chain_from(root_hash(ns), 2, seed);
  EXPECT_TRUE(dump_chain(a.get(), ns, root_hash(ns), *older_chain).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  *newer_chain = chain_from(root_hash(ns), 2, seed + 1);
  EXPECT_TRUE(dump_chain(b.get(), ns, root_hash(ns), *newer_chain).ok());
  return ns;
}

/// dump_two_shards() into the store "store" of a test's temp dir `tag`.
struct TwoShards {
  TempDir t;
  std::string root;
  NamespaceId ns{};
  std::vector<BlockHash> older, newer;
  TwoShards(const std::string& tag, const std::string& older_shard, const std::string& newer_shard, int pause_ms,
            uint32_t seed)
      : t(tag), root(t.sub("store")) {
    ns = dump_two_shards(root, older_shard, newer_shard, pause_ms, seed, &older, &newer);
  }
};

}  // namespace

TEST(Sharded, WritersGetOwnShardsAndReadersSeeTheUnion) {
  TempDir t("union");
  const std::string root = t.sub("store");
  EXPECT_TRUE(build_sharded(root).created);
  ASSERT_FALSE(HasFailure());
  // A root is refused by single-store code with a message naming what it is.
  fmt::Superblock sb;
  Status v = fmt::read_superblock(root, &sb);
  EXPECT_EQ(v.code(), Code::kVersion);
  EXPECT_NE(v.message().find("sharded"), std::string::npos) << v.message();

  auto a = open_rw(root, "node-a");
  auto b = open_rw(root, "node-b");
  ASSERT_TRUE(a && b);
  const NamespaceId ns = reg(a.get());
  EXPECT_EQ(reg(b.get()), ns);  // ids are fingerprints: the same in every shard
  const BlockHash r = root_hash(ns);
  const auto ca = chain_from(r, 4, 1), cb = chain_from(r, 3, 2);
  ASSERT_TRUE(dump_chain(a.get(), ns, r, ca).ok());
  ASSERT_TRUE(dump_chain(b.get(), ns, r, cb).ok());
  DocumentEntry da{"doc-a", ca.front(), ca.back(), 4, 64, "a.txt", 0, ""}, db{"doc-b", cb.front(), cb.back(), 3, 48, "b.txt", 0, ""};
  ASSERT_TRUE(a->put_document(ns, da).ok());
  ASSERT_TRUE(b->put_document(ns, db).ok());
  EXPECT_TRUE(fs::exists(fmt::superblock_path(fmt::shard_path(root, "node-a"))));
  EXPECT_TRUE(fs::exists(fmt::superblock_path(fmt::shard_path(root, "node-b"))));

  // A second writer for a held shard is Busy and told how to get another one.
  OpenOptions o;
  o.mode = OpenOptions::Mode::kReadWrite;
  o.shard = "node-a";
  std::unique_ptr<Store> dup;
  Status busy = Store::Open(root, o, &dup);
  EXPECT_EQ(busy.code(), Code::kBusy);
  EXPECT_NE(busy.message().find("UCM_SHARD"), std::string::npos) << busy.message();
  o.shard = "../evil";
  EXPECT_EQ(Store::Open(root, o, &dup).code(), Code::kInvalidArgument);

  auto rd = open_ro(root);
  ASSERT_TRUE(rd);
  EXPECT_EQ(present_count(rd.get(), ns, ca), 4u);
  EXPECT_EQ(present_count(rd.get(), ns, cb), 3u);
  EXPECT_EQ(load_and_check(rd.get(), ns, ca), 4u);
  EXPECT_EQ(load_and_check(rd.get(), ns, cb), 3u);
  EXPECT_EQ(rd->documents(ns).size(), 2u);
  DocumentEntry got;
  EXPECT_TRUE(rd->get_document(ns, "doc-b", &got).ok());
  EXPECT_EQ(got.last_block, cb.back());
  EXPECT_EQ(rd->namespaces().size(), 1u);
  // Writers read the union too (shards created after their open: after a refresh).
  ASSERT_TRUE(a->refresh().ok());
  EXPECT_EQ(load_and_check(a.get(), ns, cb), 3u);
  // Mixed request: blocks of both shards and one absent block, in one load.
  std::vector<BlockHash> mixed = {ca[0], cb[1], chain_from(r, 1, 99)[0], ca[3]};
  std::vector<Status> st;
  EXPECT_EQ(load_and_check(rd.get(), ns, mixed, &st), 3u);
  EXPECT_EQ(st[2].code(), Code::kNotFound);
  // Metrics: one exposition, every sample labelled with its shard.
  const std::string m = rd->metrics_text();
  EXPECT_NE(m.find("shard=\"node-a\""), std::string::npos);
  EXPECT_NE(m.find("shard=\"node-b\""), std::string::npos);
  // Reads are refused writes.
  EXPECT_EQ(rd->dump(ns, nullptr, 0)->wait().code(), Code::kInvalidArgument);
}

TEST(Sharded, NewShardsAndBlocksAppearWithinTheRefreshInterval) {
  TempDir t("refresh");
  const std::string root = t.sub("store");
  auto a = open_rw(root, "a");  // a missing store opened with a shard name is created sharded
  ASSERT_TRUE(a);
  fmt::RootKind k;
  ASSERT_TRUE(fmt::root_kind(root, &k).ok());
  EXPECT_EQ(k, fmt::RootKind::kSharded);
  const NamespaceId ns = reg(a.get());
  auto rd = open_ro(root, 200);
  ASSERT_TRUE(rd);
  auto c = open_rw(root, "c");  // a shard created after the reader opened
  reg(c.get());
  const auto hs = chain_from(root_hash(ns), 2, 7);
  ASSERT_TRUE(dump_chain(c.get(), ns, root_hash(ns), hs).ok());
  const auto t0 = std::chrono::steady_clock::now();
  while (present_count(rd.get(), ns, hs) < 2 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(present_count(rd.get(), ns, hs), 2u) << "new shard's blocks not visible after " << secs << " s";
  EXPECT_LT(secs, 5.0);
  EXPECT_EQ(load_and_check(rd.get(), ns, hs), 2u);
}

TEST(Sharded, ABlockInTwoShardsIsServedFromEitherWhenOneCopyIsBad) {
  TempDir t("either");
  const std::string root = t.sub("store");
  auto a = open_rw(root, "a"), b = open_rw(root, "b");
  const NamespaceId ns = reg(a.get());
  reg(b.get());
  const auto hs = chain_from(root_hash(ns), 2, 3);
  ASSERT_TRUE(dump_chain(a.get(), ns, root_hash(ns), hs).ok());
  ASSERT_TRUE(dump_chain(b.get(), ns, root_hash(ns), hs).ok());
  a.reset();
  b.reset();
  // Damage shard a's copy of block 1 (the first shard in name order, tried first).
  BlockInfo info;
  {
    std::unique_ptr<Store> sa;
    OpenOptions o;
    ASSERT_TRUE(Store::Open(fmt::shard_path(root, "a"), o, &sa).ok());
    ASSERT_TRUE(sa->get_block(ns, hs[1], &info).ok());
  }
  const std::string f = fmt::data_file_path(fmt::shard_path(root, "a"), info.kv_file);
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(std::streamoff(info.kv_offset + 4096 + 100));
    io.put(char(0x5a));
  }
  auto rd = open_ro(root);
  std::vector<Status> st;
  EXPECT_EQ(load_and_check(rd.get(), ns, hs, &st), 2u) << st[1].ToString();
}

TEST(Sharded, GcKeepsChainsThatStartInAnotherShardAndRemovesTrueOrphans) {
  TempDir t("foreign");
  const std::string root = t.sub("store");
  NamespaceId ns;
  std::vector<BlockHash> head, tail, orphan;
  {
    auto a = open_rw(root, "a"), b = open_rw(root, "b");
    ns = reg(a.get());
    reg(b.get());
    head = chain_from(root_hash(ns), 3, 11);
    ASSERT_TRUE(dump_chain(a.get(), ns, root_hash(ns), head).ok());
    // b extends a's prefix (a server that loaded it from a), and holds a block whose parent is nowhere.
    tail = chain_from(head.back(), 2, 12);
    ASSERT_TRUE(dump_chain(b.get(), ns, head.back(), tail).ok());
    BlockHash nowhere{};
    nowhere[0] = 0x42;
    orphan = chain_from(nowhere, 1, 13);
    ASSERT_TRUE(dump_chain(b.get(), ns, nowhere, orphan).ok());
  }
  admin::GcOptions go;
  go.grace_ms = 0;
  admin::GcReport rep;
  Status s = admin::gc(root, go, &rep);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(rep.sharded);
  EXPECT_EQ(rep.foreign_roots, 1u);
  EXPECT_EQ(rep.orphans_removed, 1u);
  EXPECT_EQ(rep.shards.size(), 2u);
  auto rd = open_ro(root);
  EXPECT_EQ(load_and_check(rd.get(), ns, head), 3u);
  EXPECT_EQ(load_and_check(rd.get(), ns, tail), 2u);
  EXPECT_EQ(present_count(rd.get(), ns, orphan), 0u);
  // JSON names the shards.
  EXPECT_NE(rep.to_json().find("\"shards\""), std::string::npos);
}

TEST(Sharded, MaxBytesEvictsInOneOrderAcrossShards) {
  const TwoShards two("order", "a", "b", 30, 21);
  ASSERT_FALSE(HasFailure());
  const auto& [t, root, ns, old_chain, new_chain] = two;
  // Each shard alone is within the budget; the store is not. Per-shard gc would evict nothing.
  uint64_t two_blocks = 0;
  {
    auto rd = open_ro(root);
    BlockInfo i0, i1;
    ASSERT_TRUE(rd->get_block(ns, new_chain[0], &i0).ok());
    ASSERT_TRUE(rd->get_block(ns, new_chain[1], &i1).ok());
    two_blocks = i0.kv_length + i1.kv_length;
  }
  admin::GcOptions go;
  go.grace_ms = 0;
  go.max_bytes = two_blocks;
  admin::GcReport rep;
  Status s = admin::gc(root, go, &rep);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(rep.evicted_blocks, 2u);
  auto rd = open_ro(root);
  EXPECT_EQ(present_count(rd.get(), ns, old_chain), 0u) << "the older chain (shard a) goes first";
  EXPECT_EQ(load_and_check(rd.get(), ns, new_chain), 2u);
}

TEST(Sharded, GcLeaseIsExclusiveAndAnExpiredOneIsTakenOver) {
  TempDir t("lease");
  const std::string root = t.sub("store");
  {
    auto a = open_rw(root, "a");
    reg(a.get());
  }
  // A live lease of another gc: Busy at once, naming the holder.
  ASSERT_TRUE(fmt::make_dirs(fmt::gc_dir(root)).ok());
  auto write_lease = [&](const std::string& holder, uint64_t expires) {
    std::ofstream f(fmt::gc_lease_path(root));
    f << "{\"holder\":\"" << holder << "\",\"acquired_ms\":1,\"renewed_ms\":1,\"expires_ms\":" << expires << "}\n";
  };
  write_lease("otherhost:4242:cafe", fmt::now_ms() + 60000);
  admin::GcOptions go;
  admin::GcReport rep;
  Status s = admin::gc(root, go, &rep);
  EXPECT_EQ(s.code(), Code::kBusy);
  EXPECT_NE(s.message().find("otherhost:4242:cafe"), std::string::npos) << s.message();
  // Waiting for a lease that expires meanwhile takes it over.
  write_lease("otherhost:4242:cafe", fmt::now_ms() + 1500);
  go.lease_wait_ms = 5000;
  s = admin::gc(root, go, &rep);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(rep.lease_taken_over_from, "otherhost:4242:cafe");
  EXPECT_FALSE(fs::exists(fmt::gc_lease_path(root))) << "a finished gc releases its lease";
  // A busy shard (its writer runs) is left as it is and reported, when gc hands nothing to live
  // writers (--writer-wait 0; the hand-off: tests/tools/test_gc_live_writer.cc).
  auto a = open_rw(root, "a");
  go.lease_wait_ms = 0;
  go.writer_wait_ms = 0;
  s = admin::gc(root, go, &rep);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(rep.shards_busy, 1u);
  ASSERT_EQ(rep.shards.size(), 1u);
  EXPECT_EQ(rep.shards[0].state.rfind("busy", 0), 0u) << rep.shards[0].state;
}

TEST(Sharded, GcRetiresAnEmptyShardWhoseWriterIsGone) {
  const TwoShards two("retire", "dead-node", "a", 2500, 31);
  ASSERT_FALSE(HasFailure());
  const auto& [t, root, ns, gone, keep] = two;
  auto rd = open_ro(root);
  EXPECT_EQ(present_count(rd.get(), ns, gone), 2u);
  admin::GcOptions go;
  go.grace_ms = 0;
  go.max_age_ms = 2000;  // the dead node's blocks are 2.5 s old; a's are younger
  go.writer_heartbeat_ms = 0;  // (its wait would age a's blocks too)
  admin::GcReport rep;
  ASSERT_TRUE(admin::gc(root, go, &rep).ok());
  EXPECT_EQ(rep.shards_retired, 1u) << rep.to_text();
  std::vector<std::string> names;
  ASSERT_TRUE(fmt::list_shards(root, &names).ok());
  EXPECT_EQ(names, std::vector<std::string>{"a"});
  ASSERT_TRUE(rd->refresh().ok());
  EXPECT_EQ(present_count(rd.get(), ns, gone), 0u);
  EXPECT_EQ(load_and_check(rd.get(), ns, keep), 2u);
}

TEST(Sharded, UpgradeOfASingleStoreKeepsEveryBlockAndAKilledUpgradeIsFinished) {
  TempDir t("upgrade");
  for (int killed = 0; killed < 2; ++killed) {
    const std::string root = t.sub("store" + std::to_string(killed));
    NamespaceId ns;
    std::vector<BlockHash> hs;
    {
      OpenOptions o;
      o.mode = OpenOptions::Mode::kReadWrite;
      o.create_if_missing = true;
      std::unique_ptr<Store> s;
      ASSERT_TRUE(Store::Open(root, o, &s).ok());
      ns = reg(s.get());
      hs = chain_from(root_hash(ns), 3, 41);
      ASSERT_TRUE(dump_chain(s.get(), ns, root_hash(ns), hs).ok());
      ASSERT_TRUE(s->put_document(ns, DocumentEntry{"d", hs.front(), hs.back(), 3, 48, "", 0, ""}).ok());
    }
    if (killed) {
      // What a kill after moving the index (before the data files and the superblock) leaves.
      fs::create_directories(fmt::shards_dir(root) + "/.n1.upgrading");
      fs::rename(fmt::index_dir(root), fmt::shards_dir(root) + "/.n1.upgrading/index");
      std::unique_ptr<Store> s;
      Status st = Store::Open(root, OpenOptions{}, &s);
      EXPECT_EQ(st.code(), Code::kInvalidArgument);
      EXPECT_NE(st.message().find("--to-sharded"), std::string::npos) << st.message();
    }
    admin::MigrateOptions mo;
    mo.to_sharded = true;
    mo.shard_name = "n1";
    admin::MigrateReport mr;
    Status st = admin::migrate(root, "", mo, &mr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(mr.upgraded);
    fmt::RootKind k;
    ASSERT_TRUE(fmt::root_kind(root, &k).ok());
    EXPECT_EQ(k, fmt::RootKind::kSharded);
    auto rd = open_ro(root);
    EXPECT_EQ(load_and_check(rd.get(), ns, hs), 3u);
    DocumentEntry d;
    EXPECT_TRUE(rd->get_document(ns, "d", &d).ok());
    // A writer on another node gets a shard of its own beside it.
    auto w = open_rw(root, "n2", false);
    ASSERT_TRUE(w);
    EXPECT_EQ(load_and_check(w.get(), ns, hs), 3u);
  }
}

TEST(Sharded, InspectReportsEachShardAndMigrateCompactsThemIntoOne) {
  TempDir t("inspect");
  const std::string root = t.sub("store");
  NamespaceId ns;
  std::vector<BlockHash> ca, cb;
  {
    auto a = open_rw(root, "a"), b = open_rw(root, "b");
    ns = reg(a.get());
    reg(b.get());
    ca = chain_from(root_hash(ns), 3, 51);
    cb = chain_from(root_hash(ns), 2, 52);
    ASSERT_TRUE(dump_chain(a.get(), ns, root_hash(ns), ca).ok());
    ASSERT_TRUE(dump_chain(b.get(), ns, root_hash(ns), cb).ok());
    ASSERT_TRUE(dump_chain(b.get(), ns, root_hash(ns), {ca[0]}).ok());  // a block in two shards
  }
  admin::InspectOptions io;
  io.verify = true;
  admin::InspectReport ir;
  ASSERT_TRUE(admin::inspect(root, io, &ir).ok());
  EXPECT_TRUE(ir.sharded);
  EXPECT_EQ(ir.format_version, 3u);
  ASSERT_EQ(ir.shards.size(), 2u);
  EXPECT_EQ(ir.shards[0].blocks, 3u);
  EXPECT_EQ(ir.shards[1].blocks, 3u);
  EXPECT_EQ(ir.blocks, 6u);
  EXPECT_EQ(ir.verified, 6u);
  ASSERT_EQ(ir.namespaces.size(), 1u);
  EXPECT_EQ(ir.namespaces[0].blocks, 6u);
  EXPECT_NE(ir.to_text().find("shards"), std::string::npos);

  admin::MigrateOptions mo;
  admin::MigrateReport mr;
  const std::string dst = t.sub("single");
  ASSERT_TRUE(admin::migrate(root, dst, mo, &mr).ok());
  EXPECT_EQ(mr.blocks_copied, 5u);  // the duplicate is copied once
  fmt::RootKind k;
  ASSERT_TRUE(fmt::root_kind(dst, &k).ok());
  EXPECT_EQ(k, fmt::RootKind::kSingle);
  auto rd = open_ro(dst);
  EXPECT_EQ(load_and_check(rd.get(), ns, ca), 3u);
  EXPECT_EQ(load_and_check(rd.get(), ns, cb), 2u);
}

TEST(Sharded, CApiOpensAsTheWriterOfANamedShard) {
  TempDir t("capi");
  const std::string root = t.sub("store");
  ucm_store_open_params p = ucm_store_default_open_params();
  p.mode = UCM_OPEN_CREATE;
  ucm_store_t* s = nullptr;
  ASSERT_EQ(ucm_store_open_shard(root.c_str(), &p, "capi-writer", &s), UCM_OK) << ucm_last_error();
  ucm_store_t* s2 = nullptr;
  EXPECT_EQ(ucm_store_open_shard(root.c_str(), &p, "capi-writer", &s2), UCM_E_BUSY);
  EXPECT_EQ(ucm_store_open_shard(root.c_str(), &p, ".hidden", &s2), UCM_E_INVALID);
  ASSERT_EQ(ucm_store_open_shard(root.c_str(), &p, "capi-writer-2", &s2), UCM_OK) << ucm_last_error();
  ucm_store_close(s2);
  ucm_store_close(s);
  EXPECT_TRUE(fs::exists(fmt::superblock_path(fmt::shard_path(root, "capi-writer"))));
  EXPECT_TRUE(fs::exists(fmt::superblock_path(fmt::shard_path(root, "capi-writer-2"))));
  // ucm_store_open reads the union.
  ucm_store_open_params r = ucm_store_default_open_params();
  ASSERT_EQ(ucm_store_open(root.c_str(), &r, &s), UCM_OK) << ucm_last_error();
  ucm_store_close(s);
}

TEST(Sharded, GcLeavesAShardWhoseWriterHeartbeatMovesEvenWithoutItsFlock) {
  // A shared file system can drop flocks (a GlusterFS brick restart does): the writer still runs
  // but its LOCK is free. Its heartbeat (LOCK's mtime, touched every second) keeps gc out.
  TempDir t("heartbeat");
  const std::string root = t.sub("store");
  NamespaceId ns;
  std::vector<BlockHash> hs;
  {
    auto a = open_rw(root, "a");
    ns = reg(a.get());
    hs = chain_from(root_hash(ns), 2, 61);
    ASSERT_TRUE(dump_chain(a.get(), ns, root_hash(ns), hs).ok());
  }
  std::atomic<bool> stop{false};
  const std::string lock = fmt::lock_path(fmt::shard_path(root, "a"));
  std::thread beat([&] {  // what a writer that lost its flock still does
    while (!stop) {
      ::utimensat(AT_FDCWD, lock.c_str(), nullptr, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  admin::GcOptions go;
  go.grace_ms = 0;
  go.max_bytes = 0;  // would evict everything
  go.writer_heartbeat_ms = 1000;
  go.writer_wait_ms = 0;  // no hand-off: the heartbeat alone keeps gc out (with one: test_gc_live_writer.cc)
  admin::GcReport rep;
  Status s = admin::gc(root, go, &rep);
  stop = true;
  beat.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(rep.shards_busy, 1u);
  ASSERT_EQ(rep.shards.size(), 1u);
  EXPECT_NE(rep.shards[0].state.find("heartbeat"), std::string::npos) << rep.shards[0].state;
  auto rd = open_ro(root);
  EXPECT_EQ(load_and_check(rd.get(), ns, hs), 2u);
  // Without the heartbeat the same gc evicts.
  s = admin::gc(root, go, &rep);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(rep.evicted_blocks, 2u);
}

// A writer whose shard does not register a namespace that another shard does (a server saving
// into a store precomputed elsewhere, or one whose namespace another process created) adopts it
// on its first write: the dump succeeds, readers see the blocks, the shard now registers it.
TEST(Sharded, AWriteIntoANamespaceOfAnotherShardAdoptsItsDescriptor) {
  TempDir t("adopt");
  const std::string root = t.sub("store");
  build_sharded(root);
  ASSERT_FALSE(HasFailure());
  NamespaceId ns{};
  {
    auto a = open_rw(root, "node-a");
    ASSERT_TRUE(a);
    ns = reg(a.get());
  }
  auto b = open_rw(root, "node-b");
  ASSERT_TRUE(b);
  NamespaceDesc d;
  ASSERT_TRUE(b->get_namespace(ns, &d).ok());  // seen through the union
  const auto hs = chain_from(root_hash(ns), 5, 7);
  Status st = dump_chain(b.get(), ns, root_hash(ns), hs);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(load_and_check(b.get(), ns, hs), hs.size());
  b.reset();
  // node-b's shard alone (a version-2 store) now registers the namespace and holds the blocks.
  auto only_b = open_ro(root + "/shards/node-b");
  ASSERT_TRUE(only_b);
  EXPECT_TRUE(only_b->get_namespace(ns, &d).ok());
  EXPECT_EQ(load_and_check(only_b.get(), ns, hs), hs.size());
  auto r = open_ro(root);
  EXPECT_EQ(present_count(r.get(), ns, hs), hs.size());
  // A namespace no shard registers is still refused.
  NamespaceId other = ns;
  other[0] ^= 0xFF;
  auto c = open_rw(root, "node-c");
  EXPECT_EQ(dump_chain(c.get(), other, root_hash(other), chain_from(root_hash(other), 1, 9)).code(), Code::kNotFound);
}
