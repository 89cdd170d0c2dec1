// ucm build / inspect / gc / migrate / rebuild-index, in-process against real stores.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "admin_internal.h"
#include "ucm/format/format.h"
#include "tools_test_util.h"
#include "ucm/admin.h"

using namespace ucm;
using namespace ucm::admin;
using namespace ucm::test;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

GcReport must_gc(const std::string& p, GcOptions o) {
  GcReport r;
  Status st = gc(p, o, &r);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return r;
}

size_t present_prefix(Store* s, const NamespaceId& ns, const std::vector<BlockHash>& hs) {
  size_t prefix = 0;
  lookup_present(s, ns, hs, &prefix);
  return prefix;
}

/// Sum of the apparent sizes of the files in data/.
uint64_t data_dir_bytes(const std::string& store) {
  uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(store + "/data"))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}

/// Appends `n` bytes copied from [from, from + n) of the file to its end, as a dump killed
/// after its pwrite and before its index commit leaves them (a valid but unindexed record).
void append_copy(const std::string& file, uint64_t from, uint64_t n) {
  std::string all = read_file(file);
  ASSERT_GE(all.size(), from + n);
  std::ofstream f(file, std::ios::binary | std::ios::app);
  f.write(all.data() + from, static_cast<std::streamsize>(n));
}

void make_newer_version(const std::string& path) {
  fmt::Superblock sb;
  ASSERT_TRUE(fmt::read_superblock(path, &sb).ok());
  sb.format_version = 99;
  uint8_t buf[fmt::kSuperblockSize];
  fmt::encode_superblock(sb, buf);
  std::ofstream f(fmt::superblock_path(path), std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(buf), sizeof buf);
}

}  // namespace

TEST(Build, CreatesAndIsIdempotent) {
  TempDir d;
  const std::string s = d.sub("store");
  BuildReport r;
  ASSERT_TRUE(build(s, {}, &r).ok());
  EXPECT_TRUE(r.created);
  for (const char* sub : {"UCMSTORE", "index", "data", "access", "readers", "tmp"})
    EXPECT_TRUE(fs::exists(s + "/" + sub)) << sub;
  const std::string sb = read_file(s + "/UCMSTORE");
  auto mtime = fs::last_write_time(s + "/UCMSTORE");
  BuildReport r2;
  ASSERT_TRUE(build(s, {}, &r2).ok());
  EXPECT_FALSE(r2.created);
  EXPECT_NE(r2.format_message.find("nothing changed"), std::string::npos);
  EXPECT_EQ(read_file(s + "/UCMSTORE"), sb);
  EXPECT_EQ(fs::last_write_time(s + "/UCMSTORE"), mtime);
  auto j = json::parse(r2.to_json());
  EXPECT_EQ(j["created"], false);

  // A non-empty non-store directory is refused.
  fs::create_directories(d.sub("junk"));
  std::ofstream(d.sub("junk/file")) << "x";
  EXPECT_EQ(build(d.sub("junk"), {}, &r).code(), Code::kInvalidArgument);
}

class AdminStore : public ::testing::Test {
 protected:
  void SetUp() override {
    path = dir.sub("store");
    BuildReport r;
    ASSERT_TRUE(build(path, {}, &r).ok());
    auto s = open_store(path, true);
    desc_a = tiny_desc("model-a");
    desc_b = tiny_desc("model-b");
    ASSERT_TRUE(s->register_namespace(desc_a, &ns_a).ok());
    ASSERT_TRUE(s->register_namespace(desc_b, &ns_b).ok());
    chain_a = dump_chain(s.get(), ns_a, desc_a, 100, 3, true);
    chain_b = dump_chain(s.get(), ns_b, desc_b, 500, 2, false);
    DocumentEntry doc = document_of("doc-a", chain_a);
    doc.tokens = 12;
    doc.source = "a.rst";
    ASSERT_TRUE(s->put_document(ns_a, doc).ok());
    ASSERT_TRUE(s->put_attachment(ns_a, "r4_projection", "PROJ", 4).ok());
  }
  /// Appends chain_a's payloads, as `s` loads them, to *out; ASSERTs each block loads.
  void load_chain_a(Store* s, std::vector<std::string>* out) {
    for (auto& h : chain_a.hashes) {
      std::string block;
      ASSERT_TRUE(load_block(s, ns_a, desc_a, h, &block).ok());
      out->push_back(block);
    }
  }
  /// Removes the index and rebuilds it from the data files into *br: `blocks` blocks, both
  /// namespaces, doc-a, nothing corrupt.
  void expect_index_rebuilt(size_t blocks, BuildReport* br) {
    fs::remove_all(path + "/index");
    ASSERT_NO_FATAL_FAILURE(rebuild_index(path, br));
    EXPECT_EQ(br->blocks_indexed, blocks);
    EXPECT_EQ(br->namespaces, 2u);
    EXPECT_EQ(br->documents, 1u);
    EXPECT_EQ(br->corrupt_records, 0u);
  }
  /// The same through a read-only handle of its own.
  void load_chain_a(std::vector<std::string>* out) { load_chain_a(open_store(path, false).get(), out); }
  TempDir dir;
  std::string path;
  NamespaceDesc desc_a, desc_b;
  NamespaceId ns_a{}, ns_b{};
  Chain chain_a, chain_b;
};

