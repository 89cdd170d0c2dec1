// ucm inspect: store summary, --verify, --block, --docs (ucm/admin.h).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

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

/// --verify's reader threads: the scan adds blocks; every 65,536 they are sorted by (file,
/// offset) and read by `threads` threads (each block: KV record, then its repr record), while the
/// scan goes on filling the next chunk. Memory: two chunks of ~130 B per block.
class VerifyPass {
 public:
  VerifyPass(DataFileReader& reader, uint32_t threads, InspectReport* rep) : reader_(reader), threads_(threads), rep_(rep) {}
  ~VerifyPass() { finish(); }
  void add(const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& r) {
    fill_.push_back({ns, h, r});
    if (fill_.size() >= kChunk) launch();
  }
  void finish() {
    launch();
    wait();
  }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  uint64_t corrupt() const { return corrupt_.load(std::memory_order_relaxed); }

 private:
  struct Item {
    NamespaceId ns;
    BlockHash h;
    fmt::BlockRecord r;
  };
  static constexpr size_t kChunk = 65536;
  void wait() {
    for (auto& t : workers_) t.join();
    workers_.clear();
  }
  void launch() {
    wait();  // the previous chunk is done: its buffer is free
    work_.swap(fill_);
    fill_.clear();
    if (work_.empty()) return;
    std::sort(work_.begin(), work_.end(), [](const Item& a, const Item& b) {
      return std::tie(a.r.kv_file, a.r.kv_offset) < std::tie(b.r.kv_file, b.r.kv_offset);
    });
    next_ = 0;
    for (uint32_t t = 0; t < threads_; ++t)
      workers_.emplace_back([this] {
        fmt::AlignedBuffer buf;
        for (;;) {
          const size_t i = next_.fetch_add(1);
          if (i >= work_.size()) return;
          const Item& it = work_[i];
          const uint8_t* p;
          uint64_t len;
          Status v = reader_.read_block(it.ns, it.h, it.r, false, &buf, &p, &len);
          if (v.ok() && it.r.has_repr()) {
            v = reader_.read_block(it.ns, it.h, it.r, true, &buf, &p, &len);
            if (!v.ok()) v = Status(v.code(), "repr: " + v.message());
          } else if (!v.ok()) {
            v = Status(v.code(), "kv: " + v.message());
          }
          std::lock_guard<std::mutex> g(mu_);
          if (v.ok()) {
            ++rep_->verified;
            rep_->verified_bytes += it.r.bytes();
            bytes_.fetch_add(it.r.bytes(), std::memory_order_relaxed);
          } else {
            ++rep_->corrupt_total;
            corrupt_.fetch_add(1, std::memory_order_relaxed);
            if (rep_->corrupt.size() < 1000) rep_->corrupt.push_back({to_hex(it.ns), to_hex(it.h), v.message()});
          }
        }
      });
  }
  DataFileReader& reader_;
  const uint32_t threads_;
  InspectReport* rep_;
  std::vector<Item> fill_, work_;
  std::vector<std::thread> workers_;
  std::atomic<size_t> next_{0};
  std::atomic<uint64_t> bytes_{0}, corrupt_{0};
  std::mutex mu_;
};

// One namespace's row: its descriptor, counts from the index, and its documents.
Status namespace_stats(Index& idx, const NsInfo& n, NamespaceStats* out) {
  NamespaceStats& s = *out;
  s.name = n.desc.display_name();
  s.id_hex = to_hex(n.id);
  s.model_id = n.desc.model_id;
  s.dtype = dtype_name(n.desc.dtype);
  s.weights_digest = n.desc.weights_digest;
  NamespaceId seed = hash_seed_namespace(n.desc, n.id);
  if (seed != n.id) s.hash_seed_namespace = to_hex(seed);
  s.block_size = n.desc.block_size;
  s.num_layers = n.desc.num_layers;
  s.num_kv_heads = n.desc.num_kv_heads;
  s.head_dim = n.desc.head_dim;
  if (n.desc.is_sglang_pages()) {
    const auto e = nlohmann::json::parse(n.desc.extra_json, nullptr, false);
    if (e.is_object() && e.contains("sglang_pages") && e["sglang_pages"].is_object()) {
      const auto& sp = e["sglang_pages"];
      s.sglang_pages_of = sp.value("of", std::string());
      s.sglang_head_begin = sp.value("head_begin", 0u);
      s.sglang_head_end = sp.value("head_end", 0u);
    }
  }
  s.blocks = n.value.blocks;
  s.bytes = n.value.bytes;
  return idx.for_each_doc(n.id, [&](const std::string&, const std::string&) {
    ++s.documents;
    return true;
  });
}

