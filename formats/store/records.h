// formats/store/records.h: encoding, decoding and file I/O of the ucm store format v1.
// The contract is formats/store/store_v1.md; section numbers below refer to it.
//
// Everything here is pure format code: no RocksDB, no threads. libucm (lib/src), the admin
// commands (lib/admin) and tests use it. All functions are thread-safe unless noted.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucm/status.h"
#include "ucm/version.h"
#include "ucm/types.h"

namespace ucm::fmt {

// ---------------------------------------------------------------------------------------------
// Constants (§2, §3)
inline constexpr uint32_t kFormatVersion = 2;       ///< newest format this code reads (it reads 1 too), and the one it writes (§10)
inline constexpr uint32_t kMinReaderVersion = 2;    ///< written into new superblocks (§2)
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

// ---------------------------------------------------------------------------------------------
// Store directory layout (§1)
std::string superblock_path(const std::string& store);  ///< STORE/UCMSTORE
std::string lock_path(const std::string& store);        ///< STORE/LOCK
std::string index_dir(const std::string& store);        ///< STORE/index
std::string data_dir(const std::string& store);         ///< STORE/data
std::string access_dir(const std::string& store);       ///< STORE/access
std::string readers_dir(const std::string& store);      ///< STORE/readers
std::string tmp_dir(const std::string& store);          ///< STORE/tmp
/// STORE/data/NNNNNNNN.ucmd (8 decimal digits).
std::string data_file_path(const std::string& store, uint32_t file_id);
/// Parses "NNNNNNNN.ucmd" (a bare file name); false for anything else.
bool parse_data_file_name(std::string_view name, uint32_t* file_id);
/// Host name of this machine ("unknown" if gethostname fails).
std::string host_name();
/// fsync of a directory (after creating / renaming / unlinking an entry in it).
Status fsync_dir(const std::string& dir);
/// mkdir -p. IOError names the path.
Status make_dirs(const std::string& dir);

// ---------------------------------------------------------------------------------------------
// Superblock (§2)
struct Superblock {
  uint32_t format_version = kFormatVersion;
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
/// Creates a new empty store skeleton in `store` (missing or empty dir): directories of §1 and
/// the superblock. Does not create the index (the caller opens RocksDB with create_if_missing
/// and writes the meta keys). Not crash-atomic by itself: libucm runs it on the sibling
/// creating_dir() and renames the finished store into place (§1.1). InvalidArgument when `store` exists and is a non-empty directory
/// without a superblock, or is not a directory.
Status create_store_skeleton(const std::string& store, Superblock* sb_out);

/// What a path holds, as seen by open and create (§1.1).
enum class StoreDirState {
  kMissing,      ///< nothing there
  kEmpty,        ///< an empty directory
  kSkeleton,     ///< no superblock and nothing of value: only skeleton entries of §1 left by a
                 ///< killed creation (empty data/ access/ readers/, tmp/ with at most
                 ///< UCMSTORE.tmp, index/ with RocksDB files only, LOCK); safe to create into
  kHalfCreated,  ///< superblock, but no index/CURRENT and no data file: creation was killed
                 ///< before the index existed; a writer finishes creating it
  kStore,        ///< superblock and an index (or data files to rebuild one from)
  kNotAStore,    ///< anything else: a non-empty directory without superblock, or not a directory
};
/// Classifies `store` (never modifies it). IOError when it cannot be listed.
Status classify_store_dir(const std::string& store, StoreDirState* state);
/// Removes the entries of a kSkeleton directory, leaving it empty. InvalidArgument when the
/// directory is not (or no longer) a skeleton.
Status clear_store_skeleton(const std::string& store);
/// The sibling where a store is built before it is renamed into place (§1.1):
/// "<parent>/.<name>.creating-<pid>".
std::string creating_dir(const std::string& store, long pid);
/// Removes leftover "<parent>/.<name>.creating-<pid>" siblings of `store` whose creator is gone
/// (the pid does not exist on this host and the directory's LOCK is not flock-ed). Best effort;
/// returns how many it removed.
int remove_dead_creating_dirs(const std::string& store);

// ---------------------------------------------------------------------------------------------
// Writer lock (§8): flock(LOCK_EX|LOCK_NB) on STORE/LOCK, holder text "pid=P host=H since=T\n".
class WriterLock {
 public:
  /// Takes the lock. Busy: "store STORE is locked by pid P on host H since T; wait for it or stop
  /// it" (T = ISO-8601 UTC time).
  static Status Acquire(const std::string& store, std::unique_ptr<WriterLock>* out);
  ~WriterLock();  ///< releases (closes the fd; the text is left, it is informational)
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  explicit WriterLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// ---------------------------------------------------------------------------------------------
// Data files (§3)
struct FileHeader {
  uint32_t format_version = kFormatVersion;
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
};
/// Record header flag bit 0 (§3.2, NS_ATTACHMENT only): the payload starts with the attachment's
/// name (§3.3). Records of writers before it have flags 0 and hold the bare data.
inline constexpr uint32_t kRecordFlagNamed = 1;
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
/// Checks magic, record_version, header_size and header checksum. Corruption names `where`.
Status decode_record_header(const uint8_t* page, const std::string& where, RecordHeader* h);

/// A page-aligned heap buffer (for O_DIRECT). Grows, never shrinks; contents not preserved.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  /// Ensures capacity >= n (rounded up to a page). Returns false on allocation failure.
  bool reserve(size_t n);
  uint8_t* data() { return p_; }
  size_t capacity() const { return cap_; }

 private:
  uint8_t* p_ = nullptr;
  size_t cap_ = 0;
};

/// pread until `len` bytes or EOF, retrying EINTR and short reads. *got = bytes read; when the OS
/// fails the read, *os_errno (if given) gets its errno (0 otherwise).
Status pread_full(int fd, void* buf, size_t len, uint64_t offset, size_t* got, const std::string& where,
                  int* os_errno = nullptr);
/// pwrite all of `len` bytes, retrying EINTR and short writes. ENOSPC/EDQUOT -> NoSpace.
Status pwrite_full(int fd, const void* buf, size_t len, uint64_t offset, const std::string& where);

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
  static Status Create(const std::string& store, uint32_t file_id, std::unique_ptr<DataFileWriter>* out);
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

// ---------------------------------------------------------------------------------------------
// Index values (§5)

/// BlockRecord v1 (§5.3), 96 bytes.
struct BlockRecord {
  uint16_t version = 1;
  uint16_t flags = 0;  ///< bit 0: has representations
  uint32_t token_count = 0;
  BlockHash parent{};
  uint32_t kv_file = 0;
  uint32_t repr_file = 0;
  uint64_t kv_offset = 0, kv_length = 0, kv_checksum = 0;
  uint64_t repr_offset = 0, repr_length = 0, repr_checksum = 0;
  uint64_t created_ms = 0;
  uint64_t last_access_ms = 0;
  bool has_repr() const { return flags & 1u; }
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

/// MD5 of bytes (OpenSSL EVP), e.g. MD5(name) for attachment keys.
BlockHash md5(const void* data, size_t len);

}  // namespace ucm::fmt
