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

// What one namespace's copy needs: the source, the destination and the conversion.
struct NsCopy {
  const std::string& src;
  const NsInfo& n;
  Store& out;
  NamespaceId did{};
  bool conv = false;
  DType to_dtype = DType::kBF16;
  DataFileReader& reader;
  fmt::AlignedBuffer& rbuf;
  MigrateReport* rep;
};

// The destination namespace's descriptor: a converted one keeps the source's block hashes (§7.1).
NamespaceDesc destination_desc(const NsInfo& n, bool conv, DType to_dtype) {
  NamespaceDesc d = n.desc;
  if (!conv) return d;
  json extra = json::parse(d.extra_json, nullptr, false);
  if (!extra.is_object()) extra = json::object();
  if (!extra.contains("hash_seed_namespace")) extra["hash_seed_namespace"] = to_hex(n.id);
  d.extra_json = extra.dump();
  d.dtype = to_dtype;
  d.name.clear();  // the default name carries dtype and id
  return d;
}

// Attachments (names from the index, §5.2).
Status copy_attachments(NsCopy& c) {
  for (const auto& [name, v] : c.n.value.attachments) {
    std::string blob;
    Status st = read_attachment(c.src, c.n.id, name, v.file, v.offset, v.length, v.checksum, &blob);
    if (!st.ok()) return st;
    st = c.out.put_attachment(c.did, name, blob.data(), blob.size());
    if (!st.ok()) return st;
    ++c.rep->attachments;
  }
  return Status::OK();
}

// Sorts blocks by their depth in the chain (parents first); a block whose parent is not in the
// namespace starts a chain.
void sort_parents_first(std::vector<SrcBlock>* blocks) {
  auto& b = *blocks;
  std::unordered_map<std::string, size_t> pos;
  for (size_t i = 0; i < b.size(); ++i) pos[std::string(reinterpret_cast<const char*>(b[i].h.data()), 16)] = i;
  std::vector<int64_t> depth(b.size(), -1);
  for (size_t i = 0; i < b.size(); ++i) {
    std::vector<size_t> path;
    size_t k = i;
    int64_t base = 0;
    while (true) {
      if (depth[k] >= 0) {
        base = depth[k];
        break;
      }
      path.push_back(k);
      auto it = pos.find(std::string(reinterpret_cast<const char*>(b[k].r.parent.data()), 16));
      if (it == pos.end() || path.size() > b.size()) break;
      k = it->second;
    }
    for (auto p = path.rbegin(); p != path.rend(); ++p) depth[*p] = ++base;
  }
  for (size_t i = 0; i < b.size(); ++i) b[i].depth = depth[i];
  std::stable_sort(b.begin(), b.end(), [](const SrcBlock& x, const SrcBlock& y) { return x.depth < y.depth; });
}

// One block's payload (converted if asked), its token ids and its representation, read from the
// source into the caller's buffers.
Status read_source_block(NsCopy& c, const SrcBlock& b, std::string* kv, std::vector<uint32_t>* toks,
                         std::string* repr) {
  const uint8_t* p;
  uint64_t len;
  Status st = c.reader.read_block(c.n.id, b.h, b.r, false, &c.rbuf, &p, &len);
  if (!st.ok())
    return Status(st.code(), "source block " + to_hex(c.n.id) + ":" + to_hex(b.h) + ": " + st.message() +
                                 " (run `ucm gc " + c.src + " --verify` to drop corrupt blocks, then retry)");
  if (c.conv) {
    if (len != c.n.desc.payload_bytes())
      return Status::Corruption("source block " + to_hex(b.h) + " has " + std::to_string(len) +
                                " payload bytes, expected " + std::to_string(c.n.desc.payload_bytes()));
    const uint64_t elems = c.n.desc.payload_bytes() / dtype_size(c.n.desc.dtype);
    kv->resize(elems * dtype_size(c.to_dtype));
    convert_dtype(p, c.n.desc.dtype, kv->data(), c.to_dtype, elems);
  } else {
    kv->assign(reinterpret_cast<const char*>(p), len);
  }
  fmt::RecordHeader kh;  // read_block verified this header page; token ids carried (§3.2)
  if (fmt::decode_record_header(c.rbuf.data(), "", &kh).ok()) *toks = fmt::record_tokens(c.rbuf.data(), kh);
  if (b.r.has_repr()) {
    st = c.reader.read_block(c.n.id, b.h, b.r, true, &c.rbuf, &p, &len);
    if (!st.ok()) return Status(st.code(), "source block " + to_hex(b.h) + " repr: " + st.message());
    repr->assign(reinterpret_cast<const char*>(p), len);
  }
  return Status::OK();
}

