// lib/src/store_gc_requests.cc: StoreWriter's side of gc beside a live writer (store_v1.md
// §11.5): the requests `ucm gc` leaves in STORE/gc-requests are applied at the heartbeat, one
// synced index batch of removals at a time under the commit mutex (so no dump commit interleaves),
// answered with <nonce>.done; dead data files are retired and unlinked after the grace period.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "ucm/core/document.h"
#include "ucm/core/log.h"
#include "ucm/core/store_writer.h"

namespace ucm::detail {

namespace fs = std::filesystem;

/// What one request did (the .done file, §11.5).
struct StoreWriter::GcApplied {
  uint64_t requested = 0, removed = 0, absent = 0, bytes = 0, documents_removed = 0;
  uint64_t files_retired = 0, files_unlinked = 0, bytes_unlinked = 0;
  std::vector<std::string> errors;
};

namespace {
constexpr size_t kBatchEntries = 4096;  // removals per synced index batch (dumps commit between)
}  // namespace

std::map<uint32_t, std::shared_ptr<ActiveFile>> StoreWriter::session_files() {
  std::map<uint32_t, std::shared_ptr<ActiveFile>> out;
  std::lock_guard<std::mutex> g(files_mu_);
  for (auto it = session_files_.begin(); it != session_files_.end();) {
    if (auto af = it->second.lock()) {
      out[it->first] = std::move(af);
      ++it;
    } else {
      it = session_files_.erase(it);
    }
  }
  return out;
}

Status StoreWriter::gc_remove_blocks(std::vector<fmt::GcRequestEntry>& entries, GcApplied* a,
                                     std::set<NamespaceId>* touched) {
  // Entries sorted and unique, so a block listed twice is removed (and counted) once.
  auto key = [](const fmt::GcRequestEntry& e) { return fmt::block_key(e.ns, e.hash); };
  std::sort(entries.begin(), entries.end(), [&](const auto& x, const auto& y) { return key(x) < key(y); });
  entries.erase(std::unique(entries.begin(), entries.end(),
                            [&](const auto& x, const auto& y) { return key(x) == key(y); }),
                entries.end());
  for (size_t i = 0; i < entries.size(); i += kBatchEntries) {
    const size_t end = std::min(entries.size(), i + kBatchEntries);
    // Under the commit mutex: no dump or metadata commit runs between our reads of the block
    // records and the batch, and the in-memory file records of this session's files (which every
    // commit writes back) take the same decrements as the index.
    std::lock_guard<std::mutex> g(commit_mu_);
    const auto alive = session_files();
    Index::Batch b;
    std::map<NamespaceId, std::pair<int64_t, int64_t>> ns_delta;
    std::map<uint32_t, uint64_t> dead;
    std::vector<uint64_t> fps;
    uint64_t bytes = 0;
    for (size_t j = i; j < end; ++j) {
      const auto& e = entries[j];
      fmt::BlockRecord r;
      if (!s_.index->get_block(e.ns, e.hash, &r).ok()) {
        ++a->absent;  // removed already, or never here
        continue;
      }
      b.delete_block(e.ns, e.hash);
      ns_delta[e.ns].first -= 1;
      ns_delta[e.ns].second -= int64_t(r.bytes());
      dead[r.kv_file] += fmt::record_size(r.kv_length);
      if (r.has_repr()) dead[r.repr_file] += fmt::record_size(r.repr_length);
      fps.push_back(fmt::block_fingerprint(e.ns, e.hash));
      bytes += r.bytes();
      touched->insert(e.ns);
    }
    if (fps.empty()) continue;
    for (const auto& [ns, d] : ns_delta) b.add_ns_counters(ns, d.first, d.second);
    std::vector<std::pair<ActiveFile*, uint64_t>> undo;
    for (const auto& [fid, d] : dead) {
      auto it = alive.find(fid);
      if (it == alive.end()) {
        b.add_file_bytes(fid, 0, -int64_t(d));
        continue;
      }
      const uint64_t take = std::min(d, it->second->rec.live_bytes);
      it->second->rec.live_bytes -= take;
      undo.emplace_back(it->second.get(), take);
      b.put_file(fid, it->second->rec);
    }
    Status s = s_.index->write(b, true);
    if (!s.ok()) {
      for (auto& [af, take] : undo) af->rec.live_bytes += take;
      return s;
    }
    {
      std::unique_lock<std::shared_mutex> tg(s_.table_mu);
      for (uint64_t fp : fps) s_.table.erase(fp);
      s_.applied_seq = s_.index->journal_seq();
    }
    a->removed += fps.size();
    a->bytes += bytes;
  }
  return Status::OK();
}

Status StoreWriter::gc_drop_documents(const std::set<NamespaceId>& touched, GcApplied* a) {
  // The registry lists complete documents only (§5.6): a document that lost a block goes, as gc
  // does it. The walk runs outside the commit mutex; each entry found incomplete is checked again
  // under it (a writer may have replaced it meanwhile) before it is deleted.
  auto complete = [&](const NamespaceId& ns, const std::string& js) {
    DocumentEntry d;
    return document_from_json(js, &d).ok() && document_complete(d, [&](const BlockHash& h, BlockHash* parent) {
             fmt::BlockRecord r;
             if (!s_.index->get_block(ns, h, &r).ok()) return false;
             *parent = r.parent;
             return true;
           });
  };
  for (const auto& ns : touched) {
    std::vector<std::string> drop;
    Status s = s_.index->for_each_doc(ns, [&](const std::string& id, const std::string& js) {
      if (!complete(ns, js)) drop.push_back(id);
      return true;
    });
    if (!s.ok()) return s;
    if (drop.empty()) continue;
    std::lock_guard<std::mutex> g(commit_mu_);
    Index::Batch b;
    uint64_t n = 0;
    for (const auto& id : drop) {
      std::string js;
      if (!s_.index->get_doc(ns, id, &js).ok() || complete(ns, js)) continue;
      b.delete_doc(ns, id);
      ++n;
    }
    if (n == 0) continue;
    s = s_.index->write(b, true);
    if (!s.ok()) return s;
    a->documents_removed += n;
  }
  return Status::OK();
}

Status StoreWriter::gc_retire_files(GcApplied* a) {
  // Files with no live bytes that this session does not write to any more (no ActiveFile of it
  // is alive: the active file, and files a dump still in flight reserved room in, are kept) are
  // retired, as gc retires them (§5.4); they are unlinked once the grace period has passed.
  // A file of only its header page is left alone: the roller commits a new file's record before
  // the file is registered here, and nothing grows a file past its header unregistered.
  std::lock_guard<std::mutex> g(commit_mu_);
  const auto alive = session_files();
  const uint64_t now = fmt::now_ms();
  Index::Batch b;
  uint64_t n = 0;
  Status s = s_.index->for_each_file([&](uint32_t id, const fmt::FileRecord& f) {
    if (f.state == fmt::FileState::kRetired || f.live_bytes != 0 || f.size <= fmt::kPage || alive.count(id))
      return true;
    fmt::FileRecord r = f;
    r.state = fmt::FileState::kRetired;
    r.retired_ms = now;
    b.put_file(id, r);
    ++n;
    return true;
  });
  if (!s.ok() || n == 0) return s;
  s = s_.index->write(b, true);
  if (s.ok()) a->files_retired += n;
  return s;
}

Status StoreWriter::gc_unlink_retired(uint64_t grace_ms, GcApplied* a) {
  // Retired files past the grace period (readers with a stale view have finished with them):
  // unlinked, then their records deleted, as gc's own phase does. Later ones are remembered
  // and unlinked by a later heartbeat (or by the next gc, when this writer is gone by then).
  const uint64_t now = fmt::now_ms();
  std::vector<std::pair<uint32_t, uint64_t>> due;  // id, size
  {
    std::lock_guard<std::mutex> g(commit_mu_);
    Status s = s_.index->for_each_file([&](uint32_t id, const fmt::FileRecord& f) {
      if (f.state != fmt::FileState::kRetired) return true;
      if (now >= f.retired_ms + grace_ms) due.emplace_back(id, f.size);
      else unlink_due_[id] = f.retired_ms + grace_ms;
      return true;
    });
    if (!s.ok()) return s;
  }
  return unlink_files(due, a);
}

Status StoreWriter::unlink_files(const std::vector<std::pair<uint32_t, uint64_t>>& due, GcApplied* a) {
  if (due.empty()) return Status::OK();
  Index::Batch b;
  uint64_t n = 0, bytes = 0;
  for (const auto& [id, size] : due) {
    const std::string p = fmt::data_file_path(s_.path, id);
    if (::unlink(p.c_str()) != 0 && errno != ENOENT) continue;
    s_.files->drop(id);  // this process's descriptor: the space is freed once readers close theirs
    b.delete_file(id);
    unlink_due_.erase(id);
    ++n;
    bytes += size;
  }
  if (n == 0) return Status::OK();
  (void)fmt::fsync_dir(fmt::data_dir(s_.path));
  std::lock_guard<std::mutex> g(commit_mu_);
  Status s = s_.index->write(b, true);
  if (s.ok() && a) {
    a->files_unlinked += n;
    a->bytes_unlinked += bytes;
  }
  return s;
}

Status StoreWriter::apply_gc_request(fmt::GcRequest& rq, GcApplied* a) {
  a->requested = rq.entries.size();
  std::set<NamespaceId> touched;
  Status s = gc_remove_blocks(rq.entries, a, &touched);
  if (s.ok()) s = gc_drop_documents(touched, a);
  if (s.ok() && (rq.flags & fmt::kGcRequestRetireFiles)) s = gc_retire_files(a);
  if (s.ok() && (rq.flags & fmt::kGcRequestRetireFiles)) s = gc_unlink_retired(rq.grace_ms, a);
  return s;
}

void StoreWriter::handle_gc_request(const std::string& nonce, bool claimed) {
  const std::string req = fmt::gc_request_path(s_.path, nonce, ".req");
  const std::string work = fmt::gc_request_path(s_.path, nonce, ".work");
  const std::string dir = fmt::gc_requests_dir(s_.path);
  // Claimed by a rename: from here on the requester's withdrawal (an unlink of .req) finds
  // nothing, and knows the request is being applied.
  if (!claimed && ::rename(req.c_str(), work.c_str()) != 0) return;
  std::string bytes;
  fmt::GcRequest rq;
  Status s = fmt::read_small_file(work, &bytes);
  if (s.ok()) s = fmt::decode_gc_request(bytes.data(), bytes.size(), &rq);
  if (!s.ok()) {
    const std::string bad = fmt::gc_request_path(s_.path, nonce, ".bad");
    (void)::rename(work.c_str(), bad.c_str());
    (void)fmt::fsync_dir(dir);
    s_.metrics.gc_requests_refused.fetch_add(1, std::memory_order_relaxed);
    log().warn("store {}: gc request {} refused, nothing applied ({}); kept as {}", s_.path, nonce, s.message(), bad);
    return;
  }
  const uint64_t now = fmt::now_ms();
  if (rq.expires_ms && now > rq.expires_ms) {
    // Its requester stopped waiting (and reported it unanswered): a stale plan is not applied.
    ::unlink(work.c_str());
    (void)fmt::fsync_dir(dir);
    log().info("store {}: gc request {} from {} expired {} ms ago; discarded unapplied", s_.path, nonce, rq.requester,
               now - rq.expires_ms);
    return;
  }
  GcApplied a;
  s = apply_gc_request(rq, &a);
  if (!s.ok()) a.errors.push_back(s.message());
  nlohmann::ordered_json j;
  j["nonce"] = nonce;
  j["requester"] = rq.requester;
  j["writer"] = fmt::host_name() + ":" + std::to_string(::getpid());
  j["applied_ms"] = fmt::now_ms();
  j["blocks_requested"] = a.requested;
  j["blocks_removed"] = a.removed;
  j["blocks_absent"] = a.absent;
  j["bytes_removed"] = a.bytes;
  j["documents_removed"] = a.documents_removed;
  j["files_retired"] = a.files_retired;
  j["files_unlinked"] = a.files_unlinked;
  j["bytes_unlinked"] = a.bytes_unlinked;
  j["files_pending_unlink"] = unlink_due_.size();
  j["errors"] = a.errors;
  Status w = fmt::write_file_atomic(dir, nonce + ".done", j.dump() + "\n");
  ::unlink(work.c_str());
  (void)fmt::fsync_dir(dir);
  s_.metrics.gc_requests_applied.fetch_add(1, std::memory_order_relaxed);
  s_.metrics.gc_blocks_removed.fetch_add(a.removed, std::memory_order_relaxed);
  log().info("store {}: gc request {} from {} applied: {} of {} blocks removed ({} bytes, {} absent), {} documents "
             "unregistered, {} files retired, {} unlinked{}{}",
             s_.path, nonce, rq.requester, a.removed, a.requested, a.bytes, a.absent, a.documents_removed,
             a.files_retired, a.files_unlinked, a.errors.empty() ? "" : "; error: ",
             a.errors.empty() ? "" : a.errors.front());
  if (!w.ok()) log().warn("store {}: gc request {}: the answer could not be written: {}", s_.path, nonce, w.message());
}

void StoreWriter::poll_gc_requests() {
  // Retired files whose grace period has passed since an earlier request.
  if (!unlink_due_.empty()) {
    const uint64_t now = fmt::now_ms();
    std::vector<std::pair<uint32_t, uint64_t>> due;
    {
      std::lock_guard<std::mutex> g(commit_mu_);
      (void)s_.index->for_each_file([&](uint32_t id, const fmt::FileRecord& f) {
        auto it = unlink_due_.find(id);
        if (it != unlink_due_.end() && f.state == fmt::FileState::kRetired && now >= it->second)
          due.emplace_back(id, f.size);
        return true;
      });
    }
    if (!due.empty()) {
      Status s = unlink_files(due, nullptr);
      if (!s.ok()) log().warn("store {}: unlinking retired data files: {}", s_.path, s.message());
    }
    std::erase_if(unlink_due_, [&](const auto& kv) { return kv.second + 60000 < now; });  // records gone meanwhile
  }
  std::error_code ec;
  fs::directory_iterator it(fmt::gc_requests_dir(s_.path), ec);
  if (ec) return;  // no requests directory: nothing asked
  std::vector<std::pair<std::string, bool>> pending;  // nonce, claimed already
  for (const auto& e : it) {
    std::string nonce, suffix;
    if (!fmt::parse_gc_request_name(e.path().filename().string(), &nonce, &suffix)) continue;
    // A .work file is never in progress here (this thread applies requests to the end): it is
    // one a killed writer claimed. Its removals are idempotent, so it is applied again.
    if (suffix == ".req" || suffix == ".work") pending.emplace_back(nonce, suffix == ".work");
  }
  std::sort(pending.begin(), pending.end());
  for (const auto& [nonce, claimed] : pending) handle_gc_request(nonce, claimed);
}

}  // namespace ucm::detail
