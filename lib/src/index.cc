// lib/src/index.cc: see index.h.
#include "ucm/core/index.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/options_util.h>
#include <rocksdb/write_batch.h>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "ucm/core/log.h"
#include "ucm/core/ns_value.h"

#include <cstdarg>
#include <cstdio>

namespace ucm {

namespace {
constexpr const char* kFamilyNames[] = {"default", "namespaces", "blocks", "files", "journal", "docs"};

Status from_rocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::OK();
  if (s.IsNotFound()) return Status::NotFound(what + ": not found");
  if (s.IsCorruption())
    return Status::Corruption(what + ": index corruption: " + s.ToString() +
                              "; run `ucm build --rebuild-index` to rebuild it from the data files");
  if (s.IsNoSpace()) return Status::NoSpace(what + ": " + s.ToString() + "; free disk space and retry");
  if (s.IsBusy() || s.IsTryAgain()) return Status::Busy(what + ": " + s.ToString());
  if (s.IsInvalidArgument()) return Status::InvalidArgument(what + ": " + s.ToString());
  if (s.IsNotSupported()) return Status::NotSupported(what + ": " + s.ToString());
  return Status::IOError(what + ": " + s.ToString());
}

// RocksDB's info log, forwarded to spdlog instead of the file index/LOG (or readers/X/LOG).
// Why: Debian's librocksdb 7.8 is built with assertions, and once a write to the LOG file fails
// (ENOSPC) the next one aborts the process (WritableFileWriter::
// AssertFalseAndGetStatusForPrevError: sync_without_flush_called_), e.g. in DB::Close or in the
// error handler after a failed WAL write. A logger that writes no file cannot fail that way.
// Messages go to the spdlog logger "ucm.rocksdb" (stderr, created on first use unless the
// application registered one of that name): RocksDB's warnings and errors at warn, everything
// else at debug. RocksDB formats INFO messages only while that logger shows debug.
class SpdlogRocksLogger : public rocksdb::Logger {
 public:
  explicit SpdlogRocksLogger(std::shared_ptr<spdlog::logger> l)
      : rocksdb::Logger(l->should_log(spdlog::level::debug) ? rocksdb::InfoLogLevel::INFO_LEVEL
                                                            : rocksdb::InfoLogLevel::WARN_LEVEL),
        log_(std::move(l)) {}
  using rocksdb::Logger::Logv;
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    const auto lvl = level >= rocksdb::InfoLogLevel::WARN_LEVEL ? spdlog::level::warn : spdlog::level::debug;
    if (!log_->should_log(lvl)) return;
    char buf[1024];
    va_list aq;
    va_copy(aq, ap);
    const int n = std::vsnprintf(buf, sizeof buf, format, aq);
    va_end(aq);
    if (n < 0) return;
    std::string big;
    std::string_view msg(buf, size_t(n));
    if (size_t(n) >= sizeof buf) {
      big.assign(size_t(n) + 1, '\0');
      std::vsnprintf(big.data(), big.size(), format, ap);
      big.resize(size_t(n));
      msg = big;
    }
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.remove_suffix(1);
    log_->log(lvl, "rocksdb: {}", msg);
  }

 private:
  std::shared_ptr<spdlog::logger> log_;
};

std::shared_ptr<spdlog::logger> rocks_spdlog() { return named_logger("ucm.rocksdb"); }

rocksdb::Options base_options() {
  rocksdb::Options o;
  o.info_log = std::make_shared<SpdlogRocksLogger>(rocks_spdlog());
  o.create_if_missing = false;
  o.create_missing_column_families = false;
  o.max_open_files = -1;  // required by secondaries; fine for the primary
  o.IncreaseParallelism(2);
  return o;
}

rocksdb::ColumnFamilyOptions family_options(Index::Family f) {
  rocksdb::ColumnFamilyOptions o;
  rocksdb::BlockBasedTableOptions t;
  if (f == Index::Family::kBlocks) {
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
    t.whole_key_filtering = true;
    o.OptimizeForPointLookup(64);
  }
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

std::vector<rocksdb::ColumnFamilyDescriptor> descriptors() {
  std::vector<rocksdb::ColumnFamilyDescriptor> d;
  for (int i = 0; i < int(Index::Family::kCount); ++i)
    d.emplace_back(kFamilyNames[i], family_options(Index::Family(i)));
  return d;
}

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  fmt::put_le32(reinterpret_cast<uint8_t*>(s.data()), v);
  return s;
}
std::string le64(uint64_t v) {
  std::string s(8, '\0');
  fmt::put_le64(reinterpret_cast<uint8_t*>(s.data()), v);
  return s;
}
}  // namespace

