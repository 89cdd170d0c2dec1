// lib/src/store_reader.cc: StoreReader (see ucm/core/store_reader.h): the table's catch-up,
// lookup, get_block, read_verified and the load / visit_repr tasks on it, metrics.
#include "ucm/core/store_reader.h"
#include "ucm/core/page_strides.h"

#include "ucm/core/fptable_io.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace ucm::detail {

namespace {
BlockInfo to_info(const NamespaceId& ns, const BlockHash& hash, const fmt::BlockRecord& r) {
  BlockInfo b;
  b.ns = ns;
  b.hash = hash;
  b.parent = r.parent;
  b.token_count = r.token_count;
  b.kv_file = r.kv_file;
  b.kv_offset = r.kv_offset;
  b.kv_length = r.kv_length;
  b.kv_checksum = r.kv_checksum;
  b.has_repr = r.has_repr();
  b.has_tokens = r.has_tokens();
  b.repr_file = r.repr_file;
  b.repr_offset = r.repr_offset;
  b.repr_length = r.repr_length;
  b.repr_checksum = r.repr_checksum;
  b.created_ms = r.created_ms;
  b.last_access_ms = r.last_access_ms;
  return b;
}
}  // namespace

Status StoreReader::rebuild_table() {
  // Caller holds refresh_mu_. The index view does not move meanwhile: a secondary changes only
  // in try_catch_up (under refresh_mu_), and only this process writes a primary.
  FpTable t;
  uint64_t seq = 0;
  Status s = fptable_scan(*s_.index, &t, &seq);
  if (!s.ok()) return s;
  std::unique_lock<std::shared_mutex> g(s_.table_mu);
  s_.table = std::move(t);
  s_.applied_seq = seq;
  return Status::OK();
}

Status StoreReader::replay_journal() {
  std::vector<std::pair<uint64_t, fmt::JournalEntry>> entries;
  Status s = s_.index->for_each_journal(s_.applied_seq, [&](uint64_t seq, const fmt::JournalEntry& e) {
    entries.emplace_back(seq, e);
    return true;
  });
  if (!s.ok()) return s;
  const uint64_t last = s_.index->journal_seq();
  const bool gap = (!entries.empty() && entries.front().first != s_.applied_seq + 1) ||
                   (entries.empty() && last > s_.applied_seq);
  if (gap) return rebuild_table();  // gc trimmed entries we never saw
  if (entries.empty()) return Status::OK();
  std::unique_lock<std::shared_mutex> g(s_.table_mu);
  for (const auto& [seq, e] : entries) {
    uint64_t fp = fmt::block_fingerprint(e.ns, e.hash);
    if (e.op == fmt::JournalOp::kAdd) s_.table.insert(fp);
    else s_.table.erase(fp);
    s_.applied_seq = seq;
  }
  return Status::OK();
}

Status StoreReader::refresh() {
  if (!s_.read_only()) return Status::OK();
  std::lock_guard<std::mutex> g(refresh_mu_);
  Status s = s_.index->try_catch_up();
  if (!s.ok()) return s;
  s_.metrics.refreshes.fetch_add(1, std::memory_order_relaxed);
  return replay_journal();
}

Status StoreReader::get_namespace(const NamespaceId& ns, NamespaceDesc* desc) {
  NamespaceDesc d;
  Status s = s_.namespace_desc(ns, &d);
  if (s.code() == Code::kNotFound && s_.read_only()) {
    (void)refresh();
    s = s_.namespace_desc(ns, &d);
  }
  if (!s.ok()) return s;
  if (desc) *desc = std::move(d);
  return Status::OK();
}


