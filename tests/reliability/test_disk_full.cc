// Disk full (docs/reliability.md §5): on a small tmpfs, dump until the disk is full. The failing
// dump reports NoSpace; the store still opens, verifies clean, and every block acknowledged
// before keeps its exact bytes. Needs mount privileges (root); skipped otherwise.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#include "rel_check.h"
#include "rel_common.h"
#include "rel_proc.h"
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
  // The filling writer is a child process: if disk-full handling crashes the writer, the test
  // reports that (instead of dying) and still checks what a crash must leave behind.
  rel::Child c;
  ASSERT_TRUE(rel::spawn_child({"fill", S}, &c));
  c.reap();
  std::set<uint64_t> acked;
  std::string full, again;
  int nospace_blocks = 0;
  rel::for_each_report(c.lines(), [&](const std::string& w, std::istream& in, const std::string& l) {
    if (w == "ack") {
      rel::read_ack(in, &acked);
    } else if (w == "full") {
      full = l;
    } else if (w == "block") {
      int code;
      in >> code;
      nospace_blocks += code == static_cast<int>(ucm::Code::kNoSpace);
    } else if (w == "again") {
      again = l;
    }
  });
  std::printf("[ reliability ] disk full after %zu acknowledged blocks: %s; next dump: %s; writer exit status %d%s\n",
              acked.size(), full.c_str(), again.c_str(), c.status,
              WIFSIGNALED(c.status) ? " (killed by a signal)" : "");
  EXPECT_TRUE(c.exited_ok()) << "the writer process died when the disk filled up (status " << c.status
                             << ", signal " << (WIFSIGNALED(c.status) ? WTERMSIG(c.status) : 0)
                             << "); its last output:\n" << c.output.substr(c.output.size() > 400 ? c.output.size() - 400 : 0);
  EXPECT_EQ(full.rfind("full " + std::to_string(static_cast<int>(ucm::Code::kNoSpace)) + " ", 0), 0u)
      << "the dump that hit ENOSPC did not report NoSpace: '" << full << "'";
  EXPECT_GT(nospace_blocks, 0) << "no per-block NoSpace status in the failing dump";
  EXPECT_FALSE(again.empty() || again.rfind("again 0 ", 0) == 0) << "a dump after ENOSPC: '" << again << "'";
  EXPECT_GT(acked.size(), 100u);

  rel::check_verify(S, "after ENOSPC");
  rel::StoreCheck sc;
  rel::check_blocks(S, acked.size() + 64, acked, "after ENOSPC", &sc);
  EXPECT_GE(sc.present_keep, acked.size());

  umount2(mnt.c_str(), MNT_DETACH);
  rel::rm_rf(mnt);
}

}  // namespace
