// lib/src/store_writer.cc: StoreWriter (see ucm/core/store_writer.h): the free-space reserve,
// the active data file, the commit thread, small metadata records. dump: store_dump.cc.
#include "ucm/core/store_writer.h"

#include <sys/statvfs.h>

#include <algorithm>

namespace ucm::detail {

StoreWriter::StoreWriter(StoreShared* shared) : s_(*shared) {
  commit_thread_ = std::thread([this] { commit_loop(); });
}

StoreWriter::~StoreWriter() { stop_commits(); }

void StoreWriter::stop_commits() {
  if (!commit_thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> g(commit_q_mu_);
    commit_stop_ = true;
  }
  commit_q_cv_.notify_all();
  commit_thread_.join();
}

// ---------------------------------------------------------------------------------------------
Status StoreWriter::check_space(uint64_t bytes, const std::string& what) {
  struct statvfs v;
  if (::statvfs(s_.path.c_str(), &v) != 0) return Status::OK();  // cannot tell: the write will
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
  return Status::NoSpace(what + " into " + s_.path + ": " + std::to_string(avail) + " bytes free on its file system, " +
                         std::to_string(need) + " needed (" + std::to_string(bytes) + " to write plus a reserve of " +
                         std::to_string(need - bytes) + " kept so the index can always commit and close); nothing "
                         "was written. Free disk space (e.g. `ucm gc --max-bytes`) and retry");
}

Status StoreWriter::active_file_locked(std::shared_ptr<ActiveFile>* af) {
  if (!roller_) roller_ = std::make_unique<FileRoller>(s_.path, s_.index, &commit_mu_,
                                                        std::min<uint32_t>(s_.format_version, fmt::kCreateFormatVersion));
  Status s = roller_->get(0, af);
  if (s.ok()) {
    std::lock_guard<std::mutex> g(files_mu_);
    session_files_.emplace((*af)->w->file_id(), *af);
  }
  return s;
}

Status StoreWriter::append_record(fmt::RecordHeader* h, const std::vector<std::pair<const void*, size_t>>& pieces,
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

Status StoreWriter::reserve_range(uint64_t bytes, uint64_t* off, std::shared_ptr<ActiveFile>* af) {
  std::lock_guard<std::mutex> g(append_mu_);
  Status s = active_file_locked(af);
  if (!s.ok()) return s;
  return (*af)->w->reserve(bytes, off);
}

void StoreWriter::submit_commit(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> g(commit_q_mu_);
    commit_q_.push_back(std::move(f));
  }
  commit_q_cv_.notify_one();
}

void StoreWriter::commit_loop() {
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


// ---------------------------------------------------------------------------------------------
Status StoreWriter::write_meta_records(fmt::RecordHeader* hs, const std::string* payloads, size_t n, RecordAt* at,
                                       const std::function<Status(Index::Batch&)>& fill) {
  // The records (one file, or two when the active file rolls meanwhile), one fdatasync per
  // file, then one synced index batch (store_v1.md §3.4).
  std::vector<std::pair<std::shared_ptr<ActiveFile>, uint64_t>> files;  // file, live bytes added
  for (size_t i = 0; i < n; ++i) {
    std::shared_ptr<ActiveFile> af;
    Status s = append_record(&hs[i], {{payloads[i].data(), payloads[i].size()}}, &at[i].file, &at[i].offset, &af);
    if (!s.ok()) return s;
    if (files.empty() || files.back().first != af) files.emplace_back(af, 0);
    files.back().second += fmt::record_size(payloads[i].size());
  }
  for (auto& [af, live] : files) {
    Status s = af->w->sync();
    if (!s.ok()) return s;
  }
  std::lock_guard<std::mutex> g(commit_mu_);
  Index::Batch b;
  Status s = fill(b);
  if (!s.ok()) return s;
  for (auto& [af, live] : files) {
    af->rec.size = af->w->size();
    af->rec.live_bytes += live;
    b.put_file(af->w->file_id(), af->rec);
  }
  return s_.index->write(b, true);
}

}  // namespace ucm::detail
