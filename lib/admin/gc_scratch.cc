// lib/admin/gc_scratch.cc: see gc_scratch.h.
#include "gc_scratch.h"
#include "ucm/fs.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <filesystem>

namespace ucm::admin::gcrun {

namespace {
Status from_rocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::OK();
  if (s.IsNoSpace()) return Status::NoSpace(what + ": " + s.ToString());
  return Status::IOError(what + ": " + s.ToString());
}
rocksdb::Slice sl(std::string_view v) { return rocksdb::Slice(v.data(), v.size()); }
}  // namespace

Status Scratch::Open(const std::string& dir, uint64_t budget, std::unique_ptr<Scratch>* out) {
  std::unique_ptr<Scratch> s(new Scratch());
  s->dir_ = dir;
  std::error_code ec;
  ucm::remove_tree(dir, ec);
  rocksdb::Options o;
  o.create_if_missing = true;
  o.error_if_exists = true;
  o.compression = rocksdb::kNoCompression;
  const uint64_t b = std::max<uint64_t>(budget, 16ull << 20);
  o.write_buffer_size = size_t(b / 4);
  o.max_write_buffer_number = 2;
  o.target_file_size_base = 64ull << 20;
  o.max_open_files = 512;
  o.max_background_jobs = 2;
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = rocksdb::NewLRUCache(size_t(b / 4));
  t.block_size = 1024;  // a walk step reads one block of its children: small blocks, small reads
  // Index blocks count against the cache, and are partitioned (4 KiB pieces under a small
  // pinned top level): a walk step's seek then reads one small piece per file, not a whole
  // index of a 64 MiB file (which, evicted between seeks, made each seek read megabytes).
  t.index_type = rocksdb::BlockBasedTableOptions::IndexType::kTwoLevelIndexSearch;
  t.metadata_block_size = 4096;
  t.cache_index_and_filter_blocks = true;
  t.cache_index_and_filter_blocks_with_high_priority = true;
  t.pin_top_level_index_and_filter = true;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  // gc writes a phase's keys in random order and reads them in the next phase: appends to an
  // unsorted vector, sorted once per write-out, beat a skip list's random inserts by far.
  o.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
  o.allow_concurrent_memtable_write = false;
  o.info_log_level = rocksdb::InfoLogLevel::ERROR_LEVEL;
  o.keep_log_file_num = 1;
  rocksdb::Status rs = rocksdb::DB::Open(o, dir, &s->db_);
  if (!rs.ok()) return from_rocks(rs, "gc scratch database " + dir);
  s->batch_ = std::make_unique<rocksdb::WriteBatch>();
  *out = std::move(s);
  return Status::OK();
}

Scratch::~Scratch() {
  batch_.reset();
  delete db_;
  std::error_code ec;
  if (!dir_.empty()) ucm::remove_tree(dir_, ec);
}

Status Scratch::put(std::string_view key, std::string_view value) {
  batch_->Put(sl(key), sl(value));
  if (++pending_ >= 4096) return flush();
  return Status::OK();
}

Status Scratch::flush() {
  if (pending_ == 0) return Status::OK();
  rocksdb::WriteOptions w;
  w.disableWAL = true;
  rocksdb::Status rs = db_->Write(w, batch_.get());
  batch_->Clear();
  pending_ = 0;
  return from_rocks(rs, "gc scratch write");
}

Status Scratch::settle(bool compact) {
  Status st = flush();
  if (!st.ok()) return st;
  rocksdb::FlushOptions f;
  f.wait = true;
  rocksdb::Status rs = db_->Flush(f);
  if (rs.ok() && compact) {
    rocksdb::CompactRangeOptions c;
    c.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    rs = db_->CompactRange(c, nullptr, nullptr);
  }
  return from_rocks(rs, "gc scratch write-out");
}

Status Scratch::get(std::string_view key, std::string* value) {
  rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), sl(key), value);
  if (rs.IsNotFound()) return Status::NotFound("");
  return from_rocks(rs, "gc scratch read");
}

std::unique_ptr<Scratch::Cursor> Scratch::cursor() {
  rocksdb::ReadOptions r;
  r.fill_cache = true;
  return std::make_unique<Cursor>(db_->NewIterator(r));
}

Scratch::Cursor::Cursor(rocksdb::Iterator* it) : it_(it) {}
Scratch::Cursor::~Cursor() { delete it_; }
void Scratch::Cursor::seek(std::string_view key) { it_->Seek(sl(key)); }
bool Scratch::Cursor::valid() const { return it_->Valid(); }
void Scratch::Cursor::next() { it_->Next(); }
std::string_view Scratch::Cursor::key() const { return {it_->key().data(), it_->key().size()}; }
std::string_view Scratch::Cursor::value() const { return {it_->value().data(), it_->value().size()}; }
Status Scratch::Cursor::status() const { return from_rocks(it_->status(), "gc scratch iteration"); }

}  // namespace ucm::admin::gcrun
