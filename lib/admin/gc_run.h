// lib/admin/gc_run.h: one run of `ucm gc` (ucm/admin.h, docs/cli.md), one member function per
// phase, in the order run() calls them. Internal to lib/admin.
//
// Crash safety: every index change is a synced Index batch; data is fdatasync'd before the
// batch that points at it; files are unlinked only after the batch that retires them is durable
// and the grace period has passed, so a crash at any point leaves a consistent store (at worst
// some dead bytes, reclaimed by the next run). Readers hold no lock: nothing is overwritten in
// place, and the only truncation cuts a file's unindexed tail (bytes past its record's size, left
// by a dump killed before its index commit), where no index entry has ever pointed.
#pragma once
#include <cstdint>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "admin_internal.h"
#include "gc_scratch.h"
#include "ucm/core/file_roller.h"

namespace ucm::admin::gcrun {

enum class Why : uint8_t { kNone, kCorrupt, kOrphan, kUnreferenced, kEvicted, kDescendant };

struct LogFile {
  std::string path;
  int fd = -1;          // holds an exclusive flock when the owner is gone
  bool owner_gone = false;
};

/// Writes index batches of bounded size.
class Batcher {
 public:
  explicit Batcher(Index& idx) : idx_(idx), b_(std::make_unique<Index::Batch>()) {}
  Index::Batch& b() { return *b_; }
  Status op() {
    if (++n_ >= 4096) return flush();
    return Status::OK();
  }
  Status flush() {
    if (n_ == 0) return Status::OK();
    Status st = idx_.write(*b_, true);
    b_ = std::make_unique<Index::Batch>();
    n_ = 0;
    return st;
  }

 private:
  Index& idx_;
  std::unique_ptr<Index::Batch> b_;
  size_t n_ = 0;
};

/// One compaction's state (GcRun::compact_*, gc_files.cc): the files the copies go to, in order,
/// their live bytes, the namespaces whose records moved, blocks found corrupt while copying, and
/// the relocated block records not yet spilled to 'M'.
struct Compaction {
  /// format_version: the store's (new data files say it, §3.1).
  Compaction(const std::string& path, Index* idx, uint32_t format_version)
      : roller(path, idx, &commit_mu, format_version) {}
  std::mutex commit_mu;  // FileRoller's; gc commits from this thread only
  FileRoller roller;
  std::vector<std::shared_ptr<ActiveFile>> writers;
  std::map<uint32_t, uint64_t> new_live;
  std::set<NamespaceId> ns_changed;
  std::vector<std::pair<NamespaceId, BlockHash>> corrupt_found;
  fmt::AlignedBuffer rbuf;
  std::map<std::string, fmt::BlockRecord> moved;  // relocated blocks not yet in 'M'
  size_t retired_without_copy = 0;                // to_retire's size before any copy
};

/// What refers to a record compaction found live: its block's current record, or its namespace
/// (and attachment name).
struct LiveRecord {
  fmt::BlockRecord blk_rec;
  bool blk = false;
  NsInfo* nsi = nullptr;
  std::string att_name;
};

// Per-block state lives in the scratch database (gc_scratch.h), keyed by a one-byte kind:
//   'A' ns h access(be64)     an access-log record (phase 1); several per block, the newest wins
//   'R' ns h                  on a registered document's chain (phase 2, --unreferenced)
//   'C' ns parent h           the block under its parent: its access, bytes, flags (phase 3)
//   'V' ns h                  a block the walk from its namespace's root reached, or a corrupt
//                             one: why it goes (or kNone), its access (phases 3-4, 6)
//   'L' recency(be64) ~depth(be32) ns h   eviction order of the blocks --max-bytes may take
//                             (oldest subtree recency first, deepest first; phase 5)
//   'M' ns h                  a block record relocated by compaction (phase 9b)
// Memory: the scratch database's budget, the walk's stack (one frame per level of the deepest
// chain, at most 64 children read ahead per frame), the per-file and per-namespace maps.
class GcRun {
 public:
  GcRun(const std::string& path, const GcOptions& opts, GcReport* rep)
      : path(path), opts(opts), rep(rep), prog(opts.progress) {}
  ~GcRun() { close_logs(); }
  Status run();
  /// run() in parts, for gc over the shards of a sharded store (gc_shards.cc): prepare() is
  /// open .. walk (phases 1-4); then the caller does phase 5 over every shard (mark_evicted);
  /// finish() is the rest (the dry-run report, or phases 6-11).
  Status prepare();
  Status finish();
  /// Phase 5 for one block of the 'L' order, chosen by the caller.
  Status mark_evicted(std::string_view l_key, std::string_view l_value);
  Scratch& scratch_db() { return *scratch; }
  uint64_t live_bytes() const { return live_bytes_in_filter; }
  /// Sharded stores: does another shard hold (ns, block)? Set before prepare().
  std::function<bool(const NamespaceId&, const BlockHash&)> parent_elsewhere;
  /// gc beside a live writer (store_v1.md §11.5; gc_handoff.cc). Set before prepare(): plan
  /// read-only without trying the writer lock (a shard whose heartbeat moves).
  bool force_live = false;
  /// After prepare(): the writer runs; finish() hands the removals to it.
  bool live() const { return live_; }
  /// finish() of a live run in two halves, so that a sharded gc asks every live writer before it
  /// waits for any: the plan written as a request (none when there is nothing to do), then the
  /// wait for the answer (up to opts.writer_wait_ms from the submit) and the report.
  Status handoff_submit();
  Status handoff_await();