Status file_stats(Index& idx, InspectReport* rep) {
  return idx.for_each_file([&](uint32_t, const fmt::FileRecord& f) {
    if (f.state == fmt::FileState::kRetired) ++rep->retired_files;
    ++rep->data_files;
    rep->data_bytes += f.size;
    rep->dead_bytes += fmt::file_dead_bytes(f.size, f.live_bytes, f.state);
    return true;
  });
}

// Age and recency spread: one scan of the blocks family (O(N), store_v1.md §9) in bounded
// memory: min/max as it goes, percentiles from a uniform sample (all of them up to its size).
// --verify: the scan hands chunks of blocks, sorted by file and offset, to reader threads.
Status scan_blocks(Index& idx, const std::vector<const NsInfo*>& sel, DataFileReader& reader,
                   const InspectOptions& opts, InspectReport* rep) {
  constexpr size_t kSample = 1 << 20;
  std::vector<uint64_t> access;
  std::mt19937_64 rng(0x5eed);
  Progress prog(opts.progress);
  uint64_t seen = 0, total = rep->blocks;
  VerifyPass vp(reader, std::max<uint32_t>(opts.threads, 1), rep);
  const auto t0 = std::chrono::steady_clock::now();
  for (const NsInfo* n : sel) {
    NamespaceStats* stats = nullptr;
    for (auto& s : rep->namespaces)
      if (s.id_hex == to_hex(n->id)) stats = &s;
    Status st = idx.for_each_block(&n->id, [&](const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& r) {
      ++seen;
      if (stats && r.has_tokens()) ++stats->blocks_with_tokens;
      if (rep->oldest_created_ms == 0 || r.created_ms < rep->oldest_created_ms) rep->oldest_created_ms = r.created_ms;
      rep->newest_created_ms = std::max(rep->newest_created_ms, r.created_ms);
      if (rep->oldest_access_ms == 0 || r.last_access_ms < rep->oldest_access_ms)
        rep->oldest_access_ms = r.last_access_ms;
      rep->newest_access_ms = std::max(rep->newest_access_ms, r.last_access_ms);
      if (access.size() < kSample) access.push_back(r.last_access_ms);
      else if (const uint64_t k = rng() % seen; k < kSample) access[k] = r.last_access_ms;  // reservoir
      if (opts.verify) vp.add(ns, h, r);
      prog.tick([&] {
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!opts.verify) return "scan: " + std::to_string(seen) + "/" + std::to_string(total) + " blocks";
        char rate[32];
        std::snprintf(rate, sizeof rate, "%.2f", secs > 0 ? double(vp.bytes()) / secs / 1e9 : 0.0);
        return "verify: " + std::to_string(seen) + "/" + std::to_string(total) + " blocks, " + rate + " GB/s, " +
               std::to_string(vp.corrupt()) + " corrupt";
      });
      return true;
    });
    if (!st.ok()) return st;
  }
  vp.finish();
  rep->access_p10_ms = percentile(access, 0.10);
  rep->access_p50_ms = percentile(access, 0.50);
  rep->access_p90_ms = percentile(access, 0.90);
  if (opts.verify) {
    rep->verified_run = true;
    rep->verify_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    prog.tick([&] {
      return "verify: done, " + std::to_string(rep->verified) + " ok, " + std::to_string(rep->corrupt_total) +
             " corrupt";
    }, true);
  }
  return Status::OK();
}

