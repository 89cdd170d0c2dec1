// ucm/format/superblock.h: the superblock STORE/UCMSTORE (§2).
// The contract is formats/store/store_v1.md; section numbers refer to it. Pure format code:
// no RocksDB, no threads; thread-safe unless noted.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "ucm/format/common.h"

namespace ucm::fmt {

// Superblock (§2)
struct Superblock {
  uint32_t format_version = kCreateFormatVersion;
  uint32_t min_reader_version = kMinReaderVersion;
  uint64_t created_ms = 0;
  std::string created_by = kVersionString;  ///< at most 32 bytes
};
/// Encodes into exactly 64 bytes, with the checksum.
void encode_superblock(const Superblock& sb, uint8_t out[kSuperblockSize]);
/// Decodes 64 bytes. Corruption (bad magic / checksum) names `where`. Does not check the version.
Status decode_superblock(const uint8_t* buf, size_t len, const std::string& where, Superblock* sb);
/// Reads STORE/UCMSTORE and checks it. InvalidArgument "not a ucm store" when the directory or
/// the superblock is missing; Corruption on a bad checksum; Version (with the spec's message)
/// when format_version > kFormatVersion.
Status read_superblock(const std::string& store, Superblock* sb);
/// Writes STORE/UCMSTORE through tmp/ (write, fsync, rename, fsync dir). Creates tmp/.
Status write_superblock(const std::string& store, const Superblock& sb);

}  // namespace ucm::fmt