// Copies blocks [start, start + cnt) that the destination lacks, in one dump.
Status copy_block_batch(NsCopy& c, const std::vector<SrcBlock>& blocks, size_t start, size_t cnt) {
  std::vector<BlockHash> hs(cnt);
  for (size_t i = 0; i < cnt; ++i) hs[i] = blocks[start + i].h;
  std::vector<uint8_t> present(cnt, 0);
  size_t prefix = 0;
  Status st = c.out.lookup(c.did, hs.data(), cnt, present.data(), &prefix);
  if (!st.ok()) return st;
  std::vector<std::string> kv(cnt), repr(cnt);
  std::vector<std::vector<uint32_t>> toks(cnt);
  std::vector<DumpItem> items;
  for (size_t i = 0; i < cnt; ++i) {
    if (present[i]) {
      ++c.rep->blocks_skipped;
      continue;
    }
    const SrcBlock& b = blocks[start + i];
    st = read_source_block(c, b, &kv[i], &toks[i], &repr[i]);
    if (!st.ok()) return st;
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
    c.rep->bytes_copied += kv[i].size() + repr[i].size();
  }
  if (items.empty()) return Status::OK();
  auto task = c.out.dump(c.did, items.data(), items.size());
  st = task->wait();
  if (!st.ok()) return st;
  c.rep->blocks_copied += items.size();
  return Status::OK();
}

// Documents; a malformed entry is not copied.
Status copy_documents(NsCopy& c, Index& sidx) {
  Status derr;
  Status st = sidx.for_each_doc(c.n.id, [&](const std::string&, const std::string& js) {
    DocumentEntry e;
    if (!document_from_json(js, &e).ok()) return true;
    derr = c.out.put_document(c.did, e);
    if (!derr.ok()) return false;
    ++c.rep->documents;
    return true;
  });
  return st.ok() ? derr : st;
}

Status migrate_namespace(NsCopy& c, Index& sidx, Progress& prog) {
  Status st = c.out.register_namespace(destination_desc(c.n, c.conv, c.to_dtype), &c.did);
  if (!st.ok()) return st;
  ++c.rep->namespaces;
  c.rep->dst_namespaces.push_back(to_hex(c.did));
  st = copy_attachments(c);
  if (!st.ok()) return st;
  std::vector<SrcBlock> blocks;
  st = sidx.for_each_block(&c.n.id, [&](const NamespaceId&, const BlockHash& h, const fmt::BlockRecord& r) {
    blocks.push_back({h, r, 0});
    return true;
  });
  if (!st.ok()) return st;
  sort_parents_first(&blocks);
  const size_t kBatch = 32;
  for (size_t start = 0; start < blocks.size(); start += kBatch) {
    size_t cnt = std::min(kBatch, blocks.size() - start);
    st = copy_block_batch(c, blocks, start, cnt);
    if (!st.ok()) return st;
    prog.tick([&] {
      return "migrate " + c.n.desc.display_name() + ": " + std::to_string(start + cnt) + "/" +
             std::to_string(blocks.size()) + " blocks";
    });
  }
  return copy_documents(c, sidx);
}

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
    NsCopy c{src, *n, *out, {}, convert && n->desc.dtype != to_dtype, to_dtype, reader, rbuf, rep};
    st = migrate_namespace(c, sidx, prog);
    if (!st.ok()) return st;
  }
  rep->message = "migrated " + std::to_string(rep->namespaces) + " namespace(s) from " + src +
                 " to " + dst + (convert ? " converting payloads to " + opts.dtype : "");
  prog.tick([&] { return rep->message; }, true);
  return Status::OK();
}

}  // namespace ucm::admin
