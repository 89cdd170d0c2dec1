// Checked-in stores built byte by byte from formats/store/store_v1.md by
// scripts/make_store_fixtures.py (Python, independent of ucm's encoders), decoded by today's
// reader, and the version steps 1 -> 2 (named NS_ATTACHMENT records) and 2 -> 4 (token ids in
// BLOCK_KV records), spec §10:
//   * tests/fixtures/store_v4: the current format; every field a reader sees must match what the
//     script wrote (namespace id, chain hashes, payload bytes, representations, attachment,
//     document, the token ids of blocks 0 and 1; block 2 "tokens unknown");
//   * tests/fixtures/store_v2: the format of ucm 0.2.0 - 0.6.x: read and written as it is (no ids),
//     stepped to 4 by `ucm migrate --upgrade`;
//   * tests/fixtures/store_v1_unnamed: format 1 as ucm 0.1.0 wrote it before named attachments;
//     readable as it is, refused by writers, converted by `ucm migrate --upgrade`.
// The fixtures hold no index (data files are the source of truth, spec §3): each test rebuilds it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ucm/format/format.h"
#include "tools_test_util.h"
#include "ucm/admin.h"

using namespace ucm;
using namespace ucm::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(char(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

BlockHash hash_of(const std::string& hex) {
  BlockHash h{};
  EXPECT_TRUE(parse_hex16(hex, &h).ok()) << hex;
  return h;
}

class StoreFixture : public ::testing::Test {
 protected:
  // Copies fixture `name` into a temp dir, rebuilds its index, reads expected.json.
  void load(const std::string& name) {
    const fs::path from = fs::path(UCM_SOURCE_DIR) / "tests/fixtures" / name;
    ASSERT_TRUE(fs::exists(from / "UCMSTORE")) << from;
    path = dir.sub(name);
    fs::copy(from, path, fs::copy_options::recursive);
    fs::remove(fs::path(path) / "expected.json");
    std::ifstream f(from / "expected.json");
    want = json::parse(f);
    admin::BuildReport br;
    ASSERT_NO_FATAL_FAILURE(rebuild_index(path, &br));
    EXPECT_EQ(br.blocks_indexed, 3u);
    EXPECT_EQ(br.corrupt_records, 0u);
    EXPECT_EQ(br.namespaces, 1u);
    EXPECT_EQ(br.documents, 1u);
    ns = hash_of(want["namespace_id"]);
    for (const auto& h : want["block_hashes"]) hashes.push_back(hash_of(h));
  }

  // Everything a reader must find, as the script wrote it.
  void check_contents() {
    auto s = open_store(path, false);
    ASSERT_TRUE(s);
    NamespaceDesc d;
    ASSERT_TRUE(s->get_namespace(ns, &d).ok()) << "the namespace id computed from the spec is not found";
    EXPECT_EQ(d.display_name(), want["namespace_name"]);
    EXPECT_EQ(d.id(), ns) << "the descriptor's fingerprint differs from the spec's MD5 of its canonical JSON";
    // The chain: ucm's hash function over the tokens gives the script's hashes.
    std::vector<uint32_t> toks = want["tokens"].get<std::vector<uint32_t>>();
    EXPECT_EQ(root_hash(ns), hash_of(want["root"]));
    std::vector<BlockHash> computed;
    hash_blocks(root_hash(ns), toks.data(), toks.size(), d.block_size, &computed);
    EXPECT_EQ(computed, hashes);
    std::vector<uint8_t> present(3);
    size_t prefix = 0;
    ASSERT_TRUE(s->lookup(ns, hashes.data(), 3, present.data(), &prefix).ok());
    EXPECT_EQ(prefix, 3u);
    for (size_t b = 0; b < 3; ++b) {
      std::string out;
      ASSERT_TRUE(load_block(s.get(), ns, d, hashes[b], &out).ok()) << b;
      EXPECT_EQ(out, unhex(want["kv_payload_hex"][b])) << "block " << b;
      BlockInfo bi;
      ASSERT_TRUE(s->get_block(ns, hashes[b], &bi).ok());
      EXPECT_EQ(bi.parent, b == 0 ? root_hash(ns) : hashes[b - 1]);
      EXPECT_EQ(bi.has_repr, b == 0);
    }
    const std::string want_repr = unhex(want["repr_payload_hex"]);
    std::string repr(4096, '\0');
    void* dst[1] = {repr.data()};
    size_t cap[1] = {repr.size()};
    ASSERT_TRUE(s->load_repr(ns, hashes.data(), 1, dst, cap)->wait().ok());
    EXPECT_EQ(repr.substr(0, want_repr.size()), want_repr);
    std::string att;
    ASSERT_TRUE(s->get_attachment(ns, want["attachment"]["name"], &att).ok());
    EXPECT_EQ(att, unhex(want["attachment"]["data_hex"]));
    auto docs = s->documents(ns);
    ASSERT_EQ(docs.size(), 1u);
    EXPECT_EQ(docs[0].id, want["document"]["id"]);
    EXPECT_EQ(docs[0].blocks, 3u);
    EXPECT_EQ(docs[0].first_block, hashes[0]);
    EXPECT_EQ(docs[0].last_block, hashes[2]);
    admin::InspectOptions io;
    io.verify = true;
    const admin::InspectReport ir = must_inspect(path, io);
    EXPECT_GE(ir.blocks, 3u);  // the script's 3, and any a test added
    EXPECT_EQ(ir.verified, ir.blocks);
    EXPECT_TRUE(ir.corrupt.empty());
  }

  // The superblock says format `version`, for readers of `min_reader` and later.
  void expect_format(uint32_t version, uint32_t min_reader, const std::string& why = "") {
    fmt::Superblock sb;
    ASSERT_TRUE(fmt::read_superblock(path, &sb).ok());
    EXPECT_EQ(sb.format_version, version) << why;
    EXPECT_EQ(sb.min_reader_version, min_reader) << why;
  }

  // `ucm migrate --upgrade` of the store: *again is its report when the store was upgraded
  // already (nothing to do), else the upgrade's (which must upgrade).
  void upgrade(admin::MigrateReport* mr, bool again = false) {
    admin::MigrateOptions mo;
    mo.upgrade = true;
    Status st = admin::migrate(path, "", mo, mr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(mr->upgraded, !again);
  }

  TempDir dir;
  std::string path;
  json want;
  NamespaceId ns{};
  std::vector<BlockHash> hashes;
};

}  // namespace

TEST_F(StoreFixture, CurrentFormatBuiltFromTheSpecDecodes) {
  load("store_v4");
  expect_format(4, 4);
  check_contents();
  // The token ids the script wrote (§3.2), block by block and as chains; the rebuilt index flags
  // the blocks that hold them (§5.3 bit 1).
  auto s = open_store(path, false);
  ASSERT_TRUE(s);
  const std::vector<uint32_t> toks = want["tokens"].get<std::vector<uint32_t>>();
  const size_t T = 4;
  for (size_t b = 0; b < 3; ++b) {
    std::vector<uint32_t> t;
    BlockHash parent{};
    ASSERT_TRUE(s->block_tokens(ns, hashes[b], &t, &parent).ok()) << b;
    EXPECT_EQ(parent, b == 0 ? root_hash(ns) : hashes[b - 1]);
    BlockInfo bi;
    ASSERT_TRUE(s->get_block(ns, hashes[b], &bi).ok());
    if (b < 2) {
      EXPECT_EQ(t, std::vector<uint32_t>(toks.begin() + b * T, toks.begin() + (b + 1) * T)) << b;
      EXPECT_TRUE(bi.has_tokens) << b;
    } else {
      EXPECT_TRUE(t.empty()) << "block 2 was written without ids";
      EXPECT_FALSE(bi.has_tokens);
    }
  }
  std::vector<uint32_t> chain;
  size_t blocks = 0;
  ASSERT_TRUE(s->chain_tokens(ns, hashes[1], &chain, &blocks).ok());
  EXPECT_EQ(blocks, 2u);
  EXPECT_EQ(chain, std::vector<uint32_t>(toks.begin(), toks.begin() + 2 * T));
  Status st = s->chain_tokens(ns, hashes[2], &chain);
  EXPECT_EQ(st.code(), Code::kNotSupported) << st.ToString();
  EXPECT_NE(st.message().find(to_hex(hashes[2])), std::string::npos) << st.message();
  BlockHash absent{};
  absent[0] = 1;
  EXPECT_EQ(s->chain_tokens(ns, absent, &chain).code(), Code::kNotFound);
  s.reset();
  EXPECT_TRUE(open_store(path, true)) << "the current format is writable";
}

TEST_F(StoreFixture, Version2IsWrittenWithoutIdsThenUpgradedTo4) {
  load("store_v2");
  expect_format(2, 2);
  check_contents();
  NamespaceDesc d;
  // Dumps one block of ids first_token.. after `parent`, with its ids; *h gets its hash.
  auto dump_after = [&](const BlockHash& parent, uint32_t first_token, char fill, BlockHash* h) {
    auto w = open_store(path, true);
    ASSERT_TRUE(w);
    ASSERT_TRUE(w->get_namespace(ns, &d).ok());
    std::vector<uint32_t> ids(d.block_size);
    for (uint32_t i = 0; i < d.block_size; ++i) ids[i] = first_token + i;
    std::vector<BlockHash> hs;
    hash_blocks(parent, ids.data(), ids.size(), d.block_size, &hs);
    *h = hs[0];
    std::string kv(d.payload_bytes(), fill);
    DumpItem it;
    it.hash = hs[0];
    it.parent = parent;
    it.token_count = d.block_size;
    it.kv = kv.data();
    it.tokens = ids.data();
    Status st = w->dump(ns, &it, 1)->wait();
    ASSERT_TRUE(st.ok()) << st.ToString();
  };
  // A writer on a version-2 store: records and data file stay version 2 (no ids), so that
  // ucm 0.2.0 - 0.6.x keep reading it.
  BlockHash h3{};
  dump_after(hashes[2], 500, '\x5a', &h3);
  {
    auto r = open_store(path, false);
    std::vector<uint32_t> t;
    ASSERT_TRUE(r->block_tokens(ns, h3, &t, nullptr).ok());
    EXPECT_TRUE(t.empty()) << "a version-2 store records no ids";
    for (const auto& e : fs::directory_iterator(fs::path(path) / "data")) {
      std::ifstream f(e.path(), std::ios::binary);
      char hdr[12];
      f.read(hdr, 12);
      uint32_t v;
      std::memcpy(&v, hdr + 8, 4);
      EXPECT_EQ(v, 2u) << e.path() << ": a data file of a version-2 store must say 2 (§3.1)";
    }
  }
  admin::MigrateReport mr;
  ASSERT_NO_FATAL_FAILURE(upgrade(&mr));
  expect_format(4, 4, "readers older than format 4 must refuse the upgraded store");
  check_contents();
  BlockHash h4{};
  dump_after(h3, 600, '\x33', &h4);
  {
    auto w = open_store(path, false);
    std::vector<uint32_t> ids(d.block_size);
    for (uint32_t i = 0; i < d.block_size; ++i) ids[i] = 600 + i;
    std::vector<uint32_t> t;
    ASSERT_TRUE(w->block_tokens(ns, h4, &t, nullptr).ok());
    EXPECT_EQ(t, ids) << "after the upgrade, blocks record their ids";
    // The chain through blocks written before the step is "tokens unknown".
    EXPECT_EQ(w->chain_tokens(ns, h4, &t).code(), Code::kNotSupported);
  }
  admin::MigrateReport again;
  upgrade(&again, /*again=*/true);
}

TEST_F(StoreFixture, Version1IsReadableRefusedByWritersAndUpgraded) {
  load("store_v1_unnamed");
  // Readable as it is: the unnamed attachment record's bytes are all data.
  check_contents();
  // A writer would add named records that a version-1 reader misreads: it refuses, naming the fix.
  {
    OpenOptions o;
    o.mode = OpenOptions::Mode::kReadWrite;
    std::unique_ptr<Store> s;
    Status st = Store::Open(path, o, &s);
    EXPECT_EQ(st.code(), Code::kNotSupported) << st.ToString();
    EXPECT_NE(st.message().find("ucm migrate " + path + " --upgrade"), std::string::npos) << st.message();
  }
  admin::MigrateReport mr;
  ASSERT_NO_FATAL_FAILURE(upgrade(&mr));
  EXPECT_EQ(mr.attachments, 1u);
  expect_format(4, 4, "1 -> 2 -> 4 in one run; a version-1 reader must refuse the upgraded store");
  check_contents();
  EXPECT_TRUE(open_store(path, true)) << "writable after the upgrade";
  // The attachment is now a named record: a rebuild from the data files finds it by its name.
  admin::BuildReport br;
  ASSERT_NO_FATAL_FAILURE(rebuild_index(path, &br));
  check_contents();
  // Upgrading again does nothing.
  admin::MigrateReport again;
  ASSERT_NO_FATAL_FAILURE(upgrade(&again, /*again=*/true));
  EXPECT_NE(again.message.find("nothing to upgrade"), std::string::npos) << again.message;
}

TEST(StoreFormatVersion, NewStoresAreVersion4WithMinReader4) {
  TempDir d;
  auto s = open_store(d.sub("s"), true, true);
  ASSERT_TRUE(s);
  fmt::Superblock sb;
  ASSERT_TRUE(fmt::read_superblock(d.sub("s"), &sb).ok());
  EXPECT_EQ(sb.format_version, fmt::kCreateFormatVersion);
  EXPECT_EQ(sb.format_version, 4u);
  EXPECT_EQ(sb.min_reader_version, 4u);
}