// --block: the block's record and token ids, from the one selected namespace that holds it.
Status find_block(Index& idx, const std::vector<const NsInfo*>& sel, DataFileReader& reader,
                  const BlockHash& want, const std::string& ns_opt, InspectReport* rep) {
  std::vector<ojson> found;
  for (const NsInfo* n : sel) {
    fmt::BlockRecord r;
    Status g = idx.get_block(n->id, want, &r);
    if (g.ok()) {
      found.push_back(block_record_json(*n, want, r));
      // The ids in its record header (store_v1.md §3.2), or "unknown".
      std::vector<uint32_t> ids;
      Status ts = reader.read_block_tokens(n->id, want, r, &ids);
      if (!ts.ok()) found.back()["token_ids"] = "unreadable: " + ts.message();
      else if (ids.empty()) found.back()["token_ids"] = "unknown";
      else found.back()["token_ids"] = ids;
    } else if (g.code() != Code::kNotFound) {
      return g;
    }
  }
  if (found.empty())
    return Status::NotFound("block " + to_hex(want) + " is not in " +
                            (ns_opt.empty() ? "any namespace of the store" : "namespace " + ns_opt));
  if (found.size() > 1) {
    std::string names;
    for (const auto& f : found) names += " " + f["namespace"].get<std::string>();
    return Status::InvalidArgument("block " + to_hex(want) + " is in " + std::to_string(found.size()) +
                                   " namespaces; pick one with --namespace:" + names);
  }
  rep->block_json = found[0].dump();
  return Status::OK();
}

ojson document_json(const NsInfo& n, const std::string& id, const std::string& js) {
  DocumentEntry d;
  ojson e;
  e["id"] = id;
  e["namespace"] = n.desc.display_name();
  e["namespace_id"] = to_hex(n.id);
  Status ds = document_from_json(js, &d);
  if (!ds.ok()) {
    e["error"] = ds.message();
    return e;
  }
  e["blocks"] = d.blocks;
  e["tokens"] = d.tokens;
  e["first_block"] = to_hex(d.first_block);
  e["last_block"] = to_hex(d.last_block);
  e["source"] = d.source;
  e["created_ms"] = d.created_ms;
  e["created"] = format_time_ms(d.created_ms);
  e["input"] = d.input.empty() ? "text" : d.input;
  return e;
}

// --docs: every document of the selected namespaces.
Status list_documents(Index& idx, const std::vector<const NsInfo*>& sel, InspectReport* rep) {
  rep->docs_run = true;
  ojson list = ojson::array();
  for (const NsInfo* n : sel) {
    Status st = idx.for_each_doc(n->id, [&](const std::string& id, const std::string& js) {
      list.push_back(document_json(*n, id, js));
      return true;
    });
    if (!st.ok()) return st;
  }
  rep->docs_json = list.dump();
  return Status::OK();
}

}  // namespace

Status inspect_single(const std::string& path, const InspectOptions& opts, InspectReport* rep) {
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
    st = namespace_stats(idx, *n, &s);
    if (!st.ok()) return st;
    rep->blocks += s.blocks;
    rep->bytes += s.bytes;
    rep->namespaces.push_back(std::move(s));
  }
  st = file_stats(idx, rep);
  if (!st.ok()) return st;
  DataFileReader reader(path, false);
  st = scan_blocks(idx, sel, reader, opts, rep);
  if (!st.ok()) return st;
  if (!opts.block_hex.empty()) {
    st = find_block(idx, sel, reader, want_block, opts.ns, rep);
    if (!st.ok()) return st;
  }
  if (opts.docs) {
    st = list_documents(idx, sel, rep);
    if (!st.ok()) return st;
  }
  if (rep->corrupt_total > 0)
    return Status::Corruption(std::to_string(rep->corrupt_total) + " corrupt block(s) in " + path +
                              "; `ucm gc " + path +
                              " --verify` removes them (they are served as misses meanwhile)");
  return Status::OK();
}

}  // namespace ucm::admin
