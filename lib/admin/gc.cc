// ucm gc: access-log merge, corrupt / orphan / LRU / age / unreferenced eviction, data-file
// compaction, retired-file unlink and housekeeping (ucm/admin.h, docs/cli.md).
//
// Crash safety: every index change is a synced Index batch; data is fdatasync'd before the
// batch that points at it; files are unlinked only after the batch that retires them is durable
// and the grace period has passed, so a crash at any point leaves a consistent store (at worst
// some dead bytes, reclaimed by the next run). Readers hold no lock: nothing is overwritten in
// place, and the only truncation cuts a file's unindexed tail (bytes past its record's size, left
// by a dump killed before its index commit), where no index entry has ever pointed.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <unordered_map>

#include "admin_internal.h"
#include "lib/src/document.h"

namespace ucm::admin {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

enum class Why : uint8_t { kNone, kCorrupt, kOrphan, kUnreferenced, kEvicted, kDescendant };

struct Blk {
  NamespaceId ns{};
  BlockHash h{};
  fmt::BlockRecord r;
  uint64_t access = 0;
  int64_t depth = -1;
  bool access_changed = false;
  bool relocated = false;
  Why why = Why::kNone;
  bool removed() const { return why != Why::kNone; }
};

struct AccessLog {
  std::string path;
  int fd = -1;          // holds an exclusive flock when the owner is gone
  bool owner_gone = false;
};

/// Writes index batches of bounded size.
class Batcher {
 public:
  explicit Batcher(Index& idx) : idx_(idx), b_(std::make_unique<Index::Batch>()) {}
  Index::Batch& b() { return *b_; }
  Status op() {
    if (++n_ >= 4096) return flush();
    return Status::OK();
  }
  Status flush() {
    if (n_ == 0) return Status::OK();
    Status st = idx_.write(*b_, true);
    b_ = std::make_unique<Index::Batch>();
    n_ = 0;
    return st;
  }

 private:
  Index& idx_;
  std::unique_ptr<Index::Batch> b_;
  size_t n_ = 0;
};

/// Journal trimming (store_v1.md §5.5): entries with sequence < journal_seq - keep go, in one
/// synced DeleteRange. *n = how many there are (counted by a scan of just those keys). With
/// `dry`, only counts. A reader whose last applied sequence is older finds the gap on its next
/// catch-up and rescans the blocks family instead of replaying.
Status trim_journal(Index& idx, uint64_t keep, bool dry, uint64_t* n) {
  *n = 0;
  const uint64_t last = idx.journal_seq();
  if (last <= keep) return Status::OK();
  const uint64_t cut = last - keep;  // first sequence kept
  const std::string end = fmt::journal_key(cut);
  Status st = idx.scan(Index::Family::kJournal, "", [&](std::string_view k, std::string_view) {
    if (k >= std::string_view(end)) return false;
    ++*n;
    return true;
  });
  if (!st.ok() || dry || *n == 0) return st;
  rocksdb::WriteBatch wb;
  rocksdb::Status rs = wb.DeleteRange(idx.cf(Index::Family::kJournal), fmt::journal_key(0), end);
  if (rs.ok()) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    rs = idx.db()->Write(wo, &wb);
  }
  if (!rs.ok())
    return Status::IOError("gc: trimming the index journal below sequence " + std::to_string(cut) +
                           " failed: " + rs.ToString() +
                           "; the store is unchanged otherwise; check the disk and re-run gc");
  return Status::OK();
}

