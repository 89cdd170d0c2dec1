// lib/admin/rebuild.h: `ucm build --rebuild-index` (rebuild_index, build.cc) in its phases:
// move the old index aside, scan every data file for the newest record of each key, create the
// new index, then index the namespaces' blocks, the namespaces, the complete documents and the
// files. Internal; the reliability tests call the phases one by one.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "admin_internal.h"

namespace ucm::admin::rebuild {

/// Where a record lies and what its header says.
struct Loc {
  uint32_t file = 0;
  uint64_t offset = 0, length = 0, checksum = 0, created_ms = 0;
  BlockHash parent{};
  uint32_t token_count = 0;
  bool tokens = false;  ///< a BLOCK_KV header with token ids (§3.2)
  /// Newest wins: by created_ms, then by (file, offset).
  bool newer_than(const Loc& o) const {
    if (created_ms != o.created_ms) return created_ms > o.created_ms;
    if (file != o.file) return file > o.file;
    return offset > o.offset;
  }
};

struct DocRec {
  Loc loc;
  std::string id;
  std::string json;
};

/// What the scan of the data files found: the newest record of each kind and key.
struct Scan {
  std::vector<uint32_t> ids;                                  ///< data file ids, ascending
  std::map<std::string, Loc> kv, repr;                        ///< block key (bkey) -> newest record
  std::map<NamespaceId, std::pair<Loc, std::string>> nsrec;   ///< ns -> newest NAMESPACE record + payload
  std::map<std::string, Loc> attach;                          ///< ns||md5(name) -> newest
  std::map<std::pair<NamespaceId, std::string>, DocRec> docs;
  std::map<uint32_t, uint64_t> file_size;                     ///< readable files' sizes
  std::set<std::string> attachment_names;                     ///< the names attachments can have
  uint64_t scanned_bytes = 0;
};

/// Live bytes per data file, and (blocks, bytes) per namespace, as the phases index them.
struct Totals {
  std::map<uint32_t, uint64_t> live;
  std::map<NamespaceId, std::pair<uint64_t, uint64_t>> counts;
};

/// Index batches of up to 4096 counted entries.
class BatchWriter {
 public:
  explicit BatchWriter(Index* idx) : idx_(idx), b_(std::make_unique<Index::Batch>()) {}
  Index::Batch& batch() { return *b_; }
  /// Counts one entry put in batch().
  void count() { ++in_batch_; }
  /// Counts one entry and writes the batch when it holds 4096.
  Status count_and_flush_full();
  /// Writes what the batch holds (nothing when no entry was counted).
  Status flush();

 private:
  Index* idx_;
  std::unique_ptr<Index::Batch> b_;
  size_t in_batch_ = 0;
};

/// Moves index/ (when present) to tmp/index.broken-<ms>, durably; rep->moved_index_to.
Status move_index_aside(const std::string& path, BuildReport* rep);
/// Lists data/ and scans every data file (scan_data_file) into *scan.
Status scan_data_files(const std::string& path, Progress* prog, Scan* scan, BuildReport* rep);
/// One data file: its readable records kept when newest; corrupt records and torn tails counted.
/// An unreadable header counts one corrupt record. Errors: the scanner's I/O error.
Status scan_data_file(const std::string& path, uint32_t id, Progress* prog, Scan* scan, BuildReport* rep);
/// A new primary index at index/ with the superblock's meta and the next file id.
Status create_index(const std::string& path, const fmt::Superblock& sb, const Scan& scan, std::unique_ptr<Index>* idx);
/// The namespaces whose newest NAMESPACE record parses and matches its id; others are corrupt.
std::map<NamespaceId, NamespaceDesc> namespaces_from_records(const Scan& scan, BuildReport* rep);
/// The newest KV record of each block of a known namespace (with its repr record, if any).
Status index_blocks(const Scan& scan, const std::map<NamespaceId, NamespaceDesc>& descs, BatchWriter* w,
                    Totals* tot, BuildReport* rep);
/// Each namespace's index value: descriptor, counts and the attachments whose name is known
/// (consumed from scan->attach; what is left there is unknown).
void index_namespaces(Scan* scan, const std::map<NamespaceId, NamespaceDesc>& descs, BatchWriter* w, Totals* tot,
                      BuildReport* rep);
/// Documents of known namespaces whose every block was recovered (store_v1.md §5.6).
Status index_documents(const Scan& scan, const std::map<NamespaceId, NamespaceDesc>& descs, BatchWriter* w,
                       Totals* tot, BuildReport* rep);
/// Sealed file records (live bytes capped at the size) and the next file id; then the last flush.
Status index_files(const Scan& scan, const Totals& tot, BatchWriter* w);

}  // namespace ucm::admin::rebuild
