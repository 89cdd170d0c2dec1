// ucm/format/index_values.h: the index's keys and values (§5), access log records (§6) and lookup fingerprints (§8).
// The contract is formats/store/store_v1.md; section numbers refer to it. Pure format code:
// no RocksDB, no threads; thread-safe unless noted.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "ucm/format/common.h"

namespace ucm::fmt {

// Index values (§5)

/// BlockRecord v1 (§5.3), 96 bytes.
struct BlockRecord {
  uint16_t version = 1;
  uint16_t flags = 0;  ///< bit 0: has representations; bit 1: the KV record holds token ids (§5.3)
  uint32_t token_count = 0;
  BlockHash parent{};
  uint32_t kv_file = 0;
  uint32_t repr_file = 0;
  uint64_t kv_offset = 0, kv_length = 0, kv_checksum = 0;
  uint64_t repr_offset = 0, repr_length = 0, repr_checksum = 0;
  uint64_t created_ms = 0;
  uint64_t last_access_ms = 0;
  bool has_repr() const { return flags & 1u; }
  bool has_tokens() const { return flags & 2u; }
  /// payload + repr bytes (what namespace "bytes" counts).
  uint64_t bytes() const { return kv_length + (has_repr() ? repr_length : 0); }
};
std::string encode_block_record(const BlockRecord& r);
/// Corruption when the size or version is wrong.
Status decode_block_record(std::string_view v, BlockRecord* r);

enum class FileState : uint32_t { kActive = 0, kSealed = 1, kRetired = 2 };
/// FileRecord (§5.4), 28 bytes.
struct FileRecord {
  uint64_t size = 0;
  uint64_t live_bytes = 0;
  FileState state = FileState::kActive;
  uint64_t retired_ms = 0;
};
std::string encode_file_record(const FileRecord& r);
Status decode_file_record(std::string_view v, FileRecord* r);
/// Bytes of a data file that hold nothing live (store_v1.md §5.4): all of a retired file; for
/// the others, `size` less the file header page and `live_bytes`. The header is overhead, not
/// dead space: a file of live records only has 0 dead bytes.
inline uint64_t file_dead_bytes(uint64_t size, uint64_t live_bytes, FileState state) {
  if (state == FileState::kRetired) return size;
  const uint64_t used = kPage + live_bytes;
  return size > used ? size - used : 0;
}

enum class JournalOp : uint8_t { kAdd = 1, kRemove = 2 };
struct JournalEntry {
  JournalOp op = JournalOp::kAdd;
  NamespaceId ns{};
  BlockHash hash{};
};
std::string encode_journal_entry(const JournalEntry& e);
Status decode_journal_entry(std::string_view v, JournalEntry* e);

// Keys.
std::string block_key(const NamespaceId& ns, const BlockHash& h);  ///< 32 bytes
/// Splits a 32-byte blocks key. False if the size is wrong.
bool parse_block_key(std::string_view k, NamespaceId* ns, BlockHash* h);
std::string ns_key(const NamespaceId& ns);                          ///< 16 bytes
std::string file_key(uint32_t file_id);                             ///< 4 bytes BE
uint32_t parse_file_key(std::string_view k);
std::string journal_key(uint64_t seq);                              ///< 8 bytes BE
uint64_t parse_journal_key(std::string_view k);
std::string doc_key(const NamespaceId& ns, std::string_view doc_id);

// Access log record (§6).
struct AccessRecord {
  NamespaceId ns{};
  BlockHash hash{};
  uint64_t access_ms = 0;
};
void encode_access_record(const AccessRecord& r, uint8_t out[kAccessRecordSize]);
AccessRecord decode_access_record(const uint8_t* in);

/// Lookup fingerprint (§8): XXH3-64(namespace_id || block_hash).
uint64_t block_fingerprint(const NamespaceId& ns, const BlockHash& h);

}  // namespace ucm::fmt
