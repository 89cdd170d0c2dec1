// lib/admin/gc_shards.cc: gc over the shards of a sharded store (store_v1.md §11.3): the lease,
// the writer lock of every shard it can take, one eviction order across them, and the
// retirement of empty shards whose writer is gone.
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "gc_lease.h"
#include "gc_run.h"
#include "ucm/format/format.h"
#include "ucm/fs.h"

namespace ucm::admin {

namespace fs = std::filesystem;

void add_gc_counters(GcReport* to, const GcReport& f) {
  to->blocks_before += f.blocks_before;
  to->bytes_before += f.bytes_before;
  to->evicted_blocks += f.evicted_blocks;
  to->evicted_bytes += f.evicted_bytes;
  to->evicted_descendants += f.evicted_descendants;
  to->unreferenced_removed += f.unreferenced_removed;
  to->orphans_removed += f.orphans_removed;
  to->corrupt_removed += f.corrupt_removed;
  to->files_compacted += f.files_compacted;
  to->files_retired += f.files_retired;
  to->files_deleted += f.files_deleted;
  to->bytes_reclaimed += f.bytes_reclaimed;
  to->unreferenced_files_deleted += f.unreferenced_files_deleted;
  to->tails_truncated += f.tails_truncated;
  to->tail_bytes_truncated += f.tail_bytes_truncated;
  to->access_logs_merged += f.access_logs_merged;
  to->access_logs_deleted += f.access_logs_deleted;
  to->stale_dirs_removed += f.stale_dirs_removed;
  to->journal_trimmed += f.journal_trimmed;
  to->documents_removed += f.documents_removed;
  for (const auto& d : f.documents_removed_ids)
    if (to->documents_removed_ids.size() < 1000) to->documents_removed_ids.push_back(d);
  to->foreign_roots += f.foreign_roots;
  to->blocks_after += f.blocks_after;
  to->bytes_after += f.bytes_after;
  for (const auto& w : f.would_evict)
    if (to->would_evict.size() < 1000) to->would_evict.push_back(w);
}

void add_handoff(GcHandoff* to, const GcHandoff& f) {
  if (f.requested) to->answered = (to->requested ? to->answered : true) && f.answered;
  to->requested |= f.requested;
  to->blocks_requested += f.blocks_requested;
  to->blocks_removed += f.blocks_removed;
  to->blocks_absent += f.blocks_absent;
  to->bytes_removed += f.bytes_removed;
  to->documents_removed += f.documents_removed;
  to->files_retired += f.files_retired;
  to->files_unlinked += f.files_unlinked;
  to->bytes_unlinked += f.bytes_unlinked;
  for (const auto& e : f.errors) to->errors.push_back(e);
}

namespace {

struct HeldShard {
  std::string name, path;
  GcOptions opts;
  GcReport rep;
  std::unique_ptr<gcrun::GcRun> run;
  ShardSummary line;
};

/// Bytes of the blocks of `filter` (all namespaces when empty) in a shard, from its index.
uint64_t shard_bytes(ReaderView& v, const std::string& filter) {
  std::vector<NsInfo> nss;
  if (!load_namespaces(v.index(), &nss).ok()) return 0;
  uint64_t b = 0;
  for (const auto& n : nss)
    if (filter.empty() || n.desc.display_name() == filter || to_hex(n.id) == filter) b += n.value.bytes;
  return b;
}

/// A held shard that gc emptied: no blocks, no documents, and every namespace registered in
/// another shard too. Renamed to shards/.retired-<name>-<ms> under its writer lock, then deleted.
bool retire_if_empty(const std::string& root, const std::string& name,
                     const std::map<std::string, std::unique_ptr<ReaderView>>& others) {
  const std::string p = fmt::shard_path(root, name);
  std::unique_ptr<fmt::WriterLock> lock;
  if (!fmt::WriterLock::Acquire(p, &lock).ok()) return false;  // a writer came back
  std::unique_ptr<ReaderView> v;
  if (!ReaderView::Open(p, &v).ok()) return false;
  std::vector<NsInfo> nss;
  if (!load_namespaces(v->index(), &nss).ok()) return false;
  std::set<NamespaceId> elsewhere;  // namespaces the other shards register
  for (const auto& [m, o] : others) {
    std::vector<NsInfo> theirs;
    if (m != name && o && load_namespaces(o->index(), &theirs).ok())
      for (const auto& t : theirs) elsewhere.insert(t.id);
  }
  for (const auto& n : nss) {
    if (n.value.blocks) return false;
    bool docs = false;
    if (!v->index().for_each_doc(n.id, [&](const std::string&, const std::string&) {
          docs = true;
          return false;
        }).ok() || docs)
      return false;
    if (!elsewhere.count(n.id)) return false;
  }
  v.reset();
  const std::string to = fmt::shards_dir(root) + "/.retired-" + name + "-" + std::to_string(fmt::now_ms());
  if (::rename(p.c_str(), to.c_str()) != 0) return false;
  (void)fmt::fsync_dir(fmt::shards_dir(root));
  lock.reset();
  std::error_code ec;
  ucm::remove_tree(to, ec);  // a leftover (a reader's open files) is removed by a later gc
  return true;
}

void remove_retired_leftovers(const std::string& root) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fmt::shards_dir(root), ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".retired-", 0) == 0) ucm::remove_tree(e.path(), ec);
  }
}

