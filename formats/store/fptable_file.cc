// formats/store/fptable_file.cc: the fingerprint table file header (fptable.md §2).
#include "ucm/format/fptable_file.h"

#include <algorithm>
#include <cstring>

#include "ucm/format/common.h"

namespace ucm::fmt {

namespace {
constexpr char kMagic[8] = {'U', 'C', 'M', 'F', 'P', 'T', 'A', 'B'};
constexpr size_t kChecksumAt = kFpTableHeaderBytes - 8;
}  // namespace

std::string fptable_path(const std::string& store) { return store + "/fptable"; }

void encode_fptable_header(const FpTableHeader& h, uint8_t out[kFpTableHeaderBytes]) {
  std::memset(out, 0, kFpTableHeaderBytes);
  std::memcpy(out, kMagic, 8);
  put_le32(out + 8, kFpTableVersion);
  put_le32(out + 12, uint32_t(kFpTableHeaderBytes));
  put_le32(out + 16, kFpTableFingerprintId);
  put_le64(out + 24, h.capacity);
  put_le64(out + 32, h.count);
  put_le64(out + 40, h.journal_seq);
  put_le64(out + 48, h.created_ms);
  put_le64(out + 56, h.slots_checksum);
  std::memcpy(out + 64, h.index_identity.data(), std::min(h.index_identity.size(), kFpTableIdentityBytes - 1));
  put_le64(out + kChecksumAt, xxh3(out, kChecksumAt));
}

Status decode_fptable_header(const uint8_t* p, uint64_t file_size, FpTableHeader* h) {
  if (file_size < kFpTableHeaderBytes)
    return Status::Corruption("corrupt: " + std::to_string(file_size) + " bytes, shorter than its 4096-byte header");
  if (std::memcmp(p, kMagic, 8) != 0) return Status::Corruption("corrupt: bad magic (not \"UCMFPTAB\")");
  if (get_le64(p + kChecksumAt) != xxh3(p, kChecksumAt)) return Status::Corruption("corrupt: header checksum mismatch");
  const uint32_t version = get_le32(p + 8);
  if (version != kFpTableVersion)
    return Status::Version("version " + std::to_string(version) + " unknown (this ucm reads version " +
                           std::to_string(kFpTableVersion) + ")");
  if (get_le32(p + 12) != kFpTableHeaderBytes)
    return Status::Corruption("corrupt: header_bytes " + std::to_string(get_le32(p + 12)) + ", expected 4096");
  if (get_le32(p + 16) != kFpTableFingerprintId)
    return Status::Version("fingerprint function " + std::to_string(get_le32(p + 16)) + " unknown");
  h->capacity = get_le64(p + 24);
  h->count = get_le64(p + 32);
  h->journal_seq = get_le64(p + 40);
  h->created_ms = get_le64(p + 48);
  h->slots_checksum = get_le64(p + 56);
  const char* id = reinterpret_cast<const char*>(p + 64);
  h->index_identity.assign(id, strnlen(id, kFpTableIdentityBytes));
  const uint64_t cap = h->capacity;
  if (cap < 16 || (cap & (cap - 1)) != 0 || cap > (uint64_t(1) << 40))
    return Status::Corruption("corrupt: capacity " + std::to_string(cap) + " is not a power of two >= 16");
  if (h->count > cap / 2)
    return Status::Corruption("corrupt: count " + std::to_string(h->count) + " exceeds half the capacity " +
                              std::to_string(cap));
  if (file_size != kFpTableHeaderBytes + 8 * cap)
    return Status::Corruption("corrupt: " + std::to_string(file_size) + " bytes, expected " +
                              std::to_string(kFpTableHeaderBytes + 8 * cap) + " for " + std::to_string(cap) +
                              " slots (truncated?)");
  return Status::OK();
}

}  // namespace ucm::fmt
