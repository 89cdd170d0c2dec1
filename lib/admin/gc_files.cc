// lib/admin/gc_files.cc: `ucm gc` phases 9-12, the data files: unindexed tails cut, sizes on
// disk, compaction of files past the dead ratio, unlinking retired files after the grace
// period, files no index entry knows, stale reader and tmp directories (see gc_run.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cstring>
#include <set>

#include "gc_run.h"
#include "ucm/core/file_roller.h"
#include "ucm/core/index_open.h"
#include "ucm/fs.h"

namespace ucm::admin::gcrun {

namespace fs = std::filesystem;
using json = nlohmann::json;

Status GcRun::measure_files() {
  Index& idx = *idx_;
  // 9. Dead space from the files' sizes on disk. A dump killed after writing its records but
  // before its index commit leaves them past the file record's `size` (every commit sets `size`
  // to the file's end, so every indexed location lies below it). We hold the writer lock, so no
  // writer appends to any file now (and writers never reopen an old file, §3.4): that unindexed
  // tail is truncated back to `size` (ftruncate + fsync). No index entry points past `size`, so
  // no reader can hold a valid location there. A file shorter than its record (damaged; its
  // blocks were removed as corrupt above) gets `size` = its length on disk. Files with no live
  // bytes are retired (unlinked after the grace); the others are compacted past the threshold.
  Status st = idx.for_each_file([&](uint32_t id, const fmt::FileRecord& f) {
    files[id] = f;
    return true;
  });
  if (!st.ok()) return st;
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
  return Status::OK();
}

// 7b. Compaction, in phases: copy each file's live records (compact_copy_file, record by record:
// compact_is_live, compact_copy_record), make the copies durable (compact_sync), point the index
// at them (compact_index_moves: phase A), then retire the old files (compact_retire).
Status GcRun::compact_spill(Compaction* c) {
  for (const auto& [k, r] : c->moved) {
    Status s = scratch->put("M" + k, fmt::encode_block_record(r));
    if (!s.ok()) return s;
  }
  c->moved.clear();
  return scratch->settle();
}

Status GcRun::compact_writer(Compaction* c, uint64_t need) {
  std::shared_ptr<ActiveFile> af;
  Status s = c->roller.get(need, &af);
  if (s.ok() && (c->writers.empty() || c->writers.back() != af)) c->writers.push_back(std::move(af));
  return s;
}

bool GcRun::compact_is_live(Compaction* c, uint32_t fid, const fmt::ScannedRecord& rec, LiveRecord* lr) {
  const fmt::RecordHeader& h = rec.header;
  switch (h.type) {
    case fmt::RecordType::kBlockKV:
    case fmt::RecordType::kBlockRepr: {
      // Removals are committed: a removed block is not in the index any more. The block's current
      // record includes this run's relocations.
      const std::string k = bkey(h.ns, h.key);
      std::string m;
      auto rel = c->moved.find(k);
      if (rel != c->moved.end()) {
        lr->blk_rec = rel->second;
      } else if (scratch->get("M" + k, &m).ok()) {
        if (!fmt::decode_block_record(m, &lr->blk_rec).ok()) return false;
      } else if (!idx_->get_block(h.ns, h.key, &lr->blk_rec).ok()) {
        return false;
      }
      lr->blk = true;
      if (h.type == fmt::RecordType::kBlockKV)
        return lr->blk_rec.kv_file == fid && lr->blk_rec.kv_offset == rec.offset;
      return lr->blk_rec.has_repr() && lr->blk_rec.repr_file == fid && lr->blk_rec.repr_offset == rec.offset;
    }
    case fmt::RecordType::kNamespace: {
      auto it = ns_by_id.find(h.ns);
      if (it == ns_by_id.end()) return false;
      lr->nsi = it->second;
      return lr->nsi->value.has_record && lr->nsi->value.record_file == fid &&
             lr->nsi->value.record_offset == rec.offset;
    }
    case fmt::RecordType::kNsAttachment: {
      auto it = ns_by_id.find(h.ns);
      if (it == ns_by_id.end()) return false;
      lr->nsi = it->second;
      bool live = false;
      for (const auto& [name, v] : lr->nsi->value.attachments)
        if (v.file == fid && v.offset == rec.offset) {
          live = true;
          lr->att_name = name;
        }
      return live;
    }
    case fmt::RecordType::kDocument: return true;  // decided after reading it
    default: return false;
  }
}

Status GcRun::compact_copy_record(Compaction* c, uint32_t fid, int fd, const std::string& where,
                                  const fmt::ScannedRecord& rec, LiveRecord* lr) {
  const fmt::RecordHeader& h = rec.header;
  fmt::RecordExpect ex;
  ex.type = h.type;
  ex.check_ids = true;
  ex.ns = h.ns;
  ex.key = h.key;
  ex.payload_length = h.payload_length;
  ex.payload_checksum = h.payload_checksum;
  Status r = fmt::read_record(fd, rec.offset, ex, &c->rbuf, where);
  if (!r.ok()) {
    if (lr->blk) c->corrupt_found.push_back({h.ns, h.key});
    return Status::OK();
  }
  const uint8_t* payload = c->rbuf.data() + fmt::kPage;
  if (h.type == fmt::RecordType::kDocument) {
    json d = json::parse(payload, payload + h.payload_length, nullptr, false);
    std::string cur;
    if (!d.is_object() || !d.contains("id") || !d["id"].is_string() ||
        !idx_->get_doc(h.ns, d["id"].get<std::string>(), &cur).ok() || json::parse(cur, nullptr, false) != d)
      return Status::OK();  // superseded or deleted document
  }
  Status st = compact_writer(c, fmt::record_size(h.payload_length));
  if (!st.ok()) return st;
  fmt::RecordHeader nh = h;
  const std::vector<uint32_t> tokens = fmt::record_tokens(c->rbuf.data(), h);  // carried as they are (§3.2)
  nh.tokens = tokens.empty() ? nullptr : tokens.data();
  uint64_t noff = 0;
  st = c->writers.back()->w->append(&nh, {{payload, h.payload_length}}, &noff);
  if (!st.ok()) return st;
  const uint32_t nid = c->writers.back()->w->file_id();
  c->new_live[nid] += fmt::record_size(h.payload_length);
  if (lr->blk) {
    if (h.type == fmt::RecordType::kBlockKV) {
      lr->blk_rec.kv_file = nid;
      lr->blk_rec.kv_offset = noff;
    } else {
      lr->blk_rec.repr_file = nid;
      lr->blk_rec.repr_offset = noff;
    }
    // Relocations in memory up to a share of the budget, then written out to 'M'.
    c->moved[bkey(h.ns, h.key)] = lr->blk_rec;
    if (c->moved.size() * 256 >= opts.memory_budget / 4) {
      st = compact_spill(c);
      if (!st.ok()) return st;
    }
  } else if (lr->nsi && h.type == fmt::RecordType::kNamespace) {
    lr->nsi->value.record_file = nid;
    lr->nsi->value.record_offset = noff;
    c->ns_changed.insert(lr->nsi->id);
  } else if (lr->nsi) {
    NsAttachmentRef& v = lr->nsi->value.attachments[lr->att_name];
    v.file = nid;
    v.offset = noff;
    c->ns_changed.insert(lr->nsi->id);
  }
  prog.tick([&] {
    return "gc compaction: file " + std::to_string(fid) + ", " +
           format_bytes(c->writers.empty() ? 0 : c->writers.back()->w->size()) + " copied";
  });
  return Status::OK();
}

Status GcRun::compact_copy_file(Compaction* c, uint32_t fid) {
  const std::string fpath = fmt::data_file_path(path, fid);
  std::unique_ptr<fmt::DataFileScanner> sc;
  Status o = fmt::DataFileScanner::Open(fpath, &sc);
  int fd = ::open(fpath.c_str(), O_RDONLY | O_CLOEXEC);
  if (!o.ok() || fd < 0) {
    if (fd >= 0) ::close(fd);
    // Unreadable file: blocks in it were removed as corrupt above (size check) or will be
    // by a --verify run; retire it only when nothing references it.
    if (files[fid].live_bytes == 0) to_retire.push_back(fid);
    return Status::OK();
  }
  const std::string where = "data/" + fs::path(fpath).filename().string();
  fmt::ScannedRecord rec;
  Status st;
  while (sc->next(&rec, nullptr, false)) {
    if (rec.state != fmt::ScannedRecord::State::kValid) continue;
    LiveRecord lr;
    if (!compact_is_live(c, fid, rec, &lr)) continue;
    st = compact_copy_record(c, fid, fd, where, rec, &lr);
    if (!st.ok()) break;
  }
  ::close(fd);
  if (st.ok() && !sc->status().ok()) st = sc->status();
  if (!st.ok()) return st;  // nothing committed yet: the new files are dead space
  to_retire.push_back(fid);
  return Status::OK();
}

Status GcRun::compact_sync(Compaction* c) {
  // Data first, then the index.
  for (auto& dw : c->writers) {
    Status st = dw->w->sync();
    if (!st.ok()) return st;
  }
  // The new files' directory entries must be durable before the index points at them.
  Status st = fmt::fsync_dir(fmt::data_dir(path));
  if (!st.ok()) return st;
  return compact_spill(c);
}

Status GcRun::compact_index_moves(Compaction* c, Batcher* bt) {
  Index& idx = *idx_;
  Status st;
  std::set<std::string> corrupt_keys;
  for (auto& [ns, h] : c->corrupt_found) corrupt_keys.insert(bkey(ns, h));
  {
    auto cur = scratch->cursor();
    for (cur->seek("M"); cur->valid() && cur->key().size() == 33 && cur->key()[0] == 'M'; cur->next()) {
      if (corrupt_keys.count(std::string(cur->key().substr(1)))) continue;
      fmt::BlockRecord r;
      st = fmt::decode_block_record(cur->value(), &r);
      if (!st.ok()) return st;
      NamespaceId ns;
      BlockHash h;
      std::memcpy(ns.data(), cur->key().data() + 1, 16);
      std::memcpy(h.data(), cur->key().data() + 17, 16);
      bt->b().update_block(ns, h, r);
      st = bt->op();
      if (!st.ok()) return st;
    }
    if (!cur->status().ok()) return cur->status();
  }
  for (const auto& k : corrupt_keys) {
    NamespaceId ns;
    BlockHash h;
    std::memcpy(ns.data(), k.data(), 16);
    std::memcpy(h.data(), k.data() + 16, 16);
    fmt::BlockRecord r;
    if (!idx.get_block(ns, h, &r).ok()) continue;
    bt->b().delete_block(ns, h);
    if (ns_by_id.count(ns)) bt->b().add_ns_counters(ns, -1, -static_cast<int64_t>(r.bytes()));
    ++rep->corrupt_removed;
    st = bt->op();
    if (!st.ok()) return st;
  }
  for (auto& dw : c->writers) {
    fmt::FileRecord fr;
    fr.size = dw->w->size();
    fr.live_bytes = c->new_live[dw->w->file_id()];
    fr.state = fmt::FileState::kSealed;
    bt->b().put_file(dw->w->file_id(), fr);
    st = bt->op();
    if (!st.ok()) return st;
  }
  // Phase A durable: blocks point at the new files. A crash here leaves the old files
  // unretired; they hold only dead copies and the next gc compacts them again.
  return bt->flush();
}

Status GcRun::compact_retire(Compaction* c, Batcher* bt) {
  Status st;
  for (const auto& id : c->ns_changed) {
    // Keep the counters as they are now (after the removals above).
    std::string cur;
    NsIndexValue v = ns_by_id[id]->value, cv;
    if (idx_->get_namespace(id, &cur).ok() && ns_value_from_json(cur, &cv).ok()) {
      v.blocks = cv.blocks;
      v.bytes = cv.bytes;
    }
    bt->b().put_namespace(id, ns_value_to_json(v));
    ns_by_id[id]->value = v;
    st = bt->op();
    if (!st.ok()) return st;
  }
  for (uint32_t fid : to_retire) {
    fmt::FileRecord fr = files[fid];
    fr.live_bytes = 0;
    fr.state = fmt::FileState::kRetired;
    fr.retired_ms = now;
    bt->b().put_file(fid, fr);
    files[fid] = fr;
    ++rep->files_retired;
    st = bt->op();
    if (!st.ok()) return st;
  }
  return bt->flush();
}

Status GcRun::compact_files() {
  if (to_compact.empty() && to_retire.empty()) return Status::OK();
  fmt::Superblock sb;
  Status sbs = fmt::read_superblock(path, &sb);
  if (!sbs.ok()) return sbs;
  Compaction c(path, idx_, sb.format_version);
  c.retired_without_copy = to_retire.size();
  for (uint32_t fid : to_compact) {
    Status st = compact_copy_file(&c, fid);
    if (!st.ok()) return st;
  }
  Batcher bt(*idx_);
  Status st = compact_sync(&c);
  if (st.ok()) st = compact_index_moves(&c, &bt);
  if (st.ok()) st = compact_retire(&c, &bt);
  if (!st.ok()) return st;
  rep->files_compacted = to_retire.size() - c.retired_without_copy;
  return Status::OK();
}

Status GcRun::unlink_retired() {
  Index& idx = *idx_;
  Status st;
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
    // Best effort: a lost unlink leaves a retired file whose index entry is already gone; the
    // next gc finds it as unreferenced and deletes it.
    if (any) (void)fmt::fsync_dir(fmt::data_dir(path));
    st = bt.flush();
    if (!st.ok()) return st;
  }

