// formats/store/records.cc: see records.h and store_v1.md.
#include "formats/store/records.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

namespace ucm::fmt {

namespace {
constexpr char kSuperMagic[8] = {'U', 'C', 'M', 'S', 'T', 'O', 'R', 'E'};
constexpr char kDataMagic[8] = {'U', 'C', 'M', 'D', 'A', 'T', 'A', '1'};
constexpr char kRecMagic[4] = {'U', 'C', 'M', 'R'};

std::string at(const std::string& where, uint64_t off) {
  return where + " at offset " + std::to_string(off);
}
}  // namespace

uint64_t xxh3(const void* data, size_t len) { return XXH3_64bits(data, len); }

uint64_t now_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

void put_le16(uint8_t* p, uint16_t v) { for (int i = 0; i < 2; ++i) p[i] = uint8_t(v >> (8 * i)); }
void put_le32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i)); }
void put_le64(uint8_t* p, uint64_t v) { for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i)); }
uint16_t get_le16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t get_le32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
void put_be32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * (3 - i))); }
void put_be64(uint8_t* p, uint64_t v) { for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * (7 - i))); }
uint32_t get_be32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
void encode_superblock(const Superblock& sb, uint8_t out[kSuperblockSize]) {
  std::memset(out, 0, kSuperblockSize);
  std::memcpy(out, kSuperMagic, 8);
  put_le32(out + 8, sb.format_version);
  put_le32(out + 12, sb.min_reader_version);
  put_le64(out + 16, sb.created_ms);
  std::memcpy(out + 24, sb.created_by.data(), std::min<size_t>(32, sb.created_by.size()));
  put_le64(out + 56, xxh3(out, 56));
}

Status decode_superblock(const uint8_t* b, size_t len, const std::string& where, Superblock* sb) {
  if (len < kSuperblockSize)
    return Status::Corruption("superblock " + where + " is " + std::to_string(len) +
                              " bytes, expected 64; the store is damaged (ucm build --rebuild-index "
                              "cannot fix a superblock: restore it from a copy)");
  if (std::memcmp(b, kSuperMagic, 8) != 0)
    return Status::Corruption("superblock " + where + " has a bad magic (not \"UCMSTORE\")");
  if (get_le64(b + 56) != xxh3(b, 56))
    return Status::Corruption("superblock " + where + " checksum mismatch; the store is damaged");
  sb->format_version = get_le32(b + 8);
  sb->min_reader_version = get_le32(b + 12);
  sb->created_ms = get_le64(b + 16);
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

bool pid_alive(long pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno != ESRCH); }
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

namespace {
std::string iso_time(uint64_t ms) {
  time_t t = time_t(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
}  // namespace

Status WriterLock::Acquire(const std::string& store, std::unique_ptr<WriterLock>* out) {
  std::string p = lock_path(store);
  int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "open lock file " + p);
  int rc;
  do rc = ::flock(fd, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    std::string text(256, '\0');
    size_t got = 0;
    (void)pread_full(fd, text.data(), text.size(), 0, &got, p);
    ::close(fd);
    if (err != EWOULDBLOCK) return Status::FromErrno(err, "flock " + p);
    text.resize(got);
    std::string pid = "?", host = "?", since = "?";
    auto field = [&](const char* k) -> std::string {
      size_t a = text.find(k);
      if (a == std::string::npos) return "?";
      a += std::strlen(k);
      size_t b = text.find_first_of(" \n", a);
      return text.substr(a, b == std::string::npos ? std::string::npos : b - a);
    };
    pid = field("pid=");
    host = field("host=");
    since = field("since=");
    std::string since_text = since;
    if (since != "?") since_text = iso_time(std::strtoull(since.c_str(), nullptr, 10));
    return Status::Busy("store " + store + " is locked by pid " + pid + " on host " + host + " since " +
                        since_text + "; wait for it or stop it");
  }
  std::string text = "pid=" + std::to_string(::getpid()) + " host=" + host_name() +
                     " since=" + std::to_string(now_ms()) + "\n";
  if (::ftruncate(fd, 0) != 0 || !pwrite_full(fd, text.data(), text.size(), 0, p).ok()) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "write lock file " + p);
  }
  (void)::fdatasync(fd);
  out->reset(new WriterLock(fd));
  return Status::OK();
}

