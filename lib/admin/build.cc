// ucm build: create a store, or rebuild its index from the data files (ucm/admin.h).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "admin_internal.h"
#include "rebuild.h"
#include "ucm/core/document.h"
#include "ucm/store.h"

namespace ucm::admin {

namespace fs = std::filesystem;
using json = nlohmann::json;

Status build(const std::string& path, const BuildOptions& opts, BuildReport* rep) {
  *rep = BuildReport();
  StoreConfig cfg;
  if (!opts.config_path.empty()) {
    Status st = load_config(opts.config_path, &cfg);
    if (!st.ok()) return st;
  }
  {
    // Sharded stores (store_v1.md §11).
    fmt::RootKind k;
    Status ks = fmt::root_kind(path, &k);
    if (fmt::interrupted_upgrade(ks)) return ks;
    const bool root = ks.ok() && k == fmt::RootKind::kSharded;
    if (root && opts.rebuild_index)
      return Status::InvalidArgument(path + " is a sharded store: rebuild the index of one shard, `ucm build " + path +
                                     "/shards/<name> --rebuild-index`");
    if (opts.sharded && opts.rebuild_index)
      return Status::InvalidArgument("--sharded and --rebuild-index do not go together");
    if (opts.sharded || root) {
      if (ks.ok() && k == fmt::RootKind::kSingle)
        return Status::InvalidArgument(path + " is a single-writer store; make it sharded with `ucm migrate " + path +
                                       " --to-sharded`");
      bool created = false;
      Status st = fmt::create_sharded_root(path, &created);
      if (!st.ok()) return st;
      rep->created = created;
      rep->format_message = created ? "created sharded store " + path + " (format version 3): writers get a shard each"
                                    : "sharded store " + path + " already exists; nothing changed";
      return Status::OK();
    }
  }
  if (opts.rebuild_index) return rebuild_index(path, opts, rep);

  std::error_code ec;
  if (fs::exists(fmt::superblock_path(path), ec)) {
    fmt::Superblock sb;
    Status st = fmt::read_superblock(path, &sb);
    if (!st.ok()) return st;
    if (!require_index(path).ok()) {
      // No index: a creation killed before the index existed is finished by a read-write open
      // (store_v1.md §1.1); a store with data files gets the same Corruption as every command.
      OpenOptions oo;
      oo.mode = OpenOptions::Mode::kReadWrite;
      std::unique_ptr<Store> store;
      st = Store::Open(path, oo, &store);
      if (!st.ok()) return st;
    }
    rep->created = false;
    rep->format_message = "store " + path + " already exists (format version " +
                          std::to_string(sb.format_version) + ", created by " + sb.created_by +
                          "); nothing changed";
    return Status::OK();
  }
  if (fs::exists(path, ec) && !fs::is_directory(path, ec))
    return Status::InvalidArgument(path + " exists and is not a directory; pick another path");
  if (fs::is_directory(path, ec) && !fs::is_empty(path, ec))
    return Status::InvalidArgument(path + " is a non-empty directory without a UCMSTORE "
                                          "superblock: not a ucm store; pick an empty or missing "
                                          "directory");
  OpenOptions oo;
  oo.mode = OpenOptions::Mode::kReadWrite;
  oo.create_if_missing = true;
  oo.io_threads = cfg.io_threads;
  oo.direct_io = cfg.direct_io;
  std::unique_ptr<Store> store;
  Status st = Store::Open(path, oo, &store);
  if (!st.ok()) return st;
  store.reset();
  rep->created = true;
  rep->format_message = "created store " + path + " (format version " +
                        std::to_string(fmt::kCreateFormatVersion) + ")";
  return Status::OK();
}

// ------------------------------------------------------------------------- rebuild-index
namespace rebuild {
namespace {
const char* kKnownAttachments[] = {"r4_projection"};
}  // namespace

Status BatchWriter::count_and_flush_full() {
  return ++in_batch_ >= 4096 ? flush() : Status::OK();
}

Status BatchWriter::flush() {
  if (in_batch_ == 0) return Status::OK();
  Status s = idx_->write(*b_);
  b_ = std::make_unique<Index::Batch>();
  in_batch_ = 0;
  return s;
}

Status move_index_aside(const std::string& path, BuildReport* rep) {
  std::error_code ec;
  const std::string idir = fmt::index_dir(path);
  Status st = fmt::make_dirs(fmt::tmp_dir(path));
  if (!st.ok()) return st;
  if (!fs::exists(idir, ec)) return Status::OK();
  std::string dest = fmt::tmp_dir(path) + "/index.broken-" + std::to_string(fmt::now_ms());
  fs::rename(idir, dest, ec);
  if (ec) return Status::IOError("cannot move " + idir + " to " + dest + ": " + ec.message());
  // The move must be durable before a new index is built in its place.
  Status fs1 = fmt::fsync_dir(path);
  if (!fs1.ok()) return fs1;
  Status fs2 = fmt::fsync_dir(fmt::tmp_dir(path));
  if (!fs2.ok()) return fs2;
  rep->moved_index_to = dest;
  return Status::OK();
}

Status scan_data_files(const std::string& path, Progress* prog, Scan* scan, BuildReport* rep) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fmt::data_dir(path), ec)) {
    uint32_t id;
    if (fmt::parse_data_file_name(e.path().filename().string(), &id)) scan->ids.push_back(id);
  }
  if (ec) return Status::IOError("cannot list " + fmt::data_dir(path) + ": " + ec.message());
  std::sort(scan->ids.begin(), scan->ids.end());
  scan->attachment_names.insert(std::begin(kKnownAttachments), std::end(kKnownAttachments));
  for (uint32_t id : scan->ids) {
    Status st = scan_data_file(path, id, prog, scan, rep);
    if (!st.ok()) return st;
  }
  return Status::OK();
}

