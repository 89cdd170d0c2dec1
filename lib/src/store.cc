// lib/src/store.cc: ucm::Store (ucm/store.h) over formats/store (records) and the RocksDB Index.
#include "ucm/store.h"

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
#include <random>
#include <set>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "formats/store/records.h"
#include "fptable.h"
#include "document.h"
#include "index.h"
#include "index_open.h"
#include "log.h"
#include "metrics.h"

namespace ucm {

namespace {

using Clock = std::chrono::steady_clock;
uint64_t elapsed_ns(Clock::time_point t0) {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

std::string rel_data_name(uint32_t id) {
  char b[32];
  std::snprintf(b, sizeof b, "data/%08u.ucmd", id);
  return b;
}

// ---------------------------------------------------------------------------------------------
class ThreadPool {
 public:
  explicit ThreadPool(uint32_t n) {
    if (n == 0) n = 1;
    for (uint32_t i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
  }
  ~ThreadPool() { shutdown(); }
  void submit(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> g(mu_);
      q_.push_back(std::move(f));
    }
    cv_.notify_one();
  }
  /// Runs every queued job, then joins.
  void shutdown() {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        f = std::move(q_.front());
        q_.pop_front();
      }
      f();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

// ---------------------------------------------------------------------------------------------
class TaskImpl : public Task {
 public:
  explicit TaskImpl(size_t n) : st_(n), remaining_(n) {}
  bool done() const override {
    std::lock_guard<std::mutex> g(mu_);
    return done_;
  }
  Status wait(int timeout_ms) override {
    std::unique_lock<std::mutex> l(mu_);
    if (timeout_ms < 0) cv_.wait(l, [&] { return done_; });
    else if (!cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return done_; }))
      return Status::Pending("task not finished after " + std::to_string(timeout_ms) + " ms");
    return result_;
  }
  const std::vector<Status>& block_status() const override { return st_; }

  std::vector<Status>& statuses() { return st_; }
  /// Marks one job finished; the caller that finishes the last runs `on_last` (if set) first.
  /// Returns true for that caller.
  bool job_done() { return remaining_.fetch_sub(1) == 1; }
  void finish(const Status& whole = Status::OK()) {
    std::lock_guard<std::mutex> g(mu_);
    result_ = whole;
    if (result_.ok())
      for (const auto& s : st_)
        if (!s.ok()) {
          result_ = s;
          break;
        }
    done_ = true;
    cv_.notify_all();
  }
  /// A finished task whose every block has `s`.
  static std::shared_ptr<TaskImpl> Failed(size_t n, const Status& s) {
    auto t = std::make_shared<TaskImpl>(n);
    for (auto& x : t->st_) x = s;
    t->finish(s);
    return t;
  }
  Clock::time_point t0 = Clock::now();

 private:
  std::vector<Status> st_;
  std::atomic<size_t> remaining_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status result_;
};

// ---------------------------------------------------------------------------------------------
/// The handle's access log (store_v1.md §6).
class AccessLog {
 public:
  ~AccessLog() { close(); }
  Status open(const std::string& store, const std::string& name) {
    std::string dir = fmt::access_dir(store);
    Status s = fmt::make_dirs(dir);
    if (!s.ok()) return s;
    path_ = dir + "/" + name + ".log";
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) return Status::FromErrno(errno, "create access log " + path_);
    int rc;
    do rc = ::flock(fd_, LOCK_SH);
    while (rc != 0 && errno == EINTR);
    return Status::OK();
  }
  void add(const NamespaceId& ns, const BlockHash& h, uint64_t ms) {
    uint8_t rec[fmt::kAccessRecordSize];
    fmt::encode_access_record({ns, h, ms}, rec);
    std::lock_guard<std::mutex> g(mu_);
    buf_.insert(buf_.end(), rec, rec + sizeof rec);
  }
  /// Writes buffered records (whole records only, so a torn write is at most the last one).
  void flush() {
    std::lock_guard<std::mutex> g(mu_);
    if (fd_ < 0 || buf_.empty()) return;
    size_t done = 0;
    while (done < buf_.size()) {
      ssize_t r = ::write(fd_, buf_.data() + done, buf_.size() - done);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;  // recency is best effort: a full disk must not fail loads
      done += size_t(r);
    }
    buf_.clear();
  }
  void close() {
    flush();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  std::mutex mu_;
  std::vector<uint8_t> buf_;
  std::string path_;
  int fd_ = -1;
};

// ---------------------------------------------------------------------------------------------
struct OpenFile {
  int fd = -1;
  bool direct = false;
};

/// The writer's current data file and its in-memory FileRecord.
struct ActiveFile {
  std::unique_ptr<fmt::DataFileWriter> w;
  fmt::FileRecord rec;
  uint64_t synced_epoch = 0;  ///< commit thread only: write epoch the last fdatasync covered
};

nlohmann::json parse_obj(const std::string& s) {
  auto j = nlohmann::json::parse(s, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return nlohmann::json::object();
  return j;
}

BlockInfo to_info(const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& r) {
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
  std::shared_ptr<Task> dump(const NamespaceId& ns, const DumpItem* items, size_t n) override;
  Status get_block(const NamespaceId& ns, const BlockHash& hash, BlockInfo* info) override;

  Status put_document(const NamespaceId& ns, const DocumentEntry& doc) override;
  Status get_document(const NamespaceId& ns, const std::string& id, DocumentEntry* doc) override;
  std::vector<DocumentEntry> documents(const NamespaceId& ns) override;

  Status refresh() override;
  std::string metrics_text() const override;

 private:
  Status writer_only(const char* what) const {
    if (!read_only()) return Status::OK();
    return Status::InvalidArgument(std::string(what) + " needs a read-write handle; " + path_ +
                                   " was opened read-only");
  }
  Status ns_desc(const NamespaceId& ns, NamespaceDesc* d);
  Status rebuild_table();
  Status replay_journal();
  void background();

  // Record I/O.
  Status file_for(uint32_t id, OpenFile* f);
  void drop_file(uint32_t id);
  Status read_verified(uint32_t file, uint64_t off, const fmt::RecordExpect& e, fmt::AlignedBuffer* buf);
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

  // Namespace descriptors by id.
  std::mutex ns_mu_;
  std::map<NamespaceId, NamespaceDesc> ns_cache_;

  // Open data files.
  std::shared_mutex files_mu_;
  std::unordered_map<uint32_t, OpenFile> files_;

  // Writer state.
  std::mutex append_mu_;                  // active file selection / roll
  std::shared_ptr<ActiveFile> active_;
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

// ---------------------------------------------------------------------------------------------
namespace {
Status put_fresh_meta(Index* ix, const fmt::Superblock& sb, bool fresh) {
  // Meta keys of a new index (§5.1); keys already present are kept. next_file_id and
  // journal_seq only for a fresh store (no data files yet).
  Index::Batch b;
  uint64_t v = 0;
  std::string str;
  if (ix->get_meta_u64(kMetaFormatVersion, &v).code() == Code::kNotFound) b.put_meta_u32(kMetaFormatVersion, sb.format_version);
  if (ix->get_meta_u64(kMetaCreatedMs, &v).code() == Code::kNotFound) b.put_meta_u64(kMetaCreatedMs, sb.created_ms);
  if (ix->get_meta_string(kMetaCreatedBy, &str).code() == Code::kNotFound) b.put_meta_string(kMetaCreatedBy, sb.created_by);
  if (fresh && ix->get_meta_u64(kMetaNextFileId, &v).code() == Code::kNotFound) b.put_meta_u32(kMetaNextFileId, 1);
  if (fresh && ix->get_meta_u64(kMetaJournalSeq, &v).code() == Code::kNotFound) b.put_meta_u64(kMetaJournalSeq, 0);
  if (b.empty()) return Status::OK();
  return ix->write(b, true);
}

std::mutex g_create_mu;  // one creation at a time per process (the sibling's name holds the pid)
}  // namespace

Status StoreImpl::create_in_place(const std::string& target, fmt::StoreDirState state) {
  // The superblock is written last: a kill before it leaves a skeleton (no superblock, no data)
  // that the next create clears (store_v1.md §1.1).
  Status s;
  if (state == fmt::StoreDirState::kSkeleton) {
    s = fmt::clear_store_skeleton(target);
    if (!s.ok()) return s;
  }
  s = fmt::make_dirs(target);
  if (!s.ok()) return s;
  s = fmt::WriterLock::Acquire(target, &lock_);
  if (!s.ok()) return s;
  fmt::StoreDirState now;
  s = fmt::classify_store_dir(target, &now);
  if (!s.ok()) return s;
  if (now != fmt::StoreDirState::kSkeleton && now != fmt::StoreDirState::kEmpty)
    return Status::Busy("store " + target + " was created by another process meanwhile; open it again");
  for (const auto& d : {fmt::data_dir(target), fmt::access_dir(target), fmt::readers_dir(target), fmt::tmp_dir(target),
                        fmt::index_dir(target)}) {
    s = fmt::make_dirs(d);
    if (!s.ok()) return s;
  }
  fmt::Superblock sb;
  sb.created_ms = fmt::now_ms();
  {
    std::unique_ptr<Index> ix;
    s = Index::OpenPrimary(fmt::index_dir(target), true, &ix);
    if (!s.ok()) return s;
    s = put_fresh_meta(ix.get(), sb, true);
    if (!s.ok()) return s;
  }
  return fmt::write_superblock(target, sb);
}

Status StoreImpl::create_new(fmt::StoreDirState state, bool* raced) {
  namespace fs = std::filesystem;
  *raced = false;
  std::lock_guard<std::mutex> cg(g_create_mu);
  std::string target = path_;
  std::error_code ec;
  if (state != fmt::StoreDirState::kMissing) {
    const fs::path c = fs::canonical(path_, ec);  // a symlink to an empty directory: create there
    if (!ec) target = c.string();
  }
  std::string parent = fs::path(target).parent_path().string();
  if (parent.empty()) parent = ".";
  Status s = fmt::make_dirs(parent);
  if (!s.ok()) return s;
  struct stat tst, pst;
  if (state != fmt::StoreDirState::kMissing && ::stat(target.c_str(), &tst) == 0 && ::stat(parent.c_str(), &pst) == 0 &&
      tst.st_dev != pst.st_dev)
    return create_in_place(target, state);  // a mount point cannot be replaced by a rename

  // Build the whole store in a sibling, then rename it into place (store_v1.md §1.1).
  (void)fmt::remove_dead_creating_dirs(target);
  const std::string tmp = fmt::creating_dir(target, long(::getpid()));
  fs::remove_all(tmp, ec);  // a leftover of an earlier process with our pid
  if (::mkdir(tmp.c_str(), 0755) != 0) return Status::FromErrno(errno, "create " + tmp);
  auto cleanup = [&] {
    lock_.reset();
    std::error_code e2;
    fs::remove_all(tmp, e2);
  };
  fmt::Superblock sb;
  s = fmt::create_store_skeleton(tmp, &sb);
  if (s.ok()) s = fmt::WriterLock::Acquire(tmp, &lock_);
  if (s.ok()) s = fmt::make_dirs(fmt::index_dir(tmp));
  if (s.ok()) {
    std::unique_ptr<Index> ix;
    s = Index::OpenPrimary(fmt::index_dir(tmp), true, &ix);
    if (s.ok()) s = put_fresh_meta(ix.get(), sb, true);
  }  // closed here: RocksDB keeps file names, so it must not be open across the rename
  if (s.ok()) s = fmt::fsync_dir(fmt::index_dir(tmp));
  if (s.ok()) s = fmt::fsync_dir(tmp);
  if (!s.ok()) {
    cleanup();
    return s;
  }
  int rc = 0, err = 0;
  if (state == fmt::StoreDirState::kMissing) {
    rc = ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {  // file system without RENAME_NOREPLACE
      struct stat x;
      if (::stat(target.c_str(), &x) == 0) errno = EEXIST;
      else rc = ::rename(tmp.c_str(), target.c_str());
    }
  } else {
    if (state == fmt::StoreDirState::kSkeleton) s = fmt::clear_store_skeleton(target);
    if (!s.ok()) {
      cleanup();
      return s;
    }
    rc = ::rename(tmp.c_str(), target.c_str());  // replaces an empty directory atomically
  }
  err = rc != 0 ? errno : 0;
  if (rc != 0) {
    cleanup();
    if (err == EEXIST || err == ENOTEMPTY) {
      *raced = true;  // another process created something there meanwhile: look again
      return Status::OK();
    }
    if (err == EXDEV || err == EBUSY) return create_in_place(target, state);
    return Status::FromErrno(err, "rename " + tmp + " to " + target);
  }
  return fmt::fsync_dir(parent);
}

Status StoreImpl::init(bool create) {
  fmt::Superblock sb;
  Status s;
  const bool rw = opts_.mode == OpenOptions::Mode::kReadWrite;
  fmt::StoreDirState state = fmt::StoreDirState::kMissing;
  for (int attempt = 0;; ++attempt) {
    s = fmt::classify_store_dir(path_, &state);
    if (!s.ok()) return s;
    const bool creatable = state == fmt::StoreDirState::kMissing || state == fmt::StoreDirState::kEmpty ||
                           state == fmt::StoreDirState::kSkeleton;
    if (!create || !creatable) break;
    bool raced = false;
    s = create_new(state, &raced);
    if (!s.ok()) return s;
    if (!raced) break;
    if (attempt == 2)
      return Status::Busy("store " + path_ + " is being created by another process at the same time; retry");
  }
  if (create && state == fmt::StoreDirState::kNotAStore) {
    struct stat st;
    if (::stat(path_.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
      return Status::InvalidArgument(path_ + " exists and is not a directory");
    return Status::InvalidArgument(path_ + " is not empty and not a ucm store; a store is created only in a "
                                   "missing or empty directory");
  }
  s = fmt::read_superblock(path_, &sb);
  if (!s.ok()) return s;
  if (rw) {
    if (!lock_) {
      s = fmt::WriterLock::Acquire(path_, &lock_);
      if (!s.ok()) return s;
    }
    s = fmt::classify_store_dir(path_, &state);  // again, now under the writer lock
    if (!s.ok()) return s;
    const bool have_index = require_index(path_).ok();
    if (!have_index && state != fmt::StoreDirState::kHalfCreated) return require_index(path_);
    if (!have_index) {
      // Creation by an older ucm was killed before the index existed, and there are no data
      // files: nothing can be lost, so finish creating the store (store_v1.md §1.1).
      std::error_code ec;
      std::filesystem::remove_all(fmt::index_dir(path_), ec);
      s = fmt::make_dirs(fmt::index_dir(path_));
      if (!s.ok()) return s;
      s = Index::OpenPrimary(fmt::index_dir(path_), true, &own_index_);
    } else {
      s = open_writer_index(path_, &own_index_);
    }
    if (!s.ok()) return s;
    index_ = own_index_.get();
    s = put_fresh_meta(index_, sb, state == fmt::StoreDirState::kHalfCreated);
    if (!s.ok()) return s;
    for (const auto& d : {fmt::data_dir(path_), fmt::access_dir(path_), fmt::readers_dir(path_), fmt::tmp_dir(path_)}) {
      s = fmt::make_dirs(d);
      if (!s.ok()) return s;
    }
  } else {
    s = ReaderIndex::Open(path_, opts_.reader_dir, "", &ro_index_);
    if (!s.ok()) return s;
    index_ = &ro_index_->index();
  }
  uint64_t fv = 0;
  if (index_->get_meta_u64(kMetaFormatVersion, &fv).ok() && fv > fmt::kFormatVersion)
    return Status::Version("store format version " + std::to_string(fv) + " is newer than this ucm supports (max " +
                           std::to_string(fmt::kFormatVersion) + "); upgrade ucm");
  s = rebuild_table();
  if (!s.ok()) return s;
  s = access_.open(path_, process_unique_name());
  if (!s.ok()) {
    if (!read_only()) return s;
    // A reader without write access to STORE/access (another user's store, a read-only mount)
    // serves loads without recording their recency: gc then ranks its blocks by what other
    // handles logged (docs/library.md, "Read-only opens").
    log().info("store {}: loads through this handle are not recorded for gc's recency ({})", path_, s.message());
  }
  pool_ = std::make_unique<ThreadPool>(opts_.io_threads);
  if (!read_only()) commit_thread_ = std::thread([this] { commit_loop(); });
  bg_ = std::thread([this] { background(); });
  return Status::OK();
}

StoreImpl::~StoreImpl() {
  {
    std::lock_guard<std::mutex> g(bg_mu_);
    stop_ = true;
  }
  bg_cv_.notify_all();
  if (bg_.joinable()) bg_.join();
  if (pool_) pool_->shutdown();  // finishes queued load / dump jobs
  if (commit_thread_.joinable()) {  // then their commits
    {
      std::lock_guard<std::mutex> g(commit_q_mu_);
      commit_stop_ = true;
    }
    commit_q_cv_.notify_all();
    commit_thread_.join();
  }
  access_.close();
  {
    std::unique_lock<std::shared_mutex> g(files_mu_);
    for (auto& [id, f] : files_)
      if (f.fd >= 0) ::close(f.fd);
    files_.clear();
  }
  active_.reset();
  index_ = nullptr;
  own_index_.reset();
  ro_index_.reset();
  lock_.reset();
}

void StoreImpl::background() {
  const uint32_t ival = read_only() && opts_.refresh_interval_ms ? opts_.refresh_interval_ms : 1000;
  std::unique_lock<std::mutex> l(bg_mu_);
  while (!stop_) {
    bg_cv_.wait_for(l, std::chrono::milliseconds(ival));
    if (stop_) break;
    l.unlock();
    if (read_only() && opts_.refresh_interval_ms) (void)refresh();
    access_.flush();
    l.lock();
  }
}

Status StoreImpl::rebuild_table() {
  // Caller holds refresh_mu_ or is init(). The index view does not move meanwhile: a secondary
  // changes only in try_catch_up (under refresh_mu_), and only this process writes a primary.
  uint64_t seq = index_->journal_seq();
  uint64_t count = 0;
  std::string v;
  Status s = index_->scan(Index::Family::kNamespaces, "", [&](std::string_view k, std::string_view val) {
    auto j = parse_obj(std::string(val));
    count += j.value("blocks", uint64_t(0));
    return true;
  });
  if (!s.ok()) return s;
  FpTable t(count);
  s = index_->scan(Index::Family::kBlocks, "", [&](std::string_view k, std::string_view) {
    NamespaceId ns;
    BlockHash h;
    if (fmt::parse_block_key(k, &ns, &h)) t.insert(fmt::block_fingerprint(ns, h));
    return true;
  });
  if (!s.ok()) return s;
  std::unique_lock<std::shared_mutex> g(table_mu_);
  table_ = std::move(t);
  applied_seq_ = seq;
  return Status::OK();
}

Status StoreImpl::replay_journal() {
  std::vector<std::pair<uint64_t, fmt::JournalEntry>> entries;
  Status s = index_->for_each_journal(applied_seq_, [&](uint64_t seq, const fmt::JournalEntry& e) {
    entries.emplace_back(seq, e);
    return true;
  });
  if (!s.ok()) return s;
  const uint64_t last = index_->journal_seq();
  const bool gap = (!entries.empty() && entries.front().first != applied_seq_ + 1) ||
                   (entries.empty() && last > applied_seq_);
  if (gap) return rebuild_table();  // gc trimmed entries we never saw
  if (entries.empty()) return Status::OK();
  std::unique_lock<std::shared_mutex> g(table_mu_);
  for (const auto& [seq, e] : entries) {
    uint64_t fp = fmt::block_fingerprint(e.ns, e.hash);
    if (e.op == fmt::JournalOp::kAdd) table_.insert(fp);
    else table_.erase(fp);
    applied_seq_ = seq;
  }
  return Status::OK();
}

Status StoreImpl::refresh() {
  if (!read_only()) return Status::OK();
  std::lock_guard<std::mutex> g(refresh_mu_);
  Status s = index_->try_catch_up();
  if (!s.ok()) return s;
  metrics_.refreshes.fetch_add(1, std::memory_order_relaxed);
  return replay_journal();
}

// ---------------------------------------------------------------------------------------------
Status StoreImpl::ns_desc(const NamespaceId& ns, NamespaceDesc* d) {
  {
    std::lock_guard<std::mutex> g(ns_mu_);
    auto it = ns_cache_.find(ns);
    if (it != ns_cache_.end()) {
      *d = it->second;
      return Status::OK();
    }
  }
  std::string json;
  Status s = index_->get_namespace(ns, &json);
  if (!s.ok()) return s;
  s = NamespaceDesc::from_json(json, d);
  if (!s.ok()) return Status::Corruption("namespace " + to_hex(ns) + " in the index of " + path_ + ": " + s.message());
  std::lock_guard<std::mutex> g(ns_mu_);
  ns_cache_[ns] = *d;
  return Status::OK();
}

Status StoreImpl::get_namespace(const NamespaceId& ns, NamespaceDesc* desc) {
  NamespaceDesc d;
  Status s = ns_desc(ns, &d);
  if (!s.ok() && s.code() == Code::kNotFound && read_only()) {
    (void)refresh();
    s = ns_desc(ns, &d);
  }
  if (!s.ok()) {
    if (s.code() == Code::kNotFound)
      return Status::NotFound("namespace " + to_hex(ns) + " is not registered in store " + path_ +
                              " (a writer registers it first: ucm_store_namespace_register)");
    return s;
  }
  if (desc) *desc = std::move(d);
  return Status::OK();
}

Status StoreImpl::find_namespace(const std::string& key, NamespaceDesc* desc, NamespaceId* id) {
  NamespaceId ns;
  NamespaceDesc d;
  if (key.size() == 32 && parse_hex16(key, &ns).ok() && ns_desc(ns, &d).ok()) {
    if (desc) *desc = d;
    if (id) *id = ns;
    return Status::OK();
  }
  bool found = false;
  Status inner;
  Status s = index_->for_each_namespace([&](const NamespaceId& n, const std::string& json) {
    NamespaceDesc x;
    if (!NamespaceDesc::from_json(json, &x).ok()) return true;
    if (x.display_name() == key) {
      d = x;
      ns = n;
      found = true;
      return false;
    }
    return true;
  });
  if (!s.ok()) return s;
  if (!found)
    return Status::NotFound("namespace \"" + key + "\" is not registered in store " + path_ +
                            " (list them with `ucm inspect " + path_ + "`)");
  if (desc) *desc = d;
  if (id) *id = ns;
  return Status::OK();
}

std::vector<NamespaceDesc> StoreImpl::namespaces() {
  std::vector<NamespaceDesc> out;
  (void)index_->for_each_namespace([&](const NamespaceId&, const std::string& json) {
    NamespaceDesc x;
    if (NamespaceDesc::from_json(json, &x).ok()) out.push_back(std::move(x));
    return true;
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
Status StoreImpl::check_space(uint64_t bytes, const std::string& what) {
  struct statvfs v;
  if (::statvfs(path_.c_str(), &v) != 0) return Status::OK();  // cannot tell: the write will
  const uint64_t unit = v.f_frsize ? v.f_frsize : v.f_bsize;
  const uint64_t avail = uint64_t(v.f_bavail) * unit, total = uint64_t(v.f_blocks) * unit;
  const uint64_t base_reserve = std::min<uint64_t>(fmt::kSpaceReserveMax, total / 16);
  const uint64_t reserve = std::max<uint64_t>(2 * bytes, base_reserve);
  std::lock_guard<std::mutex> g(space_mu_);
  const uint64_t need = std::max<uint64_t>(bytes + reserve, space_need_);
  if (avail >= need) {
    space_need_ = 0;
    return Status::OK();
  }
  // Hysteresis: until this much is free, smaller writes are refused too (bounded by one base
  // reserve above the current free space, so one oversized dump does not block the rest).
  space_need_ = std::min<uint64_t>(need, avail + base_reserve);
  return Status::NoSpace(what + " into " + path_ + ": " + std::to_string(avail) + " bytes free on its file system, " +
                         std::to_string(need) + " needed (" + std::to_string(bytes) + " to write plus a reserve of " +
                         std::to_string(need - bytes) + " kept so the index can always commit and close); nothing "
                         "was written. Free disk space (e.g. `ucm gc --max-bytes`) and retry");
}

Status StoreImpl::active_file_locked(std::shared_ptr<ActiveFile>* af) {
  if (!active_ || active_->w->size() >= fmt::kFileRollBytes) {
    uint32_t id = 0;
    Status s = index_->allocate_file_id(&id);
    if (!s.ok()) return s;
    auto nf = std::make_shared<ActiveFile>();
    s = fmt::DataFileWriter::Create(path_, id, &nf->w);
    if (!s.ok()) return s;
    nf->rec.size = fmt::kPage;
    nf->rec.state = fmt::FileState::kActive;
    Index::Batch b;
    {
      std::lock_guard<std::mutex> c(commit_mu_);
      if (active_) {
        active_->rec.state = fmt::FileState::kSealed;
        b.put_file(active_->w->file_id(), active_->rec);
      }
      b.put_file(id, nf->rec);
      s = index_->write(b, true);
    }
    if (!s.ok()) return s;
    active_ = nf;
  }
  *af = active_;
  return Status::OK();
}

Status StoreImpl::append_record(fmt::RecordHeader* h, const std::vector<std::pair<const void*, size_t>>& pieces,
                                uint32_t* file, uint64_t* off, std::shared_ptr<ActiveFile>* af) {
  std::shared_ptr<ActiveFile> cur;
  {
    std::lock_guard<std::mutex> g(append_mu_);
    Status s = active_file_locked(&cur);
    if (!s.ok()) return s;
  }
  Status s = cur->w->append(h, pieces, off);
  if (!s.ok()) return s;
  *file = cur->w->file_id();
  *af = cur;
  return Status::OK();
}

Status StoreImpl::reserve_range(uint64_t bytes, uint64_t* off, std::shared_ptr<ActiveFile>* af) {
  std::lock_guard<std::mutex> g(append_mu_);
  Status s = active_file_locked(af);
  if (!s.ok()) return s;
  return (*af)->w->reserve(bytes, off);
}

void StoreImpl::submit_commit(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> g(commit_q_mu_);
    commit_q_.push_back(std::move(f));
  }
  commit_q_cv_.notify_one();
}

void StoreImpl::commit_loop() {
  for (;;) {
    std::function<void()> f;
    {
      std::unique_lock<std::mutex> l(commit_q_mu_);
      commit_q_cv_.wait(l, [&] { return commit_stop_ || !commit_q_.empty(); });
      if (commit_q_.empty()) return;
      f = std::move(commit_q_.front());
      commit_q_.pop_front();
    }
    f();
  }
}

Status StoreImpl::write_meta_record(fmt::RecordHeader* h, const std::string& payload, uint32_t* file,
                                    uint64_t* off, const std::function<Status(Index::Batch&)>& fill) {
  std::shared_ptr<ActiveFile> af;
  Status s = check_space(fmt::record_size(payload.size()) + fmt::kPage,
                         std::string("write a ") + fmt::record_type_name(h->type) + " record");
  if (!s.ok()) return s;
  s = append_record(h, {{payload.data(), payload.size()}}, file, off, &af);
  if (!s.ok()) return s;
  s = af->w->sync();
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> g(commit_mu_);
  Index::Batch b;
  s = fill(b);
  if (!s.ok()) return s;
  af->rec.size = af->w->size();
  af->rec.live_bytes += fmt::record_size(payload.size());
  b.put_file(*file, af->rec);
  return index_->write(b, true);
}

Status StoreImpl::register_namespace(const NamespaceDesc& desc, NamespaceId* id) {
  Status s = writer_only("register_namespace");
  if (!s.ok()) return s;
  s = desc.validate();
  if (!s.ok()) return s;
  const NamespaceId ns = desc.id();
  const std::string name = desc.display_name();
  std::string existing;
  if (index_->get_namespace(ns, &existing).ok()) {
    if (id) *id = ns;
    return Status::OK();
  }
  Status clash;
  s = index_->for_each_namespace([&](const NamespaceId& n, const std::string& json) {
    NamespaceDesc x;
    if (NamespaceDesc::from_json(json, &x).ok() && x.display_name() == name && n != ns) {
      clash = Status::InvalidArgument("namespace name \"" + name + "\" is already used by namespace " + to_hex(n) +
                                      " with a different fingerprint in " + path_ + "; pick another name");
      return false;
    }
    return true;
  });
  if (!s.ok()) return s;
  if (!clash.ok()) return clash;
  NamespaceDesc named = desc;
  named.name = name;
  const std::string payload = named.to_json();
  fmt::RecordHeader h;
  h.type = fmt::RecordType::kNamespace;
  h.ns = ns;
  uint32_t file = 0;
  uint64_t off = 0;
  s = write_meta_record(&h, payload, &file, &off, [&](Index::Batch& b) {
    auto j = parse_obj(payload);
    j["blocks"] = 0;
    j["bytes"] = 0;
    j["attachments"] = nlohmann::json::object();
    j["record"] = {file, off};
    b.put_namespace(ns, j.dump());
    return Status::OK();
  });
  if (!s.ok()) return s;
  if (id) *id = ns;
  return Status::OK();
}

Status StoreImpl::put_attachment(const NamespaceId& ns, const std::string& name, const void* data, size_t len) {
  Status s = writer_only("put_attachment");
  if (!s.ok()) return s;
  if (name.empty()) return Status::InvalidArgument("attachment name is empty");
  if (name.size() > fmt::kMaxAttachmentName)
    return Status::InvalidArgument("attachment name of " + std::to_string(name.size()) + " bytes is longer than " +
                                   std::to_string(fmt::kMaxAttachmentName) + "; use a shorter name");
  if (len && !data) return Status::InvalidArgument("put_attachment: data is null with len > 0");
  std::string tmp;
  s = index_->get_namespace(ns, &tmp);
  if (!s.ok()) return s;
  fmt::RecordHeader h;
  h.type = fmt::RecordType::kNsAttachment;
  h.flags = fmt::kRecordFlagNamed;  // the payload carries the name, so rebuild-index recovers it (§3.3)
  h.ns = ns;
  h.key = fmt::md5(name.data(), name.size());
  const std::string payload = fmt::encode_attachment_payload(name, data, len);
  uint32_t file = 0;
  uint64_t off = 0;
  return write_meta_record(&h, payload, &file, &off, [&](Index::Batch& b) {
    std::string cur;
    Status st = index_->get_namespace(ns, &cur);
    if (!st.ok()) return st;
    auto j = parse_obj(cur);
    j["attachments"][name] = {file, off, uint64_t(payload.size()), h.payload_checksum};
    b.put_namespace(ns, j.dump());
    return Status::OK();
  });
}

Status StoreImpl::get_attachment(const NamespaceId& ns, const std::string& name, std::string* data) {
  std::string cur;
  Status s = index_->get_namespace(ns, &cur);
  if (!s.ok()) return s;
  auto j = parse_obj(cur);
  if (!j.contains("attachments") || !j["attachments"].contains(name))
    return Status::NotFound("namespace " + to_hex(ns) + " has no attachment \"" + name + "\"");
  auto a = j["attachments"][name];
  if (!a.is_array() || a.size() != 4) return Status::Corruption("attachment \"" + name + "\" entry is malformed in the index");
  fmt::RecordExpect e;
  e.type = fmt::RecordType::kNsAttachment;
  e.ns = ns;
  e.key = fmt::md5(name.data(), name.size());
  e.payload_length = a[2].get<uint64_t>();
  e.payload_checksum = a[3].get<uint64_t>();
  fmt::AlignedBuffer buf;
  const uint32_t file = a[0].get<uint32_t>();
  const uint64_t off = a[1].get<uint64_t>();
  s = read_verified(file, off, e, &buf);
  if (!s.ok()) return s;
  const std::string where = path_ + "/" + rel_data_name(file) + " at offset " + std::to_string(off);
  fmt::RecordHeader h;
  s = fmt::decode_record_header(buf.data(), where, &h);
  if (!s.ok()) return s;
  std::string stored;
  size_t data_off = 0;
  const uint8_t* p = buf.data() + fmt::kPage;
  s = fmt::decode_attachment_payload(h.flags, p, e.payload_length, where, &stored, &data_off);
  if (!s.ok()) return s;
  if ((h.flags & fmt::kRecordFlagNamed) && stored != name)
    return Status::Corruption(where + ": attachment record holds \"" + stored + "\", the index says \"" + name + "\"");
  data->assign(reinterpret_cast<const char*>(p + data_off), e.payload_length - data_off);
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------
Status StoreImpl::put_document(const NamespaceId& ns, const DocumentEntry& doc) {
  Status s = writer_only("put_document");
  if (!s.ok()) return s;
  if (doc.id.empty()) return Status::InvalidArgument("document id is empty");
  std::string tmp;
  s = index_->get_namespace(ns, &tmp);
  if (!s.ok()) return s;
  const std::string payload = document_to_json(doc);
  fmt::RecordHeader h;
  h.type = fmt::RecordType::kDocument;
  h.ns = ns;
  h.key = fmt::md5(doc.id.data(), doc.id.size());
  uint32_t file = 0;
  uint64_t off = 0;
  return write_meta_record(&h, payload, &file, &off, [&](Index::Batch& b) {
    b.put_doc(ns, doc.id, payload);
    return Status::OK();
  });
}

Status StoreImpl::get_document(const NamespaceId& ns, const std::string& id, DocumentEntry* doc) {
  std::string json;
  Status s = index_->get_doc(ns, id, &json);
  if (!s.ok()) return s;
  return document_from_json(json, doc);
}

std::vector<DocumentEntry> StoreImpl::documents(const NamespaceId& ns) {
  std::vector<DocumentEntry> out;
  (void)index_->for_each_doc(ns, [&](const std::string&, const std::string& json) {
    DocumentEntry d;
    if (document_from_json(json, &d).ok()) out.push_back(std::move(d));
    return true;
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
Status StoreImpl::lookup(const NamespaceId& ns, const BlockHash* hashes, size_t n, uint8_t* present,
                         size_t* prefix_blocks) {
  const auto t0 = Clock::now();
  if (n && !hashes) return Status::InvalidArgument("lookup: hashes is null with n > 0");
  size_t prefix = 0, hits = 0;
  bool in_prefix = true;
  constexpr size_t kChunk = 16;
  uint64_t fps[kChunk];
  {
    std::shared_lock<std::shared_mutex> g(table_mu_);
    for (size_t base = 0; base < n; base += kChunk) {
      const size_t m = std::min(kChunk, n - base);
      for (size_t i = 0; i < m; ++i) {
        fps[i] = fmt::block_fingerprint(ns, hashes[base + i]);
        table_.prefetch(fps[i]);
      }
      for (size_t i = 0; i < m; ++i) {
        const bool p = table_.contains(fps[i]);
        if (present) present[base + i] = p ? 1 : 0;
        hits += p;
        if (in_prefix && p) ++prefix;
        else in_prefix = false;
      }
    }
  }
  if (prefix_blocks) *prefix_blocks = prefix;
  metrics_.lookups.fetch_add(n, std::memory_order_relaxed);
  metrics_.lookup_hits.fetch_add(hits, std::memory_order_relaxed);
  metrics_.lookup.observe_ns(elapsed_ns(t0));
  return Status::OK();
}

Status StoreImpl::get_block(const NamespaceId& ns, const BlockHash& hash, BlockInfo* info) {
  fmt::BlockRecord r;
  Status s = index_->get_block(ns, hash, &r);
  if (!s.ok()) return s;
  if (info) *info = to_info(ns, hash, r);
  return Status::OK();
}

Status StoreImpl::file_for(uint32_t id, OpenFile* f) {
  {
    std::shared_lock<std::shared_mutex> g(files_mu_);
    auto it = files_.find(id);
    if (it != files_.end()) {
      *f = it->second;
      return Status::OK();
    }
  }
  const std::string p = fmt::data_file_path(path_, id);
  OpenFile of;
  if (opts_.direct_io) {
    of.fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    of.direct = of.fd >= 0;
    if (of.fd < 0 && errno == ENOENT)
      return Status::NotFound("data file " + p + " is gone (retired by gc)");
  }
  if (of.fd < 0) {
    of.fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (of.fd < 0) {
      if (errno == ENOENT) return Status::NotFound("data file " + p + " is gone (retired by gc)");
      return Status::FromErrno(errno, "open data file " + p);
    }
  }
  std::unique_lock<std::shared_mutex> g(files_mu_);
  auto [it, inserted] = files_.emplace(id, of);
  if (!inserted) ::close(of.fd);
  *f = it->second;
  return Status::OK();
}

void StoreImpl::drop_file(uint32_t id) {
  std::unique_lock<std::shared_mutex> g(files_mu_);
  auto it = files_.find(id);
  if (it == files_.end()) return;
  ::close(it->second.fd);
  files_.erase(it);
}

Status StoreImpl::read_verified(uint32_t file, uint64_t off, const fmt::RecordExpect& e, fmt::AlignedBuffer* buf) {
  OpenFile f;
  Status s = file_for(file, &f);
  if (!s.ok()) return s;
  const std::string where = path_ + "/" + rel_data_name(file) + " (file id " + std::to_string(file) + ")";
  int err = 0;
  s = fmt::read_record(f.fd, off, e, buf, where, &err);
  if (!s.ok() && f.direct && err == EINVAL) {
    // The file system refused O_DIRECT for this read: reopen buffered and retry once.
    int fd = ::open(fmt::data_file_path(path_, file).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "open " + where);
    {
      std::unique_lock<std::shared_mutex> g(files_mu_);
      auto it = files_.find(file);
      if (it != files_.end()) {
        ::close(it->second.fd);
        it->second = OpenFile{fd, false};
      } else {
        files_.emplace(file, OpenFile{fd, false});
      }
    }
    s = fmt::read_record(fd, off, e, buf, where);
  }
  return s;
}

void StoreImpl::load_one(const std::shared_ptr<TaskImpl>& t, size_t i, const NamespaceId& ns, const BlockHash& h,
                         const NamespaceDesc& d, uint32_t h0, uint32_t h1, const LoadDest& dest) {
  thread_local fmt::AlignedBuffer buf;
  Status s;
  for (int attempt = 0; attempt < 2; ++attempt) {
    fmt::BlockRecord r;
    s = index_->get_block(ns, h, &r);
    if (s.ok() && r.kv_length != d.payload_bytes())
      s = Status::Corruption("block " + to_hex(h) + ": index says " + std::to_string(r.kv_length) +
                             " payload bytes, namespace expects " + std::to_string(d.payload_bytes()));
    if (s.ok()) {
      fmt::RecordExpect e;
      e.type = fmt::RecordType::kBlockKV;
      e.ns = ns;
      e.key = h;
      e.payload_length = r.kv_length;
      e.payload_checksum = r.kv_checksum;
      s = read_verified(r.kv_file, r.kv_offset, e, &buf);
      if (s.code() == Code::kNotFound && attempt == 0) {
        // The data file was retired by gc: our view is stale. Catch up once and retry.
        drop_file(r.kv_file);
        (void)refresh();
        continue;
      }
    }
    break;
  }
  if (s.ok()) {
    const uint8_t* src = buf.data() + fmt::kPage;
    const size_t S = dtype_size(d.dtype), T = d.block_size, H = d.num_kv_heads, D = d.head_dim, L = d.num_layers;
    const size_t run = size_t(h1 - h0) * D * S;  // bytes per token in the destination
    const size_t page_src = T * H * D * S, page_dst = T * run;
    for (size_t l = 0; l < L; ++l)
      for (size_t kv = 0; kv < 2; ++kv) {
        const uint8_t* sp = src + (l * 2 + kv) * page_src;
        uint8_t* dp = dest.kind == LoadDest::Kind::kContiguous
                          ? static_cast<uint8_t*>(dest.ptrs[i]) + (l * 2 + kv) * page_dst
                          : static_cast<uint8_t*>(dest.ptrs[(i * L + l) * 2 + kv]);
        if (h0 == 0 && h1 == H) std::memcpy(dp, sp, page_src);
        else
          for (size_t tt = 0; tt < T; ++tt) std::memcpy(dp + tt * run, sp + (tt * H + h0) * D * S, run);
      }
    metrics_.blocks_loaded.fetch_add(1, std::memory_order_relaxed);
    metrics_.bytes_loaded.fetch_add(L * 2 * page_dst, std::memory_order_relaxed);
    access_.add(ns, h, fmt::now_ms());
  } else {
    metrics_.count_error(s.code());
  }
  t->statuses()[i] = s;
  if (t->job_done()) finish_load(t);
}

void StoreImpl::finish_load(const std::shared_ptr<TaskImpl>& t) {
  metrics_.load_task.observe_ns(elapsed_ns(t->t0));
  t->finish();
}

std::shared_ptr<Task> StoreImpl::load(const NamespaceId& ns, const BlockHash* hashes, size_t n, const LoadDest& dest) {
  NamespaceDesc d;
  Status s = get_namespace(ns, &d);
  if (!s.ok()) {
    metrics_.count_error(s.code());
    return TaskImpl::Failed(n, s);
  }
  const uint32_t h0 = dest.heads.begin, h1 = dest.heads.end == 0 ? d.num_kv_heads : dest.heads.end;
  Status bad;
  if (h0 >= h1 || h1 > d.num_kv_heads)
    bad = Status::InvalidArgument("load: KV-head range [" + std::to_string(h0) + ", " + std::to_string(h1) +
                                  ") is not within [0, " + std::to_string(d.num_kv_heads) + ") of namespace " +
                                  d.display_name());
  const size_t need = dest.kind == LoadDest::Kind::kContiguous ? n : n * d.num_layers * 2;
  if (bad.ok() && dest.ptrs.size() < need)
    bad = Status::InvalidArgument("load: " + std::to_string(dest.ptrs.size()) + " destination pointers, need " +
                                  std::to_string(need) + (dest.kind == LoadDest::Kind::kPaged ? " (n * L * 2, paged)" : " (n)"));
  if (bad.ok() && n && !hashes) bad = Status::InvalidArgument("load: hashes is null with n > 0");
  if (bad.ok())
    for (size_t k = 0; k < need; ++k)
      if (!dest.ptrs[k]) {
        bad = Status::InvalidArgument("load: destination pointer " + std::to_string(k) + " is null");
        break;
      }
  if (!bad.ok()) {
    metrics_.count_error(bad.code());
    return TaskImpl::Failed(n, bad);
  }
  auto t = std::make_shared<TaskImpl>(n);
  if (n == 0) {
    t->finish();
    return t;
  }
  auto shared_dest = std::make_shared<LoadDest>(dest);
  auto hs = std::make_shared<std::vector<BlockHash>>(hashes, hashes + n);
  for (size_t i = 0; i < n; ++i)
    pool_->submit([this, t, i, ns, hs, d, h0, h1, shared_dest] { load_one(t, i, ns, (*hs)[i], d, h0, h1, *shared_dest); });
  return t;
}

std::shared_ptr<Task> StoreImpl::load_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n, void* const* dst,
                                           const size_t* cap) {
  if (n && (!hashes || !dst || !cap)) return TaskImpl::Failed(n, Status::InvalidArgument("load_repr: null argument"));
  auto t = std::make_shared<TaskImpl>(n);
  if (n == 0) {
    t->finish();
    return t;
  }
  auto hs = std::make_shared<std::vector<BlockHash>>(hashes, hashes + n);
  auto ds = std::make_shared<std::vector<void*>>(dst, dst + n);
  auto cs = std::make_shared<std::vector<size_t>>(cap, cap + n);
  for (size_t i = 0; i < n; ++i)
    pool_->submit([this, t, i, ns, hs, ds, cs] {
      thread_local fmt::AlignedBuffer buf;
      const BlockHash& h = (*hs)[i];
      Status s;
      for (int attempt = 0; attempt < 2; ++attempt) {
        fmt::BlockRecord r;
        s = index_->get_block(ns, h, &r);
        if (s.ok() && !r.has_repr()) s = Status::NotFound("block " + to_hex(h) + " has no representations");
        if (s.ok() && r.repr_length > (*cs)[i])
          s = Status::InvalidArgument("load_repr: block " + to_hex(h) + " needs " + std::to_string(r.repr_length) +
                                      " bytes, destination " + std::to_string(i) + " has " + std::to_string((*cs)[i]));
        if (s.ok() && !(*ds)[i]) s = Status::InvalidArgument("load_repr: destination " + std::to_string(i) + " is null");
        if (s.ok()) {
          fmt::RecordExpect e;
          e.type = fmt::RecordType::kBlockRepr;
          e.ns = ns;
          e.key = h;
          e.payload_length = r.repr_length;
          e.payload_checksum = r.repr_checksum;
          s = read_verified(r.repr_file, r.repr_offset, e, &buf);
          if (s.code() == Code::kNotFound && attempt == 0) {
            drop_file(r.repr_file);
            (void)refresh();
            continue;
          }
          if (s.ok()) {
            std::memcpy((*ds)[i], buf.data() + fmt::kPage, r.repr_length);
            metrics_.bytes_loaded.fetch_add(r.repr_length, std::memory_order_relaxed);
            access_.add(ns, h, fmt::now_ms());
          }
        }
        break;
      }
      if (!s.ok()) metrics_.count_error(s.code());
      t->statuses()[i] = s;
      if (t->job_done()) finish_load(t);
    });
  return t;
}

// ---------------------------------------------------------------------------------------------
namespace {
struct DumpState {
  NamespaceId ns;
  NamespaceDesc desc;
  std::vector<DumpItem> items;
  std::vector<fmt::BlockRecord> recs;
  std::vector<bool> skip;  // already present (no-op)
  std::vector<std::shared_ptr<ActiveFile>> slot_file;  // per item: file of its reserved slot
  std::vector<uint64_t> slot_off;                      // per item: offset of its KV record
  std::vector<std::shared_ptr<ActiveFile>> files;  // files written by this task (to fdatasync)
  uint64_t epoch = 0;  // write_epoch_ after the task's last write
};
}  // namespace

std::shared_ptr<Task> StoreImpl::dump(const NamespaceId& ns, const DumpItem* items, size_t n) {
  Status s = writer_only("dump");
  NamespaceDesc d;
  if (s.ok()) s = get_namespace(ns, &d);
  if (s.ok() && n && !items) s = Status::InvalidArgument("dump: items is null with n > 0");
  for (size_t i = 0; s.ok() && i < n; ++i) {
    if (!items[i].kv && !items[i].kv_pages)
      s = Status::InvalidArgument("dump: item " + std::to_string(i) + " has no KV payload (kv and kv_pages are null)");
    else if (items[i].token_count != d.block_size)
      s = Status::InvalidArgument("dump: item " + std::to_string(i) + " has token_count " +
                                  std::to_string(items[i].token_count) + ", the namespace's block size is " +
                                  std::to_string(d.block_size) + " (only full blocks are stored)");
    else if (items[i].repr_len && !items[i].repr)
      s = Status::InvalidArgument("dump: item " + std::to_string(i) + " has repr_len but no repr");
    else if (items[i].kv_pages)
      for (size_t p = 0; p < size_t(d.num_layers) * 2; ++p)
        if (!items[i].kv_pages[p]) {
          s = Status::InvalidArgument("dump: item " + std::to_string(i) + " page " + std::to_string(p) + " is null");
          break;
        }
  }
  if (s.ok() && n) {
    uint64_t bytes = fmt::kPage;  // a new data file's header, if the dump rolls
    for (size_t i = 0; i < n; ++i)
      bytes += fmt::record_size(d.payload_bytes()) + (items[i].repr_len ? fmt::record_size(items[i].repr_len) : 0);
    s = check_space(bytes, "dump of " + std::to_string(n) + " blocks");
  }
  if (!s.ok()) {
    metrics_.count_error(s.code());
    return TaskImpl::Failed(n, s);
  }
  auto t = std::make_shared<TaskImpl>(n);
  if (n == 0) {
    t->finish();
    return t;
  }
  auto st = std::make_shared<DumpState>();
  st->ns = ns;
  st->desc = d;
  st->items.assign(items, items + n);
  st->recs.resize(n);
  st->skip.assign(n, false);
  st->slot_file.resize(n);
  st->slot_off.assign(n, 0);

  // Existence, batched: the in-memory fingerprint table first (the writer keeps it exact for its
  // own commits); only a fingerprint hit costs an index get. Duplicates within the task are
  // written once.
  {
    std::vector<size_t> hits;
    {
      std::shared_lock<std::shared_mutex> g(table_mu_);
      for (size_t i = 0; i < n; ++i)
        if (table_.contains(fmt::block_fingerprint(ns, items[i].hash))) hits.push_back(i);
    }
    fmt::BlockRecord cur;
    for (size_t i : hits)
      if (index_->get_block(ns, items[i].hash, &cur).ok()) st->skip[i] = true;
    if (n > 1) {
      std::set<BlockHash> seen;
      for (size_t i = 0; i < n; ++i)
        if (!st->skip[i] && !seen.insert(items[i].hash).second) st->skip[i] = true;
    }
  }

  // Space: the task's records are contiguous, reserved (and allocated) up front in runs of at
  // most kRun bytes, each record's KV record followed by its repr record.
  {
    constexpr uint64_t kRun = 64ull << 20;
    size_t i = 0;
    while (i < n) {
      uint64_t run = 0;
      size_t j = i;
      for (; j < n; ++j) {
        if (st->skip[j]) continue;
        const uint64_t rb = fmt::record_size(d.payload_bytes()) + (items[j].repr_len ? fmt::record_size(items[j].repr_len) : 0);
        if (run && run + rb > kRun) break;
        run += rb;
      }
      if (run) {
        std::shared_ptr<ActiveFile> af;
        uint64_t off = 0;
        s = reserve_range(run, &off, &af);
        if (!s.ok()) {
          metrics_.count_error(s.code());
          return TaskImpl::Failed(n, Status(s.code(), "dump of " + std::to_string(n) + " blocks: " + s.message() +
                                                         " (nothing was committed)"));
        }
        if (st->files.empty() || st->files.back() != af) st->files.push_back(af);
        for (size_t k = i; k < j; ++k) {
          if (st->skip[k]) continue;
          st->slot_file[k] = af;
          st->slot_off[k] = off;
          off += fmt::record_size(d.payload_bytes()) + (items[k].repr_len ? fmt::record_size(items[k].repr_len) : 0);
        }
      }
      i = j;
    }
  }

  auto commit = [this, t, st] {
    // On the commit thread. All records of this task are written (or failed). Make them
    // durable (store_v1.md §3.4: data fdatasync'd before the synced index batch), then index them.
    const size_t n = st->items.size();
    auto& bs = t->statuses();
    bool any = false;
    Status full;
    for (size_t i = 0; i < n; ++i) {
      any |= bs[i].ok() && !st->skip[i];
      if (bs[i].code() == Code::kNoSpace && full.ok()) full = bs[i];
    }
    Status whole;
    if (any && !full.ok()) {
      // The disk filled up while this task wrote (another process took the reserve). Committing
      // the blocks that did get written would append to the index's WAL on a full disk, and a
      // failed WAL write leaves the index refusing writes until it is reopened. Fail the whole
      // task instead; the written records are dead space for gc.
      whole = Status::NoSpace(full.message() + " (no block of this dump was committed)");
      for (size_t i = 0; i < n; ++i)
        if (bs[i].ok() && !st->skip[i]) bs[i] = whole;
      any = false;
    }
    if (any) {
      for (auto& f : st->files) {
        if (!whole.ok()) break;
        if (f->synced_epoch >= st->epoch) continue;  // an fdatasync begun after our writes covered it
        const uint64_t e = write_epoch_.load();
        whole = f->w->sync();
        if (whole.ok()) f->synced_epoch = std::max(f->synced_epoch, e);
      }
      if (whole.ok()) {
        std::lock_guard<std::mutex> g(commit_mu_);
        Index::Batch b;
        int64_t blocks = 0, bytes = 0;
        std::map<uint32_t, int64_t> live;
        std::vector<size_t> added;
        for (size_t i = 0; i < n; ++i) {
          if (!bs[i].ok() || st->skip[i]) continue;
          const auto& h = st->items[i].hash;
          fmt::BlockRecord cur;
          bool maybe;
          {
            std::shared_lock<std::shared_mutex> tg(table_mu_);
            maybe = table_.contains(fmt::block_fingerprint(st->ns, h));
          }
          if (maybe && index_->get_block(st->ns, h, &cur).ok()) {
            st->skip[i] = true;  // raced with another dump of the same block: ours is dead space
            continue;
          }
          const auto& r = st->recs[i];
          b.put_block(st->ns, h, r);
          ++blocks;
          bytes += int64_t(r.bytes());
          live[r.kv_file] += int64_t(fmt::record_size(r.kv_length));
          if (r.has_repr()) live[r.repr_file] += int64_t(fmt::record_size(r.repr_length));
          added.push_back(i);
        }
        if (!added.empty()) {
          b.add_ns_counters(st->ns, blocks, bytes);
          for (auto& f : st->files) {
            const uint32_t id = f->w->file_id();
            f->rec.size = f->w->size();
            f->rec.live_bytes += uint64_t(live[id]);
            b.put_file(id, f->rec);
          }
          whole = index_->write(b, true);
          if (whole.ok()) {
            std::unique_lock<std::shared_mutex> tg(table_mu_);
            for (size_t i : added) table_.insert(fmt::block_fingerprint(st->ns, st->items[i].hash));
            applied_seq_ = index_->journal_seq();
          } else {
            // Nothing was indexed; undo the in-memory live bytes.
            for (auto& f : st->files) f->rec.live_bytes -= uint64_t(live[f->w->file_id()]);
          }
        }
        if (whole.ok())
          for (size_t i : added) {
            metrics_.blocks_dumped.fetch_add(1, std::memory_order_relaxed);
            metrics_.bytes_dumped.fetch_add(st->recs[i].bytes(), std::memory_order_relaxed);
          }
      }
      if (!whole.ok())
        for (size_t i = 0; i < n; ++i)
          if (bs[i].ok() && !st->skip[i]) bs[i] = whole;
    }
    for (size_t i = 0; i < n; ++i) {
      if (st->skip[i] && bs[i].ok()) metrics_.dump_skipped.fetch_add(1, std::memory_order_relaxed);
      metrics_.count_error(bs[i].code());
    }
    metrics_.dump_task.observe_ns(elapsed_ns(t->t0));
    t->finish();
  };
  auto job_finished = [this, t, st, commit] {
    if (!t->job_done()) return;
    st->epoch = write_epoch_.load();
    submit_commit(commit);
  };

  for (size_t i = 0; i < n; ++i) {
    if (st->skip[i]) {
      job_finished();  // cheap no-op
      continue;
    }
    pool_->submit([this, t, st, i, job_finished] {
      // Encode the KV record (and the repr record right after it) into a page-aligned staging
      // buffer, copying and checksumming in one pass, then write both with one O_DIRECT write.
      thread_local fmt::AlignedBuffer stage;
      const DumpItem& it = st->items[i];
      const NamespaceDesc& d = st->desc;
      const uint64_t kv_rec = fmt::record_size(d.payload_bytes());
      const uint64_t total = kv_rec + (it.repr_len ? fmt::record_size(it.repr_len) : 0);
      Status s;
      if (!stage.reserve(total)) s = Status::Internal("out of memory (dump staging buffer of " + std::to_string(total) + " bytes)");
      std::vector<std::pair<const void*, size_t>> pieces;
      if (it.kv) pieces.emplace_back(it.kv, d.payload_bytes());
      else {
        const size_t page = d.payload_bytes() / (size_t(d.num_layers) * 2);
        for (size_t p = 0; p < size_t(d.num_layers) * 2; ++p) pieces.emplace_back(it.kv_pages[p], page);
      }
      fmt::RecordHeader h;
      h.type = fmt::RecordType::kBlockKV;
      h.ns = st->ns;
      h.key = it.hash;
      h.parent = it.parent;
      h.token_count = it.token_count;
      fmt::RecordHeader rh;
      if (s.ok()) {
        fmt::encode_record(&h, pieces, stage.data());
        if (it.repr_len) {
          rh = h;
          rh.type = fmt::RecordType::kBlockRepr;
          fmt::encode_record(&rh, {{it.repr, it.repr_len}}, stage.data() + kv_rec);
        }
        const auto& af = st->slot_file[i];
        const uint64_t off = st->slot_off[i];
        s = af->w->write_at(stage.data(), total, off);
        write_epoch_.fetch_add(1);
        if (s.ok()) {
          fmt::BlockRecord& r = st->recs[i];
          r.token_count = it.token_count;
          r.parent = it.parent;
          r.kv_file = af->w->file_id();
          r.kv_offset = off;
          r.kv_length = h.payload_length;
          r.kv_checksum = h.payload_checksum;
          r.created_ms = h.created_ms;
          r.last_access_ms = h.created_ms;
          if (it.repr_len) {
            r.flags |= 1;
            r.repr_file = r.kv_file;
            r.repr_offset = off + kv_rec;
            r.repr_length = rh.payload_length;
            r.repr_checksum = rh.payload_checksum;
          }
        }
      }
      t->statuses()[i] = s;
      job_finished();
    });
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
std::string StoreImpl::metrics_text() const {
  size_t n;
  {
    std::shared_lock<std::shared_mutex> g(table_mu_);
    n = table_.size();
  }
  return metrics_.render(n);
}

}  // namespace

Status Store::Open(const std::string& path, const OpenOptions& opts, std::unique_ptr<Store>* out) {
  if (path.empty()) return Status::InvalidArgument("store path is empty");
  if (!out) return Status::InvalidArgument("Store::Open: out is null");
  if (opts.create_if_missing && opts.mode == OpenOptions::Mode::kReadOnly)
    return Status::InvalidArgument("create_if_missing needs mode kReadWrite (" + path + ")");
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto s = std::make_unique<StoreImpl>(p, opts);
  Status st;
  try {
    st = s->init(opts.create_if_missing);
  } catch (const std::exception& e) {
    st = Status::Internal(std::string("opening ") + p + ": " + e.what());
  }
  if (!st.ok()) return st;
  *out = std::move(s);
  return Status::OK();
}

}  // namespace ucm
