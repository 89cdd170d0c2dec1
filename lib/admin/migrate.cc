// ucm migrate: copy / merge stores, convert payload dtype, upgrade the format (ucm/admin.h).
#include <algorithm>
#include <filesystem>
#include <unordered_map>

#include "admin_internal.h"
#include "ucm/core/document.h"
#include "ucm/store.h"

namespace ucm::admin {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct SrcBlock {
  BlockHash h{};
  fmt::BlockRecord r;
  int64_t depth = 0;
};

}  // namespace

Status migrate_single(const std::string& src, const std::string& dst, const MigrateOptions& opts,
               MigrateReport* rep) {
  *rep = MigrateReport();
  if (opts.upgrade) {
    rep->upgraded = false;
    return upgrade_store(src, rep);
  }
  if (dst.empty()) return Status::InvalidArgument("migrate needs a destination store (DST)");
  std::error_code ec;
  if (fs::exists(dst, ec) && fs::exists(src, ec) && fs::equivalent(src, dst, ec))
    return Status::InvalidArgument("source and destination are the same store (" + src +
                                   "); pick another DST");
  DType to_dtype = DType::kBF16;
  bool convert = !opts.dtype.empty();
  if (convert) {
    Status st = parse_dtype(opts.dtype, &to_dtype);
    if (!st.ok() || to_dtype == DType::kFP32)
      return Status::InvalidArgument("--dtype '" + opts.dtype + "': expected bf16 or fp16");
  }

  std::unique_ptr<ReaderView> ri;
  Status st = ReaderView::Open(src, &ri);
  if (!st.ok()) return st;
  Index& sidx = ri->index();
  std::vector<NsInfo> nss;
  st = load_namespaces(sidx, &nss);
  if (!st.ok()) return st;
  std::vector<const NsInfo*> sel;
  if (!opts.ns.empty()) {
    const NsInfo* n;
    st = resolve_namespace(nss, opts.ns, &n);
    if (!st.ok()) return st;
    sel.push_back(n);
  } else {
    for (const auto& n : nss) sel.push_back(&n);
  }

  OpenOptions oo;
  oo.mode = OpenOptions::Mode::kReadWrite;
  oo.create_if_missing = true;
  std::unique_ptr<Store> out;
  st = Store::Open(dst, oo, &out);
  if (!st.ok()) return st;

  DataFileReader reader(src, false);
  fmt::AlignedBuffer rbuf;
  Progress prog(opts.progress);
  for (const NsInfo* n : sel) {
    // Destination namespace.
    NamespaceDesc d = n->desc;
    bool conv = convert && d.dtype != to_dtype;
    if (conv) {
      json extra = json::parse(d.extra_json, nullptr, false);
      if (!extra.is_object()) extra = json::object();
      if (!extra.contains("hash_seed_namespace"))
        extra["hash_seed_namespace"] = to_hex(n->id);  // keep the source's block hashes (§7.1)
      d.extra_json = extra.dump();
      d.dtype = to_dtype;
      d.name.clear();  // the default name carries dtype and id
    }
    NamespaceId did;
    st = out->register_namespace(d, &did);
    if (!st.ok()) return st;
    ++rep->namespaces;
    rep->dst_namespaces.push_back(to_hex(did));

    // Attachments (names from the index, §5.2).
    {
      for (const auto& [name, v] : n->value.attachments) {
        std::string blob;
        st = read_attachment(src, n->id, name, v.file, v.offset, v.length, v.checksum, &blob);
        if (!st.ok()) return st;
        st = out->put_attachment(did, name, blob.data(), blob.size());
        if (!st.ok()) return st;
        ++rep->attachments;
      }
    }

    // Blocks in chain order (parents first).
    std::vector<SrcBlock> blocks;
    st = sidx.for_each_block(&n->id, [&](const NamespaceId&, const BlockHash& h,
                                         const fmt::BlockRecord& r) {
      blocks.push_back({h, r, 0});
      return true;
    });
    if (!st.ok()) return st;
    {
      std::unordered_map<std::string, size_t> pos;
      for (size_t i = 0; i < blocks.size(); ++i)
        pos[std::string(reinterpret_cast<const char*>(blocks[i].h.data()), 16)] = i;
      std::vector<int64_t> depth(blocks.size(), -1);
      for (size_t i = 0; i < blocks.size(); ++i) {
        std::vector<size_t> path;
        size_t k = i;
        int64_t base = 0;
        while (true) {
          if (depth[k] >= 0) {
            base = depth[k];
            break;
          }
          path.push_back(k);
          auto it = pos.find(std::string(reinterpret_cast<const char*>(blocks[k].r.parent.data()), 16));
          if (it == pos.end() || path.size() > blocks.size()) break;
          k = it->second;
        }
        for (auto p = path.rbegin(); p != path.rend(); ++p) depth[*p] = ++base;
      }
      for (size_t i = 0; i < blocks.size(); ++i) blocks[i].depth = depth[i];
      std::stable_sort(blocks.begin(), blocks.end(),
                       [](const SrcBlock& a, const SrcBlock& b) { return a.depth < b.depth; });
    }

    const size_t kBatch = 32;
    const uint64_t elems = n->desc.payload_bytes() / dtype_size(n->desc.dtype);
    for (size_t start = 0; start < blocks.size(); start += kBatch) {
      size_t cnt = std::min(kBatch, blocks.size() - start);
      std::vector<BlockHash> hs(cnt);
      for (size_t i = 0; i < cnt; ++i) hs[i] = blocks[start + i].h;
      std::vector<uint8_t> present(cnt, 0);
      size_t prefix = 0;
      st = out->lookup(did, hs.data(), cnt, present.data(), &prefix);
      if (!st.ok()) return st;
      std::vector<std::string> kv(cnt), repr(cnt);
      std::vector<std::vector<uint32_t>> toks(cnt);  // carried across (store_v1.md §3.2)
      std::vector<DumpItem> items;
      for (size_t i = 0; i < cnt; ++i) {
        if (present[i]) {
          ++rep->blocks_skipped;
          continue;
        }
        const SrcBlock& b = blocks[start + i];
        const uint8_t* p;
        uint64_t len;
        st = reader.read_block(n->id, b.h, b.r, false, &rbuf, &p, &len);
        if (!st.ok())
          return Status(st.code(), "source block " + to_hex(n->id) + ":" + to_hex(b.h) + ": " +
                                       st.message() + " (run `ucm gc " + src +
                                       " --verify` to drop corrupt blocks, then retry)");
        if (conv) {
          if (len != n->desc.payload_bytes())
            return Status::Corruption("source block " + to_hex(b.h) + " has " +
                                      std::to_string(len) + " payload bytes, expected " +
                                      std::to_string(n->desc.payload_bytes()));
          kv[i].resize(elems * dtype_size(to_dtype));
          convert_dtype(p, n->desc.dtype, kv[i].data(), to_dtype, elems);
        } else {
          kv[i].assign(reinterpret_cast<const char*>(p), len);
        }
        {
          fmt::RecordHeader kh;  // read_block verified this header page
          if (fmt::decode_record_header(rbuf.data(), "", &kh).ok()) toks[i] = fmt::record_tokens(rbuf.data(), kh);
        }
        if (b.r.has_repr()) {
          st = reader.read_block(n->id, b.h, b.r, true, &rbuf, &p, &len);
          if (!st.ok())
            return Status(st.code(), "source block " + to_hex(b.h) + " repr: " + st.message());
          repr[i].assign(reinterpret_cast<const char*>(p), len);
        }
        DumpItem it;
        it.hash = b.h;
        it.parent = b.r.parent;
        it.token_count = b.r.token_count;
        it.kv = kv[i].data();
        if (!toks[i].empty()) it.tokens = toks[i].data();
        if (b.r.has_repr()) {
          it.repr = repr[i].data();
          it.repr_len = repr[i].size();
        }
        items.push_back(it);
        rep->bytes_copied += kv[i].size() + repr[i].size();
      }
      if (!items.empty()) {
        auto task = out->dump(did, items.data(), items.size());
        st = task->wait();
        if (!st.ok()) return st;
        rep->blocks_copied += items.size();
      }
      prog.tick([&] {
        return "migrate " + n->desc.display_name() + ": " + std::to_string(start + cnt) + "/" +
               std::to_string(blocks.size()) + " blocks";
      });
    }

    // Documents.
    Status derr;
    st = sidx.for_each_doc(n->id, [&](const std::string&, const std::string& js) {
      DocumentEntry e;
      if (!document_from_json(js, &e).ok()) return true;  // a malformed entry is not copied
      derr = out->put_document(did, e);
      if (!derr.ok()) return false;
      ++rep->documents;
      return true;
    });
    if (!st.ok()) return st;
    if (!derr.ok()) return derr;
  }
  rep->message = "migrated " + std::to_string(rep->namespaces) + " namespace(s) from " + src +
                 " to " + dst + (convert ? " converting payloads to " + opts.dtype : "");
  prog.tick([&] { return rep->message; }, true);
  return Status::OK();
}

}  // namespace ucm::admin
