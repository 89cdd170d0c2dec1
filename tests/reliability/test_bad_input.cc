// Bad input (docs/reliability.md §3): a missing path, a directory that is not a store, a store of
// a newer format version, malformed block-hash strings and out-of-range KV-head ranges each get a
// clear error (code checked, message names the problem) and change nothing on disk (the tree is
// byte-identical before and after).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "rel_check.h"
#include "rel_common.h"
#include "ucm/admin.h"
#include "ucm/store.h"

namespace {

using ucm::Code;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
bool has(const ucm::Status& s, const std::string& needle) {
  return lower(s.message()).find(lower(needle)) != std::string::npos;
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override { root_ = rel::make_temp_dir("ucm-badinput"); }
  void TearDown() override {
    if (!HasFailure()) rel::rm_rf(root_);
    else std::printf("[ reliability ] kept %s\n", root_.c_str());
  }
  // A store with `n` keep blocks.
  std::string make_store(const std::string& name, uint64_t n) {
    const std::string p = root_ + "/" + name;
    std::unique_ptr<ucm::Store> st;
    ucm::Status s = rel::open_rw(p, &st);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return p;
    ucm::NamespaceId ns;
    EXPECT_TRUE(st->register_namespace(rel::test_desc("keep"), &ns).ok());
    s = rel::dump_batch(st.get(), ns, 0, n);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return p;
  }
  // Runs every entry point that must refuse `path` with `code`; checks messages with `check`.
  void refuse_everywhere(const std::string& path, Code code,
                         const std::function<void(const std::string& what, const ucm::Status&)>& check) {
    std::unique_ptr<ucm::Store> st;
    ucm::OpenOptions ro;
    ucm::Status s = ucm::Store::Open(path, ro, &st);
    EXPECT_EQ(s.code(), code) << "Open read-only: " << s.ToString();
    check("Open read-only", s);
    EXPECT_EQ(st, nullptr);
    ucm::OpenOptions rw;
    rw.mode = ucm::OpenOptions::Mode::kReadWrite;
    s = ucm::Store::Open(path, rw, &st);
    EXPECT_EQ(s.code(), code) << "Open read-write: " << s.ToString();
    check("Open read-write", s);
    ucm::admin::InspectReport ir;
    s = ucm::admin::inspect(path, {}, &ir);
    EXPECT_EQ(s.code(), code) << "inspect: " << s.ToString();
    check("inspect", s);
    ucm::admin::InspectOptions iv;
    iv.verify = true;
    s = ucm::admin::inspect(path, iv, &ir);
    EXPECT_EQ(s.code(), code) << "inspect --verify: " << s.ToString();
    ucm::admin::GcReport gr;
    ucm::admin::GcOptions go;
    go.grace_ms = 0;
    s = ucm::admin::gc(path, go, &gr);
    EXPECT_EQ(s.code(), code) << "gc: " << s.ToString();
    check("gc", s);
    ucm::admin::MigrateReport mr;
    const std::string dst = root_ + "/migrate-dst";
    s = ucm::admin::migrate(path, dst, {}, &mr);
    EXPECT_EQ(s.code(), code) << "migrate src: " << s.ToString();
    check("migrate", s);
    struct stat stt;
    EXPECT_NE(stat(dst.c_str(), &stt), 0) << "migrate from a refused source created its destination " << dst;
    rel::rm_rf(dst);
  }
  std::string root_;
};

TEST_F(BadInput, MissingPath) {
  const std::string p = root_ + "/does/not/exist";
  const auto before = rel::snapshot(root_);
  refuse_everywhere(p, Code::kInvalidArgument, [&](const std::string& what, const ucm::Status& s) {
    EXPECT_TRUE(has(s, p)) << what << ": message does not name the path: " << s.ToString();
  });
  EXPECT_EQ(rel::snapshot_diff(before, rel::snapshot(root_)), "");
}

TEST_F(BadInput, DirectoryThatIsNotAStore) {
  const std::string p = root_ + "/notastore";
  ASSERT_EQ(mkdir(p.c_str(), 0755), 0);
  std::ofstream(p + "/notes.txt") << "my files\n";
  const auto before = rel::snapshot(root_);
  refuse_everywhere(p, Code::kInvalidArgument, [&](const std::string& what, const ucm::Status& s) {
    EXPECT_TRUE(has(s, p)) << what << ": message does not name the path: " << s.ToString();
    EXPECT_TRUE(has(s, "not a ucm store")) << what << ": message does not say 'not a ucm store': " << s.ToString();
  });
  // Creating into a non-empty non-store directory is refused too.
  std::unique_ptr<ucm::Store> st;
  ucm::OpenOptions rw;
  rw.mode = ucm::OpenOptions::Mode::kReadWrite;
  rw.create_if_missing = true;
  ucm::Status s = ucm::Store::Open(p, rw, &st);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  ucm::admin::BuildReport br;
  s = ucm::admin::build(p, {}, &br);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << "build: " << s.ToString();
  EXPECT_TRUE(has(s, p)) << s.ToString();
  EXPECT_EQ(rel::snapshot_diff(before, rel::snapshot(root_)), "");
}

TEST_F(BadInput, NewerFormatVersion) {
  const std::string p = make_store("v2", 4);
  // Patch format_version (offset 8) to 6 (3 is a sharded root, store_v1.md §11) and recompute the
  // checksum (offset 56, XXH3 of [0,56)).
  {
    int fd = open((p + "/UCMSTORE").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t sb[64];
    ASSERT_EQ(pread(fd, sb, 64, 0), 64);
    ASSERT_EQ(std::string(reinterpret_cast<char*>(sb), 8), "UCMSTORE");
    ASSERT_EQ(sb[8], 4);
    sb[8] = 6;
    uint64_t c = XXH3_64bits(sb, 56);
    for (int i = 0; i < 8; ++i) sb[56 + i] = static_cast<uint8_t>(c >> (8 * i));
    ASSERT_EQ(pwrite(fd, sb, 64, 0), 64);
    close(fd);
  }
  const auto before = rel::snapshot(root_);
  refuse_everywhere(p, Code::kVersion, [&](const std::string& what, const ucm::Status& s) {
    EXPECT_TRUE(has(s, "version 6")) << what << ": message does not name version 6: " << s.ToString();
    EXPECT_TRUE(has(s, "newer")) << what << ": " << s.ToString();
    EXPECT_TRUE(has(s, "upgrade")) << what << ": message does not say what to do: " << s.ToString();
    EXPECT_EQ(ucm::admin::exit_code(s), ucm::admin::kExitVersion) << what;
  });
  ucm::admin::BuildReport br;
  ucm::Status s = ucm::admin::build(p, {}, &br);
  EXPECT_EQ(s.code(), Code::kVersion) << "build: " << s.ToString();
  ucm::admin::MigrateOptions up;
  up.upgrade = true;
  ucm::admin::MigrateReport mr;
  s = ucm::admin::migrate(p, "", up, &mr);
  EXPECT_EQ(s.code(), Code::kVersion) << "migrate --upgrade: " << s.ToString();
  EXPECT_EQ(rel::snapshot_diff(before, rel::snapshot(root_)), "");
}

TEST_F(BadInput, MalformedBlockHashAndUnknownNamespace) {
  const std::string p = make_store("good", 4);
  const auto before = rel::snapshot(root_);
  for (const std::string bad : {"zz", "0123456789abcdef0123456789abcdeg", "0123456789abcdef0123456789abcde",
                                "0123456789abcdef0123456789abcdef0", ""}) {
    if (bad.empty()) continue;  // empty = "no --block"
    ucm::admin::InspectOptions io;
    io.block_hex = bad;
    ucm::admin::InspectReport rep;
    ucm::Status s = ucm::admin::inspect(p, io, &rep);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << "--block " << bad << ": " << s.ToString();
    EXPECT_TRUE(has(s, bad)) << "--block " << bad << ": message does not show the bad string: " << s.ToString();
    EXPECT_EQ(ucm::admin::exit_code(s), ucm::admin::kExitError);
  }
  // A well-formed hash that is absent: NotFound.
  {
    ucm::admin::InspectOptions io;
    io.block_hex = std::string(32, 'a');
    ucm::admin::InspectReport rep;
    ucm::Status s = ucm::admin::inspect(p, io, &rep);
    EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  }
  // A present block: its record as JSON.
  {
    ucm::admin::InspectOptions io;
    io.block_hex = ucm::to_hex(rel::block_hash(rel::test_desc("keep").id(), 1));
    ucm::admin::InspectReport rep;
    ucm::Status s = ucm::admin::inspect(p, io, &rep);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_NE(rep.block_json.find(io.block_hex), std::string::npos) << rep.block_json;
  }
  {
    ucm::admin::InspectOptions io;
    io.ns = "no-such-namespace";
    ucm::admin::InspectReport rep;
    ucm::Status s = ucm::admin::inspect(p, io, &rep);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
    EXPECT_TRUE(has(s, "no-such-namespace")) << s.ToString();
  }
  // parse_hex16 itself.
  ucm::BlockHash h;
  ucm::Status s = ucm::parse_hex16("zz", &h);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(has(s, "zz")) << s.ToString();
  EXPECT_EQ(rel::snapshot_diff(before, rel::snapshot(root_)), "");
}

TEST_F(BadInput, OutOfRangeHeadRanges) {
  const std::string p = make_store("heads", 2);
  const ucm::NamespaceId ns = rel::test_desc("keep").id();
  const auto before = rel::snapshot(p);
  {
    ucm::OpenOptions o;
    o.refresh_interval_ms = 0;
    std::unique_ptr<ucm::Store> st;
    ASSERT_TRUE(ucm::Store::Open(p, o, &st).ok());
    const ucm::BlockHash h = rel::block_hash(ns, 0);
    const std::vector<uint8_t> sentinel(rel::kPayload, 0x77);
    struct Case {
      uint32_t h0, h1;
    };
    // H = 2: h1 > H, h0 >= h1, h0 == H.
    for (Case c : {Case{0, 3}, Case{1, 1}, Case{2, 1}, Case{2, 2}, Case{5, 9}, Case{3, 0}}) {
      std::vector<uint8_t> buf = sentinel;
      ucm::LoadDest d;
      d.heads = {c.h0, c.h1};
      d.ptrs = {buf.data()};
      auto task = st->load(ns, &h, 1, d);
      ucm::Status s = task->wait(5000);
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << "[" << c.h0 << "," << c.h1 << "): " << s.ToString();
      EXPECT_TRUE(has(s, "head")) << "[" << c.h0 << "," << c.h1 << "): message does not name the head range: "
                                  << s.ToString();
      EXPECT_EQ(buf, sentinel) << "[" << c.h0 << "," << c.h1 << "): destination was written";
    }
    // Wrong number of destination pointers (contiguous: n; paged: n * L * 2).
    {
      std::vector<uint8_t> buf = sentinel;
      ucm::LoadDest d;
      d.kind = ucm::LoadDest::Kind::kPaged;
      d.ptrs = {buf.data()};
      ucm::Status s = st->load(ns, &h, 1, d)->wait(5000);
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << "paged with 1 pointer: " << s.ToString();
      EXPECT_EQ(buf, sentinel);
    }
    // A valid range still works on the same handle.
    std::vector<uint8_t> half(rel::kPayload / 2);
    ucm::LoadDest d;
    d.heads = {0, 1};
    d.ptrs = {half.data()};
    EXPECT_TRUE(st->load(ns, &h, 1, d)->wait(5000).ok());
    EXPECT_EQ(half, rel::payload_heads(h, 0, 1));
  }
  // The read-only handle may leave an access log (store_v1.md §6: recency of loads); nothing else.
  auto after = rel::snapshot(p);
  for (auto* m : {&after}) {
    for (auto it = m->begin(); it != m->end();) {
      if (it->first.rfind("access/", 0) == 0 && !before.count(it->first)) it = m->erase(it);
      else ++it;
    }
  }
  EXPECT_EQ(rel::snapshot_diff(before, after), "");
}

}  // namespace