TEST_F(AdminStore, InspectJson) {
  InspectReport r = must_inspect(path);
  json j = json::parse(r.to_json());
  EXPECT_EQ(j["format_version"], 4);
  EXPECT_EQ(j["blocks"], 5);
  const uint64_t per = desc_a.payload_bytes();
  ASSERT_EQ(j["namespaces"].size(), 2u);
  uint64_t total = 0;
  for (auto& n : j["namespaces"]) {
    total += n["bytes"].get<uint64_t>();
    if (n["id"] == to_hex(ns_b)) {
      EXPECT_EQ(n["blocks"], 2);
      EXPECT_EQ(n["bytes"], 2 * per);
      EXPECT_EQ(n["model_id"], "model-b");
      EXPECT_EQ(n["dtype"], "bf16");
      EXPECT_EQ(n["block_size"], 4);
      EXPECT_EQ(n["name"], desc_b.display_name());
    } else {
      EXPECT_EQ(n["id"], to_hex(ns_a));
      EXPECT_EQ(n["blocks"], 3);
      EXPECT_GT(n["bytes"].get<uint64_t>(), 3 * per);  // + repr
      EXPECT_EQ(n["documents"], 1);
    }
  }
  EXPECT_EQ(j["bytes"], total);
  EXPECT_GE(j["data_files"].get<uint64_t>(), 1u);
  EXPECT_GT(j["data_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(j["oldest_created_ms"].get<uint64_t>(), 0u);
  EXPECT_LE(j["oldest_access_ms"].get<uint64_t>(), j["newest_access_ms"].get<uint64_t>());
  // Age / last-access spread as ISO-8601 UTC strings beside the ms values.
  for (const char* k : {"oldest_created", "newest_created", "oldest_access", "newest_access"}) {
    ASSERT_TRUE(j[k].is_string()) << k;
    EXPECT_EQ(j[k], format_time_ms(j[std::string(k) + "_ms"].get<uint64_t>())) << k;
    EXPECT_EQ(j[k].get<std::string>().back(), 'Z') << k;
    EXPECT_EQ(j[k].get<std::string>()[10], 'T') << k;
  }
  EXPECT_TRUE(j["access_percentiles"]["p50"].is_string());
  EXPECT_GE(j["inspected_ms"].get<uint64_t>(), j["newest_access_ms"].get<uint64_t>());
  EXPECT_FALSE(j.contains("verified"));
  // Text shows ages relative to when inspect ran (SetUp wrote everything just now).
  const std::string text = r.to_text();
  EXPECT_NE(text.find("block created    oldest just now"), std::string::npos) << text;
  EXPECT_NE(text.find("last access      oldest just now"), std::string::npos) << text;
  InspectReport aged = r;
  aged.now_ms = r.oldest_created_ms + 3 * 86400 * 1000ull + 5000;
  aged.newest_access_ms = aged.now_ms - 2 * 3600 * 1000ull;
  const std::string at = aged.to_text();
  EXPECT_NE(at.find("block created    oldest 3 d ago"), std::string::npos) << at;
  EXPECT_NE(at.find("newest 2 h ago"), std::string::npos) << at;

  InspectOptions o;
  o.ns = desc_b.display_name();
  json jb = json::parse(must_inspect(path, o).to_json());
  EXPECT_EQ(jb["blocks"], 2);
  ASSERT_EQ(jb["namespaces"].size(), 1u);
  o.ns = "nope";
  InspectReport bad;
  EXPECT_EQ(inspect(path, o, &bad).code(), Code::kInvalidArgument);
}

TEST_F(AdminStore, InspectVerifyCleanFlippedAndTruncated) {
  InspectOptions v;
  v.verify = true;
  json j = json::parse(must_inspect(path, v).to_json());
  EXPECT_EQ(j["verified"], 5);
  EXPECT_TRUE(j["corrupt"].empty());

  // Flip one payload byte of block a[1].
  fmt::BlockRecord rec;
  {
    std::unique_ptr<Store> s = open_store(path, false);
    BlockInfo bi;
    ASSERT_TRUE(s->get_block(ns_a, chain_a.hashes[1], &bi).ok());
    rec.kv_file = bi.kv_file;
    rec.kv_offset = bi.kv_offset;
  }
  const std::string f = fmt::data_file_path(path, rec.kv_file);
  {
    int fd = ::open(f.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t c;
    ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(rec.kv_offset + fmt::kPage + 5)), 1);
    c ^= 0x40;
    ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(rec.kv_offset + fmt::kPage + 5)), 1);
    ::close(fd);
  }
  InspectReport r;
  Status st = inspect(path, v, &r);
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_EQ(exit_code(st), 3);
  ASSERT_EQ(r.corrupt.size(), 1u);
  EXPECT_EQ(r.corrupt[0].block_hex, to_hex(chain_a.hashes[1]));
  EXPECT_EQ(r.corrupt[0].ns_hex, to_hex(ns_a));
  EXPECT_EQ(r.verified, 4u);
  json jc = json::parse(r.to_json());
  EXPECT_EQ(jc["corrupt"][0]["block"], to_hex(chain_a.hashes[1]));
  EXPECT_FALSE(jc["corrupt"][0]["reason"].get<std::string>().empty());

  // Truncate the data file inside the record of chain_b's last block: it is corrupt too.
  {
    std::unique_ptr<Store> s = open_store(path, false);
    BlockInfo bi;
    ASSERT_TRUE(s->get_block(ns_b, chain_b.hashes[1], &bi).ok());
    ASSERT_EQ(bi.kv_file, rec.kv_file);
    fs::resize_file(f, bi.kv_offset + fmt::kPage + 10);
  }
  InspectReport r2;
  EXPECT_EQ(inspect(path, v, &r2).code(), Code::kCorruption);
  EXPECT_EQ(r2.corrupt.size(), 2u);
  bool found = false;
  for (auto& c : r2.corrupt)
    if (c.block_hex == to_hex(chain_b.hashes[1])) found = true;
  EXPECT_TRUE(found);
}

