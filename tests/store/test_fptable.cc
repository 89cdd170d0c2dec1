// The persisted fingerprint table STORE/fptable (formats/store/fptable.md): the writer saves it,
// opens map it and replay the journal after it, and a missing, corrupt, truncated, unknown,
// foreign or stale table is rebuilt from the index (with the right answers) and written anew.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "ucm/admin.h"
#include "ucm/core/fptable.h"
#include "ucm/core/fptable_io.h"
#include "ucm/core/index.h"
#include "ucm/format/format.h"
#include "ucm/hash.h"
#include "ucm/store.h"
#include "store_blocks.h"

using namespace ucm;
namespace fs = std::filesystem;

namespace {

NamespaceDesc tiny_ns() { return test::test_ns("fptable-test", 1, 1, 8); }
std::vector<BlockHash> chain(const NamespaceId& ns, size_t blocks, uint32_t seed) {
  return test::random_chain(root_hash(ns), blocks, seed);
}
std::unique_ptr<Store> open_store(const std::string& p, bool rw, bool create = false) {
  return test::open_test_store(p, rw, create);
}

void dump(Store* s, const NamespaceId& ns, const std::vector<BlockHash>& hs) {
  const NamespaceDesc d = tiny_ns();
  std::vector<uint8_t> payload(d.payload_bytes(), 7);
  std::vector<DumpItem> items(hs.size());
  for (size_t i = 0; i < hs.size(); ++i) {
    items[i].hash = hs[i];
    items[i].parent = i ? hs[i - 1] : root_hash(ns);
    items[i].token_count = 16;
    items[i].kv = payload.data();
  }
  ASSERT_TRUE(s->dump(ns, items.data(), items.size())->wait().ok());
}

size_t present(Store* s, const NamespaceId& ns, const std::vector<BlockHash>& hs) {
  std::vector<uint8_t> p(hs.size());
  EXPECT_TRUE(s->lookup(ns, hs.data(), hs.size(), p.data(), nullptr).ok());
  size_t n = 0;
  for (auto x : p) n += x;
  return n;
}

uint64_t metric(Store* s, const std::string& name) {
  const std::string t = s->metrics_text();
  const size_t at = t.find("\n" + name + " ");
  EXPECT_NE(at, std::string::npos) << name;
  return at == std::string::npos ? ~0ull : std::stoull(t.substr(at + name.size() + 2));
}

std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void write_all(const std::string& p, const std::string& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), std::streamsize(b.size()));
}

class FpTableFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path = (fs::temp_directory_path() / ("ucm_fpt_" + std::to_string(::getpid()))).string();
    fs::remove_all(path);
    auto w = open_store(path, true, true);
    ASSERT_TRUE(w->register_namespace(tiny_ns(), &ns).ok());
    a = chain(ns, 50, 1);
    dump(w.get(), ns, a);
  }
  void TearDown() override { fs::remove_all(path); }
  std::string table() const { return fmt::fptable_path(path); }
  std::string path;
  NamespaceId ns;
  std::vector<BlockHash> a;
};

}  // namespace

TEST(FpTable, MappedSlotsAnswerGrowAndErase) {
  // A table adopted over foreign memory (as over a mapping) behaves like a heap one and moves
  // its slots to the heap when it grows.
  const size_t cap = 16;
  void* m = ::mmap(nullptr, 4096 + cap * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* slots = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(m) + 4096);
  slots[5] = 5;
  slots[6] = 21;  // home 5, probed on
  FpTable t = FpTable::Adopt(m, 4096 + cap * 8, slots, cap, 2);
  EXPECT_TRUE(t.mapped());
  EXPECT_TRUE(t.contains(5));
  EXPECT_TRUE(t.contains(21));
  EXPECT_FALSE(t.contains(37));
  t.erase(5);  // 21 shifts back into its home
  EXPECT_TRUE(t.contains(21));
  EXPECT_EQ(t.slots()[5], 21u);
  for (uint64_t f = 100; f < 140; ++f) t.insert(f);
  EXPECT_FALSE(t.mapped());
  EXPECT_GE(t.capacity(), 82u);
  EXPECT_EQ(t.size(), 41u);
  for (uint64_t f = 100; f < 140; ++f) EXPECT_TRUE(t.contains(f));
  EXPECT_TRUE(t.contains(21));
  EXPECT_FALSE(t.contains(5));
}