Status scan_data_file(const std::string& path, uint32_t id, Progress* prog, Scan* scan, BuildReport* rep) {
  auto keep = [&](std::map<std::string, Loc>& m, const std::string& k, const Loc& l) {
    auto it = m.find(k);
    if (it == m.end()) m.emplace(k, l);
    else {
      ++rep->duplicate_records;
      if (l.newer_than(it->second)) it->second = l;
    }
  };
  std::string fpath = fmt::data_file_path(path, id);
  std::unique_ptr<fmt::DataFileScanner> sc;
  Status o = fmt::DataFileScanner::Open(fpath, &sc);
  ++rep->files_scanned;
  if (!o.ok()) {
    ++rep->corrupt_records;  // the whole file is unreadable (bad header)
    return Status::OK();
  }
  scan->file_size[id] = sc->file_size();
  fmt::ScannedRecord r;
  std::string payload;
  while (sc->next(&r, &payload, true)) {
    if (r.state == fmt::ScannedRecord::State::kCorrupt) {
      ++rep->corrupt_records;
      continue;
    }
    if (r.state == fmt::ScannedRecord::State::kTornTail) {
      rep->torn_bytes += r.length;
      continue;
    }
    const auto& h = r.header;
    Loc l;
    l.file = id;
    l.offset = r.offset;
    l.length = h.payload_length;
    l.checksum = h.payload_checksum;
    l.created_ms = h.created_ms;
    l.parent = h.parent;
    l.token_count = h.token_count;
    l.tokens = (h.flags & fmt::kRecordFlagTokens) != 0;
    switch (h.type) {
      case fmt::RecordType::kBlockKV: keep(scan->kv, bkey(h.ns, h.key), l); break;
      case fmt::RecordType::kBlockRepr: keep(scan->repr, bkey(h.ns, h.key), l); break;
      case fmt::RecordType::kNamespace: {
        auto it = scan->nsrec.find(h.ns);
        if (it == scan->nsrec.end() || l.newer_than(it->second.first)) scan->nsrec[h.ns] = {l, payload};
        NsIndexValue nv;  // records of early writers carried the index value, attachments included
        if (ns_value_from_json(payload, &nv).ok())
          for (const auto& [name, a] : nv.attachments) scan->attachment_names.insert(name);
        break;
      }
      case fmt::RecordType::kNsAttachment: {
        // Named records (flag bit 0, store_v1.md §3.3) carry their name; older ones are only
        // recovered when a NAMESPACE record or kKnownAttachments names them.
        std::string name;
        size_t data_off = 0;
        if (fmt::decode_attachment_payload(h.flags, reinterpret_cast<const uint8_t*>(payload.data()), payload.size(),
                                           fpath, &name, &data_off).ok() &&
            !name.empty() && fmt::md5(name.data(), name.size()) == h.key)
          scan->attachment_names.insert(name);
        keep(scan->attach, bkey(h.ns, h.key), l);
        break;
      }
      case fmt::RecordType::kDocument: {
        json j = json::parse(payload, nullptr, false);
        if (!j.is_object() || !j.contains("id") || !j["id"].is_string()) {
          ++rep->corrupt_records;
          break;
        }
        auto key = std::make_pair(h.ns, j["id"].get<std::string>());
        auto it = scan->docs.find(key);
        if (it == scan->docs.end() || l.newer_than(it->second.loc)) scan->docs[key] = DocRec{l, key.second, payload};
        break;
      }
      default: ++rep->corrupt_records; break;
    }
    scan->scanned_bytes += r.length;
    prog->tick([&] {
      return "rebuild-index: file " + std::to_string(id) + ", " + format_bytes(scan->scanned_bytes) + " scanned, " +
             std::to_string(scan->kv.size()) + " blocks";
    });
  }
  return sc->status();
}