// --verify's reader threads: any thread count finds the same blocks, counts the bytes it read,
// reports the corrupt total beside the list, and ends its progress with the totals.
TEST_F(AdminStore, InspectVerifyThreadsAgree) {
  const uint64_t all_bytes = must_inspect(path).bytes;
  BlockInfo bad;
  {
    std::unique_ptr<Store> s = open_store(path, false);
    ASSERT_TRUE(s->get_block(ns_a, chain_a.hashes[2], &bad).ok());
  }
  {
    const std::string f = fmt::data_file_path(path, bad.kv_file);
    int fd = ::open(f.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t c = 0;
    ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(bad.kv_offset + fmt::kPage + 7)), 1);
    c ^= 0x01;
    ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(bad.kv_offset + fmt::kPage + 7)), 1);
    ::close(fd);
  }
  const uint64_t bad_bytes = bad.kv_length + (bad.has_repr ? bad.repr_length : 0);
  for (uint32_t threads : {1u, 3u, 16u}) {
    SCOPED_TRACE(threads);
    InspectOptions v;
    v.verify = true;
    v.threads = threads;
    std::vector<std::string> lines;
    v.progress = [&](const std::string& l) { lines.push_back(l); };
    InspectReport r;
    EXPECT_EQ(inspect(path, v, &r).code(), Code::kCorruption);
    EXPECT_EQ(r.verified, 4u);
    EXPECT_EQ(r.corrupt_total, 1u);
    ASSERT_EQ(r.corrupt.size(), 1u);
    EXPECT_EQ(r.corrupt[0].block_hex, to_hex(chain_a.hashes[2]));
    EXPECT_EQ(r.verified_bytes, all_bytes - bad_bytes);
    EXPECT_GT(r.verify_seconds, 0);
    json j = json::parse(r.to_json());
    EXPECT_EQ(j["corrupt_total"], 1);
    EXPECT_EQ(j["verified_bytes"], all_bytes - bad_bytes);
    EXPECT_TRUE(j.contains("verify_gbps"));
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines.back(), "verify: done, 4 ok, 1 corrupt");
  }
}

TEST_F(AdminStore, InspectBlockAndDocs) {
  InspectOptions o;
  o.block_hex = to_hex(chain_a.hashes[2]);
  InspectReport r = must_inspect(path, o);
  json j = json::parse(r.to_json());
  EXPECT_EQ(j["block"]["hash"], to_hex(chain_a.hashes[2]));
  EXPECT_EQ(j["block"]["parent"], to_hex(chain_a.hashes[1]));
  EXPECT_EQ(j["block"]["token_count"], 4);
  EXPECT_TRUE(j["block"]["repr"].is_object());
  o.block_hex = to_hex(chain_a.hashes[0]);
  json j0 = json::parse(must_inspect(path, o).to_json());
  EXPECT_EQ(j0["block"]["parent_is_root"], true);

  const std::string before = read_file(fmt::superblock_path(path));
  o.block_hex = "xyz";
  InspectReport bad;
  Status st = inspect(path, o, &bad);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(exit_code(st), 1);
  EXPECT_NE(st.message().find("32 hex digits"), std::string::npos);
  EXPECT_EQ(read_file(fmt::superblock_path(path)), before);
  o.block_hex = std::string(32, '0');
  EXPECT_EQ(inspect(path, o, &bad).code(), Code::kNotFound);

  InspectOptions dopt;
  dopt.docs = true;
  json jd = json::parse(must_inspect(path, dopt).to_json());
  ASSERT_EQ(jd["docs"].size(), 1u);
  EXPECT_EQ(jd["docs"][0]["id"], "doc-a");
  EXPECT_EQ(jd["docs"][0]["blocks"], 3);
  EXPECT_EQ(jd["docs"][0]["tokens"], 12);
  EXPECT_EQ(jd["docs"][0]["last_block"], to_hex(chain_a.hashes[2]));
  EXPECT_EQ(jd["docs"][0]["source"], "a.rst");
}

TEST_F(AdminStore, InspectWhileWriterHoldsAndGcBusy) {
  auto w = open_store(path, true);
  InspectReport r = must_inspect(path);
  EXPECT_EQ(r.blocks, 5u);
  GcReport g;
  GcOptions no_handoff;
  no_handoff.writer_wait_ms = 0;  // the writer runs and gc hands it nothing: busy
  Status st = gc(path, no_handoff, &g);
  EXPECT_EQ(st.code(), Code::kBusy);
  EXPECT_EQ(exit_code(st), 4);
  EXPECT_NE(st.message().find("pid"), std::string::npos) << st.message();
  // By default gc plans read-only beside the live writer (store_v1.md §11.5): nothing to remove.
  st = gc(path, {}, &g);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(g.live_writer);
  EXPECT_EQ(g.handoff.outcome, "nothing to remove");
  EXPECT_EQ(g.blocks_after, 5u);
  BuildOptions bo;
  bo.rebuild_index = true;
  BuildReport br;
  EXPECT_EQ(build(path, bo, &br).code(), Code::kBusy);
  MigrateReport mr;
  EXPECT_EQ(migrate(path, path, {}, &mr).code(), Code::kInvalidArgument);  // same store
}

TEST_F(AdminStore, GcDryRunChangesNothing) {
  InspectReport before = must_inspect(path);
  std::vector<std::string> files_before;
  for (auto& e : fs::directory_iterator(path + "/data")) files_before.push_back(read_file(e.path()));
  GcOptions o;
  o.dry_run = true;
  o.max_bytes = 0;
  o.grace_ms = 0;
  GcReport g = must_gc(path, o);
  EXPECT_EQ(g.evicted_blocks, 5u);
  EXPECT_EQ(g.blocks_after, 0u);
  EXPECT_EQ(g.would_evict.size(), 5u);
  InspectReport after = must_inspect(path);
  EXPECT_EQ(after.blocks, before.blocks);
  after.now_ms = before.now_ms;  // only the time of the inspect run may differ
  EXPECT_EQ(after.to_json(), before.to_json());
  std::vector<std::string> files_after;
  for (auto& e : fs::directory_iterator(path + "/data")) files_after.push_back(read_file(e.path()));
  EXPECT_EQ(files_after, files_before);
}

TEST_F(AdminStore, GcLruUsesAccessLogsOfReadOnlyHandles) {
  // chain_b was dumped after chain_a, so by creation time chain_a is the LRU one. A read-only
  // handle loads chain_a: its access log makes chain_b the LRU one.
  sleep_ms(20);
  {
    auto r = open_store(path, false);
    for (auto& h : chain_a.hashes) {
      std::string out;
      ASSERT_TRUE(load_block(r.get(), ns_a, desc_a, h, &out).ok());
    }
  }  // close flushes the access log
  InspectReport ins = must_inspect(path);
  uint64_t a_bytes = 0;
  for (auto& n : ins.namespaces)
    if (n.id_hex == to_hex(ns_a)) a_bytes = n.bytes;
  GcOptions o;
  o.max_bytes = a_bytes;
  o.grace_ms = 0;
  GcReport g = must_gc(path, o);
  // The logs of build's, SetUp's and the reader's handles; all closed, so all deleted.
  EXPECT_GE(g.access_logs_merged, 2u);
  EXPECT_EQ(g.access_logs_deleted, g.access_logs_merged);
  EXPECT_TRUE(fs::is_empty(path + "/access"));
  EXPECT_EQ(g.evicted_blocks, 2u);
  EXPECT_EQ(g.blocks_after, 3u);
  auto s = open_store(path, false);
  EXPECT_EQ(present_count(s.get(), ns_a, chain_a.hashes), 3u);
  EXPECT_EQ(present_count(s.get(), ns_b, chain_b.hashes), 0u);
}

