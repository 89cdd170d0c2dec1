// lib/src/data_file_reader.cc: see data_file_reader.h.
#include "ucm/core/data_file_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

namespace ucm {
namespace {

/// Opens a data file for buffered reads with the kernel's readahead off (POSIX_FADV_RANDOM):
/// every read here is one whole record at a random offset, so readahead (read_ahead_kb, 128 KiB
/// to 8 MiB) only reads pages nobody asked for. Measured with `ucm bench store`
/// (docs/benchmarks.md "Raw read modes and load modes"). Returns -1 with errno set on failure.
int open_buffered(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  return fd;
}

}  // namespace

DataFileReader::~DataFileReader() {
  for (auto& [id, f] : files_)
    if (f.fd >= 0) ::close(f.fd);
}

std::string DataFileReader::where(uint32_t id) const {
  return fmt::data_file_path(store_, id) + " (file id " + std::to_string(id) + ")";
}

Status DataFileReader::get(uint32_t id, Open* out) {
  {
    std::shared_lock<std::shared_mutex> g(mu_);
    auto it = files_.find(id);
    if (it != files_.end()) {
      *out = it->second;
      return Status::OK();
    }
  }
  const std::string p = fmt::data_file_path(store_, id);
  Open o;
  if (direct_io_) {
    o.fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    o.direct = o.fd >= 0;
  }
  if (o.fd < 0) o.fd = open_buffered(p);
  if (o.fd < 0) {
    if (errno == ENOENT) return Status::NotFound("data file " + p + " is gone (retired by gc)");
    return Status::FromErrno(errno, "open data file " + p);
  }
  struct stat st {};
  o.size = ::fstat(o.fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  std::unique_lock<std::shared_mutex> g(mu_);
  auto [it, inserted] = files_.emplace(id, o);
  if (!inserted) ::close(o.fd);
  *out = it->second;
  return Status::OK();
}

void DataFileReader::drop(uint32_t id) {
  std::unique_lock<std::shared_mutex> g(mu_);
  auto it = files_.find(id);
  if (it == files_.end()) return;
  ::close(it->second.fd);
  files_.erase(it);
}

int64_t DataFileReader::file_size(uint32_t id) {
  Open o;
  return get(id, &o).ok() ? o.size : -1;
}

Status DataFileReader::read(uint32_t file, uint64_t off, const fmt::RecordExpect& e, fmt::AlignedBuffer* buf) {
  Open f;
  Status s = get(file, &f);
  if (!s.ok()) return s;
  const std::string at = where(file);
  int err = 0;
  s = fmt::read_record(f.fd, off, e, buf, at, &err);
  if (s.ok() || !f.direct || err != EINVAL) return s;
  // The file system refused O_DIRECT for this read: reopen buffered and retry once.
  const int fd = open_buffered(fmt::data_file_path(store_, file));
  if (fd < 0) return Status::FromErrno(errno, "open " + at);
  {
    std::unique_lock<std::shared_mutex> g(mu_);
    auto it = files_.find(file);
    if (it != files_.end()) {
      ::close(it->second.fd);
      it->second.fd = fd;
      it->second.direct = false;
    } else {
      files_.emplace(file, Open{fd, false, f.size});
    }
  }
  return fmt::read_record(fd, off, e, buf, at);
}

Status DataFileReader::read_block(const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& rec, bool repr,
                                  fmt::AlignedBuffer* buf, const uint8_t** payload, uint64_t* len) {
  const uint32_t file = repr ? rec.repr_file : rec.kv_file;
  const uint64_t off = repr ? rec.repr_offset : rec.kv_offset;
  fmt::RecordExpect ex;
  ex.type = repr ? fmt::RecordType::kBlockRepr : fmt::RecordType::kBlockKV;
  ex.check_ids = true;
  ex.ns = ns;
  ex.key = h;
  ex.payload_length = repr ? rec.repr_length : rec.kv_length;
  ex.payload_checksum = repr ? rec.repr_checksum : rec.kv_checksum;
  Status st = read(file, off, ex, buf);
  if (!st.ok()) return st;
  const std::string at = where(file) + " offset " + std::to_string(off);
  fmt::RecordHeader hdr;
  st = fmt::decode_record_header(buf->data(), at, &hdr);
  if (!st.ok()) return st;
  if (hdr.parent != rec.parent) return Status::Corruption(at + ": record parent differs from the index");
  if (hdr.token_count != rec.token_count) return Status::Corruption(at + ": record token_count differs from the index");
  *payload = buf->data() + fmt::kPage;
  *len = ex.payload_length;
  return Status::OK();
}

Status DataFileReader::read_block_tokens(const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& rec,
                                        std::vector<uint32_t>* tokens) {
  tokens->clear();
  Open f;
  Status st = get(rec.kv_file, &f);
  if (!st.ok()) return st;
  const std::string at = where(rec.kv_file) + " offset " + std::to_string(rec.kv_offset);
  fmt::AlignedBuffer buf;
  if (!buf.reserve(fmt::kPage)) return Status::Internal("out of memory reading " + at);
  size_t got = 0;
  int err = 0;
  st = fmt::pread_full(f.fd, buf.data(), fmt::kPage, rec.kv_offset, &got, at, &err);
  if (!st.ok() && f.direct && err == EINVAL) {  // O_DIRECT refused: one buffered read
    const int fd = open_buffered(fmt::data_file_path(store_, rec.kv_file));
    if (fd < 0) return Status::FromErrno(errno, "open " + at);
    st = fmt::pread_full(fd, buf.data(), fmt::kPage, rec.kv_offset, &got, at);
    ::close(fd);
  }
  if (!st.ok()) return st;
  if (got < fmt::kPage) return Status::Corruption(at + ": the record header page is truncated");
  fmt::RecordHeader hdr;
  st = fmt::decode_record_header(buf.data(), at, &hdr);
  if (!st.ok()) return st;
  if (hdr.type != fmt::RecordType::kBlockKV || hdr.ns != ns || hdr.key != h)
    return Status::Corruption(at + ": the record is not the KV record of this block");
  if (hdr.parent != rec.parent || hdr.token_count != rec.token_count)
    return Status::Corruption(at + ": record parent or token_count differs from the index");
  *tokens = fmt::record_tokens(buf.data(), hdr);
  return Status::OK();
}

Status DataFileReader::read_attachment(const NamespaceId& ns, const std::string& name, uint32_t file, uint64_t off,
                                       uint64_t length, uint64_t checksum, std::string* data) {
  fmt::RecordExpect e;
  e.type = fmt::RecordType::kNsAttachment;
  e.check_ids = true;
  e.ns = ns;
  e.key = fmt::md5(name.data(), name.size());
  e.payload_length = length;
  e.payload_checksum = checksum;
  fmt::AlignedBuffer buf;
  Status s = read(file, off, e, &buf);
  if (!s.ok()) return s;
  const std::string at = where(file) + " at offset " + std::to_string(off);
  fmt::RecordHeader h;
  s = fmt::decode_record_header(buf.data(), at, &h);
  if (!s.ok()) return s;
  std::string stored;
  size_t data_off = 0;
  const uint8_t* p = buf.data() + fmt::kPage;
  s = fmt::decode_attachment_payload(h.flags, p, length, at, &stored, &data_off);
  if (!s.ok()) return s;
  if ((h.flags & fmt::kRecordFlagNamed) && stored != name)
    return Status::Corruption(at + ": attachment record holds \"" + stored + "\", the index says \"" + name + "\"");
  data->assign(reinterpret_cast<const char*>(p + data_off), length - data_off);
  return Status::OK();
}

Status DataFileReader::check_size(const fmt::BlockRecord& rec) {
  auto one = [&](uint32_t file, uint64_t off, uint64_t len, const char* what) -> Status {
    const int64_t sz = file_size(file);
    if (sz < 0) return Status::NotFound(std::string(what) + " data file " + std::to_string(file) + " missing");
    if (off + fmt::record_size(len) > static_cast<uint64_t>(sz))
      return Status::Corruption(std::string(what) + " record at " + std::to_string(off) +
                                " runs past the end of data file " + std::to_string(file) + " (size " +
                                std::to_string(sz) + "): truncated");
    return Status::OK();
  };
  Status st = one(rec.kv_file, rec.kv_offset, rec.kv_length, "kv");
  if (st.ok() && rec.has_repr()) st = one(rec.repr_file, rec.repr_offset, rec.repr_length, "repr");
  return st;
}

}  // namespace ucm
