// formats/store/records.cc: file and record headers, attachment payloads, record encoding and reads (§3.1-§3.3).
#include "ucm/format/records.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>
#include <algorithm>
#include <cstring>

#include "format_internal.h"

namespace ucm::fmt {

using detail::kRecMagic;
using detail::kDataMagic;
using detail::at;

void encode_file_header(const FileHeader& h, uint8_t out[kPage]) {
  detail::encode_head(kDataMagic, {h.format_version, h.file_id, h.created_ms}, out, kPage);
  put_le64(out + 4088, xxh3(out, 4088));
}

Status decode_file_header(const uint8_t* p, const std::string& where, FileHeader* h) {
  detail::Head head;
  if (!detail::decode_head(kDataMagic, p, &head))
    return Status::Corruption("data file " + where + " has a bad header magic (not \"UCMDATA1\")");
  if (get_le64(p + 4088) != xxh3(p, 4088))
    return Status::Corruption("data file " + where + " header checksum mismatch");
  h->format_version = head.format_version;
  h->file_id = head.second;
  h->created_ms = head.created_ms;
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
  if ((h.flags & kRecordFlagTokens) && h.tokens && h.token_count >= 1 && h.token_count <= kMaxRecordTokens) {
    for (uint32_t i = 0; i < h.token_count; ++i) put_le32(p + 128 + 4 * size_t(i), h.tokens[i]);
    put_le64(p + 96, xxh3(p + 128, 4 * size_t(h.token_count)));
  } else {
    put_le32(p + 12, h.flags & ~kRecordFlagTokens);  // nothing to hold: tokens unknown
  }
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
  h->tokens_checksum = get_le64(p + 96);
  h->tokens = nullptr;
  if (h->flags & kRecordFlagTokens) {
    if (h->type != RecordType::kBlockKV || h->token_count < 1 || h->token_count > kMaxRecordTokens)
      return Status::Corruption(where + ": token ids flagged on a " + record_type_name(h->type) + " record of " +
                                std::to_string(h->token_count) + " tokens (1 to " +
                                std::to_string(kMaxRecordTokens) + ", BLOCK_KV only)");
    if (xxh3(p + 128, 4 * size_t(h->token_count)) != h->tokens_checksum)
      return Status::Corruption(where + ": record token ids checksum mismatch");
  }
  return Status::OK();
}

std::vector<uint32_t> record_tokens(const uint8_t* p, const RecordHeader& h) {
  std::vector<uint32_t> out;
  if (!(h.flags & kRecordFlagTokens)) return out;
  out.resize(h.token_count);
  for (uint32_t i = 0; i < h.token_count; ++i) out[i] = get_le32(p + 128 + 4 * size_t(i));
  return out;
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
  h->flags = get_le32(dst + 12);  // the tokens flag stays only where ids were written
  h->tokens_checksum = get_le64(dst + 96);
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

}  // namespace ucm::fmt