TEST_F(AdminStore, GcTailsFirstAndDescendants) {
  // Same recency everywhere except what we load: evicting one block's worth takes the tail.
  GcOptions o;
  o.grace_ms = 0;
  o.ns = to_hex(ns_b);
  o.max_bytes = desc_b.payload_bytes();  // one of chain_b's two blocks must go
  GcReport g = must_gc(path, o);
  {
    auto s = open_store(path, false);
    EXPECT_EQ(present_count(s.get(), ns_b, chain_b.hashes), 1u);
    EXPECT_EQ(present_prefix(s.get(), ns_b, chain_b.hashes), 1u) << "the tail went first";
    EXPECT_EQ(present_count(s.get(), ns_a, chain_a.hashes), 3u) << "other namespace untouched";
  }
  // a[0] has the oldest access of its own, but a[1] and a[2] are loaded: using a block means its
  // prefix was used, so a[0] counts as recent as a[2] and the tail a[2] goes first.
  sleep_ms(20);
  {
    auto r = open_store(path, false);
    for (size_t i = 1; i < 3; ++i) {
      std::string out;
      ASSERT_TRUE(load_block(r.get(), ns_a, desc_a, chain_a.hashes[i], &out).ok());
    }
  }
  GcOptions o2;
  o2.grace_ms = 0;
  o2.ns = desc_a.display_name();
  InspectReport ins = must_inspect(path);
  uint64_t a_bytes = 0;
  for (auto& n : ins.namespaces)
    if (n.id_hex == to_hex(ns_a)) a_bytes = n.bytes;
  o2.max_bytes = a_bytes - 1;
  GcReport g2 = must_gc(path, o2);
  EXPECT_EQ(g2.evicted_blocks, 1u);
  EXPECT_EQ(g2.evicted_descendants, 0u);
  {
    auto s = open_store(path, false);
    EXPECT_EQ(present_prefix(s.get(), ns_a, chain_a.hashes), 2u) << "the tail went first";
  }
  // The age limit drops a[0] (never loaded since its dump) and a[1]: a[1] either by its own
  // age or, if its load was under 15 ms ago, as a descendant of a[0] (a parent takes its
  // descendants with it); either way nothing of the chain is left.
  GcOptions o3;
  o3.grace_ms = 0;
  o3.ns = desc_a.display_name();
  o3.max_age_ms = 15;
  GcReport g3 = must_gc(path, o3);
  EXPECT_EQ(g3.evicted_blocks, 2u);
  EXPECT_LE(g3.evicted_descendants, 1u);
  auto s = open_store(path, false);
  EXPECT_EQ(present_count(s.get(), ns_a, chain_a.hashes), 0u);
}

TEST_F(AdminStore, GcRemovesOrphansAndUnreferenced) {
  {
    auto s = open_store(path, true);
    // A chain whose first block's parent is neither the root nor a present block.
    Chain c;
    std::vector<uint32_t> toks = {9, 9, 9, 9, 8, 8, 8, 8};
    BlockHash bogus{};
    bogus[0] = 0xEE;
    hash_blocks(bogus, toks.data(), toks.size(), 4, &c.hashes);
    std::string kv = payload_for(desc_b, c.hashes[0]);
    DumpItem items[2];
    for (int i = 0; i < 2; ++i) {
      items[i].hash = c.hashes[i];
      items[i].parent = i == 0 ? bogus : c.hashes[0];
      items[i].token_count = 4;
      items[i].kv = kv.data();
    }
    ASSERT_TRUE(s->dump(ns_b, items, 2)->wait().ok());
  }
  EXPECT_EQ(must_inspect(path).blocks, 7u);
  GcOptions o;
  o.grace_ms = 0;
  GcReport g = must_gc(path, o);
  EXPECT_EQ(g.orphans_removed, 2u);
  EXPECT_EQ(g.evicted_blocks, 0u);
  EXPECT_EQ(must_inspect(path).blocks, 5u);

  // --unreferenced: only doc-a's chain (namespace a) is referenced.
  GcOptions u;
  u.grace_ms = 0;
  u.unreferenced = true;
  GcReport gu = must_gc(path, u);
  EXPECT_EQ(gu.unreferenced_removed, 2u);
  auto s = open_store(path, false);
  EXPECT_EQ(present_count(s.get(), ns_a, chain_a.hashes), 3u);
  EXPECT_EQ(present_count(s.get(), ns_b, chain_b.hashes), 0u);
}