TEST_F(FpTableFile, WriterSavesOnCloseAndReadersMapIt) {
  ASSERT_TRUE(fs::exists(table()));
  EXPECT_EQ(fs::file_size(table()), 4096u + 128u * 8u);  // 50 blocks: 128 slots
  auto r = open_store(path, false);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_loaded"), 1u);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_replayed"), 0u);
  EXPECT_EQ(present(r.get(), ns, a), 50u);
  EXPECT_EQ(present(r.get(), ns, chain(ns, 10, 2)), 0u);
  // A writer maps it too.
  r.reset();
  auto w = open_store(path, true);
  EXPECT_EQ(metric(w.get(), "ucm_fptable_loaded"), 1u);
  EXPECT_EQ(present(w.get(), ns, a), 50u);
}

TEST_F(FpTableFile, AnOlderTableIsCaughtUpFromTheJournal) {
  const std::string old = read_all(table());  // as of sequence 50
  auto b = chain(ns, 40, 3);
  {
    auto w = open_store(path, true);
    dump(w.get(), ns, b);
  }
  write_all(table(), old);  // as if the writer had died before saving
  auto r = open_store(path, false);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_loaded"), 1u);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_replayed"), 40u);  // and grew past its 128 slots
  EXPECT_EQ(present(r.get(), ns, a), 50u);
  EXPECT_EQ(present(r.get(), ns, b), 40u);
  r.reset();
  // Removals replay too: gc evicts namespace-wide; the table it left is older than them.
  write_all(table(), old);
  admin::GcOptions o;
  o.max_bytes = 0;
  o.grace_ms = 0;
  admin::GcReport rep;
  ASSERT_TRUE(admin::gc(path, o, &rep).ok());
  ASSERT_EQ(rep.evicted_blocks, 90u);
  r = open_store(path, false);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_loaded"), 1u);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_replayed"), 130u);
  EXPECT_EQ(present(r.get(), ns, a), 0u);
  EXPECT_EQ(present(r.get(), ns, b), 0u);
}