const char* index_family_name(Index::Family f) { return kFamilyNames[int(f)]; }

Status Index::OpenPrimary(const std::string& dir, bool create, std::unique_ptr<Index>* out,
                          uint64_t write_buffer_budget) {
  rocksdb::DBOptions opts(base_options());
  if (write_buffer_budget) opts.db_write_buffer_size = size_t(write_buffer_budget);
  opts.create_if_missing = create;
  opts.create_missing_column_families = create;
  std::unique_ptr<Index> ix(new Index);
  ix->dir_ = dir;
  ix->primary_ = true;
  rocksdb::Status s = rocksdb::DB::Open(opts, dir, descriptors(), &ix->cfs_, &ix->db_);
  if (!s.ok()) return from_rocks(s, "open index " + dir);
  uint64_t seq = 0;
  Status st = ix->get_meta_u64(kMetaJournalSeq, &seq);
  if (!st.ok() && st.code() != Code::kNotFound) return st;
  ix->journal_seq_ = seq;
  *out = std::move(ix);
  return Status::OK();
}

Status Index::OpenSecondary(const std::string& dir, const std::string& secondary_dir, std::unique_ptr<Index>* out) {
  Status st = fmt::make_dirs(secondary_dir);
  if (!st.ok()) return st;
  rocksdb::DBOptions opts(base_options());
  std::unique_ptr<Index> ix(new Index);
  ix->dir_ = dir;
  ix->primary_ = false;
  rocksdb::Status s = rocksdb::DB::OpenAsSecondary(opts, dir, secondary_dir, descriptors(), &ix->cfs_, &ix->db_);
  if (!s.ok()) return from_rocks(s, "open index " + dir + " (secondary)");
  *out = std::move(ix);
  return Status::OK();
}

Index::~Index() {
  if (db_) {
    // The primary flushes its memtables before closing, so the next open (a reader's secondary
    // instance or the next writer) reads SST files instead of replaying the WAL: measured with
    // 1 M blocks written without flush, a secondary open took 5.85 s, 0.03 s after this flush
    // (which took 0.95 s). A flush that fails (e.g. disk full) leaves the WAL, which stays valid.
    if (primary_) (void)flush();
    for (auto* h : cfs_) db_->DestroyColumnFamilyHandle(h);
    db_->Close();
    delete db_;
  }
}

Status Index::try_catch_up() {
  if (primary_) return Status::OK();
  return from_rocks(db_->TryCatchUpWithPrimary(), "catch up with the writer of index " + dir_);
}

Status Index::get(Family f, const std::string& key, std::string* value) const {
  rocksdb::ReadOptions ro;
  return from_rocks(db_->Get(ro, cf(f), key, value), std::string("index ") + index_family_name(f) + " get");
}

Status Index::scan(Family f, const std::string& prefix,
                   const std::function<bool(std::string_view, std::string_view)>& fn) const {
  return scan_from(f, prefix, [&](std::string_view k, std::string_view v) {
    return (prefix.empty() || k.substr(0, prefix.size()) == prefix) && fn(k, v);
  });
}

Status Index::scan_from(Family f, const std::string& start,
                        const std::function<bool(std::string_view, std::string_view)>& fn) const {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;          // full scans must not evict the point-lookup working set
  ro.readahead_size = 2u << 20;   // sequential SST reads (table build, gc, inspect)
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf(f)));
  for (it->Seek(start); it->Valid(); it->Next()) {
    rocksdb::Slice k = it->key(), v = it->value();
    if (!fn(std::string_view(k.data(), k.size()), std::string_view(v.data(), v.size()))) break;
  }
  return from_rocks(it->status(), std::string("index ") + index_family_name(f) + " scan");
}

Status Index::get_meta_u64(const char* key, uint64_t* v) const {
  std::string s;
  Status st = get(Family::kMeta, key, &s);
  if (!st.ok()) return st;
  auto* p = reinterpret_cast<const uint8_t*>(s.data());
  if (s.size() == 4) *v = fmt::get_le32(p);
  else if (s.size() == 8) *v = fmt::get_le64(p);
  else return Status::Corruption(std::string("index meta key ") + key + " has " + std::to_string(s.size()) + " bytes");
  return Status::OK();
}

Status Index::get_meta_string(const char* key, std::string* v) const { return get(Family::kMeta, key, v); }

