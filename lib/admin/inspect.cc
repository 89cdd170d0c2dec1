// ucm inspect: store summary, --verify, --block, --docs (ucm/admin.h).
#include <algorithm>

#include "admin_internal.h"
#include "ucm/core/document.h"

namespace ucm::admin {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

uint64_t percentile(std::vector<uint64_t>& v, double p) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

Status inspect(const std::string& path, const InspectOptions& opts, InspectReport* rep) {
  *rep = InspectReport();
  rep->path = path;
  rep->now_ms = fmt::now_ms();
  // Validate arguments before touching the store.
  BlockHash want_block{};
  if (!opts.block_hex.empty()) {
    Status st = parse_hex16(opts.block_hex, &want_block);
    if (!st.ok())
      return Status::InvalidArgument("--block '" + opts.block_hex +
                                     "' is not a block hash: expected exactly 32 hex digits "
                                     "(as printed by `ucm inspect --docs` or the library)");
  }
  std::unique_ptr<ReaderView> ri;
  Status st = ReaderView::Open(path, &ri);
  if (!st.ok()) return st;
  Index& idx = ri->index();
  rep->format_version = ri->superblock().format_version;
  rep->created_by = ri->superblock().created_by;
  rep->created_ms = ri->superblock().created_ms;

  std::vector<NsInfo> all;
  st = load_namespaces(idx, &all);
  if (!st.ok()) return st;
  std::vector<const NsInfo*> sel;
  if (!opts.ns.empty()) {
    const NsInfo* n = nullptr;
    st = resolve_namespace(all, opts.ns, &n);
    if (!st.ok()) return st;
    sel.push_back(n);
  } else {
    for (const auto& n : all) sel.push_back(&n);
  }

  for (const NsInfo* n : sel) {
    NamespaceStats s;
    s.name = n->desc.display_name();
    s.id_hex = to_hex(n->id);
    s.model_id = n->desc.model_id;
    s.dtype = dtype_name(n->desc.dtype);
    s.weights_digest = n->desc.weights_digest;
    NamespaceId seed = hash_seed_namespace(n->desc, n->id);
    if (seed != n->id) s.hash_seed_namespace = to_hex(seed);
    s.block_size = n->desc.block_size;
    s.num_layers = n->desc.num_layers;
    s.num_kv_heads = n->desc.num_kv_heads;
    s.head_dim = n->desc.head_dim;
    s.blocks = n->value.blocks;
    s.bytes = n->value.bytes;
    st = idx.for_each_doc(n->id, [&](const std::string&, const std::string&) {
      ++s.documents;
      return true;
    });
    if (!st.ok()) return st;
    rep->blocks += s.blocks;
    rep->bytes += s.bytes;
    rep->namespaces.push_back(std::move(s));
  }

  st = idx.for_each_file([&](uint32_t, const fmt::FileRecord& f) {
    if (f.state == fmt::FileState::kRetired) {
      ++rep->retired_files;
    }
    ++rep->data_files;
    rep->data_bytes += f.size;
    rep->dead_bytes += fmt::file_dead_bytes(f.size, f.live_bytes, f.state);
    return true;
  });
  if (!st.ok()) return st;

  // Age and recency spread: one scan of the blocks family (O(N), store_v1.md §9).
  std::vector<uint64_t> access;
  DataFileReader reader(path, false);
  fmt::AlignedBuffer rbuf;
  Progress prog(opts.progress);
  uint64_t seen = 0, total = rep->blocks;
  for (const NsInfo* n : sel) {
    Status err;
    st = idx.for_each_block(&n->id, [&](const NamespaceId& ns, const BlockHash& h,
                                        const fmt::BlockRecord& r) {
      ++seen;
      if (rep->oldest_created_ms == 0 || r.created_ms < rep->oldest_created_ms)
        rep->oldest_created_ms = r.created_ms;
      rep->newest_created_ms = std::max(rep->newest_created_ms, r.created_ms);
      if (rep->oldest_access_ms == 0 || r.last_access_ms < rep->oldest_access_ms)
        rep->oldest_access_ms = r.last_access_ms;
      rep->newest_access_ms = std::max(rep->newest_access_ms, r.last_access_ms);
      access.push_back(r.last_access_ms);
      if (opts.verify) {
        const uint8_t* p;
        uint64_t len;
        Status v = reader.read_block(ns, h, r, false, &rbuf, &p, &len);
        if (v.ok() && r.has_repr()) {
          v = reader.read_block(ns, h, r, true, &rbuf, &p, &len);
          if (!v.ok()) v = Status(v.code(), "repr: " + v.message());
        } else if (!v.ok()) {
          v = Status(v.code(), "kv: " + v.message());
        }
        if (v.ok()) ++rep->verified;
        else rep->corrupt.push_back({to_hex(ns), to_hex(h), v.message()});
        prog.tick([&] {
          return "verify: " + std::to_string(seen) + "/" + std::to_string(total) + " blocks, " +
                 std::to_string(rep->corrupt.size()) + " corrupt";
        });
      }
      return true;
    });
    if (!st.ok()) return st;
    if (!err.ok()) return err;
  }
  rep->access_p10_ms = percentile(access, 0.10);
  rep->access_p50_ms = percentile(access, 0.50);
  rep->access_p90_ms = percentile(access, 0.90);
  if (opts.verify) {
    rep->verified_run = true;
    prog.tick([&] {
      return "verify: done, " + std::to_string(rep->verified) + " ok, " +
             std::to_string(rep->corrupt.size()) + " corrupt";
    }, true);
  }

  if (!opts.block_hex.empty()) {
    std::vector<ojson> found;
    for (const NsInfo* n : sel) {
      fmt::BlockRecord r;
      Status g = idx.get_block(n->id, want_block, &r);
      if (g.ok()) found.push_back(block_record_json(*n, want_block, r));
      else if (g.code() != Code::kNotFound) return g;
    }
    if (found.empty())
      return Status::NotFound("block " + to_hex(want_block) + " is not in " +
                              (opts.ns.empty() ? "any namespace of the store"
                                               : "namespace " + opts.ns));
    if (found.size() > 1) {
      std::string names;
      for (const auto& f : found) names += " " + f["namespace"].get<std::string>();
      return Status::InvalidArgument("block " + to_hex(want_block) + " is in " +
                                     std::to_string(found.size()) +
                                     " namespaces; pick one with --namespace:" + names);
    }
    rep->block_json = found[0].dump();
  }

  if (opts.docs) {
    rep->docs_run = true;
    ojson list = ojson::array();
    for (const NsInfo* n : sel) {
      st = idx.for_each_doc(n->id, [&](const std::string& id, const std::string& js) {
        DocumentEntry d;
        ojson e;
        e["id"] = id;
        e["namespace"] = n->desc.display_name();
        e["namespace_id"] = to_hex(n->id);
        Status ds = document_from_json(js, &d);
        if (ds.ok()) {
          e["blocks"] = d.blocks;
          e["tokens"] = d.tokens;
          e["first_block"] = to_hex(d.first_block);
          e["last_block"] = to_hex(d.last_block);
          e["source"] = d.source;
          e["created_ms"] = d.created_ms;
          e["created"] = format_time_ms(d.created_ms);
        } else {
          e["error"] = ds.message();
        }
        list.push_back(std::move(e));
        return true;
      });
      if (!st.ok()) return st;
    }
    rep->docs_json = list.dump();
  }

  if (!rep->corrupt.empty())
    return Status::Corruption(std::to_string(rep->corrupt.size()) + " corrupt block(s) in " + path +
                              "; `ucm gc " + path +
                              " --verify` removes them (they are served as misses meanwhile)");
  return Status::OK();
}

}  // namespace ucm::admin
