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
#include "ucm/core/fptable_file.h"

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
Status drop_incomplete_documents(Index& idx, const std::vector<NsInfo>& nss, const std::vector<Blk>& blocks,
                                 const std::unordered_map<std::string, size_t>& by_key, bool dry,
                                 GcReport* rep) {
  Batcher bt(idx);
  Status st;
  for (const auto& n : nss) {
    std::vector<std::string> drop;
    Status s = idx.for_each_doc(n.id, [&](const std::string& id, const std::string& js) {
      DocumentEntry d;
      const bool complete =
          document_from_json(js, &d).ok() && document_complete(d, [&](const BlockHash& h, BlockHash* parent) {
            auto it = by_key.find(bkey(n.id, h));
            if (it == by_key.end() || blocks[it->second].removed()) return false;
            *parent = blocks[it->second].r.parent;
            return true;
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
  Status st = open();
  if (!st.ok()) return st;
  merge_access_logs();
  st = load_blocks();
  if (!st.ok()) return st;
  find_corrupt();
  find_orphans();
  st = evict_unreferenced();
  if (!st.ok()) return st;
  evict_by_age();
  evict_by_size();
  if (opts.dry_run) return finish_dry_run();
  st = commit_removals();
  if (!st.ok()) return st;
  st = measure_files();
  if (!st.ok()) return st;
  st = compact_files();
  if (!st.ok()) return st;
  // Compaction may have found more corrupt blocks: their documents go too.
  st = drop_incomplete_documents(*idx_, nss, blocks, by_key, false, rep);
  if (!st.ok()) return st;
  st = unlink_retired();
  if (!st.ok()) return st;
  delete_unreferenced_files();
  housekeeping();
  // 13. Journal entries more than journal_keep changes old (after this run's own removals).
  st = trim_journal(path, *idx_, opts.journal_keep, false, &rep->journal_trimmed);
  if (!st.ok()) return st;
  return final_counters();
}

Status GcRun::open() {
  *rep = GcReport();
  rep->dry_run = opts.dry_run;
  Status st = WriterIndex::Open(path, &w);
  if (!st.ok()) return st;
  idx_ = w->idx.get();
  now = fmt::now_ms();
  st = load_namespaces(*idx_, &nss);
  if (!st.ok()) return st;
  for (auto& n : nss) ns_by_id[n.id] = &n;
  if (!opts.ns.empty()) {
    st = resolve_namespace(nss, opts.ns, &filter);
    if (!st.ok()) return st;
  }
  return Status::OK();
}

void GcRun::close_logs() {
  for (auto& lg : logs) {
    if (lg.fd >= 0) ::close(lg.fd);
    lg.fd = -1;
  }
}

void GcRun::merge_access_logs() {
  // 1. Access logs (§6): read every log; remember the ones whose owner is gone.
  {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fmt::access_dir(path), ec)) {
      if (e.path().extension() != ".log") continue;
      LogFile lg;
      lg.path = e.path().string();
      int fd = ::open(lg.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      std::string data;
      char buf[1 << 16];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) data.append(buf, static_cast<size_t>(n));
      size_t count = data.size() / fmt::kAccessRecordSize;  // a torn last record is ignored
      for (size_t i = 0; i < count; ++i) {
        fmt::AccessRecord a = fmt::decode_access_record(
            reinterpret_cast<const uint8_t*>(data.data()) + i * fmt::kAccessRecordSize);
        uint64_t& m = acc[bkey(a.ns, a.hash)];
        m = std::max(m, a.access_ms);
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
  }
}

Status GcRun::load_blocks() {
  Index& idx = *idx_;
  // 2. Load every block.
  Status st = idx.for_each_block(nullptr, [&](const NamespaceId& ns, const BlockHash& h,
                                       const fmt::BlockRecord& r) {
    Blk b;
    b.ns = ns;
    b.h = h;
    b.r = r;
    b.access = r.last_access_ms;
    auto it = acc.find(bkey(ns, h));
    if (it != acc.end() && it->second > b.access) {
      b.access = it->second;
      b.access_changed = true;
    }
    by_key[bkey(ns, h)] = blocks.size();
    children[bkey(ns, r.parent)].push_back(blocks.size());
    blocks.push_back(std::move(b));
    return true;
  });
  if (!st.ok()) {
    close_logs();
    return st;
  }
  for (const auto& b : blocks) {
    if (!in_filter(b.ns)) continue;
    ++rep->blocks_before;
    rep->bytes_before += b.r.bytes();
  }

  return Status::OK();
}

void GcRun::find_corrupt() {
  // 3. Corrupt blocks: data file missing / too short (cheap), or a full read with --verify.
  {
    DataFileReader reader(path, false);
    fmt::AlignedBuffer rbuf;
    uint64_t seen = 0;
    for (auto& b : blocks) {
      ++seen;
      Status c = reader.check_size(b.r);
      if (c.ok() && opts.verify) {
        const uint8_t* p;
        uint64_t len;
        c = reader.read_block(b.ns, b.h, b.r, false, &rbuf, &p, &len);
        if (c.ok() && b.r.has_repr()) c = reader.read_block(b.ns, b.h, b.r, true, &rbuf, &p, &len);
        prog.tick([&] {
          return "gc verify: " + std::to_string(seen) + "/" + std::to_string(blocks.size()) +
                 " blocks";
        });
      }
      if (!c.ok()) {
        b.why = Why::kCorrupt;
        ++rep->corrupt_removed;
      }
    }
  }
}

void GcRun::find_orphans() {
  // 4. Orphans: blocks not reachable from their namespace's root through present blocks.
  for (auto& [id, n] : ns_by_id) {
    BlockHash root = chain_root(n->desc, id);
    std::vector<std::pair<size_t, int64_t>> stack;
    auto push_children = [&](const NamespaceId& ns, const BlockHash& parent, int64_t depth) {
      auto it = children.find(bkey(ns, parent));
      if (it == children.end()) return;
      for (size_t c : it->second)
        if (!blocks[c].removed() && blocks[c].depth < 0) stack.push_back({c, depth});
    };
    push_children(id, root, 1);
    while (!stack.empty()) {
      auto [i, d] = stack.back();
      stack.pop_back();
      if (blocks[i].depth >= 0) continue;
      blocks[i].depth = d;
      push_children(blocks[i].ns, blocks[i].h, d + 1);
    }
  }
  for (auto& b : blocks)
    if (!b.removed() && b.depth < 0) {
      b.why = Why::kOrphan;
      ++rep->orphans_removed;
    }
}

// Evicts block i and all its present descendants. Returns bytes freed.
uint64_t GcRun::evict_subtree(size_t i, Why why) {
  uint64_t freed = 0;
  std::vector<size_t> stack{i};
  while (!stack.empty()) {
    size_t k = stack.back();
    stack.pop_back();
    if (blocks[k].removed()) continue;
    blocks[k].why = k == i ? why : (why == Why::kUnreferenced ? Why::kUnreferenced : Why::kDescendant);
    freed += blocks[k].r.bytes();
    ++rep->evicted_blocks;
    rep->evicted_bytes += blocks[k].r.bytes();
    if (k != i && why != Why::kUnreferenced) ++rep->evicted_descendants;
    if (why == Why::kUnreferenced) ++rep->unreferenced_removed;
    if (rep->would_evict.size() < 1000 && opts.dry_run)
      rep->would_evict.push_back(to_hex(blocks[k].ns) + ":" + to_hex(blocks[k].h));
    auto it = children.find(bkey(blocks[k].ns, blocks[k].h));
    if (it != children.end())
      for (size_t c : it->second) stack.push_back(c);
  }
  return freed;
}

Status GcRun::evict_unreferenced() {
  Index& idx = *idx_;
  // 5. Unreferenced: blocks no registered document's chain reaches.
  if (opts.unreferenced) {
    std::vector<char> referenced(blocks.size(), 0);
    for (auto& [id, n] : ns_by_id) {
      if (!in_filter(id)) continue;
      Status st = idx.for_each_doc(id, [&](const std::string&, const std::string& js) {
        DocumentEntry d;
        if (!document_from_json(js, &d).ok()) return true;
        BlockHash h = d.last_block;
        for (int guard = 0; guard < (1 << 30); ++guard) {
          auto it = by_key.find(bkey(id, h));
          if (it == by_key.end() || referenced[it->second]) break;
          referenced[it->second] = 1;
          h = blocks[it->second].r.parent;
        }
        return true;
      });
      if (!st.ok()) return st;
    }
    for (size_t i = 0; i < blocks.size(); ++i)
      if (!blocks[i].removed() && in_filter(blocks[i].ns) && !referenced[i])
        evict_subtree(i, Why::kUnreferenced);
  }

  return Status::OK();
}

void GcRun::evict_by_age() {
  // 6. Age: last access older than max_age.
  if (opts.max_age_ms) {
    uint64_t cutoff = now > *opts.max_age_ms ? now - *opts.max_age_ms : 0;
    for (size_t i = 0; i < blocks.size(); ++i)
      if (!blocks[i].removed() && in_filter(blocks[i].ns) && blocks[i].access < cutoff)
        evict_subtree(i, Why::kEvicted);
  }
}

void GcRun::evict_by_size() {
  // 7. Size: evict least recently used first (ties: deepest first = chain tails first); a
  // parent takes its descendants with it.
  if (opts.max_bytes) {
    uint64_t cur = 0;
    std::vector<size_t> order;
    for (size_t i = 0; i < blocks.size(); ++i)
      if (!blocks[i].removed() && in_filter(blocks[i].ns)) {
        cur += blocks[i].r.bytes();
        order.push_back(i);
      }
    // Recency of a block for eviction = the newest access in its subtree: using a block means
    // its whole prefix was used, so a parent is never older than its children and, with ties
    // broken deepest first, chain tails go first.
    std::vector<uint64_t> recency(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) recency[i] = blocks[i].access;
    {
      std::vector<size_t> by_depth = order;
      std::sort(by_depth.begin(), by_depth.end(),
                [&](size_t a, size_t b) { return blocks[a].depth > blocks[b].depth; });
      for (size_t i : by_depth) {
        auto p = by_key.find(bkey(blocks[i].ns, blocks[i].r.parent));
        if (p != by_key.end()) recency[p->second] = std::max(recency[p->second], recency[i]);
      }
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (recency[a] != recency[b]) return recency[a] < recency[b];
      if (blocks[a].depth != blocks[b].depth) return blocks[a].depth > blocks[b].depth;
      return a < b;
    });
    for (size_t i : order) {
      if (cur <= *opts.max_bytes) break;
      if (blocks[i].removed()) continue;
      uint64_t freed = evict_subtree(i, Why::kEvicted);
      cur = cur >= freed ? cur - freed : 0;
    }
  }
}

Status GcRun::finish_dry_run() {
  Index& idx = *idx_;
  Status st;
  uint64_t removed_blocks = 0, removed_bytes = 0;
  for (const auto& b : blocks)
    if (b.removed() && in_filter(b.ns)) {
      ++removed_blocks;
      removed_bytes += b.r.bytes();
    }
  for (const auto& b : blocks)
    if ((b.why == Why::kCorrupt || b.why == Why::kOrphan) && rep->would_evict.size() < 1000)
      rep->would_evict.push_back(to_hex(b.ns) + ":" + to_hex(b.h));
  rep->blocks_after = rep->blocks_before - removed_blocks;
  rep->bytes_after = rep->bytes_before - removed_bytes;
  close_logs();
  st = drop_incomplete_documents(idx, nss, blocks, by_key, true, rep);
  if (!st.ok()) return st;
  return trim_journal(path, idx, opts.journal_keep, true, &rep->journal_trimmed);
}

Status GcRun::commit_removals() {
  Index& idx = *idx_;
  Status st;
  // 8. Commit access times and removals.
  {
    Batcher bt(idx);
    for (auto& b : blocks) {
      if (b.removed()) {
        bt.b().delete_block(b.ns, b.h);
        if (ns_by_id.count(b.ns))
          bt.b().add_ns_counters(b.ns, -1, -static_cast<int64_t>(b.r.bytes()));
        bt.b().add_file_bytes(b.r.kv_file, 0, -static_cast<int64_t>(fmt::record_size(b.r.kv_length)));
        if (b.r.has_repr())
          bt.b().add_file_bytes(b.r.repr_file, 0,
                                -static_cast<int64_t>(fmt::record_size(b.r.repr_length)));
      } else if (b.access_changed) {
        fmt::BlockRecord r = b.r;
        r.last_access_ms = b.access;
        bt.b().update_block(b.ns, b.h, r);
        b.r = r;
      } else {
        continue;
      }
      st = bt.op();
      if (!st.ok()) break;
    }
    if (st.ok()) st = bt.flush();
    if (!st.ok()) {
      close_logs();
      return st;
    }
  }
  // Logs of dead owners are merged and durable: delete them.
  for (auto& lg : logs) {
    if (!lg.owner_gone) continue;
    if (::unlink(lg.path.c_str()) == 0) ++rep->access_logs_deleted;
  }
  close_logs();
  // Best effort: the logs' contents are merged and durable in the index already; a lost unlink
  // only leaves a log the next gc merges (as a no-op) and deletes again.
  (void)fmt::fsync_dir(fmt::access_dir(path));
  // The registry follows the removals at once, so that no entry outlives its blocks.
  st = drop_incomplete_documents(idx, nss, blocks, by_key, false, rep);
  if (!st.ok()) return st;

  return Status::OK();
}

}  // namespace gcrun

Status gc(const std::string& path, const GcOptions& opts, GcReport* rep) {
  gcrun::GcRun r(path, opts, rep);
  return r.run();
}

}  // namespace ucm::admin
