// Read-only opens need no write access to the store (docs/library.md, "Read-only opens"):
//   * as an unprivileged user (nobody) on a root-owned store of mode 755: Store::Open(READ_ONLY),
//     lookup, load with checksums, the document registry, and `ucm inspect --verify`;
//   * on a read-only bind mount (a private mount namespace; skipped where one cannot be made);
//   * nothing is created in the store, and the private scratch directories are removed on close.
// Each reader runs in a child process (fork, then setuid or unshare). The test process itself never
// opens RocksDB, so the children start from a clean state. Needs root; skipped otherwise.
#include <gtest/gtest.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>

#include "tools_test_util.h"

using namespace ucm;
using namespace ucm::test;
namespace fs = std::filesystem;

namespace {

constexpr int kSkip = 77;

// Runs fn in a child process; returns its exit status (fn's return value), -1 if it crashed.
int in_child(const std::function<int()>& fn) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 1;
    try {
      rc = fn();
    } catch (...) {
      rc = 99;
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Runs `ucm args...` (exec, in the current process: call from a child) and returns its status.
int exec_ucm(const std::vector<std::string>& args) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<std::string> a = {UCM_BIN};
    a.insert(a.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(UCM_BIN, argv.data());
    ::_exit(127);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct Fixture {
  NamespaceDesc desc = tiny_desc();
  NamespaceId ns{};
  Chain chain;
};

// The reader's checks; returns 0 when all hold, else a code naming the first that failed.
int read_everything(const std::string& s, const Fixture& f) {
  OpenOptions o;
  o.refresh_interval_ms = 0;
  o.direct_io = false;
  std::unique_ptr<Store> st;
  Status r = Store::Open(s, o, &st);
  if (!r.ok()) {
    std::fprintf(stderr, "open: %s\n", r.ToString().c_str());
    return 10;
  }
  std::vector<uint8_t> present(f.chain.hashes.size());
  size_t prefix = 0;
  if (!st->lookup(f.ns, f.chain.hashes.data(), f.chain.hashes.size(), present.data(), &prefix).ok() ||
      prefix != f.chain.hashes.size())
    return 11;
  for (const auto& h : f.chain.hashes) {
    std::string out;
    if (!load_block(st.get(), f.ns, f.desc, h, &out).ok()) return 12;
    if (out != payload_for(f.desc, h)) return 13;
  }
  DocumentEntry d;
  if (!st->get_document(f.ns, "doc", &d).ok() || d.blocks != f.chain.hashes.size()) return 14;
  return 0;
}

std::set<std::string> tree(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    out.insert(fs::relative(it->path(), dir).string());
  return out;
}

class ReadOnly : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (to make a store another user cannot write)";
    store_ = dir_.sub("store");
    ::chmod(dir_.path.c_str(), 0755);
    // Made in a child, so that this process never starts RocksDB before forking readers.
    const int rc = in_child([&] {
      auto st = open_store(store_, true, true);
      if (!st || !st->register_namespace(f_.desc, &f_.ns).ok()) return 1;
      f_.chain = dump_chain(st.get(), f_.ns, f_.desc, 1, 3);
      DocumentEntry d;
      d.id = "doc";
      d.first_block = f_.chain.hashes.front();
      d.last_block = f_.chain.hashes.back();
      d.blocks = 3;
      return st->put_document(f_.ns, d).ok() ? 0 : 2;
    });
    ASSERT_EQ(rc, 0);
    // The same namespace id and chain, computed here (both are pure functions of the inputs).
    f_.ns = f_.desc.id();
    for (uint32_t i = 0; i < 3 * f_.desc.block_size; ++i) f_.chain.tokens.push_back(1 + i);
    hash_blocks(root_hash(f_.ns), f_.chain.tokens.data(), f_.chain.tokens.size(), f_.desc.block_size,
                &f_.chain.hashes);
    before_ = tree(store_);
  }

  TempDir dir_;
  std::string store_;
  Fixture f_;
  std::set<std::string> before_;
};

TEST_F(ReadOnly, UnprivilegedUserOnARootOwnedStore) {
  const passwd* pw = ::getpwnam("nobody");
  if (!pw) GTEST_SKIP() << "no user 'nobody'";
  const uid_t uid = pw->pw_uid;
  const gid_t gid = pw->pw_gid;
  const std::string scratch_base = "/tmp/ucm-readers-" + std::to_string(uid);
  int rc = in_child([&] {
    if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) return 3;
    ::unsetenv("XDG_RUNTIME_DIR");
    if (::access((store_ + "/readers").c_str(), W_OK) == 0) return 4;  // the premise: not writable
    int r = read_everything(store_, f_);
    if (r != 0) return r;
    // The admin path too: inspect --verify and --docs read every block and the registry.
    if (exec_ucm({"inspect", store_, "--verify"}) != 0) return 20;
    if (exec_ucm({"inspect", store_, "--docs", "--json"}) != 0) return 21;
    return 0;
  });
  EXPECT_EQ(rc, 0) << "10 open, 11 lookup, 12 load, 13 bytes, 14 registry, 20/21 ucm inspect";
  EXPECT_EQ(tree(store_), before_) << "a read-only open created something in the store";
  // The private directories went to the per-user local base and were removed on close.
  std::error_code ec;
  size_t left = 0;
  for (const auto& e : fs::directory_iterator(scratch_base, ec)) {
    (void)e;
    ++left;
  }
  EXPECT_EQ(left, 0u) << scratch_base << " keeps scratch directories after close";
}