TEST_F(AdminStore, GcCompactionReclaimsAndKeepsDataLoadable) {
  std::vector<std::string> before;
  ASSERT_NO_FATAL_FAILURE(load_chain_a(&before));
  // Evict namespace b and 0 of a: the data file's dead ratio stays low. Evict more: make b
  // big first so that its removal leaves a mostly dead file.
  {
    auto s = open_store(path, true);
    dump_chain(s.get(), ns_b, desc_b, 900, 40, false);
  }
  InspectReport i0 = must_inspect(path);
  GcOptions o;
  o.ns = to_hex(ns_b);
  o.max_bytes = 0;
  o.grace_ms = 60000;  // retired files stay for now
  o.compact_dead_ratio = 0.01;  // also compact SetUp's file: its live records move
  GcReport g = must_gc(path, o);
  EXPECT_EQ(g.evicted_blocks, 42u);
  // SetUp's file is compacted (its live records move); the second file held only namespace b,
  // so with nothing live it is retired without a copy.
  EXPECT_EQ(g.files_compacted, 1u);
  EXPECT_EQ(g.files_retired, 2u);
  EXPECT_EQ(g.files_deleted, 0u);
  InspectReport i1 = must_inspect(path);
  EXPECT_EQ(i1.retired_files, 2u);
  EXPECT_EQ(g.files_deleted, 0u);
  // Data still loads byte-identical (namespace record, attachment, document relocated too).
  {
    auto s = open_store(path, false);
    std::vector<std::string> after;
    ASSERT_NO_FATAL_FAILURE(load_chain_a(s.get(), &after));
    EXPECT_EQ(after, before);
    std::string att;
    ASSERT_TRUE(s->get_attachment(ns_a, "r4_projection", &att).ok());
    EXPECT_EQ(att, "PROJ");
    DocumentEntry doc;
    EXPECT_TRUE(s->get_document(ns_a, "doc-a", &doc).ok());
    // The moved KV records keep their token ids (store_v1.md §3.2): the chain comes back whole.
    std::vector<uint32_t> ids;
    ASSERT_TRUE(s->chain_tokens(ns_a, chain_a.hashes[2], &ids).ok());
    EXPECT_EQ(ids, chain_a.tokens);
  }
  // Past the grace period the retired files are unlinked.
  GcOptions o2;
  o2.grace_ms = 0;
  GcReport g2 = must_gc(path, o2);
  EXPECT_GE(g2.files_deleted, 1u);
  EXPECT_GT(g2.bytes_reclaimed, 0u);
  InspectReport i2 = must_inspect(path);
  EXPECT_EQ(i2.retired_files, 0u);
  EXPECT_LT(i2.data_bytes, i0.data_bytes);
  InspectOptions v;
  v.verify = true;
  EXPECT_EQ(must_inspect(path, v).verified, 3u);
  // Rebuild after compaction still finds everything.
  // Both old files were compacted and unlinked: the evicted blocks are gone for good, while
  // the relocated blocks, namespace records, attachment and document are all found.
  BuildReport br;
  ASSERT_NO_FATAL_FAILURE(expect_index_rebuilt(3, &br));
  auto s = open_store(path, false);
  EXPECT_EQ(present_count(s.get(), ns_a, chain_a.hashes), 3u);
  for (const auto& h : chain_a.hashes) {  // the rebuilt index flags the records with ids (§5.3)
    BlockInfo bi;
    ASSERT_TRUE(s->get_block(ns_a, h, &bi).ok());
    EXPECT_TRUE(bi.has_tokens);
  }
  std::string att;
  ASSERT_TRUE(s->get_attachment(ns_a, "r4_projection", &att).ok());
  EXPECT_EQ(att, "PROJ");
  std::vector<std::string> after;
  ASSERT_NO_FATAL_FAILURE(load_chain_a(s.get(), &after));
  EXPECT_EQ(after, before);
}

TEST_F(AdminStore, GcHousekeeping) {
  // A stale reader dir of a dead local process and a tmp leftover.
  fs::create_directories(path + "/readers/" + fmt::host_name() + "-999999999-abc");
  fs::create_directories(path + "/tmp/leftover");
  GcOptions o;
  o.grace_ms = 0;
  GcReport g = must_gc(path, o);
  EXPECT_EQ(g.stale_dirs_removed, 2u);
  EXPECT_FALSE(fs::exists(path + "/tmp/leftover"));
  // An unreferenced data file of a crashed writer.
  const std::string stray = fmt::data_file_path(path, 4000);
  std::unique_ptr<fmt::DataFileWriter> w;
  ASSERT_TRUE(fmt::DataFileWriter::Create(path, 4000, &w).ok());
  w.reset();
  GcReport g2 = must_gc(path, o);
  EXPECT_EQ(g2.unreferenced_files_deleted, 1u);
  EXPECT_FALSE(fs::exists(stray));
}

TEST_F(AdminStore, RebuildIndexRestoresEverything) {
  std::vector<std::string> before;
  ASSERT_NO_FATAL_FAILURE(load_chain_a(&before));
  BuildReport br;
  ASSERT_NO_FATAL_FAILURE(expect_index_rebuilt(5, &br));
  EXPECT_TRUE(br.moved_index_to.empty());
  auto s = open_store(path, false);
  std::vector<std::string> after;
  ASSERT_NO_FATAL_FAILURE(load_chain_a(s.get(), &after));
  EXPECT_EQ(after, before);
  EXPECT_EQ(present_count(s.get(), ns_b, chain_b.hashes), 2u);
  DocumentEntry doc;
  ASSERT_TRUE(s->get_document(ns_a, "doc-a", &doc).ok());
  EXPECT_EQ(doc.last_block, chain_a.hashes[2]);
  std::string att;
  ASSERT_TRUE(s->get_attachment(ns_a, "r4_projection", &att).ok());
  EXPECT_EQ(att, "PROJ");
  InspectReport ins = must_inspect(path);
  EXPECT_EQ(ins.blocks, 5u);
  s.reset();
  // With an index present, it is moved aside.
  BuildReport br2;
  ASSERT_NO_FATAL_FAILURE(rebuild_index(path, &br2));
  EXPECT_NE(br2.moved_index_to.find("tmp/index.broken-"), std::string::npos);
  EXPECT_TRUE(fs::exists(br2.moved_index_to));
}