TEST_F(FpTableFile, BadTablesAreRebuiltAndRewritten) {
  const std::string good = read_all(table());
  std::string identity;
  uint64_t seq = 0;
  {
    std::unique_ptr<Index> ix;
    ASSERT_TRUE(Index::OpenSecondary(fmt::index_dir(path), path + "/readers/t", &ix).ok());
    ASSERT_TRUE(ix->identity(&identity).ok());
    seq = ix->journal_seq();
  }
  fs::remove_all(path + "/readers/t");
  ASSERT_EQ(seq, 50u);
  // A table of 50 other fingerprints with every check passing but the one named.
  FpTable other(50);
  for (uint64_t f = 1; f <= 50; ++f) other.insert(f * 0x9e3779b97f4a7c15ull);
  auto save_other = [&](uint64_t s, const std::string& id) {
    ASSERT_TRUE(fptable_save(path, other.slots(), other.capacity(), other.size(), s, id).ok());
  };
  struct Case {
    const char* what;
    std::function<void()> damage;
  };
  const std::vector<Case> cases = {
      {"missing", [&] { fs::remove(table()); }},
      {"slot flipped", [&] { auto b = good; b[4096 + 77] ^= 0x10; write_all(table(), b); }},
      {"header flipped", [&] { auto b = good; b[33] ^= 1; write_all(table(), b); }},
      {"truncated", [&] { write_all(table(), good.substr(0, good.size() - 8)); }},
      {"empty", [&] { write_all(table(), ""); }},
      {"unknown version", [&] {
         auto b = good;
         fmt::put_le32(reinterpret_cast<uint8_t*>(b.data()) + 8, 9);
         fmt::put_le64(reinterpret_cast<uint8_t*>(b.data()) + 4088, fmt::xxh3(b.data(), 4088));
         write_all(table(), b);
       }},
      {"another index", [&] { save_other(seq, "not-this-index"); }},
      {"ahead of the index", [&] { save_other(seq + 5, identity); }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    c.damage();
    auto r = open_store(path, false);
    ASSERT_TRUE(r);
    EXPECT_EQ(metric(r.get(), "ucm_fptable_loaded"), 0u);
    EXPECT_EQ(present(r.get(), ns, a), 50u);
    EXPECT_EQ(present(r.get(), ns, chain(ns, 5, 9)), 0u);
    r.reset();
    // The reader wrote a good table: the next open uses it.
    EXPECT_EQ(read_all(table()).size(), good.size());
    auto r2 = open_store(path, false);
    EXPECT_EQ(metric(r2.get(), "ucm_fptable_loaded"), 1u);
    EXPECT_EQ(present(r2.get(), ns, a), 50u);
  }
  // Control: a sound table of this index and sequence is used as it is, even one holding other
  // fingerprints (the checks catch damage and staleness, not a writer that lies), so the cases
  // above were rebuilt for their damage alone and the answers there came from the rebuild.
  save_other(seq, identity);
  auto r = open_store(path, false);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_loaded"), 1u);
  EXPECT_EQ(present(r.get(), ns, a), 0u);
}

TEST_F(FpTableFile, ATableBehindATrimmedJournalIsRebuilt) {
  const std::string old = read_all(table());  // sequence 50
  auto b = chain(ns, 30, 4);
  {
    auto w = open_store(path, true);
    dump(w.get(), ns, b);
  }
  {
    // gc's trim, without its cap for the table (the table here is older than gc could know).
    std::unique_ptr<Index> ix;
    ASSERT_TRUE(Index::OpenPrimary(fmt::index_dir(path), false, &ix).ok());
    ASSERT_TRUE(ix->delete_journal_below(70).ok());
  }
  write_all(table(), old);
  auto r = open_store(path, false);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_loaded"), 0u);
  EXPECT_EQ(present(r.get(), ns, a), 50u);
  EXPECT_EQ(present(r.get(), ns, b), 30u);
}

TEST_F(FpTableFile, GcKeepsTheJournalEntriesTheTableHasNotSeen) {
  const std::string old = read_all(table());  // sequence 50
  auto b = chain(ns, 10, 5);
  {
    auto w = open_store(path, true);
    dump(w.get(), ns, b);  // 51..60, table saved at 60 on close
  }
  write_all(table(), old);
  admin::GcOptions o;
  o.grace_ms = 0;
  o.journal_keep = 2;
  o.update_fptable = false;  // the table stays at 50: what gc keeps for it
  admin::GcReport rep;
  ASSERT_TRUE(admin::gc(path, o, &rep).ok());
  EXPECT_EQ(rep.journal_trimmed, 50u);  // 1..50; 51..60 stay for the table of sequence 50
  auto r = open_store(path, false);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_loaded"), 1u);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_replayed"), 10u);
  EXPECT_EQ(present(r.get(), ns, b), 10u);
  r.reset();
  // Without a table, keep alone decides.
  fs::remove(table());
  ASSERT_TRUE(admin::gc(path, o, &rep).ok());
  EXPECT_EQ(rep.journal_trimmed, 7u);  // 51..57 (< 60 - 2)
}

