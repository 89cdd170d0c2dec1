// ucm/format/fptable_file.h: the fingerprint table file STORE/fptable (formats/store/fptable.md),
// the persisted lookup table of store_v1.md §8. Derived data, no part of the store's format
// version. Pure format code: no RocksDB, no threads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "ucm/status.h"

namespace ucm::fmt {

inline constexpr uint32_t kFpTableVersion = 1;         ///< fptable.md §5
inline constexpr uint32_t kFpTableFingerprintId = 1;   ///< XXH3-64(ns || hash), 0 stored as 1 (§1)
inline constexpr size_t kFpTableHeaderBytes = 4096;    ///< §2
inline constexpr size_t kFpTableIdentityBytes = 64;    ///< §2, zero-padded, at most 63 used

/// STORE/fptable.
std::string fptable_path(const std::string& store);

/// The header fields of fptable.md §2 (magic, version, sizes and checksums are implied).
struct FpTableHeader {
  uint64_t capacity = 0;
  uint64_t count = 0;
  uint64_t journal_seq = 0;
  uint64_t created_ms = 0;
  uint64_t slots_checksum = 0;
  std::string index_identity;
};

/// Writes the 4096-byte header (magic, version 1, checksum).
void encode_fptable_header(const FpTableHeader& h, uint8_t out[kFpTableHeaderBytes]);
/// Checks and decodes a header of a file of `file_size` bytes (§4 step 1, all but the slots
/// checksum, identity and journal_seq, which need the slots and the index). Corruption names
/// what is wrong; Version for an unknown version or fingerprint function.
Status decode_fptable_header(const uint8_t* p, uint64_t file_size, FpTableHeader* h);

}  // namespace ucm::fmt
