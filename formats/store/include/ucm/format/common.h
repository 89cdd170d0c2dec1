// ucm/format/common.h: constants, checksums, clocks and byte order of the store format (§2, §3).
// The contract is formats/store/store_v1.md; section numbers refer to it. Pure format code:
// no RocksDB, no threads; thread-safe unless noted.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ucm/status.h"
#include "ucm/types.h"
#include "ucm/version.h"

namespace ucm::fmt {

// Constants (§2, §3)
inline constexpr uint32_t kFormatVersion = 5;       ///< newest single-store format this code reads and writes (it reads 1, 2 and 4 too) (§10)
inline constexpr uint32_t kCreateFormatVersion = 4; ///< the format new stores (and shards) get; a writer steps one to 5 with its first page namespace (§12.2)
inline constexpr uint32_t kMinReaderVersion = 4;    ///< written into new superblocks (§2)
inline constexpr uint32_t kPageNamespacesFormatVersion = 5;  ///< the first format that may hold SGLang page namespaces (§12.2)
inline constexpr uint32_t kMinWriterVersion = 2;    ///< the oldest store format a writer opens (version 1: `ucm migrate --upgrade` first)
inline constexpr uint32_t kTokensFormatVersion = 4; ///< the first format whose BLOCK_KV records may hold token ids (§3.2)
inline constexpr uint32_t kMaxRecordTokens = 992;   ///< token ids that fit in a record header page: (4096 - 128) / 4 (§3.2)
inline constexpr size_t kPage = 4096;               ///< record alignment and header size
inline constexpr uint64_t kFileRollBytes = 1ull << 30;  ///< writers roll to a new data file past this
/// Free-space reserve of writers (§3.4): a write of B bytes needs B + max(2B, min(this, 1/16 of
/// the file system)) bytes free; 64 MiB covers one flush of a full RocksDB memtable.
inline constexpr uint64_t kSpaceReserveMax = 64ull << 20;
inline constexpr size_t kSuperblockSize = 64;
inline constexpr size_t kBlockRecordSize = 96;      ///< BlockRecord v1 (§5.3)
inline constexpr size_t kFileRecordSize = 28;       ///< FileRecord (§5.4)
inline constexpr size_t kJournalEntrySize = 33;     ///< op + ns + hash (§5.5)
inline constexpr size_t kAccessRecordSize = 40;     ///< access log record (§6)
inline constexpr const char* kVersionString = "ucm " UCM_VERSION_STRING;

/// XXH3-64, seed 0: the checksum of every structure in the format.
uint64_t xxh3(const void* data, size_t len);
/// Milliseconds since the Unix epoch (UTC).
uint64_t now_ms();
/// Rounds up to a multiple of kPage.
inline uint64_t round_up_page(uint64_t n) { return (n + kPage - 1) / kPage * kPage; }
/// On-disk size of a record with a payload of `payload_length` bytes: 4096 + round_up(len).
inline uint64_t record_size(uint64_t payload_length) { return kPage + round_up_page(payload_length); }

// Little-endian / big-endian helpers (§ intro: values LE, integer RocksDB keys BE).
void put_le16(uint8_t* p, uint16_t v);
void put_le32(uint8_t* p, uint32_t v);
void put_le64(uint8_t* p, uint64_t v);
uint16_t get_le16(const uint8_t* p);
uint32_t get_le32(const uint8_t* p);
uint64_t get_le64(const uint8_t* p);
void put_be32(uint8_t* p, uint32_t v);
void put_be64(uint8_t* p, uint64_t v);
uint32_t get_be32(const uint8_t* p);
uint64_t get_be64(const uint8_t* p);

/// MD5 of bytes (OpenSSL EVP), e.g. MD5(name) for attachment keys.
BlockHash md5(const void* data, size_t len);

}  // namespace ucm::fmt
