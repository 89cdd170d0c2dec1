// lib/src/store_open.cc: creating and opening a store, closing it, the background thread and the
// table's saves (see store_impl.h).
#include "ucm/core/sharded_store.h"
#include "ucm/core/store_impl.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "ucm/core/fptable_io.h"
#include "ucm/core/log.h"
#include "ucm/fs.h"

namespace ucm::detail {

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
  std::string target = s_.path;
  std::error_code ec;
  if (state != fmt::StoreDirState::kMissing) {
    const fs::path c = fs::canonical(s_.path, ec);  // a symlink to an empty directory: create there
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
  ucm::remove_tree(tmp, ec);  // a leftover of an earlier process with our pid
  if (::mkdir(tmp.c_str(), 0755) != 0) return Status::FromErrno(errno, "create " + tmp);
  auto cleanup = [&] {
    lock_.reset();
    std::error_code e2;
    ucm::remove_tree(tmp, e2);
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
  s_.files = std::make_unique<DataFileReader>(s_.path, s_.opts.direct_io);
  fmt::Superblock sb;
  Status s;
  const bool rw = s_.opts.mode == OpenOptions::Mode::kReadWrite;
  fmt::StoreDirState state = fmt::StoreDirState::kMissing;
  for (int attempt = 0;; ++attempt) {
    s = fmt::classify_store_dir(s_.path, &state);
    if (!s.ok()) return s;
    const bool creatable = state == fmt::StoreDirState::kMissing || state == fmt::StoreDirState::kEmpty ||
                           state == fmt::StoreDirState::kSkeleton;
    if (!create || !creatable) break;
    bool raced = false;
    s = create_new(state, &raced);
    if (!s.ok()) return s;
    if (!raced) break;
    if (attempt == 2)
      return Status::Busy("store " + s_.path + " is being created by another process at the same time; retry");
  }
  if (create && state == fmt::StoreDirState::kNotAStore) {
    struct stat st;
    if (::stat(s_.path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
      return Status::InvalidArgument(s_.path + " exists and is not a directory");
    return Status::InvalidArgument(s_.path + " is not empty and not a ucm store; a store is created only in a "
                                   "missing or empty directory");
  }
  s = fmt::read_superblock(s_.path, &sb);
  if (!s.ok()) return s;
  if (rw && sb.format_version < fmt::kMinWriterVersion)
    return Status::NotSupported("store " + s_.path + " has format version " + std::to_string(sb.format_version) +
                                "; this ucm writes format versions " + std::to_string(fmt::kMinWriterVersion) +
                                " and up (store_v1.md §10): run `ucm migrate " + s_.path +
                                " --upgrade` before writing to it (read-only opens work as it is)");
  s_.format_version = sb.format_version;
  if (rw && !s_.records_tokens())
    log().info("store {}: format version {}: blocks written to it record no token ids (tokens unknown); "
               "`ucm migrate {} --upgrade` steps it to version {} (store_v1.md §10)",
               s_.path, sb.format_version, s_.path, fmt::kTokensFormatVersion);
  if (rw) {
    if (!lock_) {
      s = fmt::WriterLock::Acquire(s_.path, &lock_);
      if (!s.ok()) return s;
    }
    s = fmt::classify_store_dir(s_.path, &state);  // again, now under the writer lock
    if (!s.ok()) return s;
    const bool have_index = require_index(s_.path).ok();
    if (!have_index && state != fmt::StoreDirState::kHalfCreated) return require_index(s_.path);
    if (!have_index) {
      // Creation by an older ucm was killed before the index existed, and there are no data
      // files: nothing can be lost, so finish creating the store (store_v1.md §1.1).
      std::error_code ec;
      ucm::remove_tree(fmt::index_dir(s_.path), ec);
      s = fmt::make_dirs(fmt::index_dir(s_.path));
      if (!s.ok()) return s;
      s = Index::OpenPrimary(fmt::index_dir(s_.path), true, &own_index_);
    } else {
      s = open_writer_index(s_.path, &own_index_);
    }
    if (!s.ok()) return s;
    s_.index = own_index_.get();
    s = put_fresh_meta(s_.index, sb, state == fmt::StoreDirState::kHalfCreated);
    if (!s.ok()) return s;
    for (const auto& d : {fmt::data_dir(s_.path), fmt::access_dir(s_.path), fmt::readers_dir(s_.path), fmt::tmp_dir(s_.path)}) {
      s = fmt::make_dirs(d);
      if (!s.ok()) return s;
    }
  } else {
    s = ReaderIndex::Open(s_.path, s_.opts.reader_dir, "", &ro_index_);
    if (!s.ok()) return s;
    s_.index = &ro_index_->index();
  }
  uint64_t fv = 0;
  if (s_.index->get_meta_u64(kMetaFormatVersion, &fv).ok() && fv > fmt::kFormatVersion)
    return Status::Version("store format version " + std::to_string(fv) + " is newer than this ucm supports (max " +
                           std::to_string(fmt::kFormatVersion) + "); upgrade ucm");
  if (rw && fv == fmt::kPageNamespacesFormatVersion && s_.format_version < fv) {
    // A step to 5 killed after the index and before the superblock (§12.2): finish it.
    s = step_to_page_namespaces();
    if (!s.ok()) return s;
  }
  if (!s_.index->identity(&index_identity_).ok()) index_identity_.clear();  // then no table is saved
  {
    // The persisted table (fptable.md §4), replayed to the index's state, or a rebuild.
    FpTable t;
    uint64_t seq = 0;
    FpTableOpenInfo info;
    s = fptable_open(s_.path, *s_.index, true, &t, &seq, &info);
    if (!s.ok()) return s;
    std::unique_lock<std::shared_mutex> g(s_.table_mu);
    s_.table = std::move(t);
    s_.applied_seq = seq;
    saved_seq_ = info.loaded ? seq - info.replayed : 0;  // the file's sequence (none: 0)
    save_pending_ = info.should_save;
    saved_at_ = Clock::now();
    s_.metrics.fptable_loaded.store(info.loaded ? 1 : 0);
    s_.metrics.fptable_replayed.store(info.replayed);
  }
  s = s_.access.open(s_.path, process_unique_name());
  if (!s.ok()) {
    if (!read_only()) return s;
    // A reader without write access to STORE/access (another user's store, a read-only mount)
    // serves loads without recording their recency: gc then ranks its blocks by what other
    // handles logged (docs/library.md, "Read-only opens").
    log().info("store {}: loads through this handle are not recorded for gc's recency ({})", s_.path, s.message());
  }
  s_.pool = std::make_unique<ThreadPool>(s_.opts.io_threads);
  if (!read_only()) writer_ = std::make_unique<StoreWriter>(&s_);
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
  if (s_.pool) s_.pool->shutdown();     // finishes queued load / dump jobs
  if (s_.index) s_.corrupt.flush(s_.path, &s_.metrics);  // for the store's writer (§11.6)
  // A safe point too: the writer applies what it (or anyone) asked for since its last heartbeat,
  // so its own last loads' corrupt blocks do not wait for the next writer.
  if (writer_) writer_->poll_gc_requests();
  if (writer_) writer_->stop_commits();  // then their commits
  if (s_.index && (!read_only() || save_pending_)) save_table(true);
  s_.access.close();
  s_.files.reset();
  writer_.reset();
  s_.index = nullptr;
  own_index_.reset();
  ro_index_.reset();
  lock_.reset();
}

void StoreImpl::save_table(bool force) {
  // The table changes (commits, replays, rebuilds) with s_.table_mu held, together with
  // s_.applied_seq, so a copy taken under s_.table_mu is exactly the set as of s_.applied_seq.
  // Readers save only what their open asked for (save_pending_).
  std::lock_guard<std::mutex> sg(save_mu_);
  save_pending_ = false;
  if (index_identity_.empty()) return;
  std::vector<uint64_t> copy;
  uint64_t seq = 0, count = 0;
  {
    std::shared_lock<std::shared_mutex> g(s_.table_mu);
    seq = s_.applied_seq;
    if (seq == saved_seq_) return;
    const bool due = force || seq - saved_seq_ >= kFpTableSaveEntries ||
                     Clock::now() - saved_at_ >= std::chrono::milliseconds(kFpTableSaveMs);
    if (!due) return;
    copy.assign(s_.table.slots(), s_.table.slots() + s_.table.capacity());
    count = s_.table.size();
  }
  Status s = fptable_save(s_.path, copy.data(), copy.size(), count, seq, index_identity_);
  saved_at_ = Clock::now();  // a failure is retried a period later, not every second
  if (s.ok()) saved_seq_ = seq;
  else log().warn("store {}: could not save the fingerprint table ({}); the next open rebuilds or replays it", s_.path,
                  s.message());
}

void StoreImpl::background() {
  const uint32_t ival = read_only() && s_.opts.refresh_interval_ms ? s_.opts.refresh_interval_ms : 1000;
  std::unique_lock<std::mutex> l(bg_mu_);
  while (!stop_) {
    if (save_pending_) {
      // The table the open rebuilt (or replayed far): written off the open's path.
      l.unlock();
      save_table(true);
      l.lock();
      continue;
    }
    bg_cv_.wait_for(l, std::chrono::milliseconds(ival));
    if (stop_) break;
    l.unlock();
    if (read_only() && s_.opts.refresh_interval_ms) (void)reader_.refresh();
    if (!read_only()) save_table(false);
    if (lock_) lock_->touch();  // the heartbeat gc checks on shared file systems (store_v1.md §11.3)
    // A safe point for gc's requests (store_v1.md §11.5): removals commit under the writer's
    // commit mutex, between dump commits.
    // Corrupt blocks this handle's loads met, as a request to the writer (§11.6): this handle's
    // own writer applies it just below.
    s_.corrupt.flush(s_.path, &s_.metrics);
    if (writer_) writer_->poll_gc_requests();
    s_.access.flush();
    l.lock();
  }
}

}  // namespace ucm::detail

namespace ucm {

Status Store::Open(const std::string& path, const OpenOptions& opts, std::unique_ptr<Store>* out) {
  if (path.empty()) return Status::InvalidArgument("store path is empty");
  if (!out) return Status::InvalidArgument("Store::Open: out is null");
  if (opts.create_if_missing && opts.mode == OpenOptions::Mode::kReadOnly)
    return Status::InvalidArgument("create_if_missing needs mode kReadWrite (" + path + ")");
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  // A sharded root (store_v1.md §11), or a missing store that a writer with a shard name creates.
  Status rk;
  bool sharded = false;
  try {
    fmt::StoreDirState state;
    rk = fmt::classify_store_dir(p, &state);
    if (!rk.ok()) return rk;
    const bool creatable = state == fmt::StoreDirState::kMissing || state == fmt::StoreDirState::kEmpty ||
                           state == fmt::StoreDirState::kSkeleton;
    const char* env = std::getenv("UCM_SHARD");
    if (creatable && opts.create_if_missing && (!opts.shard.empty() || (env && *env))) {
      bool created = false;
      rk = fmt::create_sharded_root(p, &created);
      if (!rk.ok()) return rk;
      sharded = true;
    } else if (!creatable) {
      fmt::RootKind kind;
      rk = fmt::root_kind(p, &kind);
      // Other errors are reported by the single-store open below, which knows the details.
      if (rk.ok()) sharded = kind == fmt::RootKind::kSharded;
      else if (fmt::interrupted_upgrade(rk)) return rk;
    }
    if (sharded) {
      auto ss = std::make_unique<detail::ShardedStore>(p, opts);
      rk = ss->init();
      if (!rk.ok()) return rk;
      *out = std::move(ss);
      return Status::OK();
    }
  } catch (const std::exception& e) {
    return Status::Internal(std::string("opening ") + p + ": " + e.what());
  }
  return detail::open_single_store(p, opts, out);
}

}  // namespace ucm

namespace ucm::detail {

Status open_single_store(const std::string& p, const OpenOptions& opts, std::unique_ptr<Store>* out) {
  auto s = std::make_unique<detail::StoreImpl>(p, opts);
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

}  // namespace ucm::detail
