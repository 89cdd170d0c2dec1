// lib/admin/gc_handoff.cc: gc beside a live writer (store_v1.md §11.5, docs/cli.md "gc beside a
// live writer"). When another process holds the writer lock, gc makes the same plan read-only
// (phases 1-5 on a secondary view of the index), writes the removals as a request into the
// store's gc-requests/ directory, and waits for the writer's handle to apply them at its next
// heartbeat and answer. What needs the writer lock itself (compaction of partly live files,
// unindexed tails, files no index entry knows, journal trimming, the fingerprint table file) is
// left to a gc that holds it.
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "gc_run.h"
#include "ucm/core/log.h"

namespace ucm::admin::gcrun {

namespace fs = std::filesystem;

Status GcRun::open_live(const Status& busy) {
  rep->live_writer = true;
  rep->handoff.holder = busy.message();
  Status st = ReaderView::Open(path, &ro_);
  if (!st.ok()) return st;
  live_ = true;
  rep->fptable_skipped = "a live writer holds the store (its handle keeps STORE/fptable)";
  if (opts.progress)
    opts.progress("gc: the writer lock is held (" + busy.message() + "); planning read-only, the writer applies the removals");
  return Status::OK();
}

bool GcRun::files_need_writer() {
  bool need = false;
  (void)idx_->for_each_file([&](uint32_t, const fmt::FileRecord& f) {
    need = f.state == fmt::FileState::kRetired || (f.live_bytes == 0 && f.size > fmt::kPage);
    return !need;
  });
  return need;
}

Status GcRun::handoff_submit() {
  GcHandoff& h = rep->handoff;
  std::vector<fmt::GcRequestEntry> entries;  // 32 bytes per block removed
  uint64_t seen = 0;
  Status st = for_each_decision([&](const NamespaceId& ns, const BlockHash& b, const fmt::BlockRecord&, Why why,
                                    uint64_t, bool) {
    ++seen;
    prog.tick([&] { return "gc plan: " + std::to_string(seen) + " blocks"; });
    if (why == Why::kNone) return Status::OK();
    if (why == Why::kOrphan) ++rep->orphans_removed;
    entries.push_back({ns, b});
    return Status::OK();
  });
  // The access logs stay as they are: their records count in this plan, and a gc that holds the
  // writer lock merges them into the index and deletes the dead owners' logs.
  close_logs();
  scratch.reset();
  if (!st.ok()) return st;
  h.blocks_requested = entries.size();
  if (entries.empty() && !files_need_writer()) {
    h.outcome = "nothing to remove";
    return final_counters();
  }
  fmt::GcRequest rq;
  h.nonce = fmt::new_gc_nonce();
  rq.created_ms = fmt::now_ms();
  rq.expires_ms = rq.created_ms + opts.writer_wait_ms;
  rq.grace_ms = opts.grace_ms;
  rq.requester = fmt::sanitize_shard_name(fmt::host_name()).substr(0, 32) + ":" + std::to_string(::getpid()) + ":" + h.nonce;
  rq.entries = std::move(entries);
  const std::string dir = fmt::gc_requests_dir(path);
  st = fmt::make_dirs(dir);
  if (st.ok()) st = fmt::write_file_atomic(dir, h.nonce + ".req", fmt::encode_gc_request(rq));
  if (!st.ok()) return Status(st.code(), "gc: writing the request for the live writer: " + st.message());
  h.requested = true;
  handoff_deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts.writer_wait_ms);
  prog.tick([&] { return "gc: asked the live writer to remove " + std::to_string(h.blocks_requested) + " blocks"; }, true);
  return Status::OK();
}

namespace {

void read_answer(const std::string& text, GcHandoff* h) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) {
    h->errors.push_back("the writer's answer does not parse: " + text.substr(0, 200));
    return;
  }
  h->writer = j.value("writer", "");
  h->blocks_removed = j.value("blocks_removed", uint64_t(0));
  h->blocks_absent = j.value("blocks_absent", uint64_t(0));
  h->bytes_removed = j.value("bytes_removed", uint64_t(0));
  h->documents_removed = j.value("documents_removed", uint64_t(0));
  h->files_retired = j.value("files_retired", uint64_t(0));
  h->files_unlinked = j.value("files_unlinked", uint64_t(0));
  h->bytes_unlinked = j.value("bytes_unlinked", uint64_t(0));
  if (j.contains("errors") && j["errors"].is_array())
    for (const auto& e : j["errors"])
      if (e.is_string()) h->errors.push_back(e.get<std::string>());
}

}  // namespace

Status GcRun::handoff_await() {
  GcHandoff& h = rep->handoff;
  if (!h.requested) return Status::OK();
  const std::string dir = fmt::gc_requests_dir(path);
  const std::string done = fmt::gc_request_path(path, h.nonce, ".done");
  const std::string bad = fmt::gc_request_path(path, h.nonce, ".bad");
  const std::string req = fmt::gc_request_path(path, h.nonce, ".req");
  std::string text;
  auto answered = [&] { return fmt::read_small_file(done, &text).ok(); };
  bool ok = false;
  for (;;) {
    if ((ok = answered())) break;
    std::error_code ec;
    if (fs::exists(bad, ec)) {
      h.outcome = "refused: the writer found the request malformed (its log says why; kept as " + bad + ")";
      return Status::Busy("gc of " + path + ": the live writer refused gc's request (" + bad +
                          "); nothing was removed. Is the writer's ucm older than this gc?");
    }
    if (std::chrono::steady_clock::now() >= handoff_deadline_) break;
    prog.tick([&] { return "gc: waiting for the live writer to apply the request " + h.nonce; });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!ok) {
    // Withdraw it: an unlink that succeeds means the writer never took it (and never will); one
    // that finds nothing means the writer claimed it (renamed it .work) and is applying it.
    if (::unlink(req.c_str()) == 0) {
      (void)fmt::fsync_dir(dir);
      h.outcome = "no answer: withdrawn";
    } else if ((ok = answered())) {
    } else {
      h.outcome = "no answer: claimed";
    }
  }
  if (!ok) {
    (void)final_counters();
    const std::string secs = std::to_string(opts.writer_wait_ms / 1000.0).substr(0, 5);
    return Status::Busy(
        "gc of " + path + ": the store's writer runs (" + h.holder + ") and did not answer gc's request within " +
        secs + " s (--writer-wait); " +
        (h.outcome == "no answer: withdrawn"
             ? "the request was withdrawn and nothing was removed (a writer whose ucm predates gc requests, "
               "store_v1.md §11.5, never takes them; a running handle takes them within a second)"
             : "it took the request and is applying it; its answer will be left in " + done));
  }
  ::unlink(done.c_str());
  (void)fmt::fsync_dir(dir);
  h.answered = true;
  h.outcome = "applied";
  read_answer(text, &h);
  rep->documents_removed += h.documents_removed;
  rep->files_retired += h.files_retired;
  rep->files_deleted += h.files_unlinked;
  rep->bytes_reclaimed += h.bytes_unlinked;
  // The writer's removals are committed: the view catches up to count what is left.
  (void)idx_->try_catch_up();
  Status st = final_counters();
  if (!st.ok()) return st;
  if (!h.errors.empty())
    return Status::IOError("gc of " + path + ": the live writer applied gc's request with an error: " + h.errors.front());
  return Status::OK();
}

}  // namespace ucm::admin::gcrun
