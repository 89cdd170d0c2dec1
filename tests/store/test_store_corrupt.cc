// Corrupt blocks found by loads are handed to the store's writer for removal (store_v1.md §11.6):
// a read-only handle's and the writer's own loads, once per record, the answer collected, the
// block saved again afterwards and served; a sharded store's reader hands a block to the shard
// that holds it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "store_blocks.h"
#include "temp_dir.h"
#include "ucm/format/format.h"
#include "ucm/hash.h"
#include "ucm/store.h"

using namespace ucm;
namespace fs = std::filesystem;

namespace {

// The store directory of a test, removed when the test ends (after the handles it declares later).
struct TempDir : test::TaggedTempDir {
  explicit TempDir(const std::string& tag) : TaggedTempDir("ucm_corrupt_", tag) {}
};

// The namespace of every test here: 2 layers, 2 KV heads, head_dim 8.
NamespaceDesc m_ns() { return test::test_ns("m", 2, 2, 8); }

// A test's store directory `p` (removed at the end) with namespace d = m_ns(): its id and the
// chain that fill() writes.
struct Case {
  TempDir t;
  std::string p;
  NamespaceDesc d = m_ns();
  NamespaceId ns{};
  std::vector<BlockHash> hs;
  explicit Case(const std::string& tag) : t(tag), p(t.path) {}
};

Status dump(Store* s, const NamespaceId& ns, const NamespaceDesc& d, const std::vector<BlockHash>& hs, size_t from,
            size_t to) {
  std::vector<std::vector<uint8_t>> keep(hs.size());
  std::vector<DumpItem> items;
  for (size_t i = from; i < to; ++i) {
    keep[i] = test::block_payload(hs[i], d.payload_bytes());
    DumpItem it;
    it.hash = hs[i];
    it.parent = i ? hs[i - 1] : root_hash(ns);
    it.token_count = 16;
    it.kv = keep[i].data();
    items.push_back(it);
  }
  return s->dump(ns, items.data(), items.size())->wait();
}

/// Per-block load statuses of hs[i] for every i, each into its own buffer; *bytes_ok: every
/// block that loaded has its payload's bytes.
std::vector<Code> load_all(Store* s, const NamespaceId& ns, const NamespaceDesc& d, const std::vector<BlockHash>& hs,
                           bool* bytes_ok) {
  const test::CheckedLoad r = test::load_checked(s, ns, hs, d.payload_bytes());
  *bytes_ok = true;
  for (size_t i = 0; i < hs.size(); ++i)
    if (r.code(i) == Code::kOk && !r.payload_ok[i]) *bytes_ok = false;
  return r.codes();
}

/// Registers d in w and dumps a chain of `n` blocks (seed `seed`) from its root into *hs; *info
/// gets block `info_of`'s BlockInfo.
void fill(Store* w, const NamespaceDesc& d, size_t n, uint32_t seed, NamespaceId* ns, std::vector<BlockHash>* hs,
          size_t info_of, BlockInfo* info) {
  ASSERT_TRUE(w->register_namespace(d, ns).ok());
  *hs = test::random_chain(root_hash(*ns), n, seed);
  ASSERT_TRUE(dump(w, *ns, d, *hs, 0, n).ok());
  ASSERT_TRUE(w->get_block(*ns, (*hs)[info_of], info).ok());
}

void flip_payload_byte(const std::string& store, const BlockInfo& b) {
  const std::string df = fmt::data_file_path(store, b.kv_file);
  int fd = ::open(df.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << df;
  uint8_t c;
  ASSERT_EQ(::pread(fd, &c, 1, off_t(b.kv_offset + 4096 + 100)), 1);
  c ^= 0x10;
  ASSERT_EQ(::pwrite(fd, &c, 1, off_t(b.kv_offset + 4096 + 100)), 1);
  ::close(fd);
}

bool eventually(const std::function<bool()>& f, int ms = 8000) {
  for (int i = 0; i < ms / 50; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return f();
}

bool present(Store* s, const NamespaceId& ns, const BlockHash& h) {
  BlockInfo b;
  return s->get_block(ns, h, &b).ok();
}

bool has_metric(Store* s, const std::string& line) { return s->metrics_text().find(line + "\n") != std::string::npos; }

size_t files_in(const std::string& dir) {
  std::error_code ec;
  size_t n = 0;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); ++it) ++n;
  return n;
}

}  // namespace

