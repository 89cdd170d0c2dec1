// ucm/core/file_roller.h: a writer's active data file and its rolling (store_v1.md §3.4), the
// one copy used by the store's writes (lib/src/store_writer.cc) and by gc compaction
// (lib/admin/gc_files.cc). Internal to libucm and lib/admin; not installed.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "ucm/core/index.h"
#include "ucm/format/format.h"
#include "ucm/status.h"

namespace ucm {

/// A data file being appended to, with its file record as the writer keeps it.
struct ActiveFile {
  std::unique_ptr<fmt::DataFileWriter> w;
  fmt::FileRecord rec;
  uint64_t synced_epoch = 0;  ///< the store's commit thread only: write epoch the last fdatasync covered
};

/// One active data file at a time. A new file gets the next id from the index and is created
/// fresh (writers never reopen a file for append); its file record (active, one header page)
/// and the previous file's record (sealed) are written in one synced index batch, under
/// `commit_mu`, before anything is appended to it. Not thread-safe: callers serialise get()
/// (the store under its append mutex).
class FileRoller {
 public:
  /// `format_version`: the store's superblock version, written into new data file headers (§3.1).
  FileRoller(std::string store, Index* index, std::mutex* commit_mu, uint32_t format_version,
             uint64_t roll_bytes = fmt::kFileRollBytes)
      : store_(std::move(store)), index_(index), commit_mu_(commit_mu), format_version_(format_version),
        roll_bytes_(roll_bytes) {}
  /// The file to append `need` more bytes to: the active one, or a new one when there is none
  /// or when the active one would reach the roll size with them (need 0: once it has reached
  /// it). A record larger than the roll size gets a file of its own.
  Status get(uint64_t need, std::shared_ptr<ActiveFile>* af);
  /// The active file (null before the first get()).
  const std::shared_ptr<ActiveFile>& active() const { return active_; }

 private:
  std::string store_;
  Index* index_;
  std::mutex* commit_mu_;
  uint32_t format_version_;
  uint64_t roll_bytes_;
  std::shared_ptr<ActiveFile> active_;
};

}  // namespace ucm
