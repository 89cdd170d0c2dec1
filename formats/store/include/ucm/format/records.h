// ucm/format/records.h: data file headers, record headers, record payloads and record reads (§3.1-§3.3).
// The contract is formats/store/store_v1.md; section numbers refer to it. Pure format code:
// no RocksDB, no threads; thread-safe unless noted.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucm/format/io.h"

namespace ucm::fmt {

// Data files (§3)
struct FileHeader {
  uint32_t format_version = kCreateFormatVersion;
  uint32_t file_id = 0;
  uint64_t created_ms = 0;
};
void encode_file_header(const FileHeader& h, uint8_t out[kPage]);
Status decode_file_header(const uint8_t* page, const std::string& where, FileHeader* h);

enum class RecordType : uint16_t {
  kBlockKV = 1,
  kBlockRepr = 2,
  kNamespace = 3,
  kNsAttachment = 4,
  kDocument = 5,
};
const char* record_type_name(RecordType t);

struct RecordHeader {
  uint16_t record_version = 1;
  RecordType type = RecordType::kBlockKV;
  uint32_t flags = 0;
  NamespaceId ns{};
  BlockHash key{};      ///< block hash / MD5(name) / MD5(doc id) / zero (§3.2)
  BlockHash parent{};
  uint64_t payload_length = 0;
  uint64_t payload_checksum = 0;
  uint32_t token_count = 0;
  uint64_t created_ms = 0;
  /// With kRecordFlagTokens (BLOCK_KV, format 4): XXH3-64 of the token ids' bytes (§3.2). Set by
  /// encode_record_header from `tokens`, read by decode_record_header.
  uint64_t tokens_checksum = 0;
  /// Encoding only: with kRecordFlagTokens, the token_count ids to write at offset 128 (u32 LE).
  const uint32_t* tokens = nullptr;
};
/// Record header flag bit 0 (§3.2, NS_ATTACHMENT only): the payload starts with the attachment's
/// name (§3.3). Records of writers before it have flags 0 and hold the bare data.
inline constexpr uint32_t kRecordFlagNamed = 1;
/// Record header flag bit 1 (§3.2, BLOCK_KV of format 4 only): the header page holds the block's
/// token_count token ids at offset 128, checked by tokens_checksum (offset 96).
inline constexpr uint32_t kRecordFlagTokens = 2;
/// Longest attachment name (bytes of UTF-8) a writer accepts.
inline constexpr size_t kMaxAttachmentName = 1024;
/// An NS_ATTACHMENT payload (§3.3): u32 name_len || name || zero pad to a multiple of 8 || data.
std::string encode_attachment_payload(std::string_view name, const void* data, size_t len);
/// Splits the payload of an NS_ATTACHMENT record whose header has `flags`: with kRecordFlagNamed,
/// *name = the name and *data_offset = where the data starts; without (older records), *name is
/// empty and the whole payload is data (*data_offset = 0). Corruption (naming `where`) when the
/// name prefix runs past the payload.
Status decode_attachment_payload(uint32_t flags, const uint8_t* payload, size_t len, const std::string& where,
                                 std::string* name, size_t* data_offset);

/// Fills a whole 4096-byte page (zeros + fields + header checksum).
void encode_record_header(const RecordHeader& h, uint8_t page[kPage]);
/// Checks magic, record_version, header_size, header checksum and, with kRecordFlagTokens,
/// token_count <= kMaxRecordTokens and the tokens checksum. Corruption names `where`. Leaves
/// h->tokens null: record_tokens() copies the ids out.
Status decode_record_header(const uint8_t* page, const std::string& where, RecordHeader* h);
/// The token ids of a header page that decode_record_header accepted into `h`: h.token_count ids
/// when it has kRecordFlagTokens, none (empty) otherwise ("tokens unknown").
std::vector<uint32_t> record_tokens(const uint8_t* page, const RecordHeader& h);


/// What a reader expects of a record (from the index). Fields left at their "any" value are not
/// checked: type always checked; ns/key checked when check_ids.
struct RecordExpect {
  RecordType type = RecordType::kBlockKV;
  bool check_ids = true;
  NamespaceId ns{};
  BlockHash key{};
  uint64_t payload_length = 0;
  uint64_t payload_checksum = 0;
};

/// Reads the record at `offset` of the open file `fd` (header page + payload, one pread of
/// record_size(expect.payload_length) bytes into `buf`, which is grown as needed and is page
/// aligned, so `fd` may be opened O_DIRECT) and verifies: header valid, type / ns / key /
/// payload_length / payload_checksum equal to `expect`, and XXH3 of the payload equal to the
/// checksum. On OK the payload is at buf->data() + kPage. `where` (e.g. "data/00000003.ucmd")
/// is put into messages with the offset. Errors: Corruption (any mismatch, or the record runs
/// past EOF: truncated file), IOError (the OS). When the OS failed the read, *os_errno (if
/// given) gets its errno, 0 otherwise: EINVAL from an O_DIRECT descriptor means the file system
/// refused direct I/O, and the caller retries buffered.
Status read_record(int fd, uint64_t offset, const RecordExpect& expect, AlignedBuffer* buf,
                   const std::string& where, int* os_errno = nullptr);

/// Encodes one whole record into `dst` (record_size(payload) bytes; the header page, then the
/// payload = concatenation of `pieces`, then zero padding to a page multiple). The payload is
/// copied and XXH3-hashed in one pass, 64 KiB at a time, so each chunk is hashed while it is in
/// cache. Fills h.payload_length, h.payload_checksum and h.created_ms (if 0).
void encode_record(RecordHeader* h, const std::vector<std::pair<const void*, size_t>>& pieces, uint8_t* dst);

}  // namespace ucm::fmt