// ---------------------------------------------------------------------------------------------
Status StoreReader::lookup(const NamespaceId& ns, const BlockHash* hashes, size_t n, uint8_t* present,
                         size_t* prefix_blocks) {
  const auto t0 = Clock::now();
  if (n && !hashes) return Status::InvalidArgument("lookup: hashes is null with n > 0");
  size_t prefix = 0, hits = 0;
  bool in_prefix = true;
  constexpr size_t kChunk = 16;
  uint64_t fps[kChunk];
  {
    std::shared_lock<std::shared_mutex> g(s_.table_mu);
    for (size_t base = 0; base < n; base += kChunk) {
      const size_t m = std::min(kChunk, n - base);
      for (size_t i = 0; i < m; ++i) {
        fps[i] = fmt::block_fingerprint(ns, hashes[base + i]);
        s_.table.prefetch(fps[i]);
      }
      for (size_t i = 0; i < m; ++i) {
        const bool p = s_.table.contains(fps[i]);
        if (present) present[base + i] = p ? 1 : 0;
        hits += p;
        if (in_prefix && p) ++prefix;
        else in_prefix = false;
      }
    }
  }
  if (prefix_blocks) *prefix_blocks = prefix;
  s_.metrics.lookups.fetch_add(n, std::memory_order_relaxed);
  s_.metrics.lookup_hits.fetch_add(hits, std::memory_order_relaxed);
  s_.metrics.lookup.observe_ns(elapsed_ns(t0));
  return Status::OK();
}

Status StoreReader::get_block(const NamespaceId& ns, const BlockHash& hash, BlockInfo* info) {
  fmt::BlockRecord r;
  Status s = s_.index->get_block(ns, hash, &r);
  if (!s.ok()) return s;
  if (info) *info = to_info(ns, hash, r);
  return Status::OK();
}

Status StoreReader::for_each_block(const NamespaceId& ns,
                                   const std::function<bool(const BlockHash&, const BlockInfo&)>& fn) {
  return s_.index->for_each_block(&ns, [&](const NamespaceId& n, const BlockHash& h, const fmt::BlockRecord& r) {
    return fn(h, to_info(n, h, r));
  });
}

Status StoreReader::block_tokens(const NamespaceId& ns, const BlockHash& hash, std::vector<uint32_t>* tokens,
                                 BlockHash* parent) {
  Status s;
  for (int attempt = 0; attempt < 2; ++attempt) {
    fmt::BlockRecord r;
    s = s_.index->get_block(ns, hash, &r);
    if (!s.ok()) return s;
    if (parent) *parent = r.parent;
    s = s_.files->read_block_tokens(ns, hash, r, tokens);
    if (s.code() != Code::kNotFound || attempt > 0) break;
    s_.files->drop(r.kv_file);  // retired by gc: a stale view
    (void)refresh();
  }
  return s;
}

Status StoreReader::read_verified(const NamespaceId& ns, const BlockHash& hash, Payload which, uint64_t kv_bytes,
                                fmt::BlockRecord* rec, fmt::AlignedBuffer* buf) {
  const bool kv = which == Payload::kKV;
  Status s;
  for (int attempt = 0; attempt < 2; ++attempt) {
    s = s_.index->get_block(ns, hash, rec);
    if (!s.ok()) return s;
    if (kv && kv_bytes && rec->kv_length != kv_bytes) {
      s = Status::Corruption("block " + to_hex(hash) + ": index says " + std::to_string(rec->kv_length) +
                             " payload bytes, namespace expects " + std::to_string(kv_bytes));
      break;
    }
    if (!kv && !rec->has_repr()) return Status::NotFound("block " + to_hex(hash) + " has no representations");
    fmt::RecordExpect e;
    e.type = kv ? fmt::RecordType::kBlockKV : fmt::RecordType::kBlockRepr;
    e.ns = ns;
    e.key = hash;
    e.payload_length = kv ? rec->kv_length : rec->repr_length;
    e.payload_checksum = kv ? rec->kv_checksum : rec->repr_checksum;
    const uint32_t file = kv ? rec->kv_file : rec->repr_file;
    s = s_.files->read(file, kv ? rec->kv_offset : rec->repr_offset, e, buf);
    if (s.code() != Code::kNotFound || attempt > 0) break;
    // The data file was retired by gc: our view is stale. Catch up once and retry.
    s_.files->drop(file);
    (void)refresh();
  }
  // A record that fails its checks is handed to the store's writer for removal (§11.6), so the
  // next save writes the block again instead of every later load failing on it.
  if (s.code() == Code::kCorruption)
    s_.corrupt.note(ns, hash, kv ? rec->kv_file : rec->repr_file, kv ? rec->kv_offset : rec->repr_offset);
  return s;
}