 private:
  // ---- phases (gc.cc, gc_walk.cc)
  Status open();                 // writer lock, namespaces, --namespace filter, the scratch database
  Status merge_access_logs();    // 1. access logs -> 'A'; logs of dead owners noted
  Status mark_referenced();      // 2. --unreferenced: document chains -> 'R'
  Status scan_blocks();          // 3. every block -> 'C' (access merged, corrupt checked)
  Status walk();                 // 4. from each namespace root: depth, orphans (not reached),
                                 //    unreferenced, --max-age, subtree recency -> 'V', 'L'
                                 //    (and, in a shard, from each parent another shard holds)
  Status walk_tree(const NamespaceId& ns, const BlockHash& root, uint64_t* visited);
  Status evict_by_size();        // 5. --max-bytes: 'L' in order until the bytes fit
  Status finish_dry_run();       //    --dry-run: report and stop
  Status commit_removals();      // 6. index removals, access times, dead logs, the registry
  /// 'V' and the index in key order: calls fn for every block with why it goes (orphans: the
  /// ones without 'V') and its merged access time.
  Status for_each_decision(const std::function<Status(const NamespaceId&, const BlockHash&, const fmt::BlockRecord&,
                                                      Why, uint64_t access, bool access_changed)>& fn);
  /// Is the block present after this run's decisions (for the document registry's walk)?
  bool present_after(const NamespaceId& ns, const BlockHash& h, BlockHash* parent, bool dry);
  // ---- data files (gc_files.cc)
  Status measure_files();        // 7a. unindexed tails, sizes on disk, what to retire / compact
  Status compact_files();        // 7b. copy live records, retire the old files; in phases:
  /// Copies fid's live records to the roller's files (an unreadable file is retired only when
  /// nothing references it), then queues fid for retirement.
  Status compact_copy_file(Compaction* c, uint32_t fid);
  /// Is this record of fid the one its block / namespace / attachment points at? (documents:
  /// decided by compact_copy_record). *lr: what refers to it.
  bool compact_is_live(Compaction* c, uint32_t fid, const fmt::ScannedRecord& rec, LiveRecord* lr);
  /// Reads the record verified (a bad block record is noted corrupt, not copied), appends it to
  /// the current output file and records where it went.
  Status compact_copy_record(Compaction* c, uint32_t fid, int fd, const std::string& where,
                             const fmt::ScannedRecord& rec, LiveRecord* lr);
  /// The output file with room for `need` bytes (rolled as needed), appended to c->writers.
  Status compact_writer(Compaction* c, uint64_t need);
  /// Relocations held in memory -> 'M' in the scratch database.
  Status compact_spill(Compaction* c);
  /// fdatasync of the output files and data/, then the last spill.
  Status compact_sync(Compaction* c);
  /// Phase A, one durable batch run: relocated blocks, corrupt ones removed, the new file records.
  Status compact_index_moves(Compaction* c, Batcher* bt);
  /// Namespace records that moved (counters as now), the old files retired; flushed.
  Status compact_retire(Compaction* c, Batcher* bt);
  Status unlink_retired();       // 8. retired files past the grace period
  void delete_unreferenced_files();  // 9. files no index entry knows
  void housekeeping();           // 10. stale reader dirs, tmp/ leftovers
  void update_fptable();         // 10b. STORE/fptable brought up to the index (opts.update_fptable)
  Status final_counters();       //     blocks_after, bytes_after

  bool in_filter(const NamespaceId& ns) const { return !filter || filter->id == ns; }
  void close_logs();
  // ---- beside a live writer (gc_handoff.cc)
  /// The writer lock is held (`busy`: its message): a read-only view of the index instead.
  Status open_live(const Status& busy);
  /// Is there anything for the writer to do with files (retired ones to unlink, dead ones)?
  bool files_need_writer();

  const std::string& path;
  const GcOptions& opts;
  GcReport* rep;
  Progress prog;
  uint64_t now = 0;
  std::unique_ptr<WriterIndex> w;
  std::unique_ptr<ReaderView> ro_;        // live_: the read-only view the plan is made from
  bool live_ = false;
  std::chrono::steady_clock::time_point handoff_deadline_{};
  Index* idx_ = nullptr;
  std::vector<NsInfo> nss;
  std::map<NamespaceId, NsInfo*> ns_by_id;
  const NsInfo* filter = nullptr;
  std::vector<LogFile> logs;
  std::unique_ptr<Scratch> scratch;
  uint64_t live_bytes_in_filter = 0;      // after phase 4: bytes of the blocks kept so far
  std::set<uint32_t> referenced_files;    // data files a kept block points at
  std::map<uint32_t, fmt::FileRecord> files;
  std::vector<uint32_t> to_compact, to_retire;
};

/// Journal trimming (store_v1.md §5.5): entries with sequence < journal_seq - keep go, in one
/// synced DeleteRange. *n = how many there are (counted by a scan of just those keys). With
/// `dry`, only counts. A reader whose last applied sequence is older finds the gap on its next
/// catch-up and rescans the blocks family instead of replaying. Entries the persisted
/// fingerprint table (STORE/fptable of this index) has not seen are kept as well, so that opens
/// replay them instead of rescanning (formats/store/fptable.md §3), unless the table is more than
/// 10 x keep entries behind.
Status trim_journal(const std::string& store, Index& idx, uint64_t keep, bool dry, uint64_t* n);

/// The document registry holds only complete documents (store_v1.md §5.6): an entry whose chain,
/// walked from its last block back through the parents to its first block, meets a block that
/// is absent (by `present`: false, else the block's parent) is deleted (dry run: only counted).
/// Every document of every namespace is checked, so entries left stale by an older ucm are
/// repaired too.
Status drop_incomplete_documents(Index& idx, const std::vector<NsInfo>& nss,
                                 const std::function<bool(const NamespaceId&, const BlockHash&, BlockHash*)>& present,
                                 bool dry, GcReport* rep);

}  // namespace ucm::admin::gcrun
