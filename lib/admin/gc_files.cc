// lib/admin/gc_files.cc: `ucm gc` phases 9-12, the data files: unindexed tails cut, sizes on
// disk, compaction of files past the dead ratio, unlinking retired files after the grace
// period, files no index entry knows, stale reader and tmp directories (see gc_run.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <cstring>
#include <set>

#include "gc_run.h"
#include "ucm/core/file_roller.h"
#include "ucm/core/index_open.h"

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

Status GcRun::compact_files() {
  Index& idx = *idx_;
  Status st;
  if (!to_compact.empty() || !to_retire.empty()) {
    std::mutex commit_mu;  // FileRoller's; gc commits from this thread only
    FileRoller roller(path, &idx, &commit_mu);
    std::vector<std::shared_ptr<ActiveFile>> writers;  // the files the copies go to, in order
    std::map<uint32_t, uint64_t> new_live;
    std::set<NamespaceId> ns_changed;
    std::vector<std::pair<NamespaceId, BlockHash>> corrupt_found;
    fmt::AlignedBuffer rbuf;
    const size_t retired_without_copy = to_retire.size();
    std::map<std::string, fmt::BlockRecord> moved;  // relocated blocks not yet in 'M'
    auto spill = [&]() -> Status {
      for (const auto& [k, r] : moved) {
        Status s = scratch->put("M" + k, fmt::encode_block_record(r));
        if (!s.ok()) return s;
      }
      moved.clear();
      return scratch->settle();
    };
    auto writer = [&](uint64_t need) -> Status {
      std::shared_ptr<ActiveFile> af;
      Status s = roller.get(need, &af);
      if (s.ok() && (writers.empty() || writers.back() != af)) writers.push_back(std::move(af));
      return s;
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
        fmt::BlockRecord blk_rec;  // the block's current record (relocations of this run included)
        bool blk = false;
        NsInfo* nsi = nullptr;
        std::string att_name;
        bool live = false;
        switch (h.type) {
          case fmt::RecordType::kBlockKV:
          case fmt::RecordType::kBlockRepr: {
            // Removals are committed: a removed block is not in the index any more.
            const std::string k = bkey(h.ns, h.key);
            std::string m;
            auto rel = moved.find(k);
            if (rel != moved.end()) {
              blk_rec = rel->second;
            } else if (scratch->get("M" + k, &m).ok()) {
              if (!fmt::decode_block_record(m, &blk_rec).ok()) break;
            } else if (!idx.get_block(h.ns, h.key, &blk_rec).ok()) {
              break;
            }
            blk = true;
            if (h.type == fmt::RecordType::kBlockKV)
              live = blk_rec.kv_file == fid && blk_rec.kv_offset == rec.offset;
            else
              live = blk_rec.has_repr() && blk_rec.repr_file == fid && blk_rec.repr_offset == rec.offset;
            break;
          }
          case fmt::RecordType::kNamespace: {
            auto it = ns_by_id.find(h.ns);
            if (it == ns_by_id.end()) break;
            nsi = it->second;
            live = nsi->value.has_record && nsi->value.record_file == fid && nsi->value.record_offset == rec.offset;
            break;
          }
          case fmt::RecordType::kNsAttachment: {
            auto it = ns_by_id.find(h.ns);
            if (it == ns_by_id.end()) break;
            nsi = it->second;
            for (const auto& [name, v] : nsi->value.attachments)
              if (v.file == fid && v.offset == rec.offset) {
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
          if (blk) corrupt_found.push_back({h.ns, h.key});
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
        st = writers.back()->w->append(&nh, {{payload, h.payload_length}}, &noff);
        if (!st.ok()) break;
        uint32_t nid = writers.back()->w->file_id();
        new_live[nid] += fmt::record_size(h.payload_length);
        if (blk) {
          if (h.type == fmt::RecordType::kBlockKV) {
            blk_rec.kv_file = nid;
            blk_rec.kv_offset = noff;
          } else {
            blk_rec.repr_file = nid;
            blk_rec.repr_offset = noff;
          }
          // Relocations in memory up to a share of the budget, then written out to 'M'.
          moved[bkey(h.ns, h.key)] = blk_rec;
          if (moved.size() * 256 >= opts.memory_budget / 4) {
            st = spill();
            if (!st.ok()) break;
          }
        } else if (nsi && h.type == fmt::RecordType::kNamespace) {
          nsi->value.record_file = nid;
          nsi->value.record_offset = noff;
          ns_changed.insert(nsi->id);
        } else if (nsi) {
          NsAttachmentRef& v = nsi->value.attachments[att_name];
          v.file = nid;
          v.offset = noff;
          ns_changed.insert(nsi->id);
        }
        prog.tick([&] {
          return "gc compaction: file " + std::to_string(fid) + ", " +
                 format_bytes(writers.empty() ? 0 : writers.back()->w->size()) + " copied";
        });
      }
      ::close(fd);
      if (st.ok() && !sc->status().ok()) st = sc->status();
      if (!st.ok()) return st;  // nothing committed yet: the new files are dead space
      to_retire.push_back(fid);
    }
    // Data first, then the index.
    for (auto& dw : writers) {
      st = dw->w->sync();
      if (!st.ok()) return st;
    }
    // The new files' directory entries must be durable before the index points at them.
    st = fmt::fsync_dir(fmt::data_dir(path));
    if (!st.ok()) return st;
    st = spill();
    if (!st.ok()) return st;
    Batcher bt(idx);
    std::set<std::string> corrupt_keys;
    for (auto& [ns, h] : corrupt_found) corrupt_keys.insert(bkey(ns, h));
    {
      auto c = scratch->cursor();
      for (c->seek("M"); c->valid() && c->key().size() == 33 && c->key()[0] == 'M'; c->next()) {
        if (corrupt_keys.count(std::string(c->key().substr(1)))) continue;
        fmt::BlockRecord r;
        st = fmt::decode_block_record(c->value(), &r);
        if (!st.ok()) return st;
        NamespaceId ns;
        BlockHash h;
        std::memcpy(ns.data(), c->key().data() + 1, 16);
        std::memcpy(h.data(), c->key().data() + 17, 16);
        bt.b().update_block(ns, h, r);
        st = bt.op();
        if (!st.ok()) return st;
      }
      if (!c->status().ok()) return c->status();
    }
    for (const auto& k : corrupt_keys) {
      NamespaceId ns;
      BlockHash h;
      std::memcpy(ns.data(), k.data(), 16);
      std::memcpy(h.data(), k.data() + 16, 16);
      fmt::BlockRecord r;
      if (!idx.get_block(ns, h, &r).ok()) continue;
      bt.b().delete_block(ns, h);
      if (ns_by_id.count(ns)) bt.b().add_ns_counters(ns, -1, -static_cast<int64_t>(r.bytes()));
      ++rep->corrupt_removed;
      st = bt.op();
      if (!st.ok()) return st;
    }
    for (auto& dw : writers) {
      fmt::FileRecord fr;
      fr.size = dw->w->size();
      fr.live_bytes = new_live[dw->w->file_id()];
      fr.state = fmt::FileState::kSealed;
      bt.b().put_file(dw->w->file_id(), fr);
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
      NsIndexValue v = ns_by_id[id]->value, c;
      if (idx.get_namespace(id, &cur).ok() && ns_value_from_json(cur, &c).ok()) {
        v.blocks = c.blocks;
        v.bytes = c.bytes;
      }
      bt.b().put_namespace(id, ns_value_to_json(v));
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
      if (fs::remove_all(e.path(), ec2) > 0) ++rep->stale_dirs_removed;
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
