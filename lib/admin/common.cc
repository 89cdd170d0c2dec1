// Shared helpers of the admin commands (admin_internal.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "admin_internal.h"
#include "ucm/hash.h"

namespace ucm::admin {

namespace fs = std::filesystem;
using json = nlohmann::json;

Status load_namespaces(const Index& idx, std::vector<NsInfo>* out) {
  out->clear();
  Status err;
  Status st = idx.for_each_namespace([&](const NamespaceId& id, const std::string& js) {
    NsInfo n;
    n.id = id;
    Status s = NamespaceDesc::from_json(js, &n.desc);
    if (!s.ok()) {
      err = Status::Corruption("namespace " + to_hex(id) + " in the index: " + s.message());
      return false;
    }
    n.value = json::parse(js, nullptr, false);
    if (n.value.is_discarded() || !n.value.is_object()) {
      err = Status::Corruption("namespace " + to_hex(id) + " in the index is not a JSON object");
      return false;
    }
    out->push_back(std::move(n));
    return true;
  });
  if (!st.ok()) return st;
  return err;
}

Status resolve_namespace(const std::vector<NsInfo>& all, const std::string& name_or_id,
                         const NsInfo** out) {
  NamespaceId want{};
  bool is_id = parse_hex16(name_or_id, &want).ok();
  for (const auto& n : all) {
    if ((is_id && n.id == want) || n.desc.display_name() == name_or_id) {
      *out = &n;
      return Status::OK();
    }
  }
  std::string known;
  for (const auto& n : all) known += (known.empty() ? "" : ", ") + n.desc.display_name();
  return Status::InvalidArgument("no namespace '" + name_or_id + "' in the store; known: " +
                                 (known.empty() ? "(none)" : known) +
                                 " (pass a name or a 32-hex id; `ucm inspect` lists them)");
}

NamespaceId hash_seed_namespace(const NamespaceDesc& desc, const NamespaceId& id) {
  json e = json::parse(desc.extra_json, nullptr, false);
  if (e.is_object() && e.contains("hash_seed_namespace") && e["hash_seed_namespace"].is_string()) {
    NamespaceId seed{};
    if (parse_hex16(e["hash_seed_namespace"].get<std::string>(), &seed).ok()) return seed;
  }
  return id;
}

BlockHash chain_root(const NamespaceDesc& desc, const NamespaceId& id) {
  return root_hash(hash_seed_namespace(desc, id));
}

// -------------------------------------------------------------------------------- ReaderView
Status ReaderView::Open(const std::string& store, std::unique_ptr<ReaderView>* out) {
  std::unique_ptr<ReaderView> r(new ReaderView());
  Status st = fmt::read_superblock(store, &r->sb_);
  if (!st.ok()) return st;
  st = ReaderIndex::Open(store, "", "admin", &r->ri_);
  if (!st.ok()) return st;
  *out = std::move(r);
  return Status::OK();
}

Status WriterIndex::Open(const std::string& store, std::unique_ptr<WriterIndex>* out) {
  auto w = std::make_unique<WriterIndex>();
  Status st = fmt::read_superblock(store, &w->sb);
  if (!st.ok()) return st;
  st = require_index(store);  // before the lock: nothing is created for a store without an index
  if (!st.ok()) return st;
  st = fmt::WriterLock::Acquire(store, &w->lock);
  if (!st.ok()) return st;
  st = open_writer_index(store, &w->idx);
  if (!st.ok()) return st;
  *out = std::move(w);
  return Status::OK();
}

// ------------------------------------------------------------------------------ RecordReader
RecordReader::~RecordReader() {
  for (auto& [id, f] : fds_)
    if (f >= 0) ::close(f);
}

int RecordReader::fd(uint32_t id, Status* st) {
  auto it = fds_.find(id);
  if (it != fds_.end()) {
    if (it->second < 0) *st = Status::NotFound("data file " + std::to_string(id) + " missing");
    return it->second;
  }
  std::string p = fmt::data_file_path(store_, id);
  int f = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  fds_[id] = f;
  if (f < 0) {
    *st = errno == ENOENT ? Status::NotFound("data file " + std::to_string(id) + " missing")
                          : Status::FromErrno(errno, "open " + p);
    sizes_[id] = -1;
  } else {
    struct stat s {};
    sizes_[id] = ::fstat(f, &s) == 0 ? static_cast<int64_t>(s.st_size) : -1;
  }
  return f;
}

int64_t RecordReader::file_size(uint32_t id) {
  Status st;
  fd(id, &st);
  return sizes_[id];
}

Status RecordReader::check_size(const fmt::BlockRecord& rec) {
  auto one = [&](uint32_t file, uint64_t off, uint64_t len, const char* what) -> Status {
    int64_t sz = file_size(file);
    if (sz < 0) return Status::NotFound(std::string(what) + " data file " + std::to_string(file) + " missing");
    if (off + fmt::record_size(len) > static_cast<uint64_t>(sz))
      return Status::Corruption(std::string(what) + " record at " + std::to_string(off) +
                                " runs past the end of data file " + std::to_string(file) +
                                " (size " + std::to_string(sz) + "): truncated");
    return Status::OK();
  };
  Status st = one(rec.kv_file, rec.kv_offset, rec.kv_length, "kv");
  if (st.ok() && rec.has_repr()) st = one(rec.repr_file, rec.repr_offset, rec.repr_length, "repr");
  return st;
}

Status RecordReader::read(const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& rec,
                          bool repr, const uint8_t** payload, uint64_t* len) {
  uint32_t file = repr ? rec.repr_file : rec.kv_file;
  fmt::RecordExpect ex;
  ex.type = repr ? fmt::RecordType::kBlockRepr : fmt::RecordType::kBlockKV;
  ex.check_ids = true;
  ex.ns = ns;
  ex.key = h;
  ex.payload_length = repr ? rec.repr_length : rec.kv_length;
  ex.payload_checksum = repr ? rec.repr_checksum : rec.kv_checksum;
  uint64_t off = repr ? rec.repr_offset : rec.kv_offset;
  Status st;
  int f = fd(file, &st);
  if (f < 0) return st;
  std::string where = "data/" + fs::path(fmt::data_file_path(store_, file)).filename().string();
  st = fmt::read_record(f, off, ex, &buf_, where);
  if (!st.ok()) return st;
  fmt::RecordHeader hdr;
  st = fmt::decode_record_header(buf_.data(), where, &hdr);
  if (!st.ok()) return st;
  if (hdr.parent != rec.parent)
    return Status::Corruption(where + " offset " + std::to_string(off) +
                              ": record parent differs from the index");
  if (hdr.token_count != rec.token_count)
    return Status::Corruption(where + " offset " + std::to_string(off) +
                              ": record token_count differs from the index");
  *payload = buf_.data() + fmt::kPage;
  *len = ex.payload_length;
  return Status::OK();
}

Status read_attachment(const std::string& store, const NamespaceId& ns, const std::string& name,
                       uint32_t file, uint64_t offset, uint64_t length, uint64_t checksum,
                       std::string* out) {
  const std::string p = fmt::data_file_path(store, file);
  int f = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (f < 0) return Status::FromErrno(errno, "open " + p + " (attachment " + name + ")");
  fmt::RecordExpect ex;
  ex.type = fmt::RecordType::kNsAttachment;
  ex.check_ids = true;
  ex.ns = ns;
  ex.key = fmt::md5(name.data(), name.size());
  ex.payload_length = length;
  ex.payload_checksum = checksum;
  fmt::AlignedBuffer buf;
  Status st = fmt::read_record(f, offset, ex, &buf, p);
  ::close(f);
  if (!st.ok()) return st;
  // Named records start with their name (store_v1.md §3.3): return the data only.
  fmt::RecordHeader h;
  st = fmt::decode_record_header(buf.data(), p, &h);
  if (!st.ok()) return st;
  std::string stored;
  size_t data_off = 0;
  st = fmt::decode_attachment_payload(h.flags, buf.data() + fmt::kPage, length, p, &stored, &data_off);
  if (!st.ok()) return st;
  if ((h.flags & fmt::kRecordFlagNamed) && stored != name)
    return Status::Corruption(p + " at offset " + std::to_string(offset) + ": attachment record holds \"" + stored +
                              "\", the index says \"" + name + "\"");
  out->assign(reinterpret_cast<const char*>(buf.data() + fmt::kPage + data_off), length - data_off);
  return Status::OK();
}

void Progress::tick(const std::function<std::string()>& line, bool force) {
  if (!fn_) return;
  auto now = std::chrono::steady_clock::now();
  if (!force && now - last_ < std::chrono::seconds(1)) return;
  last_ = now;
  fn_(line());
}

// -------------------------------------------------------------------------------- dtype
uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x47800000u) {                                               // >= 65536 or inf
    if (a == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    // round to nearest: values >= 65520 overflow to inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (a < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (a < 0x33000000u) return sign;  // < 2^-25 rounds to zero
    uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    int exp = static_cast<int>(a >> 23);  // biased
    int shift = 126 - exp;               // 113 - exp + 13
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((a - 0x38000000u) >> 13);
  uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into inf: correct
  return static_cast<uint16_t>(sign | half);
}

float fp16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400u));
      u = sign | ((112u - static_cast<uint32_t>(e)) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void convert_dtype(const void* in, DType from, void* out, DType to, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float f;
    if (from == DType::kFP32) {
      std::memcpy(&f, static_cast<const uint8_t*>(in) + 4 * i, 4);
    } else {
      uint16_t v;
      std::memcpy(&v, static_cast<const uint8_t*>(in) + 2 * i, 2);
      f = from == DType::kBF16 ? bf16_to_float(v) : fp16_to_float(v);
    }
    if (to == DType::kFP32) {
      std::memcpy(static_cast<uint8_t*>(out) + 4 * i, &f, 4);
    } else {
      uint16_t v = to == DType::kBF16 ? float_to_bf16(f) : float_to_fp16(f);
      std::memcpy(static_cast<uint8_t*>(out) + 2 * i, &v, 2);
    }
  }
}

nlohmann::ordered_json block_record_json(const NsInfo& ns, const BlockHash& h,
                                         const fmt::BlockRecord& r) {
  nlohmann::ordered_json j;
  j["namespace"] = ns.desc.display_name();
  j["namespace_id"] = to_hex(ns.id);
  j["hash"] = to_hex(h);
  j["parent"] = to_hex(r.parent);
  j["parent_is_root"] = r.parent == chain_root(ns.desc, ns.id);
  j["token_count"] = r.token_count;
  j["kv"] = {{"file", r.kv_file}, {"offset", r.kv_offset}, {"length", r.kv_length},
             {"checksum", r.kv_checksum}};
  if (r.has_repr())
    j["repr"] = {{"file", r.repr_file}, {"offset", r.repr_offset}, {"length", r.repr_length},
                 {"checksum", r.repr_checksum}};
  else
    j["repr"] = nullptr;
  j["bytes"] = r.bytes();
  j["created_ms"] = r.created_ms;
  j["created"] = format_time_ms(r.created_ms);
  j["last_access_ms"] = r.last_access_ms;
  j["last_access"] = format_time_ms(r.last_access_ms);
  return j;
}

}  // namespace ucm::admin
