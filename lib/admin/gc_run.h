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
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "admin_internal.h"

namespace ucm::admin::gcrun {

enum class Why : uint8_t { kNone, kCorrupt, kOrphan, kUnreferenced, kEvicted, kDescendant };

struct Blk {
  NamespaceId ns{};
  BlockHash h{};
  fmt::BlockRecord r;
  uint64_t access = 0;
  int64_t depth = -1;
  bool access_changed = false;
  bool relocated = false;
  Why why = Why::kNone;
  bool removed() const { return why != Why::kNone; }
};

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

class GcRun {
 public:
  GcRun(const std::string& path, const GcOptions& opts, GcReport* rep)
      : path(path), opts(opts), rep(rep), prog(opts.progress) {}
  ~GcRun() { close_logs(); }
  Status run();

 private:
  // ---- phases (gc.cc)
  Status open();                 // writer lock, namespaces, --namespace filter
  void merge_access_logs();      // 1. access logs -> recency; logs of dead owners noted
  Status load_blocks();          // 2. every block, its children, its recency
  void find_corrupt();           // 3. missing / short data, or checksums with --verify
  void find_orphans();           // 4. unreachable from the namespace's chain root
  Status evict_unreferenced();   // 5. --unreferenced
  void evict_by_age();           // 6. --max-age
  void evict_by_size();          // 7. --max-bytes (LRU by subtree recency, tails first)
  Status finish_dry_run();       //    --dry-run: report and stop
  Status commit_removals();      // 8. index removals, access times, dead logs, the registry
  // ---- data files (gc_files.cc)
  Status measure_files();        // 9a. unindexed tails, sizes on disk, what to retire / compact
  Status compact_files();        // 9b. copy live records, retire the old files
  Status unlink_retired();       // 10. retired files past the grace period
  void delete_unreferenced_files();  // 11. files no index entry knows
  void housekeeping();           // 12. stale reader dirs, tmp/ leftovers
  Status final_counters();       //     blocks_after, bytes_after

  uint64_t evict_subtree(size_t i, Why why);  // block i and its present descendants; bytes freed
  bool in_filter(const NamespaceId& ns) const { return !filter || filter->id == ns; }
  void close_logs();

  const std::string& path;
  const GcOptions& opts;
  GcReport* rep;
  Progress prog;
  uint64_t now = 0;
  std::unique_ptr<WriterIndex> w;
  Index* idx_ = nullptr;
  std::vector<NsInfo> nss;
  std::map<NamespaceId, NsInfo*> ns_by_id;
  const NsInfo* filter = nullptr;
  std::unordered_map<std::string, uint64_t> acc;  // block key -> newest logged access
  std::vector<LogFile> logs;
  std::vector<Blk> blocks;
  std::unordered_map<std::string, size_t> by_key;
  std::unordered_map<std::string, std::vector<size_t>> children;  // ns||parent -> blocks
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
/// is absent or removed by this run is deleted (dry run: only counted). Every document of every
/// namespace is checked, so entries left stale by an older ucm are repaired too.
Status drop_incomplete_documents(Index& idx, const std::vector<NsInfo>& nss, const std::vector<Blk>& blocks,
                                 const std::unordered_map<std::string, size_t>& by_key, bool dry,
                                 GcReport* rep);

}  // namespace ucm::admin::gcrun
