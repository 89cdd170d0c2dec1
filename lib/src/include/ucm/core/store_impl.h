// ucm/core/store_impl.h: StoreImpl, the one implementation of ucm::Store, and the helpers its
// parts share. Internal to libucm. Its definitions are split by concern:
//   store_open.cc   creation, open (init), close, the background thread, Store::Open
//   store_meta.cc   namespaces, attachments, documents (the meta records and their index entries)
//   store_read.cc   the lookup table, journal catch-up, lookup, load, load_repr, metrics
//   store_write.cc  data files, the free-space reserve, the commit thread, dump
#pragma once
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "ucm/format/format.h"
#include "ucm/core/access_log.h"
#include "ucm/core/data_file_reader.h"
#include "ucm/core/file_roller.h"
#include "ucm/core/fptable.h"
#include "ucm/core/fptable_file.h"
#include "ucm/core/index.h"
#include "ucm/core/index_open.h"
#include "ucm/core/metrics.h"
#include "ucm/core/task_impl.h"
#include "ucm/core/thread_pool.h"
#include "ucm/store.h"

namespace ucm::detail {

inline uint64_t elapsed_ns(Clock::time_point t0) {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

inline std::string rel_data_name(uint32_t id) {
  char b[32];
  std::snprintf(b, sizeof b, "data/%08u.ucmd", id);
  return b;
}


// ---------------------------------------------------------------------------------------------
/// The writer's current data file and its in-memory FileRecord.
using ucm::ActiveFile;

inline BlockInfo to_info(const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& r) {
  BlockInfo b;
  b.ns = ns;
  b.hash = h;
  b.parent = r.parent;
  b.token_count = r.token_count;
  b.kv_file = r.kv_file;
  b.kv_offset = r.kv_offset;
  b.kv_length = r.kv_length;
  b.kv_checksum = r.kv_checksum;
  b.has_repr = r.has_repr();
  b.repr_file = r.repr_file;
  b.repr_offset = r.repr_offset;
  b.repr_length = r.repr_length;
  b.repr_checksum = r.repr_checksum;
  b.created_ms = r.created_ms;
  b.last_access_ms = r.last_access_ms;
  return b;
}


/// One dump task's state, shared by its phases (StoreImpl::dump_*): per item, its index record
/// once written, whether it is skipped (already present, or a duplicate in the task) and its
/// reserved slot; the files the task wrote (to fdatasync) and write_epoch_ after its last write.
struct DumpState {
  NamespaceId ns;
  NamespaceDesc desc;
  std::vector<DumpItem> items;
  std::vector<fmt::BlockRecord> recs;
  std::vector<bool> skip;
  std::vector<std::shared_ptr<ActiveFile>> slot_file;
  std::vector<uint64_t> slot_off;
  std::vector<std::shared_ptr<ActiveFile>> files;
  uint64_t epoch = 0;
};


// =============================================================================================
class StoreImpl : public Store {
 public:
  StoreImpl(std::string path, const OpenOptions& o) : path_(std::move(path)), opts_(o) {}
  ~StoreImpl() override;

  Status init(bool create);
  /// Creates a new store at path_ (missing, empty or kSkeleton): built in the sibling
  /// fmt::creating_dir() and renamed into place, so the path holds a complete store or nothing
  /// (store_v1.md §1.1). Leaves lock_ held. *raced: another process put something at the path
  /// meanwhile; nothing was created, classify again.
  Status create_new(fmt::StoreDirState state, bool* raced);
  /// Creation inside `target` itself (a mount point, which a rename cannot replace): superblock
  /// last, so a kill leaves a skeleton the next create clears.
  Status create_in_place(const std::string& target, fmt::StoreDirState state);

  const std::string& path() const override { return path_; }
  bool read_only() const override { return opts_.mode == OpenOptions::Mode::kReadOnly; }

  Status register_namespace(const NamespaceDesc& desc, NamespaceId* id) override;
  Status find_namespace(const std::string& name_or_id, NamespaceDesc* desc, NamespaceId* id) override;
  Status get_namespace(const NamespaceId& ns, NamespaceDesc* desc) override;
  std::vector<NamespaceDesc> namespaces() override;
  Status put_attachment(const NamespaceId& ns, const std::string& name, const void* data, size_t len) override;
  Status get_attachment(const NamespaceId& ns, const std::string& name, std::string* data) override;

  Status lookup(const NamespaceId& ns, const BlockHash* hashes, size_t n, uint8_t* present,
                size_t* prefix_blocks) override;
  std::shared_ptr<Task> load(const NamespaceId& ns, const BlockHash* hashes, size_t n, const LoadDest& dest) override;
  std::shared_ptr<Task> load_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n, void* const* dst,
                                  const size_t* cap) override;
  std::shared_ptr<Task> visit_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n, ReprVisitor visit) override;
  std::shared_ptr<Task> dump(const NamespaceId& ns, const DumpItem* items, size_t n) override;
  Status get_block(const NamespaceId& ns, const BlockHash& hash, BlockInfo* info) override;