Status Index::get_block(const NamespaceId& ns, const BlockHash& h, fmt::BlockRecord* r) const {
  std::string v;
  rocksdb::ReadOptions ro;
  rocksdb::Status s = db_->Get(ro, cf(Family::kBlocks), fmt::block_key(ns, h), &v);
  if (s.IsNotFound()) return Status::NotFound("block " + to_hex(h) + " of namespace " + to_hex(ns) + " is not in the store");
  if (!s.ok()) return from_rocks(s, "index get block " + to_hex(h));
  return fmt::decode_block_record(v, r);
}

Status Index::for_each_block(const NamespaceId* ns,
                             const std::function<bool(const NamespaceId&, const BlockHash&, const fmt::BlockRecord&)>& fn) const {
  Status inner;
  Status st = scan(Family::kBlocks, ns ? fmt::ns_key(*ns) : std::string(), [&](std::string_view k, std::string_view v) {
    NamespaceId n;
    BlockHash h;
    fmt::BlockRecord r;
    if (!fmt::parse_block_key(k, &n, &h)) {
      inner = Status::Corruption("index blocks key of " + std::to_string(k.size()) + " bytes (expected 32)");
      return false;
    }
    inner = fmt::decode_block_record(v, &r);
    if (!inner.ok()) return false;
    return fn(n, h, r);
  });
  return st.ok() ? inner : st;
}

Status Index::get_namespace(const NamespaceId& ns, std::string* json) const {
  Status s = get(Family::kNamespaces, fmt::ns_key(ns), json);
  if (s.code() == Code::kNotFound) return Status::NotFound("namespace " + to_hex(ns) + " is not registered in this store");
  return s;
}

Status Index::for_each_namespace(const std::function<bool(const NamespaceId&, const std::string&)>& fn) const {
  return scan(Family::kNamespaces, "", [&](std::string_view k, std::string_view v) {
    if (k.size() != 16) return true;
    NamespaceId n;
    std::memcpy(n.data(), k.data(), 16);
    return fn(n, std::string(v));
  });
}

Status Index::get_file(uint32_t id, fmt::FileRecord* r) const {
  std::string v;
  Status s = get(Family::kFiles, fmt::file_key(id), &v);
  if (s.code() == Code::kNotFound) return Status::NotFound("data file " + std::to_string(id) + " is not in the index");
  if (!s.ok()) return s;
  return fmt::decode_file_record(v, r);
}

Status Index::for_each_file(const std::function<bool(uint32_t, const fmt::FileRecord&)>& fn) const {
  Status inner;
  Status st = scan(Family::kFiles, "", [&](std::string_view k, std::string_view v) {
    fmt::FileRecord r;
    inner = fmt::decode_file_record(v, &r);
    if (!inner.ok()) return false;
    return fn(fmt::parse_file_key(k), r);
  });
  return st.ok() ? inner : st;
}

Status Index::for_each_journal(uint64_t after, const std::function<bool(uint64_t, const fmt::JournalEntry&)>& fn) const {
  Status inner;
  Status st = scan_from(Family::kJournal, fmt::journal_key(after + 1), [&](std::string_view k, std::string_view v) {
    fmt::JournalEntry e;
    inner = fmt::decode_journal_entry(v, &e);
    if (!inner.ok()) return false;
    return fn(fmt::parse_journal_key(k), e);
  });
  return st.ok() ? inner : st;
}

Status Index::identity(std::string* id) const {
  // The IDENTITY file itself: DB::GetDbIdentity answers empty on a secondary instance.
  std::string text;
  rocksdb::Status rs = rocksdb::ReadFileToString(rocksdb::Env::Default(), dir_ + "/IDENTITY", &text);
  if (!rs.ok()) rs = db_->GetDbIdentity(text);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) text.pop_back();
  if (rs.ok() && text.empty()) return Status::Corruption("index " + dir_ + " has an empty identity");
  *id = text;
  return from_rocks(rs, "read the identity of index " + dir_);
}

uint64_t Index::journal_seq() const {
  uint64_t v = 0;
  if (!get_meta_u64(kMetaJournalSeq, &v).ok()) return 0;
  return v;
}

Status Index::get_doc(const NamespaceId& ns, const std::string& id, std::string* json) const {
  Status s = get(Family::kDocs, fmt::doc_key(ns, id), json);
  if (s.code() == Code::kNotFound) return Status::NotFound("document \"" + id + "\" is not registered in namespace " + to_hex(ns));
  return s;
}

Status Index::for_each_doc(const NamespaceId& ns, const std::function<bool(const std::string&, const std::string&)>& fn) const {
  return scan(Family::kDocs, fmt::ns_key(ns), [&](std::string_view k, std::string_view v) {
    return fn(std::string(k.substr(16)), std::string(v));
  });
}