void StoreReader::load_one(const std::shared_ptr<TaskImpl>& t, size_t i, const NamespaceId& ns, const BlockHash& hash,
                         const NamespaceDesc& d, uint32_t h0, uint32_t h1, const LoadDest& dest) {
  thread_local fmt::AlignedBuffer buf;
  fmt::BlockRecord r;
  Status s = read_verified(ns, hash, Payload::kKV, d.payload_bytes(), &r, &buf);
  if (s.ok()) {
    const uint8_t* src = buf.data() + fmt::kPage;
    const size_t S = dtype_size(d.dtype), T = d.block_size, H = d.num_kv_heads, D = d.head_dim, L = d.num_layers;
    const size_t run = size_t(h1 - h0) * D * S;  // bytes per token in the destination
    const size_t page_src = T * H * D * S, page_dst = T * run;
    const bool paged = dest.kind == LoadDest::Kind::kPaged;
    const size_t ts = paged && dest.token_stride ? dest.token_stride : run;
    const size_t hs = paged && dest.head_stride ? dest.head_stride : D * S;
    const bool strided = paged && (ts != run || hs != D * S);
    for (size_t l = 0; l < L; ++l)
      for (size_t kv = 0; kv < 2; ++kv) {
        const uint8_t* sp = src + (l * 2 + kv) * page_src;
        uint8_t* dp = dest.kind == LoadDest::Kind::kContiguous
                          ? static_cast<uint8_t*>(dest.ptrs[i]) + (l * 2 + kv) * page_dst
                          : static_cast<uint8_t*>(dest.ptrs[(i * L + l) * 2 + kv]);
        if (strided) {
          for (size_t tt = 0; tt < T; ++tt) {
            const uint8_t* st = sp + (tt * H + h0) * D * S;
            uint8_t* dt = dp + tt * ts;
            if (hs == D * S) std::memcpy(dt, st, run);
            else
              for (size_t h = 0; h < h1 - h0; ++h) std::memcpy(dt + h * hs, st + h * D * S, D * S);
          }
        } else if (h0 == 0 && h1 == H) std::memcpy(dp, sp, page_src);
        else
          for (size_t tt = 0; tt < T; ++tt) std::memcpy(dp + tt * run, sp + (tt * H + h0) * D * S, run);
      }
    s_.metrics.blocks_loaded.fetch_add(1, std::memory_order_relaxed);
    s_.metrics.bytes_loaded.fetch_add(L * 2 * page_dst, std::memory_order_relaxed);
    s_.access.add(ns, hash, fmt::now_ms());
  } else {
    s_.metrics.count_error(s.code());
  }
  t->statuses()[i] = s;
  if (t->job_done()) finish_load(t);
}

void StoreReader::finish_load(const std::shared_ptr<TaskImpl>& t) {
  s_.metrics.load_task.observe_ns(elapsed_ns(t->t0));
  t->finish();
}

std::shared_ptr<Task> StoreReader::load(const NamespaceId& ns, const BlockHash* hashes, size_t n, const LoadDest& dest) {
  NamespaceDesc d;
  Status s = get_namespace(ns, &d);
  if (!s.ok()) {
    s_.metrics.count_error(s.code());
    return TaskImpl::Failed(n, s);
  }
  const uint32_t h0 = dest.heads.begin, h1 = dest.heads.end == 0 ? d.num_kv_heads : dest.heads.end;
  Status bad;
  if (h0 >= h1 || h1 > d.num_kv_heads)
    bad = Status::InvalidArgument("load: KV-head range [" + std::to_string(h0) + ", " + std::to_string(h1) +
                                  ") is not within [0, " + std::to_string(d.num_kv_heads) + ") of namespace " +
                                  d.display_name());
  const size_t need = dest.kind == LoadDest::Kind::kContiguous ? n : n * d.num_layers * 2;
  if (bad.ok() && dest.ptrs.size() < need)
    bad = Status::InvalidArgument("load: " + std::to_string(dest.ptrs.size()) + " destination pointers, need " +
                                  std::to_string(need) + (dest.kind == LoadDest::Kind::kPaged ? " (n * L * 2, paged)" : " (n)"));
  if (bad.ok() && n && !hashes) bad = Status::InvalidArgument("load: hashes is null with n > 0");
  if (bad.ok() && (dest.token_stride || dest.head_stride)) {
    const uint64_t S = dtype_size(d.dtype), hs = dest.head_stride ? dest.head_stride : d.head_dim * S;
    const uint64_t ts = dest.token_stride ? dest.token_stride : (h1 - h0) * d.head_dim * S;
    if (dest.kind != LoadDest::Kind::kPaged)
      bad = Status::InvalidArgument("load: token_stride / head_stride are for paged destinations only");
    else if (!page_strides_ok(ts, hs, d.head_dim * S, h1 - h0, d.block_size))
      bad = Status::InvalidArgument("load: strides (token " + std::to_string(ts) + ", head " + std::to_string(hs) +
                                    " bytes) make elements of a page overlap (a head is " +
                                    std::to_string(d.head_dim * S) + " bytes)");
  }
  if (bad.ok())
    for (size_t k = 0; k < need; ++k)
      if (!dest.ptrs[k]) {
        bad = Status::InvalidArgument("load: destination pointer " + std::to_string(k) + " is null");
        break;
      }
  if (!bad.ok()) {
    s_.metrics.count_error(bad.code());
    return TaskImpl::Failed(n, bad);
  }
  auto t = std::make_shared<TaskImpl>(n);
  if (n == 0) {
    t->finish();
    return t;
  }
  auto shared_dest = std::make_shared<LoadDest>(dest);
  auto hs = std::make_shared<std::vector<BlockHash>>(hashes, hashes + n);
  for (size_t i = 0; i < n; ++i)
    s_.pool->submit([this, t, i, ns, hs, d, h0, h1, shared_dest] { load_one(t, i, ns, (*hs)[i], d, h0, h1, *shared_dest); });
  return t;
}