TEST_F(ReadOnly, ReadOnlyBindMount) {
  const std::string mnt = dir_.sub("mnt");
  fs::create_directories(mnt);
  int rc = in_child([&] {
    if (::unshare(CLONE_NEWNS) != 0) return kSkip;
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return kSkip;
    if (::mount(store_.c_str(), mnt.c_str(), nullptr, MS_BIND, nullptr) != 0) return kSkip;
    if (::mount(nullptr, mnt.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) return kSkip;
    // The premise: even root cannot write there.
    if (::mkdir((mnt + "/readers/probe").c_str(), 0755) == 0 || errno != EROFS) return 5;
    int r = read_everything(mnt, f_);
    if (r != 0) return r;
    if (exec_ucm({"inspect", mnt, "--verify"}) != 0) return 20;
    // A writer cannot open it, and says why.
    OpenOptions w;
    w.mode = OpenOptions::Mode::kReadWrite;
    std::unique_ptr<Store> st;
    if (Store::Open(mnt, w, &st).ok()) return 30;
    return 0;
  });
  if (rc == kSkip) GTEST_SKIP() << "cannot make a private mount namespace here";
  EXPECT_EQ(rc, 0) << "5 premise, 10 open, 11 lookup, 12 load, 13 bytes, 14 registry, 20 ucm inspect, 30 writer";
  EXPECT_EQ(tree(store_), before_);
}

// UCM_READER_DIR (or OpenOptions::reader_dir) puts the scratch directory where the operator says.
TEST_F(ReadOnly, ReaderDirFromTheEnvironment) {
  const std::string base = dir_.sub("scratch");
  int rc = in_child([&] {
    ::setenv("UCM_READER_DIR", base.c_str(), 1);
    OpenOptions o;
    o.refresh_interval_ms = 0;
    std::unique_ptr<Store> st;
    if (!Store::Open(store_, o, &st).ok()) return 10;
    size_t n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(base, ec)) n += e.is_directory() ? 1 : 0;
    if (n != 1) return 11;
    st.reset();
    n = 0;
    for (const auto& e : fs::directory_iterator(base, ec)) n += e.is_directory() ? 1 : 0;
    return n == 0 ? 0 : 12;
  });
  EXPECT_EQ(rc, 0) << "10 open, 11 no scratch dir in UCM_READER_DIR, 12 not removed on close";
  auto readers = [](const std::set<std::string>& t) {
    std::set<std::string> r;
    for (const auto& p : t)
      if (p.rfind("readers/", 0) == 0) r.insert(p);
    return r;
  };
  EXPECT_EQ(readers(tree(store_)), readers(before_)) << "the scratch directory went into STORE/readers";
}

}  // namespace