TEST_F(AdminStore, MigrateMergesAndSkips) {
  TempDir other;
  const std::string src2 = other.sub("s2");
  Chain c2;
  {
    BuildReport r;
    ASSERT_TRUE(build(src2, {}, &r).ok());
    auto s = open_store(src2, true);
    NamespaceId id;
    ASSERT_TRUE(s->register_namespace(desc_a, &id).ok());
    ASSERT_EQ(id, ns_a);
    c2 = dump_chain(s.get(), ns_a, desc_a, 7000, 2, true);
    dump_chain(s.get(), ns_a, desc_a, 100, 3, true);  // same as chain_a: skipped on merge
  }
  const std::string dst = other.sub("merged");
  MigrateReport m1, m2;
  ASSERT_TRUE(migrate(path, dst, {}, &m1).ok());
  EXPECT_EQ(m1.blocks_copied, 5u);
  EXPECT_EQ(m1.namespaces, 2u);
  EXPECT_EQ(m1.documents, 1u);
  EXPECT_EQ(m1.attachments, 1u);
  ASSERT_TRUE(migrate(src2, dst, {}, &m2).ok());
  EXPECT_EQ(m2.blocks_copied, 2u);
  EXPECT_EQ(m2.blocks_skipped, 3u);
  MigrateReport m3;
  ASSERT_TRUE(migrate(path, dst, {}, &m3).ok());
  EXPECT_EQ(m3.blocks_copied, 0u);
  EXPECT_EQ(m3.blocks_skipped, 5u);
  auto d = open_store(dst, false);
  auto s = open_store(path, false);
  for (auto& h : chain_a.hashes) {
    std::string a, b;
    ASSERT_TRUE(load_block(d.get(), ns_a, desc_a, h, &a).ok());
    ASSERT_TRUE(load_block(s.get(), ns_a, desc_a, h, &b).ok());
    EXPECT_EQ(a, b);
  }
  EXPECT_EQ(present_count(d.get(), ns_a, c2.hashes), 2u);
  EXPECT_EQ(present_count(d.get(), ns_b, chain_b.hashes), 2u);
  std::string att;
  ASSERT_TRUE(d->get_attachment(ns_a, "r4_projection", &att).ok());
  EXPECT_EQ(att, "PROJ");
  InspectOptions v;
  v.verify = true;
  EXPECT_EQ(must_inspect(dst, v).verified, 7u);
}

TEST_F(AdminStore, MigrateConvertsDtypeKeepingHashes) {
  TempDir other;
  const std::string src = other.sub("bf");
  NamespaceDesc d = tiny_desc("conv");
  NamespaceId ns{};
  Chain c;
  {
    BuildReport r;
    ASSERT_TRUE(build(src, {}, &r).ok());
    auto s = open_store(src, true);
    ASSERT_TRUE(s->register_namespace(d, &ns).ok());
    std::vector<uint32_t> toks = {1, 2, 3, 4};
    hash_blocks(root_hash(ns), toks.data(), toks.size(), 4, &c.hashes);
    std::vector<uint16_t> kv(d.payload_bytes() / 2);
    const uint16_t vals[] = {0x3F80, 0xC020, 0x3F00, 0x0000};  // 1, -2.5, 0.5, 0
    for (size_t i = 0; i < kv.size(); ++i) kv[i] = vals[i % 4];
    DumpItem it;
    it.hash = c.hashes[0];
    it.parent = root_hash(ns);
    it.token_count = 4;
    it.kv = kv.data();
    it.tokens = toks.data();
    ASSERT_TRUE(s->dump(ns, &it, 1)->wait().ok());
  }
  const std::string dst = other.sub("fp");
  MigrateOptions mo;
  mo.dtype = "fp16";
  MigrateReport m;
  Status st = migrate(src, dst, mo, &m);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(m.dst_namespaces.size(), 1u);
  NamespaceDesc nd;
  NamespaceId nid{};
  auto out = open_store(dst, false);
  ASSERT_TRUE(out->find_namespace(m.dst_namespaces[0], &nd, &nid).ok());
  EXPECT_EQ(nd.dtype, DType::kFP16);
  EXPECT_NE(nid, ns);
  EXPECT_EQ(json::parse(nd.extra_json)["hash_seed_namespace"], to_hex(ns));
  std::string got;
  ASSERT_TRUE(load_block(out.get(), nid, nd, c.hashes[0], &got).ok());  // same block hash
  const uint16_t want[] = {0x3C00, 0xC100, 0x3800, 0x0000};
  for (size_t i = 0; i < got.size() / 2; ++i) {
    uint16_t v;
    std::memcpy(&v, got.data() + 2 * i, 2);
    ASSERT_EQ(v, want[i % 4]) << i;
  }
  // migrate carries the token ids across (store_v1.md §3.2); the converted namespace's chain
  // root is the source's (hash_seed_namespace), so the chain walk ends there.
  std::vector<uint32_t> ids;
  ASSERT_TRUE(out->chain_tokens(nid, c.hashes[0], &ids).ok());
  EXPECT_EQ(ids, (std::vector<uint32_t>{1, 2, 3, 4}));
  // The converted namespace's chains start at the source's root: gc keeps them (not orphans).
  out.reset();
  GcOptions go;
  go.grace_ms = 0;
  GcReport g = must_gc(dst, go);
  EXPECT_EQ(g.orphans_removed, 0u);
  EXPECT_EQ(g.blocks_after, 1u);
  InspectReport ir = must_inspect(dst);
  ASSERT_EQ(ir.namespaces.size(), 1u);
  EXPECT_EQ(ir.namespaces[0].hash_seed_namespace, to_hex(ns));
}

TEST_F(AdminStore, UpgradeAndNewerVersionRefusedEverywhere) {
  MigrateOptions up;
  up.upgrade = true;
  MigrateReport m;
  ASSERT_TRUE(migrate(path, "", up, &m).ok());
  EXPECT_NE(m.message.find("already at format version 4"), std::string::npos);

  make_newer_version(path);
  BuildReport br;
  InspectReport ir;
  GcReport gr;
  MigrateReport mr;
  std::vector<Status> sts = {build(path, {}, &br), inspect(path, {}, &ir), gc(path, {}, &gr),
                             migrate(path, dir.sub("x"), {}, &mr), migrate(path, "", up, &mr)};
  BuildOptions rb;
  rb.rebuild_index = true;
  sts.push_back(build(path, rb, &br));
  for (const auto& st : sts) {
    EXPECT_EQ(st.code(), Code::kVersion) << st.ToString();
    EXPECT_EQ(exit_code(st), 5);
    EXPECT_NE(st.message().find("newer than this ucm supports"), std::string::npos) << st.message();
  }
}

TEST_F(AdminStore, GcMaxAge) {
  GcOptions o;
  o.grace_ms = 0;
  o.max_age_ms = 3600 * 1000;  // everything was used within the hour
  GcReport g = must_gc(path, o);
  EXPECT_EQ(g.evicted_blocks, 0u);
  sleep_ms(30);
  o.max_age_ms = 10;
  o.dry_run = true;
  GcReport d = must_gc(path, o);
  EXPECT_EQ(d.evicted_blocks, 5u);
  EXPECT_EQ(must_inspect(path).blocks, 5u);
  o.dry_run = false;
  GcReport g2 = must_gc(path, o);
  EXPECT_EQ(g2.evicted_blocks, 5u);
  EXPECT_EQ(g2.blocks_after, 0u);
}

