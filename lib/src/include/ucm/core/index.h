// ucm/core/index.h: a thin layer over the store's RocksDB index (formats/store/store_v1.md §5).
// Internal to libucm and the admin commands (lib/admin); not installed, not part of the ABI.
//
// Column families: default (meta), namespaces, blocks, files, journal, docs.
// A primary Index (one writer process, holding the store's WriterLock) reads and writes; a
// secondary Index (any number of readers) reads and catches up with try_catch_up().
// All methods are thread-safe.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ucm/format/format.h"
#include "ucm/status.h"
#include "ucm/types.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class WriteBatch;
}  // namespace rocksdb

namespace ucm {

/// Meta keys in the default family (§5.1).
inline constexpr const char* kMetaFormatVersion = "format_version";  // u32 LE
inline constexpr const char* kMetaCreatedMs = "created_ms";          // u64 LE
inline constexpr const char* kMetaCreatedBy = "created_by";          // string
inline constexpr const char* kMetaNextFileId = "next_file_id";       // u32 LE
inline constexpr const char* kMetaJournalSeq = "journal_seq";        // u64 LE

class Index {
 public:
  enum class Family { kMeta = 0, kNamespaces, kBlocks, kFiles, kJournal, kDocs, kCount };

  /// Opens the primary (read-write) instance of STORE/index (`dir`). With `create`, creates the
  /// database and its column families if missing. The caller must hold the WriterLock.
  /// `write_buffer_budget` (bytes, 0 = RocksDB's per-family defaults) caps the memtables of all
  /// families together (DBOptions::db_write_buffer_size): gc's removals then flush instead of
  /// growing memory with the number of blocks removed.
  static Status OpenPrimary(const std::string& dir, bool create, std::unique_ptr<Index>* out,
                            uint64_t write_buffer_budget = 0);
  /// Opens a secondary (read-only, catching up) instance; `secondary_dir` is a private scratch
  /// dir (STORE/readers/<host>-<pid>-<nonce>), created if missing. The caller removes it.
  static Status OpenSecondary(const std::string& dir, const std::string& secondary_dir,
                              std::unique_ptr<Index>* out);
  ~Index();

  bool is_primary() const { return primary_; }
  /// Secondary: TryCatchUpWithPrimary. Primary: no-op.
  Status try_catch_up();

  // ---- raw access
  Status get(Family f, const std::string& key, std::string* value) const;  ///< NotFound if absent
  /// Iterates keys with `prefix` (all keys if empty) in order; fn returns false to stop.
  Status scan(Family f, const std::string& prefix,
              const std::function<bool(std::string_view key, std::string_view value)>& fn) const;
  /// Iterates keys >= start in order; fn returns false to stop.
  Status scan_from(Family f, const std::string& start,
                   const std::function<bool(std::string_view key, std::string_view value)>& fn) const;

  // ---- typed reads
  Status get_meta_u64(const char* key, uint64_t* v) const;  ///< u32 or u64 values; NotFound
  Status get_meta_string(const char* key, std::string* v) const;
  Status get_block(const NamespaceId& ns, const BlockHash& h, fmt::BlockRecord* r) const;
  /// Every block (of `ns` when non-null).
  Status for_each_block(const NamespaceId* ns,
                        const std::function<bool(const NamespaceId&, const BlockHash&,
                                                 const fmt::BlockRecord&)>& fn) const;
  /// Descriptor JSON with counters (§5.2).
  Status get_namespace(const NamespaceId& ns, std::string* json) const;
  Status for_each_namespace(const std::function<bool(const NamespaceId&, const std::string& json)>& fn) const;
  Status get_file(uint32_t file_id, fmt::FileRecord* r) const;
  Status for_each_file(const std::function<bool(uint32_t, const fmt::FileRecord&)>& fn) const;
  /// Journal entries with sequence > after_seq, in order.
  Status for_each_journal(uint64_t after_seq,
                          const std::function<bool(uint64_t seq, const fmt::JournalEntry&)>& fn) const;
  /// The RocksDB database identity (a new one for every newly created index): ties derived
  /// files such as STORE/fptable to this index (formats/store/fptable.md §2).
  Status identity(std::string* id) const;
  /// Last journal sequence written (meta journal_seq; 0 if none).
  uint64_t journal_seq() const;
  Status get_doc(const NamespaceId& ns, const std::string& id, std::string* json) const;
  Status for_each_doc(const NamespaceId& ns,
                      const std::function<bool(const std::string& id, const std::string& json)>& fn) const;