// One gc over the shards: phases 1-4 in every shard whose writer lock it gets, phase 5 across
// them, then the rest shard by shard.
class ShardedGc {
 public:
  ShardedGc(const std::string& root, const GcOptions& opts, GcReport* rep) : root_(root), opts_(opts), rep_(rep) {}
  Status run(GcLease& lease);

 private:
  Status lost() const {
    return Status::Busy("gc of " + root_ + " lost its lease (it stalled for longer than the lease ttl and another gc "
                        "took over); what it finished is consistent, the rest is left to that gc");
  }
  void open_views(const std::vector<std::string>& names);
  void watch_heartbeats(const std::vector<std::string>& names);
  void prepare(const std::string& n, uint64_t budget);
  Status evict_across_shards();
  void finish(HeldShard& h);

  const std::string& root_;
  const GcOptions& opts_;
  GcReport* rep_;
  std::map<std::string, std::unique_ptr<ReaderView>> views_;  // the cross-shard parent test, busy bytes, retirement
  std::map<std::string, bool> beating_;
  std::vector<std::unique_ptr<HeldShard>> held_;
  std::vector<ShardSummary> lines_;
  std::vector<std::string> emptied_;
  uint64_t busy_bytes_ = 0;
  Status first_error_;
};

void ShardedGc::open_views(const std::vector<std::string>& names) {
  for (const auto& n : names) {
    std::unique_ptr<ReaderView> v;
    if (ReaderView::Open(fmt::shard_path(root_, n), &v).ok()) views_[n] = std::move(v);
  }
}

// A live writer touches its LOCK every second (its heartbeat): watch every shard's for a while,
// before opening any index, so that a writer whose flock the file system lost is not joined by
// gc as a second primary.
void ShardedGc::watch_heartbeats(const std::vector<std::string>& names) {
  if (!opts_.writer_heartbeat_ms) return;
  std::map<std::string, uint64_t> hb0;
  for (const auto& n : names) hb0[n] = fmt::lock_heartbeat_ns(fmt::shard_path(root_, n));
  if (opts_.progress)
    opts_.progress("gc: watching the writers' heartbeats for " + std::to_string(opts_.writer_heartbeat_ms) + " ms");
  std::this_thread::sleep_for(std::chrono::milliseconds(opts_.writer_heartbeat_ms));
  for (const auto& n : names) beating_[n] = fmt::lock_heartbeat_ns(fmt::shard_path(root_, n)) != hb0[n];
}

