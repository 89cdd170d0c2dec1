// ucm/core/store_writer.h: StoreWriter, the write paths of a read-write single store: the
// free-space reserve, the active data file and its rolling, the commit thread, small metadata
// records, and dump in its phases. Internal to libucm; the Store facade (StoreImpl,
// store_impl.h) creates one only for a read-write handle. Definitions: lib/src/store_writer.cc
// (space, files, commits, metadata records) and lib/src/store_dump.cc (dump).
//
// Lifetime: owned by the facade, built on its StoreShared (which must outlive it) after init()
// opened the primary index. The constructor starts the commit thread; stop_commits() (or the
// destructor) runs the commits still queued and joins it. Call it after the shared pool's
// shutdown, so that dump writes still queued there get their commit.
// Thread rules: every public method may be called from any thread at once, except the dump
// phases' own contracts below. Index commits (read-modify-write of counters and file records)
// are serialised by commit_mu_; the active file's selection and roll by append_mu_; dump
// commits run one at a time, in task order, on the commit thread.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ucm/core/file_roller.h"
#include "ucm/core/store_shared.h"
#include "ucm/core/task_impl.h"

namespace ucm::detail {

/// One dump task's state, shared by its phases (StoreWriter::dump_*): per item (one block),
/// its index record once written, whether it is skipped (already present, or a duplicate in
/// the task) and its reserved slot; the files the task wrote (to fdatasync) and the write
/// epoch after its last write.
struct DumpState {
  NamespaceId ns;
  NamespaceDesc desc;
  std::vector<DumpItem> items;
  std::vector<uint32_t> tokens;  ///< the items' token ids, copied ([n][T]; items[i].tokens points here)
  std::vector<fmt::BlockRecord> recs;
  std::vector<bool> skip;
  std::vector<std::shared_ptr<ActiveFile>> slot_file;
  std::vector<uint64_t> slot_off;
  std::vector<std::shared_ptr<ActiveFile>> files;
  uint64_t epoch = 0;
};

class StoreWriter {
 public:
  /// Starts the commit thread. s->index must be the primary.
  explicit StoreWriter(StoreShared* shared);
  ~StoreWriter();
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  /// Runs the queued commits and joins the commit thread; idempotent.
  void stop_commits();

  /// Refuses (NoSpace) a write of `bytes` when the store's file system has less than `bytes` +
  /// reserve free (store_v1.md §3.4), so that the index's WAL, memtable flushes and close never
  /// run out of space. Sticky: after a refusal, writes need as much free space as the refused
  /// one did (at most one base reserve more than was free) until space is freed.
  Status check_space(uint64_t bytes, const std::string& what);

  /// Where a metadata record was written.
  struct RecordAt {
    uint32_t file = 0;
    uint64_t offset = 0;
  };
  /// Small metadata records (namespace, attachment, document): appends record i (header
  /// hs[i], payload payloads[i]) to the active file (at[i]: where), fdatasyncs each file
  /// written once, then commits one synced index batch holding `fill`'s entries and the files'
  /// sizes and live bytes (store_v1.md §3.4). Space is the caller's to check (check_space).
  Status write_meta_records(fmt::RecordHeader* hs, const std::string* payloads, size_t n, RecordAt* at,
                            const std::function<Status(Index::Batch&)>& fill);

  /// Store::dump of blocks into namespace ns: check, mark_present and reserve on the caller's
  /// thread, write_one per item on the I/O threads, and commit (sync, then index) on the
  /// commit thread once every item is written or failed.
  std::shared_ptr<Task> dump(const NamespaceId& ns, const DumpItem* items, size_t n);

  // dump's phases, in order (store_dump.cc).
  /// Known namespace, well-formed items (full blocks, non-null pages), and room on disk for all
  /// of them (check_space). *d: the namespace.
  Status dump_check(const NamespaceId& ns, const DumpItem* items, size_t n, NamespaceDesc* d);
  /// Marks skip[i] for blocks already indexed and for repeats within the task.
  void dump_mark_present(DumpState* st);
  /// Reserves contiguous runs (<= 64 MiB) in the active file for the items not skipped; fills
  /// slot_file / slot_off and files. Nothing is committed on failure.
  Status dump_reserve(DumpState* st);
  /// Encodes item i's KV record (and repr record) and writes them at its slot; fills recs[i].
  /// Any thread, one call per item.
  Status dump_write_one(DumpState* st, size_t i);
  /// fdatasyncs the task's files that no fdatasync begun after st->epoch has covered.
  Status dump_sync(DumpState* st);
  /// One synced index batch with the written, not yet present blocks (*added: their items) and
  /// the files' sizes and live bytes; then the fingerprint table. Caller: the commit thread.
  Status dump_index(DumpState* st, const std::vector<Status>& bs, std::vector<size_t>* added);
  /// The commit thread's step: fails the whole task if the disk filled meanwhile, else sync and
  /// index; sets the task's statuses, written flags and metrics, and finishes it.
  void dump_commit(const std::shared_ptr<TaskImpl>& t, DumpState* st);