WriterLock::~WriterLock() {
  if (fd_ >= 0) ::close(fd_);
}

// ---------------------------------------------------------------------------------------------
void encode_file_header(const FileHeader& h, uint8_t out[kPage]) {
  std::memset(out, 0, kPage);
  std::memcpy(out, kDataMagic, 8);
  put_le32(out + 8, h.format_version);
  put_le32(out + 12, h.file_id);
  put_le64(out + 16, h.created_ms);
  put_le64(out + 4088, xxh3(out, 4088));
}

Status decode_file_header(const uint8_t* p, const std::string& where, FileHeader* h) {
  if (std::memcmp(p, kDataMagic, 8) != 0)
    return Status::Corruption("data file " + where + " has a bad header magic (not \"UCMDATA1\")");
  if (get_le64(p + 4088) != xxh3(p, 4088))
    return Status::Corruption("data file " + where + " header checksum mismatch");
  h->format_version = get_le32(p + 8);
  h->file_id = get_le32(p + 12);
  h->created_ms = get_le64(p + 16);
  if (h->format_version > kFormatVersion)
    return Status::Version("data file " + where + " has format version " +
                           std::to_string(h->format_version) + ", newer than this ucm supports (max " +
                           std::to_string(kFormatVersion) + "); upgrade ucm");
  return Status::OK();
}

const char* record_type_name(RecordType t) {
  switch (t) {
    case RecordType::kBlockKV: return "BLOCK_KV";
    case RecordType::kBlockRepr: return "BLOCK_REPR";
    case RecordType::kNamespace: return "NAMESPACE";
    case RecordType::kNsAttachment: return "NS_ATTACHMENT";
    case RecordType::kDocument: return "DOCUMENT";
  }
  return "UNKNOWN";
}

void encode_record_header(const RecordHeader& h, uint8_t* p) {
  std::memset(p, 0, kPage);
  std::memcpy(p, kRecMagic, 4);
  put_le16(p + 4, h.record_version);
  put_le16(p + 6, static_cast<uint16_t>(h.type));
  put_le32(p + 8, uint32_t(kPage));
  put_le32(p + 12, h.flags);
  std::memcpy(p + 16, h.ns.data(), 16);
  std::memcpy(p + 32, h.key.data(), 16);
  std::memcpy(p + 48, h.parent.data(), 16);
  put_le64(p + 64, h.payload_length);
  put_le64(p + 72, h.payload_checksum);
  put_le32(p + 80, h.token_count);
  put_le64(p + 88, h.created_ms);
  put_le64(p + 120, xxh3(p, 120));
}