std::shared_ptr<Task> StoreReader::load_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n, void* const* dst,
                                           const size_t* cap) {
  if (n && (!hashes || !dst || !cap)) return TaskImpl::Failed(n, Status::InvalidArgument("load_repr: null argument"));
  auto ds = std::make_shared<std::vector<void*>>(dst, dst + n);
  auto cs = std::make_shared<std::vector<size_t>>(cap, cap + n);
  return visit_repr(ns, hashes, n, [ds, cs, hashes_copy = std::vector<BlockHash>(hashes, hashes + n)](
                                       size_t i, const uint8_t* p, size_t len) {
    if (len > (*cs)[i])
      return Status::InvalidArgument("load_repr: block " + to_hex(hashes_copy[i]) + " needs " + std::to_string(len) +
                                     " bytes, destination " + std::to_string(i) + " has " + std::to_string((*cs)[i]));
    if (!(*ds)[i]) return Status::InvalidArgument("load_repr: destination " + std::to_string(i) + " is null");
    std::memcpy((*ds)[i], p, len);
    return Status::OK();
  });
}

std::shared_ptr<Task> StoreReader::visit_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n,
                                            Store::ReprVisitor visit) {
  if (n && (!hashes || !visit)) return TaskImpl::Failed(n, Status::InvalidArgument("visit_repr: null argument"));
  auto t = std::make_shared<TaskImpl>(n);
  if (n == 0) {
    t->finish();
    return t;
  }
  auto hs = std::make_shared<std::vector<BlockHash>>(hashes, hashes + n);
  auto vf = std::make_shared<Store::ReprVisitor>(std::move(visit));
  for (size_t i = 0; i < n; ++i)
    s_.pool->submit([this, t, i, ns, hs, vf] {
      thread_local fmt::AlignedBuffer buf;
      const BlockHash& hash = (*hs)[i];
      fmt::BlockRecord r;
      Status s = read_verified(ns, hash, Payload::kRepr, 0, &r, &buf);
      if (s.ok()) {
        try {
          s = (*vf)(i, buf.data() + fmt::kPage, r.repr_length);
        } catch (const std::exception& ex) {
          s = Status::Internal(std::string("visit_repr: visitor threw: ") + ex.what());
        }
        if (s.ok()) {
          s_.metrics.bytes_loaded.fetch_add(r.repr_length, std::memory_order_relaxed);
          s_.access.add(ns, hash, fmt::now_ms());
        }
      }
      if (!s.ok()) s_.metrics.count_error(s.code());
      t->statuses()[i] = s;
      if (t->job_done()) finish_load(t);
    });
  return t;
}


// ---------------------------------------------------------------------------------------------
std::string StoreReader::metrics_text() const {
  size_t n;
  {
    std::shared_lock<std::shared_mutex> g(s_.table_mu);
    n = s_.table.size();
  }
  return s_.metrics.render(n);
}

}  // namespace ucm::detail
