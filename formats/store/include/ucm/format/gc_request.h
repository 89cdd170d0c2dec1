// ucm/format/gc_request.h: gc requests beside a live writer (§11.5): the request file gc leaves
// in the writer's store directory (STORE/gc-requests/<nonce>.req), its names through the
// protocol (.req -> .work -> .done, or .bad) and the atomic small-file writes both sides use.
// The contract is formats/store/store_v1.md; section numbers refer to it. Pure format code:
// no RocksDB, no threads; thread-safe unless noted.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/format/common.h"

namespace ucm::fmt {

inline constexpr uint32_t kGcRequestVersion = 1;      ///< newest request version this code knows
inline constexpr size_t kGcRequestHeaderSize = 128;
inline constexpr size_t kGcRequestEntrySize = 32;     ///< namespace_id (16) || block_hash (16)
inline constexpr uint32_t kGcRequestRetireFiles = 1;  ///< flags bit 0: retire (and unlink) dead files

/// STORE/gc-requests: where gc leaves requests for the store's live writer.
std::string gc_requests_dir(const std::string& store);
/// STORE/gc-requests/<nonce><suffix>, suffix one of ".req", ".work", ".done", ".bad".
std::string gc_request_path(const std::string& store, const std::string& nonce, const char* suffix);
/// Splits "<nonce>.<suffix>" (a bare file name; nonce of 1-64 bytes of [0-9a-z]). False for
/// anything else (temporary files start with '.').
bool parse_gc_request_name(const std::string& name, std::string* nonce, std::string* suffix);
/// 16 lower-case hex digits from the system's random source.
std::string new_gc_nonce();

struct GcRequestEntry {
  NamespaceId ns{};
  BlockHash hash{};
};

/// A gc request (§11.5): the blocks the writer is asked to remove.
struct GcRequest {
  uint32_t version = kGcRequestVersion;
  uint32_t flags = kGcRequestRetireFiles;
  uint64_t created_ms = 0;
  uint64_t expires_ms = 0;   ///< the writer discards the request unapplied after this time
  uint64_t grace_ms = 0;     ///< retired data files are unlinked this long after retirement
  std::string requester;     ///< "host:pid:nonce", at most 63 bytes
  std::vector<GcRequestEntry> entries;
};

/// The request file's bytes: 128-byte header, entries, 8-byte XXH3-64 of the entries.
std::string encode_gc_request(const GcRequest& r);
/// Corruption for a bad magic, checksum or length; NotSupported for a version newer than
/// kGcRequestVersion (or an entry size this code does not know).
Status decode_gc_request(const void* data, size_t len, GcRequest* out);

/// Writes `data` as dir/name atomically: dir/.name.tmp-<pid>, fsync, rename, fsync of dir.
Status write_file_atomic(const std::string& dir, const std::string& name, const std::string& data);
/// The whole file. NotFound when it does not exist.
Status read_small_file(const std::string& path, std::string* out);

}  // namespace ucm::fmt