  /// gc beside this live writer (store_v1.md §11.5; lib/src/store_gc_requests.cc): applies the
  /// requests `ucm gc` left in STORE/gc-requests (each answered with <nonce>.done; a malformed
  /// one is renamed <nonce>.bad and never applied; an expired one is discarded), and unlinks the
  /// data files it retired once their grace period has passed. Removals commit in synced batches
  /// under the commit mutex, so dumps keep committing between them. The facade's background
  /// thread calls it once a second (with the heartbeat); one call at a time.
  void poll_gc_requests();

 private:
  struct GcApplied;
  /// One request (claimed: its .work file exists already): read, check, apply, answer.
  void handle_gc_request(const std::string& nonce, bool claimed);
  Status apply_gc_request(fmt::GcRequest& rq, GcApplied* a);
  /// The blocks' index entries, namespace counters, file live bytes and fingerprints.
  Status gc_remove_blocks(std::vector<fmt::GcRequestEntry>& entries, GcApplied* a, std::set<NamespaceId>* touched);
  /// Registry entries of `touched` namespaces that lost a block (store_v1.md §5.6).
  Status gc_drop_documents(const std::set<NamespaceId>& touched, GcApplied* a);
  /// Files with no live bytes that no ActiveFile of this session references -> retired.
  Status gc_retire_files(GcApplied* a);
  /// Retired files past grace_ms -> unlinked (later ones remembered in unlink_due_).
  Status gc_unlink_retired(uint64_t grace_ms, GcApplied* a);
  /// Unlinks (id, size) files and deletes their records; a may be null.
  Status unlink_files(const std::vector<std::pair<uint32_t, uint64_t>>& due, GcApplied* a);
  /// This session's data files whose ActiveFile is still alive (the active one, and older ones
  /// a dump in flight holds): their in-memory records are written back by every commit.
  std::map<uint32_t, std::shared_ptr<ActiveFile>> session_files();

  /// Appends one record to the active file (creating / rolling it): its file and offset, and
  /// the file itself so the caller can fdatasync it.
  Status append_record(fmt::RecordHeader* h, const std::vector<std::pair<const void*, size_t>>& pieces,
                       uint32_t* file, uint64_t* off, std::shared_ptr<ActiveFile>* af);
  /// Reserves `bytes` contiguous bytes in the active file (creating / rolling it).
  Status reserve_range(uint64_t bytes, uint64_t* off, std::shared_ptr<ActiveFile>* af);
  /// The active file, created or rolled when absent or past the roll size. Caller holds
  /// append_mu_.
  Status active_file_locked(std::shared_ptr<ActiveFile>* af);
  /// Runs `f` on the commit thread (FIFO).
  void submit_commit(std::function<void()> f);
  void commit_loop();

  StoreShared& s_;
  std::mutex append_mu_;                // active file selection / roll
  std::unique_ptr<FileRoller> roller_;  // the active file; created on the first write
  std::mutex commit_mu_;                // serialises index commits (read-modify-write)
  std::mutex space_mu_;
  uint64_t space_need_ = 0;  // > 0 after a NoSpace refusal: free bytes needed to resume
  // Dump commits (fdatasync + synced index batch) run on their own thread, in task order, so
  // the I/O threads keep writing meanwhile. write_epoch_ counts finished record writes; a file
  // whose last fdatasync began after a task's writes finished is not synced again for it.
  std::atomic<uint64_t> write_epoch_{0};
  std::thread commit_thread_;
  std::mutex commit_q_mu_;
  std::condition_variable commit_q_cv_;
  std::deque<std::function<void()>> commit_q_;
  bool commit_stop_ = false;
  // gc requests (poll_gc_requests): the files this session created (files_mu_, taken after
  // append_mu_ or commit_mu_, never before), and retired files to unlink at a time (ms).
  std::mutex files_mu_;
  std::map<uint32_t, std::weak_ptr<ActiveFile>> session_files_;
  std::map<uint32_t, uint64_t> unlink_due_;  // the background thread only
};

}  // namespace ucm::detail