Status decode_record_header(const uint8_t* p, const std::string& where, RecordHeader* h) {
  if (std::memcmp(p, kRecMagic, 4) != 0) return Status::Corruption(where + ": no record header (bad magic)");
  if (get_le64(p + 120) != xxh3(p, 120)) return Status::Corruption(where + ": record header checksum mismatch");
  h->record_version = get_le16(p + 4);
  if (h->record_version != 1)
    return Status::Corruption(where + ": unknown record version " + std::to_string(h->record_version));
  uint16_t t = get_le16(p + 6);
  if (t < 1 || t > 5) return Status::Corruption(where + ": unknown record type " + std::to_string(t));
  h->type = static_cast<RecordType>(t);
  if (get_le32(p + 8) != kPage) return Status::Corruption(where + ": header_size is not 4096");
  h->flags = get_le32(p + 12);
  std::memcpy(h->ns.data(), p + 16, 16);
  std::memcpy(h->key.data(), p + 32, 16);
  std::memcpy(h->parent.data(), p + 48, 16);
  h->payload_length = get_le64(p + 64);
  h->payload_checksum = get_le64(p + 72);
  h->token_count = get_le32(p + 80);
  h->created_ms = get_le64(p + 88);
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------
AlignedBuffer::~AlignedBuffer() { std::free(p_); }
bool AlignedBuffer::reserve(size_t n) {
  if (n <= cap_) return true;
  size_t c = round_up_page(n);
  void* np = nullptr;
  if (posix_memalign(&np, kPage, c) != 0) return false;
  std::free(p_);
  p_ = static_cast<uint8_t*>(np);
  cap_ = c;
  return true;
}

Status pread_full(int fd, void* buf, size_t len, uint64_t offset, size_t* got, const std::string& where,
                  int* os_errno) {
  if (os_errno) *os_errno = 0;
  size_t done = 0;
  auto* b = static_cast<uint8_t*>(buf);
  while (done < len) {
    ssize_t r = ::pread(fd, b + done, len - done, off_t(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      *got = done;
      if (os_errno) *os_errno = err;
      return Status::FromErrno(err, "read " + at(where, offset + done));
    }
    if (r == 0) break;
    done += size_t(r);
    // O_DIRECT reads past EOF return short counts that are not page multiples: stop at EOF.
  }
  *got = done;
  return Status::OK();
}

Status pwrite_full(int fd, const void* buf, size_t len, uint64_t offset, const std::string& where) {
  size_t done = 0;
  auto* b = static_cast<const uint8_t*>(buf);
  while (done < len) {
    ssize_t r = ::pwrite(fd, b + done, len - done, off_t(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write " + at(where, offset + done));
    }
    if (r == 0) return Status::IOError("write " + at(where, offset + done) + " wrote nothing");
    done += size_t(r);
  }
  return Status::OK();
}

Status read_record(int fd, uint64_t offset, const RecordExpect& e, AlignedBuffer* buf, const std::string& where,
                   int* os_errno) {
  if (os_errno) *os_errno = 0;
  const uint64_t total = record_size(e.payload_length);
  if (!buf->reserve(total)) return Status::Internal("out of memory reading " + at(where, offset));
  size_t got = 0;
  Status s = pread_full(fd, buf->data(), total, offset, &got, where, os_errno);
  if (!s.ok()) return s;
  const uint64_t need = kPage + e.payload_length;
  if (got < need)
    return Status::Corruption("record of " + at(where, offset) + " is truncated: file ends " +
                              std::to_string(need - got) + " bytes early; run `ucm gc` or `ucm build "
                              "--rebuild-index` to drop it");
  RecordHeader h;
  s = decode_record_header(buf->data(), at(where, offset), &h);
  if (!s.ok()) return s;
  auto mismatch = [&](const char* what) {
    return Status::Corruption(at(where, offset) + ": record " + what +
                              " does not match the index; the block is not served (run `ucm inspect "
                              "--verify`)");
  };
  if (h.type != e.type) return mismatch("type");
  if (e.check_ids && (h.ns != e.ns || h.key != e.key)) return mismatch("namespace/key");
  if (h.payload_length != e.payload_length) return mismatch("payload length");
  if (h.payload_checksum != e.payload_checksum) return mismatch("checksum field");
  if (xxh3(buf->data() + kPage, e.payload_length) != e.payload_checksum)
    return Status::Corruption(at(where, offset) + ": payload checksum mismatch (" +
                              record_type_name(e.type) + "); the block is not served (run `ucm inspect "
                              "--verify`, then `ucm gc` to drop corrupt blocks)");
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------
std::string encode_attachment_payload(std::string_view name, const void* data, size_t len) {
  const size_t prefix = (4 + name.size() + 7) / 8 * 8;
  std::string out(prefix + len, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  put_le32(p, uint32_t(name.size()));
  std::memcpy(p + 4, name.data(), name.size());
  if (len) std::memcpy(p + prefix, data, len);
  return out;
}

Status decode_attachment_payload(uint32_t flags, const uint8_t* payload, size_t len, const std::string& where,
                                 std::string* name, size_t* data_offset) {
  name->clear();
  *data_offset = 0;
  if (!(flags & kRecordFlagNamed)) return Status::OK();
  if (len < 4) return Status::Corruption(where + ": attachment payload of " + std::to_string(len) + " bytes has no name prefix");
  const uint64_t n = get_le32(payload);
  const uint64_t prefix = (4 + n + 7) / 8 * 8;
  if (prefix > len)
    return Status::Corruption(where + ": attachment name of " + std::to_string(n) + " bytes runs past its " +
                              std::to_string(len) + "-byte payload");
  name->assign(reinterpret_cast<const char*>(payload + 4), size_t(n));
  *data_offset = size_t(prefix);
  return Status::OK();
}

void encode_record(RecordHeader* h, const std::vector<std::pair<const void*, size_t>>& pieces, uint8_t* dst) {
  constexpr size_t kChunk = 64 << 10;
  XXH3_state_t xs;
  XXH3_64bits_reset(&xs);
  uint8_t* out = dst + kPage;
  for (const auto& [p, n] : pieces) {
    const auto* src = static_cast<const uint8_t*>(p);
    for (size_t done = 0; done < n;) {
      const size_t c = std::min(kChunk, n - done);
      std::memcpy(out, src + done, c);
      XXH3_64bits_update(&xs, out, c);  // hashed from the copy, still in cache
      out += c;
      done += c;
    }
  }
  const uint64_t len = uint64_t(out - (dst + kPage));
  std::memset(out, 0, round_up_page(len) - len);
  h->payload_checksum = XXH3_64bits_digest(&xs);
  h->payload_length = len;
  if (h->created_ms == 0) h->created_ms = now_ms();
  encode_record_header(*h, dst);
}

struct DataFileWriter::State {
  std::atomic<uint64_t> size{0};
  int dfd = -1;                      ///< O_DIRECT descriptor, -1 when the file system refuses it
  std::atomic<bool> direct{false};   ///< cleared when an O_DIRECT write fails with EINVAL
  std::atomic<bool> can_fallocate{true};
};

DataFileWriter::DataFileWriter(int fd, uint32_t id, std::string path, uint64_t size)
    : fd_(fd), file_id_(id), path_(std::move(path)), st_(new State) {
  st_->size = size;
  st_->dfd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
  st_->direct = st_->dfd >= 0;
}
DataFileWriter::~DataFileWriter() {
  if (st_->dfd >= 0) ::close(st_->dfd);
  if (fd_ >= 0) ::close(fd_);
}

Status DataFileWriter::Create(const std::string& store, uint32_t file_id, std::unique_ptr<DataFileWriter>* out) {
  std::string p = data_file_path(store, file_id);
  int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST)
      return Status::InvalidArgument("data file " + p + " already exists; the index's next_file_id is "
                                     "behind the data files: run `ucm build --rebuild-index`");
    return Status::FromErrno(errno, "create data file " + p);
  }
  alignas(16) uint8_t page[kPage];
  FileHeader h;
  h.file_id = file_id;
  h.created_ms = now_ms();
  encode_file_header(h, page);
  Status s = pwrite_full(fd, page, kPage, 0, p);
  if (s.ok() && ::fdatasync(fd) != 0) s = Status::FromErrno(errno, "fdatasync " + p);
  if (s.ok()) s = fsync_dir(data_dir(store));
  if (!s.ok()) {
    ::close(fd);
    ::unlink(p.c_str());
    return s;
  }
  out->reset(new DataFileWriter(fd, file_id, p, kPage));
  return Status::OK();
}

Status DataFileWriter::append(RecordHeader* h, const std::vector<std::pair<const void*, size_t>>& pieces,
                              uint64_t* offset) {
  static const std::vector<uint8_t> zeros(kPage, 0);
  XXH3_state_t xs;
  XXH3_64bits_reset(&xs);
  uint64_t len = 0;
  for (const auto& [p, n] : pieces) {
    XXH3_64bits_update(&xs, p, n);
    len += n;
  }
  h->payload_checksum = XXH3_64bits_digest(&xs);
  h->payload_length = len;
  if (h->created_ms == 0) h->created_ms = now_ms();
  alignas(64) uint8_t head[kPage];
  encode_record_header(*h, head);
  // One pwritev per record: header page, the caller's pieces, a shared zero tail.
  std::vector<iovec> iov;
  iov.reserve(pieces.size() + 2);
  iov.push_back({head, kPage});
  for (const auto& [p, n] : pieces)
    if (n) iov.push_back({const_cast<void*>(p), n});
  if (const size_t tail = round_up_page(len) - len) iov.push_back({const_cast<uint8_t*>(zeros.data()), tail});
  const uint64_t total = record_size(len);
  const uint64_t off = st_->size.fetch_add(total);
  uint64_t done = 0;
  size_t first = 0;
  while (done < total) {
    const int cnt = int(std::min<size_t>(iov.size() - first, IOV_MAX));
    ssize_t r = ::pwritev(fd_, iov.data() + first, cnt, off_t(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write " + path_ + " at offset " + std::to_string(off + done));
    }
    if (r == 0) return Status::IOError("write " + path_ + ": no progress at offset " + std::to_string(off + done));
    done += uint64_t(r);
    // Skip the iovecs written, trim a partly written one.
    size_t rem = size_t(r);
    while (first < iov.size() && rem >= iov[first].iov_len) rem -= iov[first++].iov_len;
    if (rem) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + rem;
      iov[first].iov_len -= rem;
    }
  }
  *offset = off;
  return Status::OK();
}

Status DataFileWriter::reserve(uint64_t bytes, uint64_t* offset) {
  const uint64_t off = st_->size.fetch_add(bytes);
  *offset = off;
  if (bytes && st_->can_fallocate.load(std::memory_order_relaxed)) {
    int rc;
    do rc = ::fallocate(fd_, 0, off_t(off), off_t(bytes));
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      if (errno == EOPNOTSUPP || errno == ENOSYS) st_->can_fallocate = false;
      else return Status::FromErrno(errno, "allocate " + std::to_string(bytes) + " bytes at offset " +
                                               std::to_string(off) + " of " + path_);
    }
  }
  return Status::OK();
}

Status DataFileWriter::write_at(const void* buf, size_t len, uint64_t offset) {
  const bool aligned = (reinterpret_cast<uintptr_t>(buf) % kPage) == 0 && len % kPage == 0 && offset % kPage == 0;
  if (aligned && st_->direct.load(std::memory_order_relaxed)) {
    size_t done = 0;
    while (done < len) {
      ssize_t r = ::pwrite(st_->dfd, static_cast<const uint8_t*>(buf) + done, len - done, off_t(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno == EINVAL && done == 0) {
        st_->direct = false;  // the file system refuses O_DIRECT here: buffered from now on
        break;
      }
      if (r < 0) return Status::FromErrno(errno, "write " + path_ + " at offset " + std::to_string(offset + done));
      if (r == 0 || size_t(r) % kPage) {
        // A short O_DIRECT write (e.g. the disk filled up): finish buffered.
        done += size_t(r);
        return pwrite_full(fd_, static_cast<const uint8_t*>(buf) + done, len - done, offset + done, path_);
      }
      done += size_t(r);
    }
    if (done == len) return Status::OK();
  }
  return pwrite_full(fd_, buf, len, offset, path_);
}

Status DataFileWriter::sync() {
  if (::fdatasync(fd_) != 0) return Status::FromErrno(errno, "fdatasync " + path_);
  return Status::OK();
}

uint64_t DataFileWriter::size() const { return st_->size.load(); }

// ---------------------------------------------------------------------------------------------
DataFileScanner::DataFileScanner(int fd, std::string path, uint64_t size, FileHeader h)
    : fd_(fd), path_(std::move(path)), size_(size), header_(h) {}
DataFileScanner::~DataFileScanner() {
  if (fd_ >= 0) ::close(fd_);
}

Status DataFileScanner::Open(const std::string& path, std::unique_ptr<DataFileScanner>* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open data file " + path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "stat " + path);
  }
  std::string page(kPage, '\0');
  size_t got = 0;
  Status s = pread_full(fd, page.data(), kPage, 0, &got, path);
  if (s.ok() && got < kPage)
    s = Status::Corruption("data file " + path + " is shorter than its 4096-byte header");
  FileHeader h;
  if (s.ok()) s = decode_file_header(reinterpret_cast<const uint8_t*>(page.data()), path, &h);
  if (!s.ok()) {
    ::close(fd);
    return s;
  }
  out->reset(new DataFileScanner(fd, path, uint64_t(st.st_size), h));
  return Status::OK();
}

bool DataFileScanner::next(ScannedRecord* rec, std::string* payload, bool verify_payload) {
  if (!status_.ok()) return false;
  *rec = ScannedRecord{};
  page_.resize(kPage);
  uint64_t bad_start = UINT64_MAX;
  std::string bad_error;
  while (pos_ < size_) {
    size_t got = 0;
    Status s = pread_full(fd_, page_.data(), kPage, pos_, &got, path_);
    if (!s.ok()) {
      status_ = s;
      return false;
    }
    RecordHeader h;
    Status hs = got < kPage ? Status::Corruption(at(path_, pos_) + ": partial page at end of file")
                            : decode_record_header(reinterpret_cast<const uint8_t*>(page_.data()),
                                                   at(path_, pos_), &h);
    if (!hs.ok()) {
      if (bad_start == UINT64_MAX) {
        bad_start = pos_;
        bad_error = hs.message();
      }
      pos_ += kPage;
      continue;
    }
    if (bad_start != UINT64_MAX) {
      // Report the bad run first; the good header is picked up by the next call.
      rec->state = ScannedRecord::State::kCorrupt;
      rec->offset = bad_start;
      rec->length = pos_ - bad_start;
      rec->error = bad_error;
      return true;
    }
    const uint64_t total = record_size(h.payload_length);
    rec->offset = pos_;
    rec->header = h;
    rec->header_ok = true;
    if (h.payload_length > size_ || pos_ + kPage + h.payload_length > size_) {
      rec->state = ScannedRecord::State::kTornTail;
      rec->length = size_ - pos_;
      rec->error = at(path_, pos_) + ": record runs past the end of the file (torn tail)";
      pos_ = size_;
      return true;
    }
    rec->length = total;
    if (verify_payload) {
      std::string local;
      std::string& buf = payload ? *payload : local;
      buf.resize(h.payload_length);
      size_t pg = 0;
      s = pread_full(fd_, buf.data(), h.payload_length, pos_ + kPage, &pg, path_);
      if (!s.ok()) {
        status_ = s;
        return false;
      }
      if (pg != h.payload_length || xxh3(buf.data(), h.payload_length) != h.payload_checksum) {
        rec->state = ScannedRecord::State::kCorrupt;
        rec->error = at(path_, pos_) + ": payload checksum mismatch";
        pos_ += std::min(total, size_ - pos_);
        return true;
      }
    }
    rec->state = ScannedRecord::State::kValid;
    pos_ += std::min(total, size_ - pos_);
    return true;
  }
  if (bad_start != UINT64_MAX) {
    rec->state = ScannedRecord::State::kTornTail;
    rec->offset = bad_start;
    rec->length = size_ - bad_start;
    rec->error = bad_error + " (no valid record after it: torn tail)";
    return true;
  }
  return false;
}

}  // namespace ucm::fmt
