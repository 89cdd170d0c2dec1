// gc requests beside a live writer (store_v1.md §11.5): see ucm/format/gc_request.h.
#include "ucm/format/gc_request.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "ucm/format/io.h"
#include "ucm/format/layout.h"

namespace ucm::fmt {

namespace {
constexpr char kGcRequestMagic[8] = {'U', 'C', 'M', 'G', 'C', 'R', 'Q', '1'};
}  // namespace

std::string gc_requests_dir(const std::string& store) { return store + "/gc-requests"; }

std::string gc_request_path(const std::string& store, const std::string& nonce, const char* suffix) {
  return gc_requests_dir(store) + "/" + nonce + suffix;
}

bool parse_gc_request_name(const std::string& name, std::string* nonce, std::string* suffix) {
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string::npos || dot > 64) return false;
  for (size_t i = 0; i < dot; ++i) {
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z'))) return false;
  }
  const std::string s = name.substr(dot);
  if (s != ".req" && s != ".work" && s != ".done" && s != ".bad") return false;
  *nonce = name.substr(0, dot);
  *suffix = s;
  return true;
}

std::string new_gc_nonce() {
  std::random_device rd;
  const uint64_t v = (uint64_t(rd()) << 32) ^ uint64_t(rd());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string encode_gc_request(const GcRequest& r) {
  const size_t n = r.entries.size();
  std::string out(kGcRequestHeaderSize + n * kGcRequestEntrySize + 8, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(p, kGcRequestMagic, 8);
  put_le32(p + 8, r.version);
  put_le32(p + 12, uint32_t(kGcRequestEntrySize));
  put_le64(p + 16, r.created_ms);
  put_le64(p + 24, r.expires_ms);
  put_le64(p + 32, r.grace_ms);
  put_le64(p + 40, uint64_t(n));
  put_le32(p + 48, r.flags);
  std::memcpy(p + 56, r.requester.data(), std::min<size_t>(r.requester.size(), 63));
  put_le64(p + 120, xxh3(p, 120));
  uint8_t* e = p + kGcRequestHeaderSize;
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(e + i * kGcRequestEntrySize, r.entries[i].ns.data(), 16);
    std::memcpy(e + i * kGcRequestEntrySize + 16, r.entries[i].hash.data(), 16);
  }
  put_le64(e + n * kGcRequestEntrySize, xxh3(e, n * kGcRequestEntrySize));
  return out;
}

Status decode_gc_request(const void* data, size_t len, GcRequest* out) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (len < kGcRequestHeaderSize + 8 || std::memcmp(p, kGcRequestMagic, 8) != 0)
    return Status::Corruption("gc request: not a request (bad magic or shorter than its header)");
  if (get_le64(p + 120) != xxh3(p, 120)) return Status::Corruption("gc request: header checksum mismatch");
  GcRequest r;
  r.version = get_le32(p + 8);
  if (r.version > kGcRequestVersion || r.version == 0)
    return Status::NotSupported("gc request version " + std::to_string(r.version) + " is not known to this ucm (max " +
                                std::to_string(kGcRequestVersion) + ")");
  if (get_le32(p + 12) != kGcRequestEntrySize)
    return Status::NotSupported("gc request entry size " + std::to_string(get_le32(p + 12)) + " is not known");
  r.created_ms = get_le64(p + 16);
  r.expires_ms = get_le64(p + 24);
  r.grace_ms = get_le64(p + 32);
  const uint64_t n = get_le64(p + 40);
  r.flags = get_le32(p + 48);
  if (n > (len - kGcRequestHeaderSize - 8) / kGcRequestEntrySize ||
      len != kGcRequestHeaderSize + n * kGcRequestEntrySize + 8)
    return Status::Corruption("gc request: length " + std::to_string(len) + " does not match " + std::to_string(n) +
                              " entries");
  const uint8_t* e = p + kGcRequestHeaderSize;
  if (get_le64(e + n * kGcRequestEntrySize) != xxh3(e, n * kGcRequestEntrySize))
    return Status::Corruption("gc request: entries checksum mismatch");
  const char* rq = reinterpret_cast<const char*>(p + 56);
  r.requester.assign(rq, strnlen(rq, 64));
  r.entries.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    std::memcpy(r.entries[i].ns.data(), e + i * kGcRequestEntrySize, 16);
    std::memcpy(r.entries[i].hash.data(), e + i * kGcRequestEntrySize + 16, 16);
  }
  *out = std::move(r);
  return Status::OK();
}

Status write_file_atomic(const std::string& dir, const std::string& name, const std::string& data) {
  const std::string tmp = dir + "/." + name + ".tmp-" + std::to_string(::getpid());
  const std::string dst = dir + "/" + name;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
  Status s = pwrite_full(fd, data.data(), data.size(), 0, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Status::FromErrno(errno, "fsync " + tmp);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), dst.c_str()) != 0) s = Status::FromErrno(errno, "rename " + tmp);
  if (s.ok()) s = fsync_dir(dir);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

Status read_small_file(const std::string& path, std::string* out) {
  out->clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + " does not exist");
    return Status::FromErrno(errno, "open " + path);
  }
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out->append(buf, size_t(n));
  const int err = n < 0 ? errno : 0;
  ::close(fd);
  if (err) return Status::FromErrno(err, "read " + path);
  return Status::OK();
}

}  // namespace ucm::fmt