TEST(CorruptBlocks, AReadersLoadHandsThemToTheWriterWhichRemovesThemAndTheNextSaveServes) {
  const TempDir t("single");
  const std::string& p = t.path;
  auto w = test::open_test_store(p, true, true);
  ASSERT_TRUE(w);
  const NamespaceDesc d = m_ns();
  NamespaceId ns;
  std::vector<BlockHash> hs;
  BlockInfo b1;
  ASSERT_NO_FATAL_FAILURE(fill(w.get(), d, 4, 7, &ns, &hs, 1, &b1));
  flip_payload_byte(p, b1);

  auto r = test::open_test_store(p, false);
  ASSERT_TRUE(r);
  bool bytes_ok = false;
  // Twice: the same record is handed over once.
  for (int k = 0; k < 2; ++k) {
    auto st = load_all(r.get(), ns, d, hs, &bytes_ok);
    EXPECT_EQ(st, (std::vector<Code>{Code::kOk, Code::kCorruption, Code::kOk, Code::kOk}));
    EXPECT_TRUE(bytes_ok);
  }
  // The reader's heartbeat writes the request, the writer's applies it.
  ASSERT_TRUE(eventually([&] { return !present(w.get(), ns, hs[1]); })) << "the writer never removed the block";
  EXPECT_TRUE(present(w.get(), ns, hs[0]));
  EXPECT_TRUE(present(w.get(), ns, hs[2]));  // only the corrupt block goes
  EXPECT_TRUE(has_metric(r.get(), "ucm_corrupt_blocks_reported_total 1")) << r->metrics_text();
  EXPECT_TRUE(eventually([&] { return has_metric(r.get(), "ucm_corrupt_blocks_removed_total 1"); }));
  EXPECT_TRUE(eventually([&] { return files_in(fmt::gc_requests_dir(p)) == 0; }))
      << "the reader leaves no answer behind";
  EXPECT_TRUE(has_metric(w.get(), "ucm_gc_blocks_removed_total 1"));

  // A lookup's prefix now stops before it; the next save writes it again and every block serves.
  std::vector<uint8_t> pres(4);
  size_t prefix = 9;
  ASSERT_TRUE(w->lookup(ns, hs.data(), 4, pres.data(), &prefix).ok());
  EXPECT_EQ(prefix, 1u);
  ASSERT_TRUE(dump(w.get(), ns, d, hs, 0, 4).ok());
  EXPECT_EQ(load_all(w.get(), ns, d, hs, &bytes_ok), std::vector<Code>(4, Code::kOk));
  EXPECT_TRUE(bytes_ok);
  ASSERT_TRUE(r->refresh().ok());
  EXPECT_EQ(load_all(r.get(), ns, d, hs, &bytes_ok), std::vector<Code>(4, Code::kOk));
  EXPECT_TRUE(bytes_ok);

  // The new record corrupted in turn: the writer's own load hands it over (a new record, so
  // reported again), and its own heartbeat removes it.
  BlockInfo b1n;
  ASSERT_TRUE(w->get_block(ns, hs[1], &b1n).ok());
  EXPECT_TRUE(b1n.kv_file != b1.kv_file || b1n.kv_offset != b1.kv_offset);
  flip_payload_byte(p, b1n);
  EXPECT_EQ(load_all(w.get(), ns, d, hs, &bytes_ok)[1], Code::kCorruption);
  ASSERT_TRUE(eventually([&] { return !present(w.get(), ns, hs[1]); }));
  EXPECT_TRUE(eventually([&] { return has_metric(w.get(), "ucm_corrupt_blocks_removed_total 1"); }));
}

TEST(CorruptBlocks, WithoutALiveWriterTheRequestWaitsForTheNextOne) {
  Case c("later");
  auto& [t, p, d, ns, hs] = c;
  BlockInfo b0;
  ASSERT_NO_FATAL_FAILURE(fill(test::open_test_store(p, true, true).get(), d, 2, 9, &ns, &hs, 0, &b0));
  flip_payload_byte(p, b0);
  {
    auto r = test::open_test_store(p, false);
    bool bytes_ok = false;
    EXPECT_EQ(load_all(r.get(), ns, d, hs, &bytes_ok)[0], Code::kCorruption);
  }  // the close writes the request
  EXPECT_EQ(files_in(fmt::gc_requests_dir(p)), 1u);
  auto w = test::open_test_store(p, true);
  ASSERT_TRUE(eventually([&] { return !present(w.get(), ns, hs[0]); }));
  EXPECT_TRUE(present(w.get(), ns, hs[1]));
}

TEST(CorruptBlocks, AWriterClosedRightAfterItsLoadRemovesThemAtClose) {
  Case c("close");
  auto& [t, p, d, ns, hs] = c;
  {
    auto w = test::open_test_store(p, true, true);
    BlockInfo b0;
    ASSERT_NO_FATAL_FAILURE(fill(w.get(), d, 2, 13, &ns, &hs, 0, &b0));
    flip_payload_byte(p, b0);
    bool bytes_ok = false;
    EXPECT_EQ(load_all(w.get(), ns, d, hs, &bytes_ok)[0], Code::kCorruption);
  }  // closed before any heartbeat
  auto r = test::open_test_store(p, false);
  EXPECT_FALSE(present(r.get(), ns, hs[0]));
  EXPECT_TRUE(present(r.get(), ns, hs[1]));
}

TEST(CorruptBlocks, AShardedReaderHandsABlockToTheShardThatHoldsIt) {
  const TempDir t("sharded");
  const std::string& p = t.path;
  auto a = test::open_test_store(p, true, true, 2, "a");
  auto b = test::open_test_store(p, true, false, 2, "b");
  ASSERT_TRUE(a && b);
  const NamespaceDesc d = m_ns();
  NamespaceId ns;
  ASSERT_TRUE(a->register_namespace(d, &ns).ok());
  ASSERT_TRUE(b->register_namespace(d, &ns).ok());
  const auto hs = test::random_chain(root_hash(ns), 3, 11);
  ASSERT_TRUE(dump(b.get(), ns, d, hs, 0, 3).ok());  // every block in shard b
  BlockInfo bi;
  ASSERT_TRUE(b->get_block(ns, hs[2], &bi).ok());
  flip_payload_byte(fmt::shard_path(p, "b"), bi);
  ASSERT_TRUE(a->refresh().ok());
  bool bytes_ok = false;
  EXPECT_EQ(load_all(a.get(), ns, d, hs, &bytes_ok), (std::vector<Code>{Code::kOk, Code::kOk, Code::kCorruption}));
  EXPECT_TRUE(bytes_ok);
  ASSERT_TRUE(eventually([&] { return !present(b.get(), ns, hs[2]); })) << "shard b's writer never removed it";
  EXPECT_TRUE(present(b.get(), ns, hs[1]));
}
