// Disk full (docs/reliability.md §5): on a small tmpfs, dump until the disk is full. The failing
// dump reports NoSpace; the store still opens, verifies clean, and every block acknowledged
// before keeps its exact bytes. Needs mount privileges (root); skipped otherwise.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "rel_check.h"
#include "rel_common.h"
#include "ucm/store.h"

namespace {

TEST(ReliabilityDiskFull, DumpUntilEnospcThenStoreStillVerifies) {
  const std::string mnt = rel::make_temp_dir("ucm-diskfull");
  ASSERT_FALSE(mnt.empty());
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=16m") != 0) {
    const int e = errno;
    rel::rm_rf(mnt);
    GTEST_SKIP() << "cannot mount a 16 MiB tmpfs at " << mnt << " (" << std::strerror(e)
                 << "): needs root / CAP_SYS_ADMIN";
  }
  const std::string S = mnt + "/store";
  std::set<uint64_t> acked;
  ucm::Status failed;
  std::vector<ucm::Status> failed_blocks;
  uint64_t batches = 0;
  {
    ucm::OpenOptions o;
    o.mode = ucm::OpenOptions::Mode::kReadWrite;
    o.create_if_missing = true;
    o.io_threads = 2;
    std::unique_ptr<ucm::Store> st;
    ucm::Status s = ucm::Store::Open(S, o, &st);
    ASSERT_TRUE(s.ok()) << "creating a store on a 16 MiB tmpfs: " << s.ToString();
    ucm::NamespaceId ns;
    ASSERT_TRUE(st->register_namespace(rel::test_desc("keep"), &ns).ok());
    constexpr uint64_t kBatch = 16;
    for (uint64_t first = 0; first < 100000; first += kBatch, ++batches) {
      std::vector<std::vector<uint8_t>> pay(kBatch);
      std::vector<ucm::DumpItem> items(kBatch);
      for (uint64_t k = 0; k < kBatch; ++k) {
        items[k].hash = rel::block_hash(ns, first + k);
        items[k].parent = ucm::root_hash(ns);
        items[k].token_count = rel::kBlock;
        pay[k] = rel::payload(items[k].hash);
        items[k].kv = pay[k].data();
      }
      auto task = st->dump(ns, items.data(), kBatch);
      s = task->wait();
      if (!s.ok()) {
        failed = s;
        failed_blocks = task->block_status();
        break;
      }
      for (uint64_t k = 0; k < kBatch; ++k) acked.insert(first + k);
    }
    ASSERT_FALSE(failed.ok()) << "never ran out of space";
    // After the failure the handle must still refuse cleanly (not crash) and keep failing with
    // NoSpace, not corrupt anything.
    std::vector<uint8_t> p = rel::payload(rel::block_hash(ns, 999999));
    ucm::DumpItem it;
    it.hash = rel::block_hash(ns, 999999);
    it.parent = ucm::root_hash(ns);
    it.token_count = rel::kBlock;
    it.kv = p.data();
    ucm::Status again = st->dump(ns, &it, 1)->wait();
    std::printf("[ reliability ] disk full after %llu batches (%zu blocks acknowledged): %s; next dump: %s\n",
                (unsigned long long)batches, acked.size(), failed.ToString().c_str(), again.ToString().c_str());
    EXPECT_FALSE(again.ok());
  }
  EXPECT_EQ(failed.code(), ucm::Code::kNoSpace) << "the dump that hit ENOSPC reported " << failed.ToString();
  EXPECT_EQ(ucm::admin::exit_code(failed), ucm::admin::kExitError);
  bool any_nospace = false;
  for (const auto& b : failed_blocks) any_nospace |= b.code() == ucm::Code::kNoSpace;
  EXPECT_TRUE(any_nospace) << "no per-block NoSpace status in the failing dump";
  EXPECT_GT(acked.size(), 100u);

  rel::check_verify(S, "after ENOSPC");
  rel::StoreCheck sc;
  rel::check_blocks(S, acked.size() + 64, acked, "after ENOSPC", &sc);
  EXPECT_GE(sc.present_keep, acked.size());

  umount2(mnt.c_str(), MNT_DETACH);
  rel::rm_rf(mnt);
}

}  // namespace
