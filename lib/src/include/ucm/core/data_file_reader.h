// ucm/core/data_file_reader.h: verified reads of a store's data files (store_v1.md §3), the one
// read path of the store (loads, attachments) and of the admin commands (inspect --verify, gc
// --verify, migrate). Internal to libucm and lib/admin.
#pragma once
#include <cstdint>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "ucm/format/format.h"
#include "ucm/status.h"
#include "ucm/types.h"

namespace ucm {

/// Caches one read-only descriptor per data file. Thread-safe: any number of threads may read
/// at once (each with its own buffer). With direct_io, files are opened O_DIRECT; a read the
/// file system refuses (EINVAL) is retried once on a buffered descriptor, which then replaces
/// the cached one.
class DataFileReader {
 public:
  DataFileReader(std::string store, bool direct_io) : store_(std::move(store)), direct_io_(direct_io) {}
  ~DataFileReader();
  DataFileReader(const DataFileReader&) = delete;
  DataFileReader& operator=(const DataFileReader&) = delete;

  /// Reads the record at (file, off) into `buf` and verifies it against `e` (fmt::read_record:
  /// header, type, ids, length, checksum, payload XXH3). The payload is at buf->data() + kPage.
  /// NotFound: the data file is gone (gc retired it; a stale view). Corruption: any mismatch or
  /// a truncated file. IOError: the OS.
  Status read(uint32_t file, uint64_t off, const fmt::RecordExpect& e, fmt::AlignedBuffer* buf);
  /// The KV (repr = false) or representations record of block (ns, h) whose index entry is
  /// `rec`, verified as read() does and also against the entry's parent and token count.
  /// *payload points into `buf` (valid until its next use), *len is the payload length.
  Status read_block(const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& rec, bool repr,
                    fmt::AlignedBuffer* buf, const uint8_t** payload, uint64_t* len);
  /// The token ids in the header page of block (ns, h)'s KV record (store_v1.md §3.2), whose
  /// index entry is `rec`: one 4096-byte read, the header verified (checksums of header and ids,
  /// type, ids, parent and token count against the entry); the payload is not read. *tokens is
  /// empty for a record without ids ("tokens unknown"). Errors as read().
  Status read_block_tokens(const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& rec,
                           std::vector<uint32_t>* tokens);
  /// The data of attachment `name` of `ns` (the NS_ATTACHMENT record at (file, off) of `length`
  /// payload bytes with `checksum`), without the record's name prefix (§3.3). Corruption when the
  /// record names another attachment.
  Status read_attachment(const NamespaceId& ns, const std::string& name, uint32_t file, uint64_t off,
                         uint64_t length, uint64_t checksum, std::string* data);
  /// Cheap check without reading payloads: the data files of the entry's records exist and are
  /// long enough to hold them. NotFound (file missing) or Corruption (truncated).
  Status check_size(const fmt::BlockRecord& rec);
  /// Size of data file `id` on disk when first opened here; -1 when it is missing.
  int64_t file_size(uint32_t id);
  /// Forgets the cached descriptor of `id` (the file was retired, or the view is being refreshed).
  void drop(uint32_t id);

 private:
  struct Open {
    int fd = -1;
    bool direct = false;
    int64_t size = -1;
  };
  /// The cached descriptor of `id`, opening it when needed. NotFound when the file is missing.
  Status get(uint32_t id, Open* out);
  std::string where(uint32_t id) const;

  const std::string store_;
  const bool direct_io_;
  std::shared_mutex mu_;
  std::unordered_map<uint32_t, Open> files_;
};

}  // namespace ucm
