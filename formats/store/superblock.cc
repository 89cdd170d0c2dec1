// formats/store/superblock.cc: the superblock (§2; see ucm/format/superblock.h).
#include "ucm/format/superblock.h"
#include "ucm/format/io.h"
#include "ucm/format/layout.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "format_internal.h"

namespace ucm::fmt {

using detail::kSuperMagic;
using detail::at;

void encode_superblock(const Superblock& sb, uint8_t out[kSuperblockSize]) {
  detail::encode_head(kSuperMagic, {sb.format_version, sb.min_reader_version, sb.created_ms}, out, kSuperblockSize);
  std::memcpy(out + 24, sb.created_by.data(), std::min<size_t>(32, sb.created_by.size()));
  put_le64(out + 56, xxh3(out, 56));
}

Status decode_superblock(const uint8_t* b, size_t len, const std::string& where, Superblock* sb) {
  if (len < kSuperblockSize)
    return Status::Corruption("superblock " + where + " is " + std::to_string(len) +
                              " bytes, expected 64; the store is damaged (ucm build --rebuild-index "
                              "cannot fix a superblock: restore it from a copy)");
  detail::Head head;
  if (!detail::decode_head(kSuperMagic, b, &head))
    return Status::Corruption("superblock " + where + " has a bad magic (not \"UCMSTORE\")");
  if (get_le64(b + 56) != xxh3(b, 56))
    return Status::Corruption("superblock " + where + " checksum mismatch; the store is damaged");
  sb->format_version = head.format_version;
  sb->min_reader_version = head.second;
  sb->created_ms = head.created_ms;
  const char* s = reinterpret_cast<const char*>(b + 24);
  sb->created_by.assign(s, strnlen(s, 32));
  return Status::OK();
}

Status read_superblock(const std::string& store, Superblock* sb) {
  struct stat st;
  if (::stat(store.c_str(), &st) != 0)
    return Status::InvalidArgument("store " + store + " does not exist; create it with `ucm build " +
                                   store + "` (or open with create)");
  if (!S_ISDIR(st.st_mode))
    return Status::InvalidArgument(store + " is not a ucm store (not a directory)");
  std::string p = superblock_path(store);
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return Status::InvalidArgument(store + " is not a ucm store (no UCMSTORE superblock); "
                                     "create one with `ucm build` in an empty directory");
    return Status::FromErrno(errno, "open " + p);
  }
  uint8_t buf[kSuperblockSize];
  size_t got = 0;
  Status s = pread_full(fd, buf, sizeof buf, 0, &got, p);
  ::close(fd);
  if (!s.ok()) return s;
  s = decode_superblock(buf, got, p, sb);
  if (!s.ok()) return s;
  if (sb->format_version == 3)  // kShardedFormatVersion: a root of shards, not a store (§11)
    return Status::Version(store + " is a sharded store (format version 3, store_v1.md §11): open it with the "
                           "library or a ucm command that takes a store, or give one of its shards, " +
                           store + "/shards/<name>");
  if (sb->format_version > kFormatVersion)
    return Status::Version("store format version " + std::to_string(sb->format_version) +
                           " is newer than this ucm supports (max " + std::to_string(kFormatVersion) +
                           "); upgrade ucm");
  if (sb->format_version == 0)
    return Status::Corruption("superblock " + p + " has format_version 0");
  return Status::OK();
}

Status write_superblock(const std::string& store, const Superblock& sb) {
  Status s = make_dirs(tmp_dir(store));
  if (!s.ok()) return s;
  std::string tmp = tmp_dir(store) + "/UCMSTORE.tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
  uint8_t buf[kSuperblockSize];
  encode_superblock(sb, buf);
  s = pwrite_full(fd, buf, sizeof buf, 0, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Status::FromErrno(errno, "fsync " + tmp);
  ::close(fd);
  if (!s.ok()) return s;
  std::string dst = superblock_path(store);
  if (::rename(tmp.c_str(), dst.c_str()) != 0) return Status::FromErrno(errno, "rename " + tmp + " to " + dst);
  s = fsync_dir(tmp_dir(store));
  if (!s.ok()) return s;
  return fsync_dir(store);
}

}  // namespace ucm::fmt
