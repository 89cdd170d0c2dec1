// lib/admin/gc.cc: `ucm gc` (ucm/admin.h, docs/cli.md): the run in phase order, and phases 1-8
// (access logs, blocks, corrupt and orphan blocks, eviction, the index commit and the document
// registry). Data files (phases 9-12): gc_files.cc. The run's state and crash-safety rules:
// gc_run.h.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "gc_run.h"
#include "ucm/core/document.h"
#include "ucm/core/fptable_io.h"
#include "ucm/core/log.h"

namespace ucm::admin {
namespace gcrun {

namespace fs = std::filesystem;
using json = nlohmann::json;

// See gc_run.h.
Status trim_journal(const std::string& store, Index& idx, uint64_t keep, bool dry, uint64_t* n) {
  *n = 0;
  const uint64_t last = idx.journal_seq();
  if (last <= keep) return Status::OK();
  uint64_t cut = last - keep;  // first sequence kept
  std::string identity;
  uint64_t table_seq = 0;
  if (idx.identity(&identity).ok() && fptable_file_seq(store, identity, &table_seq).ok() && table_seq < cut &&
      last - table_seq <= 10 * std::max<uint64_t>(keep, 1))
    cut = table_seq + 1;  // the table replays from there
  if (cut <= 1) return Status::OK();
  const std::string end = fmt::journal_key(cut);
  Status st = idx.scan(Index::Family::kJournal, "", [&](std::string_view k, std::string_view) {
    if (k >= std::string_view(end)) return false;
    ++*n;
    return true;
  });
  if (!st.ok() || dry || *n == 0) return st;
  st = idx.delete_journal_below(cut);
  if (!st.ok())
    return Status(st.code(), "gc: " + st.message() + "; the store is unchanged otherwise; check the disk and re-run gc");
  return Status::OK();
}

// See gc_run.h.
Status drop_incomplete_documents(Index& idx, const std::vector<NsInfo>& nss,
                                 const std::function<bool(const NamespaceId&, const BlockHash&, BlockHash*)>& present,
                                 bool dry, GcReport* rep) {
  Batcher bt(idx);
  Status st;
  for (const auto& n : nss) {
    std::vector<std::string> drop;
    Status s = idx.for_each_doc(n.id, [&](const std::string& id, const std::string& js) {
      DocumentEntry d;
      const bool complete =
          document_from_json(js, &d).ok() && document_complete(d, [&](const BlockHash& h, BlockHash* parent) {
            return present(n.id, h, parent);
          });
      if (!complete) drop.push_back(id);
      return true;
    });
    if (!s.ok()) return s;
    for (const auto& id : drop) {
      ++rep->documents_removed;
      if (rep->documents_removed_ids.size() < 1000) rep->documents_removed_ids.push_back(to_hex(n.id) + ":" + id);
      if (dry) continue;
      bt.b().delete_doc(n.id, id);
      st = bt.op();
      if (!st.ok()) return st;
    }
  }
  return bt.flush();
}

Status GcRun::run() {
  Status st = prepare();
  if (st.ok()) st = evict_by_size();
  if (!st.ok()) {
    close_logs();
    return st;
  }
  return finish();
}

Status GcRun::prepare() {
  Status st = open();
  if (!st.ok()) return st;
  st = merge_access_logs();
  if (st.ok()) st = mark_referenced();
  if (st.ok()) st = scan_blocks();
  if (st.ok()) st = walk();
  if (!st.ok()) close_logs();
  return st;
}

Status GcRun::finish() {
  if (opts.dry_run) {
    if (live_) rep->handoff.outcome = "dry run";
    return finish_dry_run();
  }
  if (live_) {
    Status st = handoff_submit();
    return st.ok() ? handoff_await() : st;
  }
  Status st = commit_removals();
  if (!st.ok()) return st;
  st = measure_files();
  if (!st.ok()) return st;
  st = compact_files();
  if (!st.ok()) return st;
  scratch.reset();  // before housekeeping empties tmp/
  // Compaction may have found more corrupt blocks: their documents go too.
  st = drop_incomplete_documents(
      *idx_, nss,
      [&](const NamespaceId& ns, const BlockHash& h, BlockHash* parent) {
        fmt::BlockRecord r;
        if (!idx_->get_block(ns, h, &r).ok()) return false;
        *parent = r.parent;
        return true;
      },
      false, rep);
  if (!st.ok()) return st;
  st = unlink_retired();
  if (!st.ok()) return st;
  delete_unreferenced_files();
  housekeeping();
  update_fptable();
  // 11. Journal entries more than journal_keep changes old (after this run's own removals).
  st = trim_journal(path, *idx_, opts.journal_keep, false, &rep->journal_trimmed);
  if (!st.ok()) return st;
  return final_counters();
}

void GcRun::update_fptable() {
  // 10b. The fingerprint table brought up to this run's removals (fptable.md §3), in bounded
  // memory, so that the next open maps it and replays nothing. Derived data: a failure here is
  // reported and costs the next open a replay or a rebuild, nothing more.
  if (!opts.update_fptable) return;
  uint64_t replayed = 0;
  const Status s = fptable_update_file(path, *idx_, &replayed);
  rep->fptable_replayed += replayed;
  if (s.ok()) {
    rep->fptable_updated = true;
    return;
  }
  rep->fptable_skipped = s.message();
  if (s.code() != Code::kNotFound)
    log().warn("gc {}: fingerprint table {} not brought up to date: {}", path, fmt::fptable_path(path), s.message());
}

Status GcRun::open() {
  *rep = GcReport();
  rep->dry_run = opts.dry_run;
  // The index's memtables get a quarter of the budget: the removals' deletes and journal
  // entries are flushed rather than held (RocksDB's defaults allow 64 MiB per family, twice).
  Status st = force_live ? Status::Busy("its writer's heartbeat moved")
                         : WriterIndex::Open(path, &w, std::max<uint64_t>(opts.memory_budget / 4, 4ull << 20));
  // A running writer: plan read-only, hand the removals to it (store_v1.md §11.5, gc_handoff.cc).
  if (st.code() == Code::kBusy && opts.writer_wait_ms) st = open_live(st);
  if (!st.ok()) return st;
  idx_ = live_ ? &ro_->index() : w->idx.get();
  now = fmt::now_ms();
  st = load_namespaces(*idx_, &nss);
  if (!st.ok()) return st;
  for (auto& n : nss) ns_by_id[n.id] = &n;
  if (!opts.ns.empty()) {
    st = resolve_namespace(nss, opts.ns, &filter);
    if (!st.ok()) return st;
  }
  // Under the writer lock: no other gc or writer uses tmp/ now; a leftover of a killed gc goes.
  // Beside a live writer, a scratch directory of this run's own (another gc may plan too).
  st = fmt::make_dirs(fmt::tmp_dir(path));
  if (!st.ok()) return st;
  const std::string dir = live_ ? "/gc-scratch-live-" + fmt::new_gc_nonce() : "/gc-scratch";
  return Scratch::Open(fmt::tmp_dir(path) + dir, opts.memory_budget, &scratch);
}

void GcRun::close_logs() {
  for (auto& lg : logs) {
    if (lg.fd >= 0) ::close(lg.fd);
    lg.fd = -1;
  }
}

Status GcRun::merge_access_logs() {
  // 1. Access logs (§6): every record -> 'A' ns h access (the newest per block wins in phase 3);
  // remember the logs whose owner is gone.
  std::error_code ec;
  uint64_t records = 0;
  for (const auto& e : fs::directory_iterator(fmt::access_dir(path), ec)) {
    if (e.path().extension() != ".log") continue;
    LogFile lg;
    lg.path = e.path().string();
    int fd = ::open(lg.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    std::string carry;
    std::vector<char> buf(1 << 16);
    ssize_t n;
    Status st;
    while (st.ok() && (n = ::read(fd, buf.data(), buf.size())) > 0) {
      carry.append(buf.data(), size_t(n));
      const size_t count = carry.size() / fmt::kAccessRecordSize;  // a torn last record is ignored
      for (size_t i = 0; i < count && st.ok(); ++i) {
        fmt::AccessRecord a =
            fmt::decode_access_record(reinterpret_cast<const uint8_t*>(carry.data()) + i * fmt::kAccessRecordSize);
        std::string k = "A" + bkey(a.ns, a.hash);
        uint8_t be[8];
        fmt::put_be64(be, a.access_ms);
        k.append(reinterpret_cast<const char*>(be), 8);
        st = scratch->put(k, "");
        ++records;
      }
      carry.erase(0, count * fmt::kAccessRecordSize);
      prog.tick([&] { return "gc: " + std::to_string(records) + " access records read"; });
    }
    if (!st.ok()) {
      ::close(fd);
      return st;
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      lg.owner_gone = true;
      lg.fd = fd;
    } else {
      ::close(fd);
    }
    ++rep->access_logs_merged;
    logs.push_back(std::move(lg));
  }
  return scratch->settle();
}

}  // namespace gcrun

Status gc_single(const std::string& path, const GcOptions& opts, GcReport* rep) {
  gcrun::GcRun r(path, opts, rep);
  return r.run();
}

}  // namespace ucm::admin