Status create_index(const std::string& path, const fmt::Superblock& sb, const Scan& scan, std::unique_ptr<Index>* idx) {
  Status st = Index::OpenPrimary(fmt::index_dir(path), true, idx);
  if (!st.ok()) return st;
  Index::Batch b;
  b.put_meta_u32(kMetaFormatVersion, sb.format_version);
  b.put_meta_u64(kMetaCreatedMs, sb.created_ms);
  b.put_meta_string(kMetaCreatedBy, sb.created_by);
  b.put_meta_u32(kMetaNextFileId, scan.ids.empty() ? 1 : scan.ids.back() + 1);
  return (*idx)->write(b);
}

std::map<NamespaceId, NamespaceDesc> namespaces_from_records(const Scan& scan, BuildReport* rep) {
  std::map<NamespaceId, NamespaceDesc> descs;
  for (auto& [id, rec] : scan.nsrec) {
    NamespaceDesc d;
    if (!NamespaceDesc::from_json(rec.second, &d).ok() || d.id() != id) {
      ++rep->corrupt_records;
      continue;
    }
    descs[id] = d;
  }
  return descs;
}

Status index_blocks(const Scan& scan, const std::map<NamespaceId, NamespaceDesc>& descs, BatchWriter* w,
                    Totals* tot, BuildReport* rep) {
  for (auto& [k, l] : scan.kv) {
    NamespaceId ns;
    BlockHash h;
    fmt::parse_block_key(k, &ns, &h);
    if (!descs.count(ns)) {
      ++rep->unknown_namespace_records;
      continue;
    }
    fmt::BlockRecord br;
    br.token_count = l.token_count;
    br.parent = l.parent;
    br.kv_file = l.file;
    br.kv_offset = l.offset;
    br.kv_length = l.length;
    br.kv_checksum = l.checksum;
    br.created_ms = l.created_ms;
    br.last_access_ms = l.created_ms;
    if (l.tokens) br.flags |= 2u;  // §5.3 bit 1
    tot->live[l.file] += fmt::record_size(l.length);
    auto rit = scan.repr.find(k);
    if (rit != scan.repr.end()) {
      br.flags |= 1u;
      br.repr_file = rit->second.file;
      br.repr_offset = rit->second.offset;
      br.repr_length = rit->second.length;
      br.repr_checksum = rit->second.checksum;
      tot->live[rit->second.file] += fmt::record_size(rit->second.length);
    }
    w->batch().put_block(ns, h, br);
    tot->counts[ns].first += 1;
    tot->counts[ns].second += br.bytes();
    ++rep->blocks_indexed;
    Status st = w->count_and_flush_full();
    if (!st.ok()) return st;
  }
  return Status::OK();
}