// Phases 1-4 in one shard; a busy or failed shard gets its line, a prepared one is held.
void ShardedGc::prepare(const std::string& n, uint64_t budget) {
  auto h = std::make_unique<HeldShard>();
  h->name = n;
  h->path = fmt::shard_path(root_, n);
  h->opts = opts_;
  h->opts.memory_budget = budget;
  const GcOptions& opts = opts_;
  if (opts.progress) h->opts.progress = [&opts, n](const std::string& line) { opts.progress("shard " + n + ": " + line); };
  h->line.name = n;
  h->run = std::make_unique<gcrun::GcRun>(h->path, h->opts, &h->rep);
  h->run->parent_elsewhere = [this, n](const NamespaceId& ns, const BlockHash& parent) {
    for (const auto& [m, v] : views_) {
      fmt::BlockRecord r;
      if (m != n && v && v->index().get_block(ns, parent, &r).ok()) return true;
    }
    return false;
  };
  // A shard whose writer runs (its flock is held, or its heartbeat moves) is planned read-only
  // and its removals handed to that writer (store_v1.md §11.5), unless --writer-wait is 0.
  h->run->force_live = beating_[n] && opts_.writer_wait_ms;
  Status st = beating_[n] && !opts_.writer_wait_ms
                  ? Status::Busy("its writer's heartbeat (the mtime of " + fmt::lock_path(h->path) +
                                 ") moved within the last " + std::to_string(opts_.writer_heartbeat_ms) + " ms")
                  : h->run->prepare();
  if (st.code() == Code::kBusy) {
    h->line.state = "busy: " + st.message();
    if (views_[n]) h->line.bytes = shard_bytes(*views_[n], opts_.ns);
    busy_bytes_ += h->line.bytes;
    ++rep_->shards_busy;
    lines_.push_back(h->line);
    return;
  }
  if (!st.ok()) {
    if (st.code() == Code::kInvalidArgument && !opts_.ns.empty() && st.message().find("namespace") != std::string::npos) {
      h->line.state = "skipped: no namespace " + opts_.ns;  // the namespace lives in other shards
    } else {
      h->line.state = "error: " + st.message();
      if (first_error_.ok()) first_error_ = Status(st.code(), "shard " + n + ": " + st.message());
    }
    lines_.push_back(h->line);
    return;
  }
  held_.push_back(std::move(h));
}

// Phase 5 over every held shard: one tails-first order (oldest subtree recency first, deepest
// first) across them, until the store's bytes (busy shards included) fit.
Status ShardedGc::evict_across_shards() {
  uint64_t total = busy_bytes_;
  std::vector<std::unique_ptr<gcrun::Scratch::Cursor>> cur;
  for (auto& h : held_) {
    total += h->run->live_bytes();
    cur.push_back(h->run->scratch_db().cursor());
    cur.back()->seek("L");
  }
  while (total > *opts_.max_bytes) {
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < cur.size(); ++i) {
      if (!cur[i]->valid() || cur[i]->key().empty() || cur[i]->key()[0] != 'L') continue;
      if (best == SIZE_MAX || cur[i]->key().substr(1, 12) < cur[best]->key().substr(1, 12)) best = i;
    }
    if (best == SIZE_MAX) break;
    const uint64_t bytes = fmt::get_le64(reinterpret_cast<const uint8_t*>(cur[best]->value().data()));
    Status st = held_[best]->run->mark_evicted(cur[best]->key(), cur[best]->value());
    if (!st.ok()) return st;
    total = total >= bytes ? total - bytes : 0;
    cur[best]->next();
  }
  for (size_t i = 0; i < cur.size(); ++i) {
    if (!cur[i]->status().ok()) return cur[i]->status();
    cur[i].reset();
    Status st = held_[i]->run->scratch_db().settle();
    if (!st.ok()) return st;
  }
  return Status::OK();
}

