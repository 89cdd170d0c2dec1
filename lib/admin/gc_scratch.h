// lib/admin/gc_scratch.h: gc's external memory. A private RocksDB database in STORE/tmp holding
// gc's per-block state (children lists, visit results, the recency order), so that gc's memory is
// bounded by a budget whatever the number of blocks (docs/cli.md "gc", store_v1.md §9): RocksDB
// keeps at most two write buffers and a block cache of the budget's size, the rest is on disk.
// No WAL and no sync: a crash leaves a directory in tmp/ that the next gc deletes.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "ucm/status.h"

namespace rocksdb {
class DB;
class Iterator;
class WriteBatch;
}  // namespace rocksdb

namespace ucm::admin::gcrun {

class Scratch {
 public:
  /// Creates the database in a new directory `dir` (removed again by the destructor). `budget`:
  /// bytes of memory it may use (write buffers + block cache).
  static Status Open(const std::string& dir, uint64_t budget, std::unique_ptr<Scratch>* out);
  ~Scratch();

  /// Buffered write (applied in batches; flush() makes every write so far readable).
  Status put(std::string_view key, std::string_view value);
  Status flush();
  /// flush(), then the write buffer to sorted files on disk (and with `compact`, every file into
  /// one sorted run): before a phase that reads. Writes go to an unsorted buffer (cheap appends,
  /// sorted once when written out), so reads are fast only after settle().
  Status settle(bool compact = false);
  /// NotFound when absent. Sees only settled writes at full speed (flushed ones slowly).
  Status get(std::string_view key, std::string* value);

  /// An ordered cursor over flushed keys.
  class Cursor {
   public:
    explicit Cursor(rocksdb::Iterator* it);
    ~Cursor();
    void seek(std::string_view key);
    bool valid() const;
    void next();
    std::string_view key() const;
    std::string_view value() const;
    Status status() const;

   private:
    rocksdb::Iterator* it_;
  };
  std::unique_ptr<Cursor> cursor();

 private:
  Scratch() = default;
  std::string dir_;
  rocksdb::DB* db_ = nullptr;
  std::unique_ptr<rocksdb::WriteBatch> batch_;
  size_t pending_ = 0;
};

}  // namespace ucm::admin::gcrun