// ---------------------------------------------------------------------------------------------
Index::Batch::Batch() : wb_(new rocksdb::WriteBatch) {}
Index::Batch::~Batch() = default;
Index::Batch::Batch(Batch&& o) noexcept : Batch() { *this = std::move(o); }
Index::Batch& Index::Batch::operator=(Batch&& o) noexcept {
  if (this == &o) return *this;
  std::swap(wb_, o.wb_);
  ops_ = std::move(o.ops_);
  journal_ = std::move(o.journal_);
  ns_delta_ = std::move(o.ns_delta_);
  file_delta_ = std::move(o.file_delta_);
  o.clear();
  return *this;
}
void Index::Batch::clear() {
  if (wb_) wb_->Clear();
  else wb_.reset(new rocksdb::WriteBatch);
  ops_.clear();
  journal_.clear();
  ns_delta_.clear();
  file_delta_.clear();
}
void Index::Batch::put(Family f, const std::string& k, const std::string& v) { ops_.push_back({f, false, k, v}); }
void Index::Batch::del(Family f, const std::string& k) { ops_.push_back({f, true, k, {}}); }
void Index::Batch::put_meta_u32(const char* k, uint32_t v) { put(Family::kMeta, k, le32(v)); }
void Index::Batch::put_meta_u64(const char* k, uint64_t v) { put(Family::kMeta, k, le64(v)); }
void Index::Batch::put_meta_string(const char* k, const std::string& v) { put(Family::kMeta, k, v); }
void Index::Batch::put_block(const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& r) {
  put(Family::kBlocks, fmt::block_key(ns, h), fmt::encode_block_record(r));
  journal_.push_back({fmt::JournalOp::kAdd, ns, h});
}
void Index::Batch::delete_block(const NamespaceId& ns, const BlockHash& h) {
  del(Family::kBlocks, fmt::block_key(ns, h));
  journal_.push_back({fmt::JournalOp::kRemove, ns, h});
}
void Index::Batch::update_block(const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& r) {
  put(Family::kBlocks, fmt::block_key(ns, h), fmt::encode_block_record(r));
}
void Index::Batch::put_namespace(const NamespaceId& ns, const std::string& json) {
  put(Family::kNamespaces, fmt::ns_key(ns), json);
}
void Index::Batch::put_file(uint32_t id, const fmt::FileRecord& r) { put(Family::kFiles, fmt::file_key(id), fmt::encode_file_record(r)); }
void Index::Batch::delete_file(uint32_t id) { del(Family::kFiles, fmt::file_key(id)); }
void Index::Batch::put_doc(const NamespaceId& ns, const std::string& id, const std::string& json) {
  put(Family::kDocs, fmt::doc_key(ns, id), json);
}
void Index::Batch::delete_doc(const NamespaceId& ns, const std::string& id) { del(Family::kDocs, fmt::doc_key(ns, id)); }
void Index::Batch::add_ns_counters(const NamespaceId& ns, int64_t blocks, int64_t bytes) {
  auto& d = ns_delta_[ns];
  d.first += blocks;
  d.second += bytes;
}
void Index::Batch::add_file_bytes(uint32_t id, int64_t size, int64_t live) {
  auto& d = file_delta_[id];
  d.first += size;
  d.second += live;
}
bool Index::Batch::empty() const { return ops_.empty() && journal_.empty() && ns_delta_.empty() && file_delta_.empty(); }