void index_namespaces(Scan* scan, const std::map<NamespaceId, NamespaceDesc>& descs, BatchWriter* w, Totals* tot,
                      BuildReport* rep) {
  for (auto& [id, d] : descs) {
    const Loc& l = scan->nsrec[id].first;
    NsIndexValue v = NsIndexValue::Fresh(d.to_json(), l.file, l.offset);
    v.blocks = uint64_t(tot->counts[id].first);
    v.bytes = uint64_t(tot->counts[id].second);
    tot->live[l.file] += fmt::record_size(l.length);
    for (const auto& name : scan->attachment_names) {
      BlockHash key = fmt::md5(name.data(), name.size());
      auto it = scan->attach.find(bkey(id, key));
      if (it == scan->attach.end()) continue;
      v.attachments[name] = {it->second.file, it->second.offset, it->second.length, it->second.checksum};
      tot->live[it->second.file] += fmt::record_size(it->second.length);
      scan->attach.erase(it);
    }
    w->batch().put_namespace(id, ns_value_to_json(v));
    ++rep->namespaces;
    w->count();
  }
  rep->unknown_namespace_records += scan->attach.size();  // attachments whose name is not known
}

Status index_documents(const Scan& scan, const std::map<NamespaceId, NamespaceDesc>& descs, BatchWriter* w,
                       Totals* tot, BuildReport* rep) {
  for (auto& doc : scan.docs) {
    const auto& key = doc.first;  // not a structured binding: Clang before 16 cannot capture one
    const auto& d = doc.second;
    if (!descs.count(key.first)) {
      ++rep->unknown_namespace_records;
      continue;
    }
    // Only complete documents are registered (store_v1.md §5.6): every block from the last back
    // to the first must have been recovered (a DOCUMENT record outlives blocks gc removed).
    DocumentEntry de;
    const bool complete =
        document_from_json(d.json, &de).ok() && document_complete(de, [&](const BlockHash& h, BlockHash* parent) {
          auto it = scan.kv.find(bkey(key.first, h));
          if (it == scan.kv.end()) return false;
          *parent = it->second.parent;
          return true;
        });
    if (!complete) {
      ++rep->incomplete_documents;
      continue;
    }
    w->batch().put_doc(key.first, key.second, d.json);
    tot->live[d.loc.file] += fmt::record_size(d.loc.length);
    ++rep->documents;
    Status st = w->count_and_flush_full();
    if (!st.ok()) return st;
  }
  return Status::OK();
}

Status index_files(const Scan& scan, const Totals& tot, BatchWriter* w) {
  for (auto& [id, size] : scan.file_size) {
    fmt::FileRecord fr;
    fr.size = size;
    auto lit = tot.live.find(id);
    fr.live_bytes = std::min(size, lit == tot.live.end() ? uint64_t{0} : lit->second);
    fr.state = fmt::FileState::kSealed;
    w->batch().put_file(id, fr);
    w->count();
  }
  w->batch().put_meta_u32(kMetaNextFileId, scan.ids.empty() ? 1 : scan.ids.back() + 1);
  w->count();
  return w->flush();
}

}  // namespace rebuild

Status rebuild_index(const std::string& path, const BuildOptions& opts, BuildReport* rep) {
  using namespace rebuild;
  rep->rebuilt = true;
  fmt::Superblock sb;
  Status st = fmt::read_superblock(path, &sb);
  if (!st.ok()) return st;
  std::unique_ptr<fmt::WriterLock> lock;
  st = fmt::WriterLock::Acquire(path, &lock);
  if (!st.ok()) return st;
  Progress prog(opts.progress);
  Scan scan;
  std::unique_ptr<Index> idx;
  st = move_index_aside(path, rep);
  if (st.ok()) st = scan_data_files(path, &prog, &scan, rep);
  if (st.ok()) st = create_index(path, sb, scan, &idx);
  if (!st.ok()) return st;
  const std::map<NamespaceId, NamespaceDesc> descs = namespaces_from_records(scan, rep);
  BatchWriter w(idx.get());
  Totals tot;
  st = index_blocks(scan, descs, &w, &tot, rep);
  if (!st.ok()) return st;
  index_namespaces(&scan, descs, &w, &tot, rep);
  st = index_documents(scan, descs, &w, &tot, rep);
  if (st.ok()) st = index_files(scan, tot, &w);
  if (!st.ok()) return st;
  prog.tick([&] { return "rebuild-index: done, " + std::to_string(rep->blocks_indexed) + " blocks"; },
            true);
  rep->format_message = "rebuilt the index of " + path + " from " +
                        std::to_string(rep->files_scanned) + " data files";
  return Status::OK();
}

}  // namespace ucm::admin
