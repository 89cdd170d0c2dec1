// Sharded stores (§11): root layout, shard names, root superblock and creation.
#include "ucm/format/shards.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "ucm/format/layout.h"

namespace ucm::fmt {

namespace fs = std::filesystem;

std::string shards_dir(const std::string& store) { return store + "/shards"; }
std::string shard_path(const std::string& store, const std::string& name) { return shards_dir(store) + "/" + name; }
std::string gc_dir(const std::string& store) { return store + "/gc"; }
std::string gc_lock_path(const std::string& store) { return gc_dir(store) + "/LOCK"; }
std::string gc_lease_path(const std::string& store) { return gc_dir(store) + "/LEASE"; }

namespace {
bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}
bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
std::string upgrade_hint(const std::string& store) {
  return "; an interrupted `ucm migrate " + store + " --to-sharded` left it so: run that command again";
}
}  // namespace

bool interrupted_upgrade(const Status& s) {
  return s.code() == Code::kInvalidArgument && s.message().find(" --to-sharded` left it so") != std::string::npos;
}

Status check_shard_name(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 64 && name[0] != '.' &&
                  std::all_of(name.begin(), name.end(), name_char);
  if (ok) return Status::OK();
  return Status::InvalidArgument("shard name '" + name +
                                 "' is not valid: use 1-64 characters of A-Z a-z 0-9 . _ - "
                                 "not starting with '.'");
}

std::string sanitize_shard_name(const std::string& name) {
  std::string s = name.substr(0, 64);
  for (char& c : s)
    if (!name_char(c)) c = '-';
  if (!s.empty() && s[0] == '.') s[0] = '_';
  return s.empty() ? "shard" : s;
}

Status root_kind(const std::string& store, RootKind* kind, Superblock* sb_out) {
  // read_superblock refuses format 3 (single-store code must not open a root); read it here.
  Superblock sb;
  Status s = read_superblock(store, &sb);
  const bool has_shards = is_dir(shards_dir(store));
  if (s.ok()) {
    if (has_shards)
      return Status::InvalidArgument(store + " is a version-" + std::to_string(sb.format_version) +
                                     " store with a shards/ directory" + upgrade_hint(store));
    *kind = RootKind::kSingle;
    if (sb_out) *sb_out = sb;
    return Status::OK();
  }
  if (s.code() == Code::kInvalidArgument && has_shards && ::access(superblock_path(store).c_str(), F_OK) != 0)
    return Status::InvalidArgument(store + " holds shards/ but no UCMSTORE superblock" + upgrade_hint(store));
  if (s.code() != Code::kVersion) return s;
  // Version: decode again and accept exactly format 3.
  std::string p = superblock_path(store);
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + p);
  uint8_t buf[kSuperblockSize];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  ::close(fd);
  if (n < 0) return Status::FromErrno(errno, "read " + p);
  Status d = decode_superblock(buf, size_t(n), p, &sb);
  if (!d.ok()) return d;
  if (sb.format_version != kShardedFormatVersion) return s;  // newer still: the Version error
  *kind = RootKind::kSharded;
  if (sb_out) *sb_out = sb;
  return Status::OK();
}

Status list_shards(const std::string& store, std::vector<std::string>* names) {
  names->clear();
  std::error_code ec;
  fs::directory_iterator it(shards_dir(store), ec);
  if (ec == std::errc::no_such_file_or_directory)
    return Status::Corruption("sharded store " + store + " has no shards/ directory (store_v1.md §11)");
  if (ec) return Status::IOError("cannot list " + shards_dir(store) + ": " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.empty() || n[0] == '.') continue;
    if (::access(superblock_path(shard_path(store, n)).c_str(), F_OK) != 0) continue;
    names->push_back(n);
  }
  if (ec) return Status::IOError("cannot list " + shards_dir(store) + ": " + ec.message());
  std::sort(names->begin(), names->end());
  return Status::OK();
}

namespace {
Status write_root(const std::string& dir) {
  for (const auto& d : {shards_dir(dir), gc_dir(dir), tmp_dir(dir)}) {
    Status s = make_dirs(d);
    if (!s.ok()) return s;
  }
  Superblock sb;
  sb.format_version = sb.min_reader_version = kShardedFormatVersion;
  sb.created_ms = now_ms();
  Status s = write_superblock(dir, sb);  // tmp/ + fsync + rename + fsync dir
  if (!s.ok()) return s;
  return fsync_dir(dir);
}
}  // namespace

Status create_sharded_root(const std::string& store, bool* created) {
  *created = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    StoreDirState state;
    Status s = classify_store_dir(store, &state);
    if (!s.ok()) return s;
    if (state == StoreDirState::kStore || state == StoreDirState::kHalfCreated) {
      RootKind k;
      s = root_kind(store, &k);
      if (!s.ok()) return s;
      if (k == RootKind::kSharded) return Status::OK();
      return Status::InvalidArgument(store + " is a single-writer store; make it sharded with `ucm migrate " +
                                     store + " --to-sharded`");
    }
    if (state == StoreDirState::kNotAStore) {
      RootKind k;
      s = root_kind(store, &k);  // the interrupted-upgrade message, when it is one
      if (!s.ok()) return s;
      return Status::InvalidArgument(store + " is not empty and not a ucm store; pick an empty directory");
    }
    if (state == StoreDirState::kSkeleton) {
      s = clear_store_skeleton(store);
      if (!s.ok()) return s;
      state = StoreDirState::kEmpty;
    }
    std::string parent = fs::path(store).parent_path().string();
    if (parent.empty()) parent = ".";
    s = make_dirs(parent);
    if (!s.ok()) return s;
    struct stat tst, pst;
    if (state == StoreDirState::kEmpty && ::stat(store.c_str(), &tst) == 0 && ::stat(parent.c_str(), &pst) == 0 &&
        tst.st_dev != pst.st_dev) {
      s = write_root(store);  // a mount point: in place, superblock last
      if (s.ok()) *created = true;
      return s;
    }
    (void)remove_dead_creating_dirs(store);
    const std::string tmp = creating_dir(store, long(::getpid()));
    std::error_code ec;
    fs::remove_all(tmp, ec);
    if (::mkdir(tmp.c_str(), 0755) != 0) return Status::FromErrno(errno, "create " + tmp);
    s = write_root(tmp);
    if (!s.ok()) {
      fs::remove_all(tmp, ec);
      return s;
    }
    int rc;
    if (state == StoreDirState::kMissing) {
      rc = ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, store.c_str(), RENAME_NOREPLACE);
      if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
        struct stat x;
        if (::stat(store.c_str(), &x) == 0) errno = EEXIST;
        else rc = ::rename(tmp.c_str(), store.c_str());
      }
    } else {
      rc = ::rename(tmp.c_str(), store.c_str());  // replaces an empty directory atomically
    }
    const int err = rc != 0 ? errno : 0;
    if (rc == 0) {
      *created = true;
      return fsync_dir(parent);
    }
    fs::remove_all(tmp, ec);
    if (err != EEXIST && err != ENOTEMPTY) return Status::FromErrno(err, "rename " + tmp + " to " + store);
    // Raced with another creator: classify again.
  }
  return Status::Busy("store " + store + " keeps changing while it is created; try again");
}

}  // namespace ucm::fmt
