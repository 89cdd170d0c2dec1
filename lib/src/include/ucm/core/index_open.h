// ucm/core/index_open.h: opening a store's index, shared by Store and the admin commands, so that
// every command gives the same answer for the same store (store_v1.md §1.1, docs/library.md).
// Internal to libucm and lib/admin; not installed.
#pragma once
#include <memory>
#include <string>

#include "ucm/core/index.h"
#include "ucm/status.h"

namespace ucm {

/// OK when STORE/index/CURRENT exists. Otherwise Corruption: "store S has no index
/// (index/CURRENT missing): run `ucm build S --rebuild-index` to rebuild it from the data
/// files". Creates nothing.
Status require_index(const std::string& store);

/// Opens STORE/index as the primary (the caller holds the writer lock). The index must exist
/// (require_index); nothing is created when it does not. `write_buffer_budget`: see
/// Index::OpenPrimary.
Status open_writer_index(const std::string& store, std::unique_ptr<Index>* out, uint64_t write_buffer_budget = 0);

/// A read-only view of STORE/index: a RocksDB secondary instance whose private scratch
/// directory is removed on destruction.
///
/// Where the scratch directory goes (the first that applies):
///   1. `reader_dir` when not empty, else the environment variable UCM_READER_DIR when set:
///      <that>/<host>-<pid>-<nonce>;
///   2. STORE/readers/<host>-<pid>-<nonce>, when this process can create it;
///   3. otherwise (a read-only mount, a store owned by another user) a local directory:
///      $XDG_RUNTIME_DIR/ucm-readers/..., or /tmp/ucm-readers-<uid>/... (mode 0700).
/// Opening needs only read access to the store. Scratch directories of dead processes on this
/// host are removed from the chosen base (1 and 3) when a new one is made; `ucm gc` cleans
/// STORE/readers.
class ReaderIndex {
 public:
  /// `tag` goes into the scratch directory's name (e.g. "admin"); may be empty.
  static Status Open(const std::string& store, const std::string& reader_dir, const std::string& tag,
                     std::unique_ptr<ReaderIndex>* out);
  ~ReaderIndex();
  Index& index() { return *idx_; }
  const std::string& scratch_dir() const { return scratch_; }
  /// True when the scratch directory is inside the store (STORE/readers).
  bool scratch_in_store() const { return in_store_; }

 private:
  ReaderIndex() = default;
  std::unique_ptr<Index> idx_;
  std::string scratch_;
  bool in_store_ = false;
};

/// Removes the subdirectories "<host>-<pid>-..." of `base` whose host is this one and whose
/// process is gone. Returns how many were removed.
uint64_t remove_stale_reader_dirs(const std::string& base);

/// A fresh "<host>-<pid>-<nonce>" name (unique in this process and across restarts).
std::string process_unique_name(const std::string& tag = {});

}  // namespace ucm