  Status put_document(const NamespaceId& ns, const DocumentEntry& doc) override;
  Status put_documents(const NamespaceId& ns, const DocumentEntry* docs, size_t n) override;
  Status get_document(const NamespaceId& ns, const std::string& id, DocumentEntry* doc) override;
  std::vector<DocumentEntry> documents(const NamespaceId& ns) override;

  Status refresh() override;
  std::string metrics_text() const override;

  /// Which payload of a block record read_verified reads.
  enum class Payload { kKV, kRepr };
  /// The one verified read of a block payload (load, load_repr, visit_repr): looks (ns, h) up in
  /// the index into *rec, then reads its kKV or kRepr record into *buf (the 4096-byte record
  /// header page, then the payload), checking record type, namespace, key, length and checksum.
  /// kKV with kv_bytes != 0: Corruption when the index's kv_length differs. kRepr: NotFound when
  /// the block has no representations. A NotFound from the data file means gc retired it and our
  /// view is stale: the file is dropped, the handle catches up (refresh) and the read is retried
  /// once. Errors: NotFound (not in the index / no repr / still missing), Corruption, IOError.
  Status read_verified(const NamespaceId& ns, const BlockHash& h, Payload which, uint64_t kv_bytes,
                       fmt::BlockRecord* rec, fmt::AlignedBuffer* buf);

  // dump's phases, in order (store_write.cc). dump() runs check, mark_present and reserve on the
  // caller's thread, write_one per item on the I/O threads, and commit (sync, then index) on the
  // commit thread once every item is written or failed.
  /// Writer handle, known namespace, well-formed items (full blocks, non-null pages), and room on
  /// disk for all of them (check_space). *d: the namespace.
  Status dump_check(const NamespaceId& ns, const DumpItem* items, size_t n, NamespaceDesc* d);
  /// Marks skip[i] for blocks already indexed and for repeats within the task.
  void dump_mark_present(DumpState* st);
  /// Reserves contiguous runs (<= 64 MiB) in the active file for the items not skipped; fills
  /// slot_file / slot_off and files. Nothing is committed on failure.
  Status dump_reserve(DumpState* st);
  /// Encodes item i's KV record (and repr record) and writes them at its slot; fills recs[i].
  Status dump_write_one(DumpState* st, size_t i);
  /// fdatasyncs the task's files that no fdatasync begun after st->epoch has covered.
  Status dump_sync(DumpState* st);
  /// One synced index batch with the written, not yet present blocks (*added: their items) and
  /// the files' sizes and live bytes; then the fingerprint table. Caller: the commit thread.
  Status dump_index(DumpState* st, const std::vector<Status>& bs, std::vector<size_t>* added);
  /// The commit thread's step: fails the whole task if the disk filled meanwhile, else sync and
  /// index; sets the task's statuses, written flags and metrics, and finishes it.
  void dump_commit(const std::shared_ptr<TaskImpl>& t, DumpState* st);

 private:
  Status writer_only(const char* what) const {
    if (!read_only()) return Status::OK();
    // Appended piece by piece: GCC 12 reports a false -Warray-bounds on the chained operator+
    // once this is inlined into dump_check.
    std::string msg(what);
    msg.append(" needs a read-write handle; ").append(path_).append(" was opened read-only");
    return Status::InvalidArgument(msg);
  }
  Status ns_desc(const NamespaceId& ns, NamespaceDesc* d);
  Status rebuild_table();
  Status replay_journal();
  /// Writer: writes STORE/fptable from a copy of the table (fptable.md §3) when `force` or
  /// when it is behind by kFpTableSaveEntries journal entries, or by any for kFpTableSaveMs.
  void save_table(bool force);
  void background();