  return Status::OK();
}

void GcRun::delete_unreferenced_files() {
  Index& idx = *idx_;
  // 11. Data files no index entry knows (left by writers that crashed before their first
  // commit). We hold the writer lock, so no writer is creating files now.
  {
    std::set<uint32_t> known;
    // Without the complete list of known files nothing is deleted.
    if (!idx.for_each_file([&](uint32_t id, const fmt::FileRecord&) {
              known.insert(id);
              return true;
            }).ok())
      return;
    std::set<uint32_t> referenced = referenced_files;  // by the blocks kept (before compaction)
    for (const auto& n : nss) {
      if (n.value.has_record) referenced.insert(n.value.record_file);
      for (const auto& [k, v] : n.value.attachments) referenced.insert(v.file);
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
    if (any) (void)fmt::fsync_dir(fmt::data_dir(path));  // best effort, as above
  }
}

void GcRun::housekeeping() {
  // 12. Stale reader dirs of dead local processes; tmp/ leftovers (we hold the writer lock,
  // and only writers use tmp/; moved-aside broken indexes are kept for the operator).
  {
    std::error_code ec;
    rep->stale_dirs_removed += remove_stale_reader_dirs(fmt::readers_dir(path));
    for (const auto& e : fs::directory_iterator(fmt::tmp_dir(path), ec)) {
      if (e.path().filename().string().rfind("index.broken-", 0) == 0) continue;
      std::error_code ec2;
      if (ucm::remove_tree(e.path(), ec2) > 0) ++rep->stale_dirs_removed;
    }
    // gc requests (store_v1.md §11.5) left by gcs that gave up and answers nobody read: no writer
    // runs now; an hour after their last change, nobody waits for them either.
    const auto cutoff = fs::file_time_type::clock::now() - std::chrono::hours(1);
    for (const auto& e : fs::directory_iterator(fmt::gc_requests_dir(path), ec)) {
      std::error_code ec2;
      const auto t = fs::last_write_time(e.path(), ec2);
      if (!ec2 && t < cutoff && fs::remove(e.path(), ec2)) ++rep->stale_dirs_removed;
    }
  }
}

Status GcRun::final_counters() {
  Index& idx = *idx_;
  // Final counters.
  std::vector<NsInfo> now_nss;
  Status st = load_namespaces(idx, &now_nss);
  if (!st.ok()) return st;
  for (const auto& n : now_nss) {
    if (filter && n.id != filter->id) continue;
    rep->blocks_after += n.value.blocks;
    rep->bytes_after += n.value.bytes;
  }
  prog.tick([&] { return "gc: done"; }, true);
  return Status::OK();
}

}  // namespace ucm::admin::gcrun
