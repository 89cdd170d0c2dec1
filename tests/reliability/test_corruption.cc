// Corruption (docs/reliability.md §2): a flipped payload byte, a flipped record-header byte and a
// truncated data file make exactly those blocks misses with an error (destination untouched);
// the other blocks load; inspect --verify names exactly them; gc --verify removes them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>

#include "rel_check.h"
#include "rel_common.h"
#include "ucm/admin.h"
#include "ucm/store.h"

namespace {

constexpr uint64_t kRecord = 4096 + 8192;  // record size of one block (header page + payload)

std::string data_file(const std::string& store, uint32_t id) {
  char name[32];
  std::snprintf(name, sizeof name, "%08u.ucmd", id);
  return store + "/data/" + name;
}

void flip_byte(const std::string& path, uint64_t off) {
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  uint8_t b = 0;
  ASSERT_EQ(pread(fd, &b, 1, static_cast<off_t>(off)), 1);
  b ^= 0x01;
  ASSERT_EQ(pwrite(fd, &b, 1, static_cast<off_t>(off)), 1);
  fsync(fd);
  close(fd);
}

void dump_range(const std::string& path, uint64_t first, uint64_t n) {
  std::unique_ptr<ucm::Store> st;
  ucm::Status s = rel::open_rw(path, &st);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ucm::NamespaceId ns;
  s = st->register_namespace(rel::test_desc("keep"), &ns);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(ns, rel::test_desc("keep").id()) << "register_namespace id != NamespaceDesc::id()";
  s = rel::dump_batch(st.get(), ns, first, n);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

TEST(ReliabilityCorruption, FlippedBytesAndTruncatedFileAreMissesAndGcRemovesThem) {
  const std::string root = rel::make_temp_dir("ucm-corrupt");
  const std::string S = root + "/store";
  // Two writer sessions -> two data files (each session starts a new file, store_v1.md §3.4).
  ASSERT_NO_FATAL_FAILURE(dump_range(S, 0, 20));
  ASSERT_NO_FATAL_FAILURE(dump_range(S, 20, 10));
  const ucm::NamespaceId ns = rel::test_desc("keep").id();
  constexpr uint64_t N = 30;
  std::vector<ucm::BlockHash> hashes(N);
  std::vector<ucm::BlockInfo> info(N);
  {
    ucm::OpenOptions o;
    std::unique_ptr<ucm::Store> st;
    ASSERT_TRUE(ucm::Store::Open(S, o, &st).ok());
    for (uint64_t i = 0; i < N; ++i) {
      hashes[i] = rel::block_hash(ns, i);
      ucm::Status s = st->get_block(ns, hashes[i], &info[i]);
      ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
      ASSERT_EQ(info[i].kv_length, rel::kPayload);
    }
  }
  ASSERT_NE(info[0].kv_file, info[20].kv_file) << "second writer session did not start a new data file";

  std::set<uint64_t> bad;
  // 1. payload byte of block 3.
  flip_byte(data_file(S, info[3].kv_file), info[3].kv_offset + 4096 + 1000);
  bad.insert(3);
  // 2. record-header byte of block 7 (inside the key field: header checksum no longer matches).
  flip_byte(data_file(S, info[7].kv_file), info[7].kv_offset + 40);
  bad.insert(7);
  // 3. truncate the second file in the middle of the payload of its 5th record: that record and
  //    every later one in the file no longer lies wholly inside the file.
  std::vector<uint64_t> offs;
  for (uint64_t i = 20; i < N; ++i) offs.push_back(info[i].kv_offset);
  std::sort(offs.begin(), offs.end());
  const uint64_t cut = offs[4] + 4096 + 2000;
  ASSERT_EQ(truncate(data_file(S, info[20].kv_file).c_str(), static_cast<off_t>(cut)), 0);
  for (uint64_t i = 20; i < N; ++i)
    if (info[i].kv_offset + kRecord > cut) bad.insert(i);
  ASSERT_EQ(bad.size(), 2u + 6u);

  // Loads: the bad blocks fail (Corruption or NotFound), destination untouched; others are exact.
  {
    ucm::OpenOptions o;
    o.refresh_interval_ms = 0;
    std::unique_ptr<ucm::Store> st;
    ASSERT_TRUE(ucm::Store::Open(S, o, &st).ok());
    const std::vector<uint8_t> sentinel(rel::kPayload, 0xC3);
    std::vector<std::vector<uint8_t>> bufs(N, sentinel);
    ucm::LoadDest d;
    for (auto& b : bufs) d.ptrs.push_back(b.data());
    auto task = st->load(ns, hashes.data(), N, d);
    ucm::Status s = task->wait();
    EXPECT_FALSE(s.ok()) << "a load including corrupt blocks reported OK";
    const auto& bs = task->block_status();
    ASSERT_EQ(bs.size(), N);
    for (uint64_t i = 0; i < N; ++i) {
      if (bad.count(i)) {
        EXPECT_TRUE(bs[i].code() == ucm::Code::kCorruption || bs[i].code() == ucm::Code::kNotFound)
            << "block " << i << ": expected Corruption/NotFound, got " << bs[i].ToString();
        EXPECT_EQ(bufs[i], sentinel) << "block " << i << ": corrupt block wrote the destination";
      } else {
        EXPECT_TRUE(bs[i].ok()) << "block " << i << ": " << bs[i].ToString();
        EXPECT_TRUE(rel::check_payload(hashes[i], bufs[i].data())) << "block " << i << " wrong bytes";
      }
    }
    // A KV-head range of a good block is the right slice.
    std::vector<uint8_t> part(rel::kPayload / 2, 0);
    ucm::LoadDest pd;
    pd.heads = {1, 2};
    pd.ptrs = {part.data()};
    ASSERT_TRUE(st->load(ns, &hashes[0], 1, pd)->wait().ok());
    EXPECT_EQ(part, rel::payload_heads(hashes[0], 1, 2));
  }

  // inspect --verify names exactly the bad blocks.
  {
    ucm::admin::InspectOptions io;
    io.verify = true;
    ucm::admin::InspectReport rep;
    ucm::Status s = ucm::admin::inspect(S, io, &rep);
    EXPECT_EQ(s.code(), ucm::Code::kCorruption) << s.ToString();
    EXPECT_EQ(ucm::admin::exit_code(s), ucm::admin::kExitCorruption);
    std::set<std::string> want, got;
    for (uint64_t i : bad) want.insert(ucm::to_hex(hashes[i]));
    for (const auto& c : rep.corrupt) {
      got.insert(c.block_hex);
      EXPECT_FALSE(c.reason.empty()) << c.block_hex;
      EXPECT_EQ(c.ns_hex, ucm::to_hex(ns));
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(rep.corrupt.size(), bad.size()) << "a corrupt block was listed twice";
    EXPECT_EQ(rep.verified, N - bad.size());
    for (const auto& c : rep.corrupt) std::printf("[ reliability ] corrupt %s: %s\n", c.block_hex.c_str(), c.reason.c_str());
  }

  // gc --verify removes them; afterwards verify is clean and the good blocks are intact.
  {
    ucm::admin::GcOptions go;
    go.verify = true;
    go.grace_ms = 0;
    ucm::admin::GcReport gr;
    ucm::Status s = ucm::admin::gc(S, go, &gr);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(gr.corrupt_removed, bad.size());
    EXPECT_EQ(gr.blocks_after, N - bad.size());
    rel::check_verify(S, "after gc --verify");
    std::set<uint64_t> good;
    for (uint64_t i = 0; i < N; ++i)
      if (!bad.count(i)) good.insert(i);
    rel::StoreCheck sc;
    rel::check_blocks(S, N, good, "after gc --verify", &sc);
    EXPECT_EQ(sc.present_keep, N - bad.size()) << "a corrupt block is still listed by lookup";
  }
  if (!HasFailure()) rel::rm_rf(root);
}

TEST(ReliabilityCorruption, BadSuperblockChecksumIsRefused) {
  const std::string root = rel::make_temp_dir("ucm-corrupt-sb");
  const std::string S = root + "/store";
  ASSERT_NO_FATAL_FAILURE(dump_range(S, 0, 2));
  flip_byte(S + "/UCMSTORE", 30);  // inside created_by
  const auto before = rel::snapshot(S);
  std::unique_ptr<ucm::Store> st;
  ucm::OpenOptions o;
  ucm::Status s = ucm::Store::Open(S, o, &st);
  EXPECT_EQ(s.code(), ucm::Code::kCorruption) << s.ToString();
  o.mode = ucm::OpenOptions::Mode::kReadWrite;
  s = ucm::Store::Open(S, o, &st);
  EXPECT_EQ(s.code(), ucm::Code::kCorruption) << s.ToString();
  ucm::admin::InspectReport rep;
  s = ucm::admin::inspect(S, {}, &rep);
  EXPECT_EQ(s.code(), ucm::Code::kCorruption) << s.ToString();
  EXPECT_EQ(rel::snapshot_diff(before, rel::snapshot(S)), "");
  if (!HasFailure()) rel::rm_rf(root);
}

}  // namespace