TEST_F(AdminStore, ReaderWithStaleViewLoadsDuringGraceAfterCompaction) {
  auto reader = open_store(path, false);  // refresh_interval_ms = 0: its view stays stale
  std::string before;
  ASSERT_TRUE(load_block(reader.get(), ns_a, desc_a, chain_a.hashes[0], &before).ok());
  GcOptions o;
  o.ns = to_hex(ns_b);
  o.max_bytes = 0;
  o.compact_dead_ratio = 0.01;  // SetUp's file is compacted and retired, not unlinked
  GcReport g = must_gc(path, o);
  EXPECT_EQ(g.files_compacted, 1u);
  EXPECT_EQ(g.files_deleted, 0u);
  std::string again;
  ASSERT_TRUE(load_block(reader.get(), ns_a, desc_a, chain_a.hashes[0], &again).ok());
  EXPECT_EQ(again, before);
  ASSERT_TRUE(reader->refresh().ok());
  ASSERT_TRUE(load_block(reader.get(), ns_a, desc_a, chain_a.hashes[0], &again).ok());
  EXPECT_EQ(again, before);
}

TEST_F(AdminStore, GcTruncatesUnindexedTailsOfKilledDumps) {
  // SetUp's session wrote one data file; its first record starts after the file header.
  std::vector<uint32_t> ids;
  for (const auto& e : fs::directory_iterator(path + "/data")) {
    uint32_t id;
    if (fmt::parse_data_file_name(e.path().filename().string(), &id)) ids.push_back(id);
  }
  ASSERT_EQ(ids.size(), 1u);
  const std::string f1 = fmt::data_file_path(path, ids[0]);
  const uint64_t f1_size = fs::file_size(f1);
  const uint64_t rec = fmt::record_size(desc_a.payload_bytes());
  InspectReport i0 = must_inspect(path);
  EXPECT_EQ(i0.data_bytes, data_dir_bytes(path));
  // (1) Two uncommitted records at the end of a file that holds committed blocks.
  append_copy(f1, fmt::kPage, 2 * rec);
  // (2) A file that a killed writer session registered (size = header page, nothing live) and
  // wrote one record into before it died.
  uint32_t f2_id = 0;
  {
    std::unique_ptr<WriterIndex> w;
    ASSERT_TRUE(WriterIndex::Open(path, &w).ok());
    ASSERT_TRUE(w->idx->allocate_file_id(&f2_id).ok());
    std::unique_ptr<fmt::DataFileWriter> dw;
    ASSERT_TRUE(fmt::DataFileWriter::Create(path, f2_id, &dw).ok());
    fmt::FileRecord fr;
    fr.size = fmt::kPage;
    Index::Batch b;
    b.put_file(f2_id, fr);
    ASSERT_TRUE(w->idx->write(b, true).ok());
  }
  const std::string f2 = fmt::data_file_path(path, f2_id);
  {
    std::string rec_bytes = read_file(f1).substr(fmt::kPage, rec);
    std::ofstream f(f2, std::ios::binary | std::ios::app);
    f.write(rec_bytes.data(), static_cast<std::streamsize>(rec_bytes.size()));
  }
  ASSERT_EQ(fs::file_size(f2), fmt::kPage + rec);
  // The index does not see the tails: inspect's data_bytes is short of what data/ holds.
  InspectReport i1 = must_inspect(path);
  EXPECT_EQ(data_dir_bytes(path), i1.data_bytes + 3 * rec);

  GcOptions o;
  o.grace_ms = 0;
  o.compact_dead_ratio = 1.0;  // no compaction: the tails must go without it
  GcReport g = must_gc(path, o);
  EXPECT_EQ(g.tails_truncated, 2u);
  EXPECT_EQ(g.tail_bytes_truncated, 3 * rec);
  EXPECT_EQ(g.files_compacted, 0u);
  EXPECT_EQ(g.files_retired, 1u);  // f2: zero live bytes
  EXPECT_EQ(g.files_deleted, 1u);
  EXPECT_EQ(g.bytes_reclaimed, 3 * rec + fmt::kPage);
  EXPECT_EQ(fs::file_size(f1), f1_size);
  EXPECT_FALSE(fs::exists(f2));
  auto j = json::parse(g.to_json());
  EXPECT_EQ(j["tails_truncated"], 2);
  EXPECT_EQ(j["tail_bytes_truncated"], 3 * rec);
  // Everything on disk is accounted for by the index, and every block still verifies.
  InspectOptions v;
  v.verify = true;
  InspectReport i2 = must_inspect(path, v);
  EXPECT_EQ(i2.data_bytes, data_dir_bytes(path));
  EXPECT_EQ(i2.data_bytes, i0.data_bytes);
  EXPECT_EQ(i2.verified, 5u);
  EXPECT_TRUE(i2.corrupt.empty());
  auto s = open_store(path, false);
  for (const auto& h : chain_a.hashes) {
    std::string out;
    ASSERT_TRUE(load_block(s.get(), ns_a, desc_a, h, &out).ok());
    EXPECT_EQ(out, payload_for(desc_a, h));
  }
  // A second run finds nothing to cut.
  s.reset();
  GcReport g2 = must_gc(path, o);
  EXPECT_EQ(g2.tails_truncated, 0u);
  EXPECT_EQ(g2.bytes_reclaimed, 0u);
}