TEST_F(FpTableFile, GcBringsTheTableUpToDateSoTheNextOpenReplaysNothing) {
  const std::string old = read_all(table());  // sequence 50
  auto b = chain(ns, 10, 5);
  {
    auto w = open_store(path, true);
    dump(w.get(), ns, b);  // 51..60
  }
  write_all(table(), old);  // the table has not seen 51..60
  // Evict three quarters of the bytes: removals 61.. in the journal.
  admin::GcOptions o;
  o.grace_ms = 0;
  o.journal_keep = 2;
  admin::GcReport rep;
  o.dry_run = true;
  ASSERT_TRUE(admin::gc(path, o, &rep).ok());
  o.dry_run = false;
  o.max_bytes = rep.bytes_before / 4;  // the oldest blocks go: a's, from its tail
  ASSERT_TRUE(admin::gc(path, o, &rep).ok());
  ASSERT_GT(rep.evicted_blocks, 0u);
  EXPECT_TRUE(rep.fptable_updated) << rep.fptable_skipped;
  EXPECT_EQ(rep.fptable_replayed, 10u + rep.evicted_blocks);  // the writer's 10 adds, then gc's removals
  EXPECT_EQ(nlohmann::json::parse(rep.to_json())["fptable_updated"], true);
  // The table is at the index's sequence now, so gc trimmed down to keep.
  std::unique_ptr<Index> ix;
  ASSERT_TRUE(Index::OpenPrimary(fmt::index_dir(path), false, &ix).ok());
  const uint64_t last = ix->journal_seq();
  std::string identity;
  ASSERT_TRUE(ix->identity(&identity).ok());
  ix.reset();
  uint64_t seq = 0;
  ASSERT_TRUE(fptable_file_seq(path, identity, &seq).ok());
  EXPECT_EQ(seq, last);
  EXPECT_EQ(rep.journal_trimmed, last - 2 - 1);  // 1 .. last - 3 (< last - keep)
  // The next open maps it and replays nothing, with the right answers.
  auto r = open_store(path, false);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_loaded"), 1u);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_replayed"), 0u);
  const size_t kept_a = present(r.get(), ns, a), kept_b = present(r.get(), ns, b);
  EXPECT_EQ(kept_a + kept_b, rep.blocks_after);
  EXPECT_EQ(kept_a + kept_b, 60u - rep.evicted_blocks);
  // The same answers as a table rebuilt from the index.
  r.reset();
  fs::remove(table());
  r = open_store(path, false);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_loaded"), 0u);
  EXPECT_EQ(present(r.get(), ns, a), kept_a);
  EXPECT_EQ(present(r.get(), ns, b), kept_b);
}

TEST_F(FpTableFile, GcLeavesACorruptTableAloneAndTheNextOpenRebuildsIt) {
  std::string bytes = read_all(table());
  bytes[fmt::kFpTableHeaderBytes + 8] ^= 0x40;  // a slot
  write_all(table(), bytes);
  admin::GcOptions o;
  o.grace_ms = 0;
  o.max_bytes = 0;  // evict all of a
  admin::GcReport rep;
  ASSERT_TRUE(admin::gc(path, o, &rep).ok());
  EXPECT_EQ(rep.evicted_blocks, 50u);
  EXPECT_FALSE(rep.fptable_updated);
  EXPECT_NE(rep.fptable_skipped.find("checksum"), std::string::npos) << rep.fptable_skipped;
  EXPECT_NE(rep.to_text().find("table not updated"), std::string::npos) << rep.to_text();
  EXPECT_EQ(read_all(table()), bytes);  // nothing replaced
  for (const auto& e : fs::directory_iterator(fmt::tmp_dir(path)))
    EXPECT_EQ(e.path().filename().string().rfind("fptable.", 0), std::string::npos) << e.path();  // no copy left
  auto r = open_store(path, false);
  EXPECT_EQ(metric(r.get(), "ucm_fptable_loaded"), 0u);
  EXPECT_EQ(present(r.get(), ns, a), 0u);
}
