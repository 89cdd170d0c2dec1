// lib/src/store_dump.cc: StoreWriter::dump and its phases (see ucm/core/store_writer.h).
#include "ucm/core/store_writer.h"
#include "ucm/core/page_strides.h"

#include "ucm/hash.h"

#include <algorithm>
#include <map>
#include <set>

namespace ucm::detail {

// ---------------------------------------------------------------------------------------------
// dump, in the phases named in store_writer.h: check, mark present, reserve, write (I/O threads),
// commit (commit thread: sync, then index).
namespace {
uint64_t dump_record_bytes(const NamespaceDesc& d, const DumpItem& it) {
  return fmt::record_size(d.payload_bytes()) + (it.repr_len ? fmt::record_size(it.repr_len) : 0);
}
}  // namespace

Status StoreWriter::dump_check(const NamespaceId& ns, const DumpItem* items, size_t n, NamespaceDesc* d) {
  Status s = s_.namespace_desc(ns, d);  // a writer's index is current: no catch-up
  if (s.ok() && n && !items) s = Status::InvalidArgument("dump: items is null with n > 0");
  for (size_t i = 0; s.ok() && i < n; ++i) {
    if (!items[i].kv && !items[i].kv_pages)
      s = Status::InvalidArgument("dump: item " + std::to_string(i) + " has no KV payload (kv and kv_pages are null)");
    else if (items[i].token_count != d->block_size)
      s = Status::InvalidArgument("dump: item " + std::to_string(i) + " has token_count " +
                                  std::to_string(items[i].token_count) + ", the namespace's block size is " +
                                  std::to_string(d->block_size) + " (only full blocks are stored)");
    else if (items[i].repr_len && !items[i].repr)
      s = Status::InvalidArgument("dump: item " + std::to_string(i) + " has repr_len but no repr");
    else if (items[i].tokens) {
      // The ids must be the ones the hash was made from (store_v1.md §3.2, §4.1).
      std::vector<BlockHash> h;
      hash_blocks(items[i].parent, items[i].tokens, d->block_size, d->block_size, &h);
      if (h.size() != 1 || h[0] != items[i].hash)
        s = Status::InvalidArgument("dump: item " + std::to_string(i) + ": its token ids do not hash to its block "
                                    "hash with its parent (MD5(parent || tokens), store_v1.md §4.1): wrong ids, "
                                    "parent or hash");
    }
    if (s.ok() && items[i].kv_pages && !items[i].kv) {
      for (size_t p = 0; p < size_t(d->num_layers) * 2; ++p)
        if (!items[i].kv_pages[p]) {
          s = Status::InvalidArgument("dump: item " + std::to_string(i) + " page " + std::to_string(p) + " is null");
          break;
        }
      const uint64_t e = uint64_t(d->head_dim) * dtype_size(d->dtype), H = d->num_kv_heads;
      const uint64_t ts = items[i].page_token_stride ? items[i].page_token_stride : H * e;
      const uint64_t hs = items[i].page_head_stride ? items[i].page_head_stride : e;
      if (s.ok() && !page_strides_ok(ts, hs, e, H, d->block_size))
        s = Status::InvalidArgument("dump: item " + std::to_string(i) + ": page strides (token " + std::to_string(ts) +
                                    ", head " + std::to_string(hs) + " bytes) make elements overlap (a head is " +
                                    std::to_string(e) + " bytes)");
    } else if (s.ok() && (items[i].page_token_stride || items[i].page_head_stride)) {
      s = Status::InvalidArgument("dump: item " + std::to_string(i) + ": page strides are for kv_pages only");
    }
  }
  if (s.ok() && n) {
    uint64_t bytes = fmt::kPage;  // a new data file's header, if the dump rolls
    for (size_t i = 0; i < n; ++i) bytes += dump_record_bytes(*d, items[i]);
    s = check_space(bytes, "dump of " + std::to_string(n) + " blocks");
  }
  return s;
}

void StoreWriter::dump_mark_present(DumpState* st) {
  // The in-memory fingerprint table first (the writer keeps it exact for its own commits); only a
  // fingerprint hit costs an index get. Duplicates within the task are written once.
  const size_t n = st->items.size();
  std::vector<size_t> hits;
  {
    std::shared_lock<std::shared_mutex> g(s_.table_mu);
    for (size_t i = 0; i < n; ++i)
      if (s_.table.contains(fmt::block_fingerprint(st->ns, st->items[i].hash))) hits.push_back(i);
  }
  fmt::BlockRecord cur;
  for (size_t i : hits)
    if (s_.index->get_block(st->ns, st->items[i].hash, &cur).ok()) st->skip[i] = true;
  if (n > 1) {
    std::set<BlockHash> seen;
    for (size_t i = 0; i < n; ++i)
      if (!st->skip[i] && !seen.insert(st->items[i].hash).second) st->skip[i] = true;
  }
}

Status StoreWriter::dump_reserve(DumpState* st) {
  // The task's records are contiguous, reserved (and allocated) up front in runs of at most kRun
  // bytes, each record's KV record followed by its repr record.
  constexpr uint64_t kRun = 64ull << 20;
  const size_t n = st->items.size();
  size_t i = 0;
  while (i < n) {
    uint64_t run = 0;
    size_t j = i;
    for (; j < n; ++j) {
      if (st->skip[j]) continue;
      const uint64_t rb = dump_record_bytes(st->desc, st->items[j]);
      if (run && run + rb > kRun) break;
      run += rb;
    }
    if (run) {
      std::shared_ptr<ActiveFile> af;
      uint64_t off = 0;
      Status s = reserve_range(run, &off, &af);
      if (!s.ok()) return s;
      if (st->files.empty() || st->files.back() != af) st->files.push_back(af);
      for (size_t k = i; k < j; ++k) {
        if (st->skip[k]) continue;
        st->slot_file[k] = af;
        st->slot_off[k] = off;
        off += dump_record_bytes(st->desc, st->items[k]);
      }
    }
    i = j;
  }
  return Status::OK();
}

Status StoreWriter::dump_write_one(DumpState* st, size_t i) {
  // Encode the KV record (and the repr record right after it) into a page-aligned staging
  // buffer, copying and checksumming in one pass, then write both with one O_DIRECT write.
  thread_local fmt::AlignedBuffer stage;
  const DumpItem& it = st->items[i];
  const NamespaceDesc& d = st->desc;
  const uint64_t kv_rec = fmt::record_size(d.payload_bytes());
  const uint64_t total = dump_record_bytes(d, it);
  if (!stage.reserve(total)) return Status::Internal("out of memory (dump staging buffer of " + std::to_string(total) + " bytes)");
  std::vector<std::pair<const void*, size_t>> pieces;
  thread_local std::vector<uint8_t> gathered;  // strided pages, packed
  const size_t page = d.payload_bytes() / (size_t(d.num_layers) * 2);
  if (it.kv) pieces.emplace_back(it.kv, d.payload_bytes());
  else if (it.page_token_stride || it.page_head_stride) {
    const size_t e = size_t(d.head_dim) * dtype_size(d.dtype), H = d.num_kv_heads, T = d.block_size;
    const size_t ts = it.page_token_stride ? it.page_token_stride : H * e;
    const size_t hs = it.page_head_stride ? it.page_head_stride : e;
    gathered.resize(d.payload_bytes());
    for (size_t p = 0; p < size_t(d.num_layers) * 2; ++p) {
      const auto* src = static_cast<const uint8_t*>(it.kv_pages[p]);
      uint8_t* dst = gathered.data() + p * page;
      for (size_t t = 0; t < T; ++t)
        if (hs == e) std::memcpy(dst + t * H * e, src + t * ts, H * e);
        else
          for (size_t h = 0; h < H; ++h) std::memcpy(dst + (t * H + h) * e, src + t * ts + h * hs, e);
    }
    pieces.emplace_back(gathered.data(), d.payload_bytes());
  } else {
    for (size_t p = 0; p < size_t(d.num_layers) * 2; ++p) pieces.emplace_back(it.kv_pages[p], page);
  }
  fmt::RecordHeader h;
  h.type = fmt::RecordType::kBlockKV;
  h.ns = st->ns;
  h.key = it.hash;
  h.parent = it.parent;
  h.token_count = it.token_count;
  if (it.tokens && s_.records_tokens()) {  // §3.2: a version-4 store; encode drops them past 992
    h.flags |= fmt::kRecordFlagTokens;
    h.tokens = it.tokens;
  }
  fmt::RecordHeader rh;
  fmt::encode_record(&h, pieces, stage.data());
  if (it.repr_len) {
    rh = h;
    rh.flags &= ~fmt::kRecordFlagTokens;
    rh.tokens = nullptr;
    rh.type = fmt::RecordType::kBlockRepr;
    fmt::encode_record(&rh, {{it.repr, it.repr_len}}, stage.data() + kv_rec);
  }
  const auto& af = st->slot_file[i];
  const uint64_t off = st->slot_off[i];
  Status s = af->w->write_at(stage.data(), total, off);
  write_epoch_.fetch_add(1);
  if (!s.ok()) return s;
  fmt::BlockRecord& r = st->recs[i];
  r.token_count = it.token_count;
  r.parent = it.parent;
  r.kv_file = af->w->file_id();
  r.kv_offset = off;
  r.kv_length = h.payload_length;
  r.kv_checksum = h.payload_checksum;
  r.created_ms = h.created_ms;
  r.last_access_ms = h.created_ms;
  if (h.flags & fmt::kRecordFlagTokens) r.flags |= 2;  // §5.3 bit 1
  if (it.repr_len) {
    r.flags |= 1;
    r.repr_file = r.kv_file;
    r.repr_offset = off + kv_rec;
    r.repr_length = rh.payload_length;
    r.repr_checksum = rh.payload_checksum;
  }
  return Status::OK();
}

Status StoreWriter::dump_sync(DumpState* st) {
  for (auto& f : st->files) {
    if (f->synced_epoch >= st->epoch) continue;  // an fdatasync begun after our writes covered it
    const uint64_t e = write_epoch_.load();
    Status s = f->w->sync();
    if (!s.ok()) return s;
    f->synced_epoch = std::max(f->synced_epoch, e);
  }
  return Status::OK();
}

Status StoreWriter::dump_index(DumpState* st, const std::vector<Status>& bs, std::vector<size_t>* added) {
  std::lock_guard<std::mutex> g(commit_mu_);
  const size_t n = st->items.size();
  Index::Batch b;
  int64_t blocks = 0, bytes = 0;
  std::map<uint32_t, int64_t> live;
  for (size_t i = 0; i < n; ++i) {
    if (!bs[i].ok() || st->skip[i]) continue;
    const auto& h = st->items[i].hash;
    fmt::BlockRecord cur;
    bool maybe;
    {
      std::shared_lock<std::shared_mutex> tg(s_.table_mu);
      maybe = s_.table.contains(fmt::block_fingerprint(st->ns, h));
    }
    if (maybe && s_.index->get_block(st->ns, h, &cur).ok()) {
      st->skip[i] = true;  // raced with another dump of the same block: ours is dead space
      continue;
    }
    const auto& r = st->recs[i];
    b.put_block(st->ns, h, r);
    ++blocks;
    bytes += int64_t(r.bytes());
    live[r.kv_file] += int64_t(fmt::record_size(r.kv_length));
    if (r.has_repr()) live[r.repr_file] += int64_t(fmt::record_size(r.repr_length));
    added->push_back(i);
  }
  if (added->empty()) return Status::OK();
  b.add_ns_counters(st->ns, blocks, bytes);
  for (auto& f : st->files) {
    const uint32_t id = f->w->file_id();
    f->rec.size = f->w->size();
    f->rec.live_bytes += uint64_t(live[id]);
    b.put_file(id, f->rec);
  }
  Status s = s_.index->write(b, true);
  if (s.ok()) {
    std::unique_lock<std::shared_mutex> tg(s_.table_mu);
    for (size_t i : *added) s_.table.insert(fmt::block_fingerprint(st->ns, st->items[i].hash));
    s_.applied_seq = s_.index->journal_seq();
  } else {
    // Nothing was indexed; undo the in-memory live bytes.
    for (auto& f : st->files) f->rec.live_bytes -= uint64_t(live[f->w->file_id()]);
  }
  return s;
}

void StoreWriter::dump_commit(const std::shared_ptr<TaskImpl>& t, DumpState* st) {
  // On the commit thread. All records of this task are written (or failed). Make them durable
  // (store_v1.md §3.4: data fdatasync'd before the synced index batch), then index them.
  const size_t n = st->items.size();
  auto& bs = t->statuses();
  bool any = false;
  Status full;
  for (size_t i = 0; i < n; ++i) {
    any |= bs[i].ok() && !st->skip[i];
    if (bs[i].code() == Code::kNoSpace && full.ok()) full = bs[i];
  }
  Status whole;
  if (any && !full.ok()) {
    // The disk filled up while this task wrote (another process took the reserve). Committing
    // the blocks that did get written would append to the index's WAL on a full disk, and a
    // failed WAL write leaves the index refusing writes until it is reopened. Fail the whole
    // task instead; the written records are dead space for gc.
    whole = Status::NoSpace(full.message() + " (no block of this dump was committed)");
    for (size_t i = 0; i < n; ++i)
      if (bs[i].ok() && !st->skip[i]) bs[i] = whole;
    any = false;
  }
  if (any) {
    whole = dump_sync(st);
    std::vector<size_t> added;
    if (whole.ok()) whole = dump_index(st, bs, &added);
    if (whole.ok())
      for (size_t i : added) {
        t->written()[i] = 1;
        s_.metrics.blocks_dumped.fetch_add(1, std::memory_order_relaxed);
        s_.metrics.bytes_dumped.fetch_add(st->recs[i].bytes(), std::memory_order_relaxed);
      }
    if (!whole.ok())
      for (size_t i = 0; i < n; ++i)
        if (bs[i].ok() && !st->skip[i]) bs[i] = whole;
  }
  for (size_t i = 0; i < n; ++i) {
    if (st->skip[i] && bs[i].ok()) s_.metrics.dump_skipped.fetch_add(1, std::memory_order_relaxed);
    s_.metrics.count_error(bs[i].code());
  }
  s_.metrics.dump_task.observe_ns(elapsed_ns(t->t0));
  t->finish();
}

std::shared_ptr<Task> StoreWriter::dump(const NamespaceId& ns, const DumpItem* items, size_t n) {
  NamespaceDesc d;
  Status s = dump_check(ns, items, n, &d);
  if (!s.ok()) {
    s_.metrics.count_error(s.code());
    return TaskImpl::Failed(n, s);
  }
  auto t = std::make_shared<TaskImpl>(n);
  if (n == 0) {
    t->finish();
    return t;
  }
  auto st = std::make_shared<DumpState>();
  st->ns = ns;
  st->desc = d;
  st->items.assign(items, items + n);
  for (size_t i = 0; i < n; ++i)
    if (items[i].tokens) st->tokens.insert(st->tokens.end(), items[i].tokens, items[i].tokens + d.block_size);
  for (size_t i = 0, k = 0; i < n; ++i)  // repointed once the copy is complete (no reallocation after)
    if (items[i].tokens) st->items[i].tokens = st->tokens.data() + (k++) * d.block_size;
  st->recs.resize(n);
  st->skip.assign(n, false);
  st->slot_file.resize(n);
  st->slot_off.assign(n, 0);
  dump_mark_present(st.get());
  s = dump_reserve(st.get());
  if (!s.ok()) {
    s_.metrics.count_error(s.code());
    return TaskImpl::Failed(n, Status(s.code(), "dump of " + std::to_string(n) + " blocks: " + s.message() +
                                                   " (nothing was committed)"));
  }
  auto job_finished = [this, t, st] {
    if (!t->job_done()) return;
    st->epoch = write_epoch_.load();
    submit_commit([this, t, st] { dump_commit(t, st.get()); });
  };
  for (size_t i = 0; i < n; ++i) {
    if (st->skip[i]) {
      job_finished();  // cheap no-op
      continue;
    }
    s_.pool->submit([this, t, st, i, job_finished] {
      t->statuses()[i] = dump_write_one(st.get(), i);
      job_finished();
    });
  }
  return t;
}

}  // namespace ucm::detail
