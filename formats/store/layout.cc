// formats/store/layout.cc: directory layout (§1), creation and skeletons (§1.1) (see ucm/format/layout.h).
#include "ucm/format/layout.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "ucm/process.h"

namespace ucm::fmt {

std::string superblock_path(const std::string& s) { return s + "/UCMSTORE"; }
std::string lock_path(const std::string& s) { return s + "/LOCK"; }
std::string index_dir(const std::string& s) { return s + "/index"; }
std::string data_dir(const std::string& s) { return s + "/data"; }
std::string access_dir(const std::string& s) { return s + "/access"; }
std::string readers_dir(const std::string& s) { return s + "/readers"; }
std::string tmp_dir(const std::string& s) { return s + "/tmp"; }
std::string data_file_path(const std::string& s, uint32_t id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "/%08u.ucmd", id);
  return data_dir(s) + buf;
}
bool parse_data_file_name(std::string_view name, uint32_t* id) {
  if (name.size() != 13 || name.substr(8) != ".ucmd") return false;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + uint64_t(name[i] - '0');
  }
  *id = uint32_t(v);
  return true;
}
std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}
Status fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open directory " + dir);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::FromErrno(err, "fsync directory " + dir);
  return Status::OK();
}
Status make_dirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create directory " + dir + ": " + ec.message() +
                                 "; check the path and its permissions");
  return Status::OK();
}

Status create_store_skeleton(const std::string& store, Superblock* sb_out) {
  struct stat st;
  if (::stat(store.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(store + " exists and is not a directory");
    std::error_code ec;
    bool empty = std::filesystem::is_empty(store, ec);
    if (ec) return Status::IOError("cannot list " + store + ": " + ec.message());
    if (!empty)
      return Status::InvalidArgument(store + " is not empty and not a ucm store; a store is created "
                                     "only in a missing or empty directory");
  }
  for (const auto& d : {store, data_dir(store), access_dir(store), readers_dir(store), tmp_dir(store)}) {
    Status s = make_dirs(d);
    if (!s.ok()) return s;
  }
  Superblock sb;
  sb.created_ms = now_ms();
  Status s = write_superblock(store, sb);
  if (!s.ok()) return s;
  if (sb_out) *sb_out = sb;
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------
namespace {
namespace fs = std::filesystem;

// A file name RocksDB writes into its database directory.
bool rocksdb_file_name(const std::string& n) {
  if (n == "CURRENT" || n == "IDENTITY" || n == "LOCK" || n.rfind("LOG", 0) == 0 || n.rfind("MANIFEST-", 0) == 0 ||
      n.rfind("OPTIONS-", 0) == 0)
    return true;
  for (const char* ext : {".log", ".sst", ".dbtmp"}) {
    const size_t e = std::strlen(ext);
    if (n.size() > e && n.compare(n.size() - e, e, ext) == 0) return true;
  }
  return false;
}

// Entries of `dir` (names). false when it cannot be listed (missing counts as empty).
bool list_dir(const std::string& dir, std::vector<std::string>* out, std::error_code* ec) {
  out->clear();
  if (!fs::exists(dir, *ec)) return !*ec;
  for (fs::directory_iterator it(dir, *ec), end; !*ec && it != end; it.increment(*ec))
    out->push_back(it->path().filename().string());
  return !*ec;
}

bool has_data_files(const std::string& store, std::error_code* ec) {
  std::vector<std::string> names;
  if (!list_dir(data_dir(store), &names, ec)) return false;
  return !names.empty();
}

// true when `store` (no superblock) holds only skeleton entries (see StoreDirState::kSkeleton).
bool is_skeleton(const std::string& store, std::error_code* ec) {
  std::vector<std::string> top, sub;
  if (!list_dir(store, &top, ec)) return false;
  for (const auto& n : top) {
    const std::string p = store + "/" + n;
    if (n == "LOCK") {
      if (!fs::is_regular_file(p, *ec)) return false;
      continue;
    }
    if (n != "data" && n != "access" && n != "readers" && n != "tmp" && n != "index") return false;
    if (!fs::is_directory(p, *ec) || !list_dir(p, &sub, ec)) return false;
    for (const auto& m : sub) {
      if (n == "tmp" && m == "UCMSTORE.tmp") continue;
      if (n == "index" && rocksdb_file_name(m) && fs::is_regular_file(p + "/" + m, *ec)) continue;
      return false;
    }
  }
  return true;
}

}  // namespace

Status classify_store_dir(const std::string& store, StoreDirState* state) {
  struct stat st;
  if (::stat(store.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      *state = StoreDirState::kMissing;
      return Status::OK();
    }
    return Status::FromErrno(errno, "stat " + store);
  }
  if (!S_ISDIR(st.st_mode)) {
    *state = StoreDirState::kNotAStore;
    return Status::OK();
  }
  std::error_code ec;
  const bool empty = fs::is_empty(store, ec);
  if (ec) return Status::IOError("cannot list " + store + ": " + ec.message());
  if (empty) {
    *state = StoreDirState::kEmpty;
    return Status::OK();
  }
  if (::stat(superblock_path(store).c_str(), &st) == 0) {
    const bool have_index = ::stat((index_dir(store) + "/CURRENT").c_str(), &st) == 0;
    const bool data = has_data_files(store, &ec);
    if (ec) return Status::IOError("cannot list " + data_dir(store) + ": " + ec.message());
    *state = (!have_index && !data) ? StoreDirState::kHalfCreated : StoreDirState::kStore;
    return Status::OK();
  }
  const bool skel = is_skeleton(store, &ec);
  if (ec) return Status::IOError("cannot list " + store + ": " + ec.message());
  *state = skel ? StoreDirState::kSkeleton : StoreDirState::kNotAStore;
  return Status::OK();
}

Status clear_store_skeleton(const std::string& store) {
  std::error_code ec;
  if (!is_skeleton(store, &ec) || ec)
    return Status::InvalidArgument(store + " is not an empty store skeleton (" +
                                   (ec ? ec.message() : std::string("it holds other files")) + "); not clearing it");
  std::vector<std::string> top;
  list_dir(store, &top, &ec);
  for (const auto& n : top) {
    fs::remove_all(store + "/" + n, ec);
    if (ec) return Status::IOError("remove " + store + "/" + n + ": " + ec.message());
  }
  return fsync_dir(store);
}

std::string creating_dir(const std::string& store, long pid) {
  fs::path p(store);
  std::string parent = p.parent_path().string();
  if (parent.empty()) parent = ".";
  return parent + "/." + p.filename().string() + ".creating-" + std::to_string(pid);
}

int remove_dead_creating_dirs(const std::string& store) {
  fs::path p(store);
  std::string parent = p.parent_path().string();
  if (parent.empty()) parent = ".";
  const std::string prefix = "." + p.filename().string() + ".creating-";
  std::vector<std::string> names;
  std::error_code ec;
  if (!list_dir(parent, &names, &ec)) return 0;
  int removed = 0;
  for (const auto& n : names) {
    if (n.size() <= prefix.size() || n.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = n.substr(prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::strtol(digits.c_str(), nullptr, 10);
    if (pid == long(::getpid()) || pid_alive(pid)) continue;
    const std::string dir = parent + "/" + n;
    // The creator holds the LOCK of its directory while it works (also across hosts on NFS).
    int fd = ::open(lock_path(dir).c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
      const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
      ::close(fd);
      if (!free) continue;
    }
    fs::remove_all(dir, ec);
    if (!ec) ++removed;
  }
  return removed;
}

}  // namespace ucm::fmt