  // ---- writes (primary only; NotSupported on a secondary)
  /// A set of changes committed atomically by write(). Counter deltas and journal entries are
  /// resolved at commit time under the index's write mutex.
  class Batch {
   public:
    Batch();
    ~Batch();
    /// Moves the pending operations; `other` is left empty and usable.
    Batch(Batch&& other) noexcept;
    Batch& operator=(Batch&& other) noexcept;
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;
    /// Drops every pending operation (the batch is empty afterwards and can be reused).
    void clear();
    void put(Family f, const std::string& key, const std::string& value);
    void del(Family f, const std::string& key);
    void put_meta_u32(const char* key, uint32_t v);
    void put_meta_u64(const char* key, uint64_t v);
    void put_meta_string(const char* key, const std::string& v);
    /// Block add/remove; each also appends a journal entry (§5.5).
    void put_block(const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& r);
    void delete_block(const NamespaceId& ns, const BlockHash& h);
    /// Overwrites a block record without a journal entry (e.g. last_access_ms merge, relocation).
    void update_block(const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& r);
    void put_namespace(const NamespaceId& ns, const std::string& json);
    void put_file(uint32_t file_id, const fmt::FileRecord& r);
    void delete_file(uint32_t file_id);
    void put_doc(const NamespaceId& ns, const std::string& id, const std::string& json);
    void delete_doc(const NamespaceId& ns, const std::string& id);
    /// Adds to the namespace's "blocks" / "bytes" counters (read-modify-write at commit).
    void add_ns_counters(const NamespaceId& ns, int64_t blocks, int64_t bytes);
    /// Adds to a file's size / live_bytes (read-modify-write at commit; creates the record
    /// as active when absent).
    void add_file_bytes(uint32_t file_id, int64_t size, int64_t live_bytes);
    bool empty() const;

   private:
    friend class Index;
    std::unique_ptr<rocksdb::WriteBatch> wb_;
    struct Op {
      Family f;
      bool del;
      std::string key, value;
    };
    std::vector<Op> ops_;
    std::vector<fmt::JournalEntry> journal_;
    std::map<NamespaceId, std::pair<int64_t, int64_t>> ns_delta_;
    std::map<uint32_t, std::pair<int64_t, int64_t>> file_delta_;
  };
  /// Commits the batch atomically (sync = true: durable on return). Assigns journal sequences.
  Status write(Batch& b, bool sync = true);
  /// Allocates the next data file id (persists next_file_id, synced).
  Status allocate_file_id(uint32_t* id);
  /// Flushes every memtable to SST files (primary; no-op on a secondary). Also done when a
  /// primary is closed, so that the next open does not replay the WAL.
  Status flush();
  /// Full compaction (after gc); flushes memtables.
  Status compact();
  /// Deletes every journal entry with sequence < first_kept in one synced range delete
  /// (store_v1.md §5.5). Primary only.
  Status delete_journal_below(uint64_t first_kept);

  const std::string& dir() const { return dir_; }

 private:
  Index() = default;
  rocksdb::ColumnFamilyHandle* cf(Family f) const { return cfs_[static_cast<int>(f)]; }
  std::string dir_;
  bool primary_ = false;
  rocksdb::DB* db_ = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> cfs_;
  std::mutex write_mu_;
  uint64_t journal_seq_ = 0;  // primary: last assigned
};

/// Names of the column families in Family order.
const char* index_family_name(Index::Family f);

}  // namespace ucm