/// The document registry holds only complete documents (store_v1.md §5.6): an entry whose chain,
/// walked from its last block back through the parents to its first block, meets a block that
/// is absent or removed by this run is deleted (dry run: only counted). Every document of every
/// namespace is checked, so entries left stale by an older ucm are repaired too.
Status drop_incomplete_documents(Index& idx, const std::vector<NsInfo>& nss, const std::vector<Blk>& blocks,
                                 const std::unordered_map<std::string, size_t>& by_key, bool dry,
                                 GcReport* rep) {
  Batcher bt(idx);
  Status st;
  for (const auto& n : nss) {
    std::vector<std::string> drop;
    Status s = idx.for_each_doc(n.id, [&](const std::string& id, const std::string& js) {
      DocumentEntry d;
      bool complete = document_from_json(js, &d).ok() && d.blocks > 0;
      BlockHash h = d.last_block;
      for (uint32_t k = 0; complete && k < d.blocks; ++k) {
        auto it = by_key.find(bkey(n.id, h));
        if (it == by_key.end() || blocks[it->second].removed()) {
          complete = false;
        } else if (k + 1 == d.blocks) {
          complete = h == d.first_block;
        } else {
          h = blocks[it->second].r.parent;
        }
      }
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

}  // namespace

Status gc(const std::string& path, const GcOptions& opts, GcReport* rep) {
  *rep = GcReport();
  rep->dry_run = opts.dry_run;
  std::unique_ptr<WriterIndex> w;
  Status st = WriterIndex::Open(path, &w);
  if (!st.ok()) return st;
  Index& idx = *w->idx;
  Progress prog(opts.progress);
  const uint64_t now = fmt::now_ms();

  std::vector<NsInfo> nss;
  st = load_namespaces(idx, &nss);
  if (!st.ok()) return st;
  std::map<NamespaceId, NsInfo*> ns_by_id;
  for (auto& n : nss) ns_by_id[n.id] = &n;
  const NsInfo* filter = nullptr;
  if (!opts.ns.empty()) {
    st = resolve_namespace(nss, opts.ns, &filter);
    if (!st.ok()) return st;
  }
  auto in_filter = [&](const NamespaceId& ns) { return !filter || filter->id == ns; };

  // 1. Access logs (§6): read every log; remember the ones whose owner is gone.
  std::unordered_map<std::string, uint64_t> acc;
  std::vector<AccessLog> logs;
  {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fmt::access_dir(path), ec)) {
      if (e.path().extension() != ".log") continue;
      AccessLog lg;
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
  auto close_logs = [&] {
    for (auto& lg : logs)
      if (lg.fd >= 0) ::close(lg.fd);
  };

  // 2. Load every block.
  std::vector<Blk> blocks;
  std::unordered_map<std::string, size_t> by_key;
  std::unordered_map<std::string, std::vector<size_t>> children;  // ns||parent -> blocks
  st = idx.for_each_block(nullptr, [&](const NamespaceId& ns, const BlockHash& h,
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

  // 3. Corrupt blocks: data file missing / too short (cheap), or a full read with --verify.
  {
    RecordReader reader(path);
    uint64_t seen = 0;
    for (auto& b : blocks) {
      ++seen;
      Status c = reader.check_size(b.r);
      if (c.ok() && opts.verify) {
        const uint8_t* p;
        uint64_t len;
        c = reader.read(b.ns, b.h, b.r, false, &p, &len);
        if (c.ok() && b.r.has_repr()) c = reader.read(b.ns, b.h, b.r, true, &p, &len);
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

  // Evicts block i and all its present descendants. Returns bytes freed.
  auto evict_subtree = [&](size_t i, Why why) -> uint64_t {
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
  };

  // 5. Unreferenced: blocks no registered document's chain reaches.
  if (opts.unreferenced) {
    std::vector<char> referenced(blocks.size(), 0);
    for (auto& [id, n] : ns_by_id) {
      if (!in_filter(id)) continue;
      idx.for_each_doc(id, [&](const std::string&, const std::string& js) {
        json d = json::parse(js, nullptr, false);
        BlockHash h{};
        if (!d.is_object() || !parse_hex16(d.value("last_block", std::string()), &h).ok())
          return true;
        for (int guard = 0; guard < (1 << 30); ++guard) {
          auto it = by_key.find(bkey(id, h));
          if (it == by_key.end() || referenced[it->second]) break;
          referenced[it->second] = 1;
          h = blocks[it->second].r.parent;
        }
        return true;
      });
    }
    for (size_t i = 0; i < blocks.size(); ++i)
      if (!blocks[i].removed() && in_filter(blocks[i].ns) && !referenced[i])
        evict_subtree(i, Why::kUnreferenced);
  }

  // 6. Age: last access older than max_age.
  if (opts.max_age_ms) {
    uint64_t cutoff = now > *opts.max_age_ms ? now - *opts.max_age_ms : 0;
    for (size_t i = 0; i < blocks.size(); ++i)
      if (!blocks[i].removed() && in_filter(blocks[i].ns) && blocks[i].access < cutoff)
        evict_subtree(i, Why::kEvicted);
  }

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

  uint64_t removed_blocks = 0, removed_bytes = 0;
  for (const auto& b : blocks)
    if (b.removed() && in_filter(b.ns)) {
      ++removed_blocks;
      removed_bytes += b.r.bytes();
    }
  if (opts.dry_run) {
    for (const auto& b : blocks)
      if ((b.why == Why::kCorrupt || b.why == Why::kOrphan) && rep->would_evict.size() < 1000)
        rep->would_evict.push_back(to_hex(b.ns) + ":" + to_hex(b.h));
    rep->blocks_after = rep->blocks_before - removed_blocks;
    rep->bytes_after = rep->bytes_before - removed_bytes;
    close_logs();
    st = drop_incomplete_documents(idx, nss, blocks, by_key, true, rep);
    if (!st.ok()) return st;
    return trim_journal(idx, opts.journal_keep, true, &rep->journal_trimmed);
  }

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
  fmt::fsync_dir(fmt::access_dir(path));
  // The registry follows the removals at once, so that no entry outlives its blocks.
  st = drop_incomplete_documents(idx, nss, blocks, by_key, false, rep);
  if (!st.ok()) return st;

  // 9. Dead space from the files' sizes on disk. A dump killed after writing its records but
  // before its index commit leaves them past the file record's `size` (every commit sets `size`
  // to the file's end, so every indexed location lies below it). We hold the writer lock, so no
  // writer appends to any file now (and writers never reopen an old file, §3.4): that unindexed
  // tail is truncated back to `size` (ftruncate + fsync). No index entry points past `size`, so
  // no reader can hold a valid location there. A file shorter than its record (damaged; its
  // blocks were removed as corrupt above) gets `size` = its length on disk. Files with no live
  // bytes are retired (unlinked after the grace); the others are compacted past the threshold.
  std::map<uint32_t, fmt::FileRecord> files;
  st = idx.for_each_file([&](uint32_t id, const fmt::FileRecord& f) {
    files[id] = f;
    return true;
  });
  if (!st.ok()) return st;
  std::vector<uint32_t> to_compact, to_retire;
  {
    Batcher bt(idx);
    for (auto& [id, f] : files) {
      if (f.state == fmt::FileState::kRetired) continue;
      const std::string fpath = fmt::data_file_path(path, id);
      struct stat sb;
      if (::stat(fpath.c_str(), &sb) != 0) {
        // Missing: its blocks were removed as corrupt above (size check).
        if (f.live_bytes == 0) to_retire.push_back(id);
        continue;
      }
      const uint64_t disk = static_cast<uint64_t>(sb.st_size);
      const uint64_t keep = std::max<uint64_t>(f.size, fmt::kPage);
      uint64_t actual = disk;
      if (disk > keep) {
        int fd = ::open(fpath.c_str(), O_WRONLY | O_CLOEXEC);
        bool done = fd >= 0 && ::ftruncate(fd, static_cast<off_t>(keep)) == 0 && ::fsync(fd) == 0;
        if (fd >= 0) ::close(fd);
        if (done) {
          ++rep->tails_truncated;
          rep->tail_bytes_truncated += disk - keep;
          rep->bytes_reclaimed += disk - keep;
          actual = keep;
        }
      }
      if (actual != f.size) {
        f.size = actual;
        bt.b().put_file(id, f);
        st = bt.op();
        if (!st.ok()) return st;
      }
      if (f.live_bytes == 0) {
        to_retire.push_back(id);  // nothing live: no copy needed
        continue;
      }
      const uint64_t dead = fmt::file_dead_bytes(actual, f.live_bytes, f.state);
      if (actual > 0 &&
          static_cast<double>(dead) / static_cast<double>(actual) > opts.compact_dead_ratio)
        to_compact.push_back(id);
    }
    st = bt.flush();
    if (!st.ok()) return st;
  }
  if (!to_compact.empty() || !to_retire.empty()) {
    std::vector<std::unique_ptr<fmt::DataFileWriter>> writers;
    std::map<uint32_t, uint64_t> new_live;
    std::set<NamespaceId> ns_changed;
    std::vector<std::pair<NamespaceId, BlockHash>> corrupt_found;
    fmt::AlignedBuffer rbuf;
    const size_t retired_without_copy = to_retire.size();
    auto writer = [&](uint64_t need) -> Status {
      if (!writers.empty() && writers.back()->size() + need <= fmt::kFileRollBytes)
        return Status::OK();
      uint32_t id;
      Status s = idx.allocate_file_id(&id);
      if (!s.ok()) return s;
      std::unique_ptr<fmt::DataFileWriter> dw;
      s = fmt::DataFileWriter::Create(path, id, &dw);
      if (!s.ok()) return s;
      writers.push_back(std::move(dw));
      return Status::OK();
    };
    for (uint32_t fid : to_compact) {
      const std::string fpath = fmt::data_file_path(path, fid);
      std::unique_ptr<fmt::DataFileScanner> sc;
      Status o = fmt::DataFileScanner::Open(fpath, &sc);
      int fd = ::open(fpath.c_str(), O_RDONLY | O_CLOEXEC);
      if (!o.ok() || fd < 0) {
        if (fd >= 0) ::close(fd);
        // Unreadable file: blocks in it were removed as corrupt above (size check) or will be
        // by a --verify run; retire it only when nothing references it.
        if (files[fid].live_bytes == 0) to_retire.push_back(fid);
        continue;
      }
      const std::string where = "data/" + fs::path(fpath).filename().string();
      fmt::ScannedRecord rec;
      while (sc->next(&rec, nullptr, false)) {
        if (rec.state != fmt::ScannedRecord::State::kValid) continue;
        const fmt::RecordHeader& h = rec.header;
        Blk* blk = nullptr;
        NsInfo* nsi = nullptr;
        std::string att_name;
        bool live = false;
        switch (h.type) {
          case fmt::RecordType::kBlockKV:
          case fmt::RecordType::kBlockRepr: {
            auto it = by_key.find(bkey(h.ns, h.key));
            if (it == by_key.end() || blocks[it->second].removed()) break;
            blk = &blocks[it->second];
            if (h.type == fmt::RecordType::kBlockKV)
              live = blk->r.kv_file == fid && blk->r.kv_offset == rec.offset;
            else
              live = blk->r.has_repr() && blk->r.repr_file == fid && blk->r.repr_offset == rec.offset;
            break;
          }
          case fmt::RecordType::kNamespace: {
            auto it = ns_by_id.find(h.ns);
            if (it == ns_by_id.end()) break;
            nsi = it->second;
            const json& r = nsi->value.contains("record") ? nsi->value["record"] : json();
            live = r.is_array() && r.size() == 2 && r[0] == fid && r[1] == rec.offset;
            break;
          }
          case fmt::RecordType::kNsAttachment: {
            auto it = ns_by_id.find(h.ns);
            if (it == ns_by_id.end() || !it->second->value.contains("attachments")) break;
            nsi = it->second;
            for (auto& [name, v] : nsi->value["attachments"].items())
              if (v.is_array() && v.size() >= 2 && v[0] == fid && v[1] == rec.offset) {
                live = true;
                att_name = name;
              }
            break;
          }
          case fmt::RecordType::kDocument: live = true; break;  // decided after reading it
          default: break;
        }
        if (!live) continue;
        fmt::RecordExpect ex;
        ex.type = h.type;
        ex.check_ids = true;
        ex.ns = h.ns;
        ex.key = h.key;
        ex.payload_length = h.payload_length;
        ex.payload_checksum = h.payload_checksum;
        Status r = fmt::read_record(fd, rec.offset, ex, &rbuf, where);
        if (!r.ok()) {
          if (blk) corrupt_found.push_back({blk->ns, blk->h});
          continue;
        }
        const uint8_t* payload = rbuf.data() + fmt::kPage;
        if (h.type == fmt::RecordType::kDocument) {
          json d = json::parse(payload, payload + h.payload_length, nullptr, false);
          std::string cur;
          if (!d.is_object() || !d.contains("id") || !d["id"].is_string() ||
              !idx.get_doc(h.ns, d["id"].get<std::string>(), &cur).ok() ||
              json::parse(cur, nullptr, false) != d)
            continue;  // superseded or deleted document
        }
        st = writer(fmt::record_size(h.payload_length));
        if (!st.ok()) break;
        fmt::RecordHeader nh = h;
        uint64_t noff = 0;
        st = writers.back()->append(&nh, {{payload, h.payload_length}}, &noff);
        if (!st.ok()) break;
        uint32_t nid = writers.back()->file_id();
        new_live[nid] += fmt::record_size(h.payload_length);
        if (blk) {
          if (h.type == fmt::RecordType::kBlockKV) {
            blk->r.kv_file = nid;
            blk->r.kv_offset = noff;
          } else {
            blk->r.repr_file = nid;
            blk->r.repr_offset = noff;
          }
          blk->relocated = true;
        } else if (nsi && h.type == fmt::RecordType::kNamespace) {
          nsi->value["record"] = {nid, noff};
          ns_changed.insert(nsi->id);
        } else if (nsi) {
          auto& v = nsi->value["attachments"][att_name];
          v[0] = nid;
          v[1] = noff;
          ns_changed.insert(nsi->id);
        }
        prog.tick([&] {
          return "gc compaction: file " + std::to_string(fid) + ", " +
                 format_bytes(writers.empty() ? 0 : writers.back()->size()) + " copied";
        });
      }
      ::close(fd);
      if (st.ok() && !sc->status().ok()) st = sc->status();
      if (!st.ok()) return st;  // nothing committed yet: the new files are dead space
      to_retire.push_back(fid);
    }
    // Data first, then the index.
    for (auto& dw : writers) {
      st = dw->sync();
      if (!st.ok()) return st;
    }
    fmt::fsync_dir(fmt::data_dir(path));
    Batcher bt(idx);
    for (auto& b : blocks) {
      if (!b.relocated) continue;
      bt.b().update_block(b.ns, b.h, b.r);
      st = bt.op();
      if (!st.ok()) return st;
    }
    for (auto& [ns, h] : corrupt_found) {
      auto& b = blocks[by_key[bkey(ns, h)]];
      bt.b().delete_block(ns, h);
      if (ns_by_id.count(ns)) bt.b().add_ns_counters(ns, -1, -static_cast<int64_t>(b.r.bytes()));
      b.why = Why::kCorrupt;
      ++rep->corrupt_removed;
      st = bt.op();
      if (!st.ok()) return st;
    }
    for (auto& dw : writers) {
      fmt::FileRecord fr;
      fr.size = dw->size();
      fr.live_bytes = new_live[dw->file_id()];
      fr.state = fmt::FileState::kSealed;
      bt.b().put_file(dw->file_id(), fr);
      st = bt.op();
      if (!st.ok()) return st;
    }
    // Phase A durable: blocks point at the new files. A crash here leaves the old files
    // unretired; they hold only dead copies and the next gc compacts them again.
    st = bt.flush();
    if (!st.ok()) return st;
    for (const auto& id : ns_changed) {
      // Keep the counters as they are now (after the removals above).
      std::string cur;
      json v = ns_by_id[id]->value;
      if (idx.get_namespace(id, &cur).ok()) {
        json c = json::parse(cur, nullptr, false);
        if (c.is_object()) {
          v["blocks"] = c.value("blocks", 0ull);
          v["bytes"] = c.value("bytes", 0ull);
        }
      }
      bt.b().put_namespace(id, v.dump());
      ns_by_id[id]->value = v;
      st = bt.op();
      if (!st.ok()) return st;
    }
    for (uint32_t fid : to_retire) {
      fmt::FileRecord fr = files[fid];
      fr.live_bytes = 0;
      fr.state = fmt::FileState::kRetired;
      fr.retired_ms = now;
      bt.b().put_file(fid, fr);
      files[fid] = fr;
      ++rep->files_retired;
      st = bt.op();
      if (!st.ok()) return st;
    }
    st = bt.flush();
    if (!st.ok()) return st;
    rep->files_compacted = to_retire.size() - retired_without_copy;
  }

  // Compaction may have found more corrupt blocks: their documents go too.
  st = drop_incomplete_documents(idx, nss, blocks, by_key, false, rep);
  if (!st.ok()) return st;

  // 10. Unlink retired files past the grace period.
  {
    Batcher bt(idx);
    bool any = false;
    for (auto& [fid, f] : files) {
      if (f.state != fmt::FileState::kRetired) continue;
      if (now < f.retired_ms + opts.grace_ms || fmt::now_ms() < f.retired_ms + opts.grace_ms) continue;
      std::string fp = fmt::data_file_path(path, fid);
      if (::unlink(fp.c_str()) != 0 && errno != ENOENT) continue;
      bt.b().delete_file(fid);
      ++rep->files_deleted;
      rep->bytes_reclaimed += f.size;
      any = true;
      st = bt.op();
      if (!st.ok()) return st;
    }
    if (any) fmt::fsync_dir(fmt::data_dir(path));
    st = bt.flush();
    if (!st.ok()) return st;
  }

  // 11. Data files no index entry knows (left by writers that crashed before their first
  // commit). We hold the writer lock, so no writer is creating files now.
  {
    std::set<uint32_t> known;
    idx.for_each_file([&](uint32_t id, const fmt::FileRecord&) {
      known.insert(id);
      return true;
    });
    std::set<uint32_t> referenced;
    for (const auto& b : blocks)
      if (!b.removed()) {
        referenced.insert(b.r.kv_file);
        if (b.r.has_repr()) referenced.insert(b.r.repr_file);
      }
    for (const auto& n : nss) {
      if (n.value.contains("record") && n.value["record"].is_array())
        referenced.insert(n.value["record"][0].get<uint32_t>());
      if (n.value.contains("attachments"))
        for (auto& [k, v] : n.value["attachments"].items())
          if (v.is_array() && !v.empty()) referenced.insert(v[0].get<uint32_t>());
    }
    std::error_code ec;
    bool any = false;
    for (const auto& e : fs::directory_iterator(fmt::data_dir(path), ec)) {
      uint32_t id;
      if (!fmt::parse_data_file_name(e.path().filename().string(), &id)) continue;
      if (known.count(id) || referenced.count(id)) continue;
      std::error_code ec2;
      uint64_t sz = fs::file_size(e.path(), ec2);
      if (fs::remove(e.path(), ec2)) {
        ++rep->unreferenced_files_deleted;
        rep->bytes_reclaimed += ec2 ? 0 : sz;
        any = true;
      }
    }
    if (any) fmt::fsync_dir(fmt::data_dir(path));
  }

  // 12. Stale reader dirs of dead local processes; tmp/ leftovers (we hold the writer lock,
  // and only writers use tmp/; moved-aside broken indexes are kept for the operator).
  {
    std::error_code ec;
    rep->stale_dirs_removed += remove_stale_reader_dirs(fmt::readers_dir(path));
    for (const auto& e : fs::directory_iterator(fmt::tmp_dir(path), ec)) {
      if (e.path().filename().string().rfind("index.broken-", 0) == 0) continue;
      std::error_code ec2;
      if (fs::remove_all(e.path(), ec2) > 0) ++rep->stale_dirs_removed;
    }
  }

  // 13. Journal entries more than journal_keep changes old (after this run's own removals).
  st = trim_journal(idx, opts.journal_keep, false, &rep->journal_trimmed);
  if (!st.ok()) return st;

  // Final counters.
  nss.clear();
  st = load_namespaces(idx, &nss);
  if (!st.ok()) return st;
  for (const auto& n : nss) {
    if (filter && n.id != filter->id) continue;
    rep->blocks_after += n.value.value("blocks", 0ull);
    rep->bytes_after += n.value.value("bytes", 0ull);
  }
  prog.tick([&] { return "gc: done"; }, true);
  return Status::OK();
}

}  // namespace ucm::admin
