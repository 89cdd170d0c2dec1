// lib/src/index_open.cc: see index_open.h.
#include "ucm/core/index_open.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include <spdlog/spdlog.h>

#include "ucm/format/format.h"
#include "ucm/core/log.h"
#include "ucm/process.h"
#include "ucm/fs.h"

namespace ucm {
namespace fs = std::filesystem;

namespace {

// mkdir that reports errno; EEXIST is success.
int make_dir(const std::string& d, mode_t mode) {
  if (::mkdir(d.c_str(), mode) == 0 || errno == EEXIST) return 0;
  return errno;
}

// A per-user local base directory: created 0700 and owned by us, never a symlink.
Status local_base(std::string* out) {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  std::string base;
  if (xdg && *xdg) {
    base = std::string(xdg) + "/ucm-readers";
  } else {
    base = "/tmp/ucm-readers-" + std::to_string(::getuid());
  }
  if (int e = make_dir(base, 0700)) return Status::FromErrno(e, "create reader directory " + base);
  struct stat st;
  if (::lstat(base.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + base);
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::getuid())
    return Status::IOError(base + " is not a directory owned by this user; set UCM_READER_DIR to a private "
                           "directory for read-only store handles");
  *out = base;
  return Status::OK();
}

}  // namespace

std::string process_unique_name(const std::string& tag) {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  const uint64_t v = (uint64_t(rd()) << 32) ^ rd() ^
                     uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^ (counter++ << 40);
  char b[24];
  std::snprintf(b, sizeof b, "%012llx", static_cast<unsigned long long>(v & 0xffffffffffffull));
  return fmt::host_name() + "-" + std::to_string(::getpid()) + "-" + tag + b;
}

uint64_t remove_stale_reader_dirs(const std::string& base) {
  uint64_t n = 0;
  std::error_code ec;
  const std::string host = fmt::host_name();
  for (const auto& e : fs::directory_iterator(base, ec)) {
    const std::string name = e.path().filename().string();
    const size_t b = name.rfind('-');
    if (b == std::string::npos || b == 0) continue;
    const size_t a = name.rfind('-', b - 1);
    if (a == std::string::npos) continue;
    if (name.substr(0, a) != host) continue;
    const long pid = std::strtol(name.substr(a + 1, b - a - 1).c_str(), nullptr, 10);
    if (pid <= 0 || pid_alive(pid)) continue;
    std::error_code ec2;
    if (ucm::remove_tree(e.path(), ec2) > 0) ++n;
  }
  return n;
}

Status require_index(const std::string& store) {
  struct stat st;
  const std::string current = fmt::index_dir(store) + "/CURRENT";
  if (::stat(current.c_str(), &st) == 0) return Status::OK();
  if (errno != ENOENT && errno != ENOTDIR) return Status::FromErrno(errno, "stat " + current);
  return Status::Corruption("store " + store + " has no index (index/CURRENT missing): run `ucm build " + store +
                            " --rebuild-index` to rebuild it from the data files");
}

Status open_writer_index(const std::string& store, std::unique_ptr<Index>* out, uint64_t write_buffer_budget) {
  Status st = require_index(store);
  if (!st.ok()) return st;
  st = Index::OpenPrimary(fmt::index_dir(store), false, out, write_buffer_budget);
  if (!st.ok())
    return Status(st.code(), "cannot open the index of " + store + ": " + st.message() +
                                 " (if index/ is damaged, run `ucm build " + store + " --rebuild-index`)");
  return Status::OK();
}

Status ReaderIndex::Open(const std::string& store, const std::string& reader_dir, const std::string& tag,
                         std::unique_ptr<ReaderIndex>* out) {
  Status st = require_index(store);
  if (!st.ok()) return st;
  std::unique_ptr<ReaderIndex> r(new ReaderIndex());
  const std::string name = process_unique_name(tag);
  std::string base = reader_dir;
  if (base.empty()) {
    const char* env = std::getenv("UCM_READER_DIR");
    if (env && *env) base = env;
  }
  if (!base.empty()) {
    st = fmt::make_dirs(base);
    if (!st.ok()) return Status(st.code(), "reader directory: " + st.message());
    remove_stale_reader_dirs(base);
    r->scratch_ = base + "/" + name;
  } else {
    const std::string in_store = fmt::readers_dir(store) + "/" + name;
    const int e = make_dir(in_store, 0755);
    if (e == 0) {
      r->scratch_ = in_store;
      r->in_store_ = true;
    } else if (e == EACCES || e == EPERM || e == EROFS || e == ENOENT) {
      st = local_base(&base);
      if (!st.ok()) return st;
      remove_stale_reader_dirs(base);
      r->scratch_ = base + "/" + name;
      log().debug("store {}: {} is not writable ({}); read-only handle uses {}", store, fmt::readers_dir(store),
                    std::strerror(e), r->scratch_);
    } else {
      return Status::FromErrno(e, "create reader directory " + in_store);
    }
  }
  st = Index::OpenSecondary(fmt::index_dir(store), r->scratch_, &r->idx_);
  if (!st.ok()) {
    std::error_code ec;
    ucm::remove_tree(r->scratch_, ec);
    r->scratch_.clear();
    return Status(st.code(), "cannot open the index of " + store + " read-only: " + st.message() +
                                 " (if index/ is damaged, run `ucm build " + store + " --rebuild-index`)");
  }
  (void)r->idx_->try_catch_up();
  *out = std::move(r);
  return Status::OK();
}

ReaderIndex::~ReaderIndex() {
  idx_.reset();
  if (!scratch_.empty()) {
    std::error_code ec;
    ucm::remove_tree(scratch_, ec);
  }
}

}  // namespace ucm
