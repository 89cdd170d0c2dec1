// formats/store/index_values.cc: the index's keys and values (§5), access records (§6), fingerprints (§8).
#include "ucm/format/index_values.h"

#include <xxhash.h>
#include <cstring>

namespace ucm::fmt {

// ---------------------------------------------------------------------------------------------
std::string encode_block_record(const BlockRecord& r) {
  std::string v(kBlockRecordSize, '\0');
  auto* p = reinterpret_cast<uint8_t*>(v.data());
  put_le16(p, r.version);
  put_le16(p + 2, r.flags);
  put_le32(p + 4, r.token_count);
  std::memcpy(p + 8, r.parent.data(), 16);
  put_le32(p + 24, r.kv_file);
  put_le32(p + 28, r.repr_file);
  put_le64(p + 32, r.kv_offset);
  put_le64(p + 40, r.kv_length);
  put_le64(p + 48, r.kv_checksum);
  put_le64(p + 56, r.repr_offset);
  put_le64(p + 64, r.repr_length);
  put_le64(p + 72, r.repr_checksum);
  put_le64(p + 80, r.created_ms);
  put_le64(p + 88, r.last_access_ms);
  return v;
}

Status decode_block_record(std::string_view v, BlockRecord* r) {
  if (v.size() != kBlockRecordSize)
    return Status::Corruption("index block record is " + std::to_string(v.size()) +
                              " bytes, expected 96; run `ucm build --rebuild-index`");
  auto* p = reinterpret_cast<const uint8_t*>(v.data());
  r->version = get_le16(p);
  if (r->version != 1)
    return Status::Corruption("index block record has unknown version " + std::to_string(r->version));
  r->flags = get_le16(p + 2);
  r->token_count = get_le32(p + 4);
  std::memcpy(r->parent.data(), p + 8, 16);
  r->kv_file = get_le32(p + 24);
  r->repr_file = get_le32(p + 28);
  r->kv_offset = get_le64(p + 32);
  r->kv_length = get_le64(p + 40);
  r->kv_checksum = get_le64(p + 48);
  r->repr_offset = get_le64(p + 56);
  r->repr_length = get_le64(p + 64);
  r->repr_checksum = get_le64(p + 72);
  r->created_ms = get_le64(p + 80);
  r->last_access_ms = get_le64(p + 88);
  return Status::OK();
}

std::string encode_file_record(const FileRecord& r) {
  std::string v(kFileRecordSize, '\0');
  auto* p = reinterpret_cast<uint8_t*>(v.data());
  put_le64(p, r.size);
  put_le64(p + 8, r.live_bytes);
  put_le32(p + 16, static_cast<uint32_t>(r.state));
  put_le64(p + 20, r.retired_ms);
  return v;
}

Status decode_file_record(std::string_view v, FileRecord* r) {
  if (v.size() != kFileRecordSize)
    return Status::Corruption("index file record is " + std::to_string(v.size()) + " bytes, expected 28");
  auto* p = reinterpret_cast<const uint8_t*>(v.data());
  r->size = get_le64(p);
  r->live_bytes = get_le64(p + 8);
  uint32_t st = get_le32(p + 16);
  if (st > 2) return Status::Corruption("index file record has unknown state " + std::to_string(st));
  r->state = static_cast<FileState>(st);
  r->retired_ms = get_le64(p + 20);
  return Status::OK();
}

std::string encode_journal_entry(const JournalEntry& e) {
  std::string v(kJournalEntrySize, '\0');
  v[0] = char(e.op);
  std::memcpy(v.data() + 1, e.ns.data(), 16);
  std::memcpy(v.data() + 17, e.hash.data(), 16);
  return v;
}

Status decode_journal_entry(std::string_view v, JournalEntry* e) {
  if (v.size() != kJournalEntrySize || (v[0] != 1 && v[0] != 2))
    return Status::Corruption("index journal entry is malformed (" + std::to_string(v.size()) + " bytes)");
  e->op = static_cast<JournalOp>(v[0]);
  std::memcpy(e->ns.data(), v.data() + 1, 16);
  std::memcpy(e->hash.data(), v.data() + 17, 16);
  return Status::OK();
}

std::string block_key(const NamespaceId& ns, const BlockHash& h) {
  std::string k(32, '\0');
  std::memcpy(k.data(), ns.data(), 16);
  std::memcpy(k.data() + 16, h.data(), 16);
  return k;
}
bool parse_block_key(std::string_view k, NamespaceId* ns, BlockHash* h) {
  if (k.size() != 32) return false;
  std::memcpy(ns->data(), k.data(), 16);
  std::memcpy(h->data(), k.data() + 16, 16);
  return true;
}
std::string ns_key(const NamespaceId& ns) { return std::string(reinterpret_cast<const char*>(ns.data()), 16); }
namespace {
// A big-endian integer as a key (sorting as the integer does), and back (0 for a key of another size).
template <class T>
std::string be_key(T v) {
  std::string k(sizeof(T), '\0');
  auto* p = reinterpret_cast<uint8_t*>(k.data());
  if constexpr (sizeof(T) == 4) put_be32(p, v);
  else put_be64(p, v);
  return k;
}
template <class T>
T parse_be_key(std::string_view k) {
  if (k.size() != sizeof(T)) return 0;
  const auto* p = reinterpret_cast<const uint8_t*>(k.data());
  if constexpr (sizeof(T) == 4) return get_be32(p);
  else return get_be64(p);
}
}  // namespace
std::string file_key(uint32_t id) { return be_key(id); }
uint32_t parse_file_key(std::string_view k) { return parse_be_key<uint32_t>(k); }
std::string journal_key(uint64_t seq) { return be_key(seq); }
uint64_t parse_journal_key(std::string_view k) { return parse_be_key<uint64_t>(k); }
std::string doc_key(const NamespaceId& ns, std::string_view id) { return ns_key(ns) + std::string(id); }

void encode_access_record(const AccessRecord& r, uint8_t out[kAccessRecordSize]) {
  std::memcpy(out, r.ns.data(), 16);
  std::memcpy(out + 16, r.hash.data(), 16);
  put_le64(out + 32, r.access_ms);
}
AccessRecord decode_access_record(const uint8_t* in) {
  AccessRecord r;
  std::memcpy(r.ns.data(), in, 16);
  std::memcpy(r.hash.data(), in + 16, 16);
  r.access_ms = get_le64(in + 32);
  return r;
}

uint64_t block_fingerprint(const NamespaceId& ns, const BlockHash& h) {
  uint8_t buf[32];
  std::memcpy(buf, ns.data(), 16);
  std::memcpy(buf + 16, h.data(), 16);
  return XXH3_64bits(buf, 32);
}

}  // namespace ucm::fmt