// Records a finished shard's outcome (run by gc or handed to its live writer) in its line.
void ShardedGc::finish(HeldShard& h) {
  const bool live = h.line.live_writer;
  h.line.handoff = h.rep.handoff;
  if (live) {
    ++rep_->shards_handed_off;
    rep_->live_writer = true;
    add_handoff(&rep_->handoff, h.rep.handoff);
  }
  h.line.blocks = h.rep.blocks_before;
  h.line.bytes = h.rep.bytes_before;
  h.line.evicted_blocks = h.rep.evicted_blocks;
  h.line.evicted_bytes = h.rep.evicted_bytes;
  h.line.blocks_after = h.rep.blocks_after;
  h.line.bytes_after = h.rep.bytes_after;
}

Status ShardedGc::run(GcLease& lease) {
  std::vector<std::string> names;
  Status st = fmt::list_shards(root_, &names);
  if (!st.ok()) return st;
  remove_retired_leftovers(root_);
  open_views(names);
  watch_heartbeats(names);
  const uint64_t budget = std::max<uint64_t>(16ull << 20, opts_.memory_budget / std::max<size_t>(names.size(), 1));
  for (const auto& n : names) {
    if (!lease.held()) return lost();
    prepare(n, budget);
  }
  if (opts_.max_bytes) {
    st = evict_across_shards();
    if (!st.ok()) return st;
  }
  // The rest, shard by shard (each shard's changes are crash-safe on their own). Live writers
  // get their requests first, so that they all work while gc waits for the first answer.
  std::map<std::string, Status> submitted;
  for (auto& h : held_)
    if (h->run->live() && !opts_.dry_run) submitted[h->name] = h->run->handoff_submit();
  for (auto& h : held_) {
    if (!lease.held()) return lost();
    const bool live = h->run->live();
    if (live && !opts_.dry_run) st = submitted[h->name].ok() ? h->run->handoff_await() : submitted[h->name];
    else st = h->run->finish();
    h->run.reset();  // releases the shard's writer lock (or its read-only view)
    h->line.live_writer = live;
    finish(*h);
    if (!st.ok() && live && st.code() == Code::kBusy) {
      h->line.state = "busy: " + st.message();  // its writer did not answer: as busy shards always were
      ++rep_->shards_busy;
    } else if (!st.ok()) {
      h->line.state = "error: " + st.message();
      if (first_error_.ok()) first_error_ = Status(st.code(), "shard " + h->name + ": " + st.message());
    } else if (live) {
      h->line.state = opts_.dry_run ? "dry run (live writer)" : "done by its writer";
    } else {
      h->line.state = opts_.dry_run ? "dry run" : "done";
      if (!opts_.dry_run && h->rep.blocks_after == 0 && opts_.ns.empty()) emptied_.push_back(h->name);
    }
    add_gc_counters(rep_, h->rep);
    lines_.push_back(h->line);
  }
  for (const auto& n : emptied_)
    if (retire_if_empty(root_, n, views_)) {
      ++rep_->shards_retired;
      for (auto& l : lines_)
        if (l.name == n) l.state = "retired";
    }
  std::sort(lines_.begin(), lines_.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  rep_->shards = std::move(lines_);
  return first_error_;
}

}  // namespace

Status gc_sharded(const std::string& root, const GcOptions& opts, GcReport* rep) {
  *rep = GcReport();
  rep->sharded = true;
  rep->dry_run = opts.dry_run;
  std::unique_ptr<GcLease> lease;
  Status st = GcLease::Acquire(root, opts.lease_ttl_ms, opts.lease_wait_ms, opts.progress, &lease,
                               &rep->lease_taken_over_from);
  if (!st.ok()) return st;
  rep->lease_holder = lease->holder();
  return ShardedGc(root, opts, rep).run(*lease);
}

}  // namespace ucm::admin