TEST_F(AdminStore, GcTrimsJournalByCountAndStaleReadersRescan) {
  auto journal_seqs = [&] {
    std::vector<uint64_t> seqs;
    std::unique_ptr<ReaderIndex> r;
    EXPECT_TRUE(ReaderIndex::Open(path, "", "test", &r).ok());
    if (!r) return seqs;
    EXPECT_TRUE(r->index()
                    .for_each_journal(0, [&](uint64_t seq, const fmt::JournalEntry&) {
                      seqs.push_back(seq);
                      return true;
                    })
                    .ok());
    return seqs;
  };
  // SetUp added 5 blocks: journal sequences 1..5.
  ASSERT_EQ(journal_seqs(), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  // The default keeps a million: nothing to trim.
  GcOptions o;
  o.grace_ms = 0;
  o.update_fptable = false;  // the table stays where the writers saved it (FpTableFile tests gc's update)
  EXPECT_EQ(must_gc(path, o).journal_trimmed, 0u);
  // A reader whose view stops at sequence 5.
  auto reader = open_store(path, false);
  EXPECT_EQ(present_count(reader.get(), ns_a, chain_a.hashes), 3u);
  // 4 more blocks (sequences 6..9); then keep 2: entries < 9 - 2 = 7 go (1..6).
  Chain c;
  {
    auto w = open_store(path, true);
    c = dump_chain(w.get(), ns_b, desc_b, 700, 4, false);
  }
  o.journal_keep = 2;
  o.dry_run = true;
  GcReport d = must_gc(path, o);
  EXPECT_EQ(d.journal_trimmed, 6u);
  EXPECT_EQ(journal_seqs().size(), 9u);  // dry run changes nothing
  o.dry_run = false;
  GcReport g = must_gc(path, o);
  EXPECT_EQ(g.journal_trimmed, 6u);
  EXPECT_EQ(json::parse(g.to_json())["journal_trimmed"], 6);
  EXPECT_NE(g.to_text().find("6 journal entries trimmed"), std::string::npos) << g.to_text();
  EXPECT_EQ(journal_seqs(), (std::vector<uint64_t>{7, 8, 9}));
  // The stale reader finds the gap (it applied up to 5, the journal starts at 7) and rescans.
  ASSERT_TRUE(reader->refresh().ok());
  EXPECT_EQ(present_count(reader.get(), ns_b, c.hashes), 4u);
  EXPECT_EQ(present_count(reader.get(), ns_a, chain_a.hashes), 3u);
  // A second run has nothing older than keep.
  EXPECT_EQ(must_gc(path, o).journal_trimmed, 0u);
  // Removals journal too: evicting namespace b adds 6 entries (10..15); keep 2 leaves 13..15.
  o.ns = to_hex(ns_b);
  o.max_bytes = 0;
  GcReport g2 = must_gc(path, o);
  EXPECT_EQ(g2.evicted_blocks, 6u);
  // Keep 2 would cut below 13, but the persisted fingerprint table (saved by the writer at 9)
  // has not seen 10..15: they stay for it to replay (formats/store/fptable.md §3).
  EXPECT_EQ(g2.journal_trimmed, 3u);  // 7..9
  EXPECT_EQ(journal_seqs(), (std::vector<uint64_t>{10, 11, 12, 13, 14, 15}));
  { auto w = open_store(path, true); }  // replays 10..15 and saves the table at 15 on close
  o.ns.clear();
  o.max_bytes.reset();
  EXPECT_EQ(must_gc(path, o).journal_trimmed, 3u);  // 10..12 (< 15 - 2 = 13)
  EXPECT_EQ(journal_seqs(), (std::vector<uint64_t>{13, 14, 15}));
  ASSERT_TRUE(reader->refresh().ok());
  EXPECT_EQ(present_count(reader.get(), ns_b, c.hashes), 0u);
  EXPECT_EQ(present_count(reader.get(), ns_a, chain_a.hashes), 3u);
}

// The document registry lists only complete documents: gc unregisters a document when any of its
// blocks goes (corrupt, evicted, or already missing), dry runs only report it, and rebuild-index
// does not bring the entry back from its DOCUMENT record.
TEST_F(AdminStore, GcUnregistersDocumentsThatLoseBlocks) {
  // A second, intact document in ns_b.
  {
    auto s = open_store(path, true);
    ASSERT_TRUE(s->put_document(ns_b, document_of("doc-b", chain_b)).ok());
  }
  // Spoil the middle block of doc-a (one payload byte): a verify gc removes it and its child.
  ASSERT_TRUE(spoil_payload_byte(path, ns_a, chain_a.hashes[1]));
  GcOptions o;
  o.grace_ms = 0;
  o.verify = true;
  o.dry_run = true;
  GcReport dry = must_gc(path, o);
  EXPECT_EQ(dry.documents_removed, 1u);
  ASSERT_EQ(dry.documents_removed_ids.size(), 1u);
  EXPECT_EQ(dry.documents_removed_ids[0], to_hex(ns_a) + ":doc-a");
  {
    auto s = open_store(path, false);
    EXPECT_EQ(s->documents(ns_a).size(), 1u) << "a dry run changed the registry";
  }
  o.dry_run = false;
  GcReport g = must_gc(path, o);
  EXPECT_EQ(g.corrupt_removed, 1u);
  EXPECT_EQ(g.documents_removed, 1u);
  {
    auto s = open_store(path, false);
    EXPECT_TRUE(s->documents(ns_a).empty());
    EXPECT_EQ(s->documents(ns_b).size(), 1u) << "an intact document was unregistered";
    DocumentEntry e;
    EXPECT_EQ(s->get_document(ns_a, "doc-a", &e).code(), Code::kNotFound);
  }
  // Rebuilding the index from the data files keeps it out (its DOCUMENT record is still there).
  BuildReport br;
  ASSERT_NO_FATAL_FAILURE(rebuild_index(path, &br));
  EXPECT_EQ(br.documents, 1u);
  EXPECT_EQ(br.incomplete_documents, 1u);
  {
    auto s = open_store(path, false);
    EXPECT_TRUE(s->documents(ns_a).empty());
    EXPECT_EQ(s->documents(ns_b).size(), 1u);
  }
  // Eviction by size takes chain tails first: doc-b loses its last block and is unregistered.
  GcOptions ev;
  ev.grace_ms = 0;
  ev.ns = to_hex(ns_b);
  ev.max_bytes = desc_b.payload_bytes();  // of its 2 blocks, the tail goes
  GcReport ge = must_gc(path, ev);
  EXPECT_EQ(ge.evicted_blocks, 1u);
  EXPECT_EQ(ge.documents_removed, 1u);
  auto s = open_store(path, false);
  EXPECT_TRUE(s->documents(ns_b).empty());
}
