// ucm/format/data_file.h: writing and scanning data files (§3.4).
// The contract is formats/store/store_v1.md; section numbers refer to it. Pure format code:
// no RocksDB, no threads; thread-safe unless noted.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ucm/format/records.h"

namespace ucm::fmt {

/// Appends records to one data file. Created fresh (O_EXCL) by one writer session; never
/// reopened for append (§3.4). Thread-safe: offsets are reserved atomically and each write goes
/// to its own range.
///
/// Two ways to write: append() (small records: one buffered pwritev of header page, the
/// caller's pieces and a shared zero tail, no staging copy), or reserve() + write_at() (bulk:
/// the caller reserves a contiguous range, encodes records with encode_record() into page-aligned
/// buffers and writes them with O_DIRECT where the file system allows it).
class DataFileWriter {
 public:
  /// Creates STORE/data/NNNNNNNN.ucmd with its header, fsyncs the file and data/.
  /// IOError / NoSpace; InvalidArgument if it exists.
  /// `format_version`: the store's (§3.1: 2 in a version-2 store, whose readers refuse a newer file).
  static Status Create(const std::string& store, uint32_t file_id, std::unique_ptr<DataFileWriter>* out,
                       uint32_t format_version = kCreateFormatVersion);
  ~DataFileWriter();

  /// Appends one record whose payload is the concatenation of `pieces` (pointer, length).
  /// Fills h.payload_length, h.payload_checksum (XXH3 of the payload) and h.created_ms if 0.
  /// *offset = the record header's offset. NoSpace on ENOSPC (the reserved range is dead space).
  Status append(RecordHeader* h, const std::vector<std::pair<const void*, size_t>>& pieces,
                uint64_t* offset);
  /// Reserves `bytes` (a multiple of kPage) at the end of the file; *offset = its start. The
  /// range is allocated at once (fallocate, extending the file; it reads as zeros until written,
  /// which scanners treat as a torn tail), so that the O_DIRECT writes into it are overwrites
  /// that ext4 runs concurrently under a shared inode lock. NoSpace when the file system cannot
  /// hold it (the range is then dead space). File systems without fallocate: the range is only
  /// reserved, and the writes extend the file.
  Status reserve(uint64_t bytes, uint64_t* offset);
  /// Writes `len` bytes from `buf` at `offset` inside a range from reserve(). When buf, len and
  /// offset are page aligned the write uses O_DIRECT (no page-cache copy) if the file system
  /// supports it, else a buffered pwrite. NoSpace on ENOSPC.
  Status write_at(const void* buf, size_t len, uint64_t offset);
  /// fdatasync of the file.
  Status sync();
  /// Bytes reserved so far (header + all appended records) = the file size after pending appends.
  uint64_t size() const;
  uint32_t file_id() const { return file_id_; }
  const std::string& path() const { return path_; }

 private:
  DataFileWriter(int fd, uint32_t id, std::string path, uint64_t size);
  int fd_;
  uint32_t file_id_;
  std::string path_;
  struct State;
  std::unique_ptr<State> st_;
};

/// One record found by DataFileScanner.
struct ScannedRecord {
  enum class State {
    kValid,     ///< header and payload checksums match
    kCorrupt,   ///< bad header or payload in the middle of the file; `length` bytes skipped
    kTornTail,  ///< a bad or incomplete record running to EOF (a killed writer's leftover)
  };
  State state = State::kValid;
  uint64_t offset = 0;   ///< of the record header (or of the first bad page)
  uint64_t length = 0;   ///< bytes the record (or the bad run) occupies on disk
  RecordHeader header;   ///< valid when state == kValid (or kCorrupt with header_ok)
  bool header_ok = false;///< kCorrupt/kTornTail: the header was fine and the payload was not
  std::string error;     ///< what was wrong (kCorrupt / kTornTail)
};

/// Iterates the records of one data file in order (rebuild-index, inspect --verify, gc
/// compaction). After a bad header it resynchronises on the next page holding a valid header.
class DataFileScanner {
 public:
  /// Opens and checks the file header (Corruption / IOError name the path).
  static Status Open(const std::string& path, std::unique_ptr<DataFileScanner>* out);
  ~DataFileScanner();
  const FileHeader& header() const { return header_; }
  uint64_t file_size() const { return size_; }
  /// Next record; false at EOF. When verify_payload, the payload is read and checksummed (and
  /// copied into *payload if non-null); otherwise only the header is read (state kValid means
  /// "header valid and record inside the file"). Returns false also on an I/O error, which is
  /// then in status().
  bool next(ScannedRecord* rec, std::string* payload = nullptr, bool verify_payload = true);
  const Status& status() const { return status_; }

 private:
  DataFileScanner(int fd, std::string path, uint64_t size, FileHeader h);
  int fd_;
  std::string path_;
  uint64_t size_;
  uint64_t pos_ = kPage;
  FileHeader header_;
  Status status_;
  std::string page_;
};

}  // namespace ucm::fmt