  // Record I/O.
  /// Writer: appends one record to the active file (creating / rolling it). Returns file + offset
  /// and keeps a reference to the writer so the caller can fdatasync it.
  Status append_record(fmt::RecordHeader* h, const std::vector<std::pair<const void*, size_t>>& pieces,
                       uint32_t* file, uint64_t* off, std::shared_ptr<ActiveFile>* af);
  /// Writer: reserves `bytes` contiguous bytes in the active file (creating / rolling it).
  Status reserve_range(uint64_t bytes, uint64_t* off, std::shared_ptr<ActiveFile>* af);
  /// Writer: the active file, created or rolled when absent or past the roll size. Caller holds
  /// append_mu_.
  Status active_file_locked(std::shared_ptr<ActiveFile>* af);
  /// Writer: runs `f` on the commit thread (FIFO).
  void submit_commit(std::function<void()> f);
  void commit_loop();
  /// Writer, for small metadata records: append + fdatasync + batch (with the file's bytes) commit.
  /// put_document / put_documents: the records, one fdatasync per file, one synced index batch.
  Status write_documents(const char* op, const NamespaceId& ns, const DocumentEntry* docs, size_t n);
  Status write_meta_record(fmt::RecordHeader* h, const std::string& payload, uint32_t* file, uint64_t* off,
                           const std::function<Status(Index::Batch&)>& fill);

  /// Writer: refuses (NoSpace) a write of `bytes` when the store's file system has less than
  /// `bytes` + reserve free (store_v1.md §3.4), so that the index's WAL, memtable flushes and
  /// close never run out of space. Sticky: after a refusal, writes need as much free space as
  /// the refused one did (at most one base reserve more than was free) until space is freed.
  Status check_space(uint64_t bytes, const std::string& what);

  void load_one(const std::shared_ptr<TaskImpl>& t, size_t i, const NamespaceId& ns, const BlockHash& h,
                const NamespaceDesc& d, uint32_t h0, uint32_t h1, const LoadDest& dest);
  void finish_load(const std::shared_ptr<TaskImpl>& t);

  std::string path_;
  OpenOptions opts_;
  std::unique_ptr<fmt::WriterLock> lock_;
  Index* index_ = nullptr;                 // own_index_ (writer) or ro_index_'s (reader)
  std::unique_ptr<Index> own_index_;
  std::unique_ptr<ReaderIndex> ro_index_;
  std::unique_ptr<ThreadPool> pool_;
  AccessLog access_;
  mutable Metrics metrics_;

  // Lookup table (§8).
  mutable std::shared_mutex table_mu_;
  FpTable table_;
  std::mutex refresh_mu_;
  uint64_t applied_seq_ = 0;
  std::string index_identity_;             // the index's identity (fptable.md §2)
  std::mutex save_mu_;                     // one save_table at a time
  uint64_t saved_seq_ = 0;                 // journal sequence of the last STORE/fptable written or loaded
  Clock::time_point saved_at_{};
  std::atomic<bool> save_pending_{false};  // the open asks for a save (background thread, or close)

  // Namespace descriptors by id.
  std::mutex ns_mu_;
  std::map<NamespaceId, NamespaceDesc> ns_cache_;

  // Open data files.
  std::unique_ptr<DataFileReader> reader_;  // created in init() (needs opts_.direct_io)

  // Writer state.
  std::mutex append_mu_;                  // active file selection / roll
  std::unique_ptr<FileRoller> roller_;    // the active file; created on the first write
  std::mutex commit_mu_;                  // serialises index commits (read-modify-write)
  std::mutex space_mu_;
  uint64_t space_need_ = 0;
  // Dump commits (fdatasync + synced index batch) run on their own thread, in task order, so
  // the I/O threads keep writing meanwhile. write_epoch_ counts finished record writes; a file
  // whose last fdatasync began after a task's writes finished is not synced again for it.
  std::atomic<uint64_t> write_epoch_{0};
  std::thread commit_thread_;
  std::mutex commit_q_mu_;
  std::condition_variable commit_q_cv_;
  std::deque<std::function<void()>> commit_q_;
  bool commit_stop_ = false;               // > 0 after a NoSpace refusal: free bytes needed to resume

  std::thread bg_;
  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool stop_ = false;
};

}  // namespace ucm::detail