Status Index::write(Batch& b, bool sync) {
  if (!primary_) return Status::NotSupported("the index of " + dir_ + " is open read-only; writes need the writer");
  std::lock_guard<std::mutex> g(write_mu_);
  rocksdb::WriteBatch wb;
  // Namespace / file counters: read-modify-write of the current values plus any put in this batch.
  std::map<std::string, std::string> pending_ns, pending_files;
  for (const auto& op : b.ops_) {
    if (op.f == Family::kNamespaces && !op.del) pending_ns[op.key] = op.value;
    if (op.f == Family::kFiles && !op.del) pending_files[op.key] = op.value;
  }
  for (const auto& op : b.ops_) {
    if (op.f == Family::kNamespaces && b.ns_delta_.count([&] {
          NamespaceId n{};
          if (op.key.size() == 16) std::memcpy(n.data(), op.key.data(), 16);
          return n;
        }()))
      continue;  // written below with counters applied
    if (op.f == Family::kFiles && !op.del && b.file_delta_.count(fmt::parse_file_key(op.key))) continue;
    rocksdb::Status s = op.del ? wb.Delete(cf(op.f), op.key) : wb.Put(cf(op.f), op.key, op.value);
    if (!s.ok()) return from_rocks(s, "index batch");
  }
  for (const auto& [ns, d] : b.ns_delta_) {
    std::string k = fmt::ns_key(ns), cur;
    auto it = pending_ns.find(k);
    if (it != pending_ns.end()) cur = it->second;
    else {
      Status st = get(Family::kNamespaces, k, &cur);
      if (!st.ok())
        return st.code() == Code::kNotFound
                   ? Status::InvalidArgument("namespace " + to_hex(ns) + " is not registered; register it before dumping")
                   : st;
    }
    NsIndexValue v;
    if (!ns_value_from_json(cur, &v).ok())
      return Status::Corruption("index namespace " + to_hex(ns) + " has an unreadable descriptor");
    v.add_counters(d.first, d.second);
    wb.Put(cf(Family::kNamespaces), k, ns_value_to_json(v));
  }
  for (const auto& [id, d] : b.file_delta_) {
    std::string k = fmt::file_key(id), cur;
    fmt::FileRecord r;
    auto it = pending_files.find(k);
    if (it != pending_files.end()) cur = it->second;
    else {
      Status st = get(Family::kFiles, k, &cur);
      if (!st.ok() && st.code() != Code::kNotFound) return st;
    }
    if (!cur.empty()) {
      Status st = fmt::decode_file_record(cur, &r);
      if (!st.ok()) return st;
    }
    r.size = uint64_t(std::max<int64_t>(0, int64_t(r.size) + d.first));
    r.live_bytes = uint64_t(std::max<int64_t>(0, int64_t(r.live_bytes) + d.second));
    wb.Put(cf(Family::kFiles), k, fmt::encode_file_record(r));
  }
  uint64_t seq = journal_seq_;
  for (const auto& e : b.journal_) wb.Put(cf(Family::kJournal), fmt::journal_key(++seq), fmt::encode_journal_entry(e));
  if (seq != journal_seq_) wb.Put(cf(Family::kMeta), kMetaJournalSeq, le64(seq));
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  rocksdb::Status s = db_->Write(wo, &wb);
  if (!s.ok()) {
    // RocksDB stops accepting writes after a failed WAL write (background error) until the
    // database is reopened; say so instead of suggesting a plain retry.
    if (s.IsNoSpace() || s.IsIOError())
      return Status(s.IsNoSpace() ? Code::kNoSpace : Code::kIOError,
                    "commit to index " + dir_ + ": " + s.ToString() +
                        "; the index refuses further writes on this handle: free disk space (e.g. `ucm gc "
                        "--max-bytes`), then close and reopen the store");
    return from_rocks(s, "commit to index " + dir_);
  }
  journal_seq_ = seq;
  return Status::OK();
}

Status Index::allocate_file_id(uint32_t* id) {
  if (!primary_) return Status::NotSupported("the index of " + dir_ + " is open read-only");
  std::lock_guard<std::mutex> g(write_mu_);
  uint64_t next = 1;
  Status st = get_meta_u64(kMetaNextFileId, &next);
  if (!st.ok() && st.code() != Code::kNotFound) return st;
  if (next == 0) next = 1;
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Put(wo, cf(Family::kMeta), kMetaNextFileId, le32(uint32_t(next + 1)));
  if (!s.ok()) return from_rocks(s, "allocate a data file id in " + dir_);
  *id = uint32_t(next);
  return Status::OK();
}

Status Index::flush() {
  if (!primary_) return Status::OK();
  rocksdb::FlushOptions fo;
  fo.wait = true;
  return from_rocks(db_->Flush(fo, cfs_), "flush index " + dir_);
}

Status Index::delete_journal_below(uint64_t first_kept) {
  if (!primary_) return Status::NotSupported("the index of " + dir_ + " is open read-only");
  std::lock_guard<std::mutex> g(write_mu_);
  rocksdb::WriteBatch wb;
  rocksdb::Status rs = wb.DeleteRange(cf(Family::kJournal), fmt::journal_key(0), fmt::journal_key(first_kept));
  if (rs.ok()) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    rs = db_->Write(wo, &wb);
  }
  return from_rocks(rs, "trim the journal of " + dir_ + " below sequence " + std::to_string(first_kept));
}

Status Index::compact() {
  if (!primary_) return Status::NotSupported("the index of " + dir_ + " is open read-only");
  for (auto* h : cfs_) {
    rocksdb::FlushOptions fo;
    rocksdb::Status s = db_->Flush(fo, h);
    if (!s.ok()) return from_rocks(s, "flush index " + dir_);
    rocksdb::CompactRangeOptions co;
    s = db_->CompactRange(co, h, nullptr, nullptr);
    if (!s.ok()) return from_rocks(s, "compact index " + dir_);
  }
  return Status::OK();
}

}  // namespace ucm
