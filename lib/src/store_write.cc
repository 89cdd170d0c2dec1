// lib/src/store_write.cc: data files, the free-space reserve, the commit thread, dump (see store_impl.h).
#include "ucm/core/store_impl.h"

namespace ucm::detail {

// ---------------------------------------------------------------------------------------------
Status StoreImpl::check_space(uint64_t bytes, const std::string& what) {
  struct statvfs v;
  if (::statvfs(path_.c_str(), &v) != 0) return Status::OK();  // cannot tell: the write will
  const uint64_t unit = v.f_frsize ? v.f_frsize : v.f_bsize;
  const uint64_t avail = uint64_t(v.f_bavail) * unit, total = uint64_t(v.f_blocks) * unit;
  const uint64_t base_reserve = std::min<uint64_t>(fmt::kSpaceReserveMax, total / 16);
  const uint64_t reserve = std::max<uint64_t>(2 * bytes, base_reserve);
  std::lock_guard<std::mutex> g(space_mu_);
  const uint64_t need = std::max<uint64_t>(bytes + reserve, space_need_);
  if (avail >= need) {
    space_need_ = 0;
    return Status::OK();
  }
  // Hysteresis: until this much is free, smaller writes are refused too (bounded by one base
  // reserve above the current free space, so one oversized dump does not block the rest).
  space_need_ = std::min<uint64_t>(need, avail + base_reserve);
  return Status::NoSpace(what + " into " + path_ + ": " + std::to_string(avail) + " bytes free on its file system, " +
                         std::to_string(need) + " needed (" + std::to_string(bytes) + " to write plus a reserve of " +
                         std::to_string(need - bytes) + " kept so the index can always commit and close); nothing "
                         "was written. Free disk space (e.g. `ucm gc --max-bytes`) and retry");
}

Status StoreImpl::active_file_locked(std::shared_ptr<ActiveFile>* af) {
  if (!roller_) roller_ = std::make_unique<FileRoller>(path_, index_, &commit_mu_);
  return roller_->get(0, af);
}

Status StoreImpl::append_record(fmt::RecordHeader* h, const std::vector<std::pair<const void*, size_t>>& pieces,
                                uint32_t* file, uint64_t* off, std::shared_ptr<ActiveFile>* af) {
  std::shared_ptr<ActiveFile> cur;
  {
    std::lock_guard<std::mutex> g(append_mu_);
    Status s = active_file_locked(&cur);
    if (!s.ok()) return s;
  }
  Status s = cur->w->append(h, pieces, off);
  if (!s.ok()) return s;
  *file = cur->w->file_id();
  *af = cur;
  return Status::OK();
}

Status StoreImpl::reserve_range(uint64_t bytes, uint64_t* off, std::shared_ptr<ActiveFile>* af) {
  std::lock_guard<std::mutex> g(append_mu_);
  Status s = active_file_locked(af);
  if (!s.ok()) return s;
  return (*af)->w->reserve(bytes, off);
}

void StoreImpl::submit_commit(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> g(commit_q_mu_);
    commit_q_.push_back(std::move(f));
  }
  commit_q_cv_.notify_one();
}

void StoreImpl::commit_loop() {
  for (;;) {
    std::function<void()> f;
    {
      std::unique_lock<std::mutex> l(commit_q_mu_);
      commit_q_cv_.wait(l, [&] { return commit_stop_ || !commit_q_.empty(); });
      if (commit_q_.empty()) return;
      f = std::move(commit_q_.front());
      commit_q_.pop_front();
    }
    f();
  }
}


// ---------------------------------------------------------------------------------------------
// dump, in the phases named in store_impl.h: check, mark present, reserve, write (I/O threads),
// commit (commit thread: sync, then index).
namespace {
uint64_t dump_record_bytes(const NamespaceDesc& d, const DumpItem& it) {
  return fmt::record_size(d.payload_bytes()) + (it.repr_len ? fmt::record_size(it.repr_len) : 0);
}
}  // namespace

Status StoreImpl::dump_check(const NamespaceId& ns, const DumpItem* items, size_t n, NamespaceDesc* d) {
  Status s = writer_only("dump");
  if (s.ok()) s = get_namespace(ns, d);
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
    else if (items[i].kv_pages)
      for (size_t p = 0; p < size_t(d->num_layers) * 2; ++p)
        if (!items[i].kv_pages[p]) {
          s = Status::InvalidArgument("dump: item " + std::to_string(i) + " page " + std::to_string(p) + " is null");
          break;
        }
  }
  if (s.ok() && n) {
    uint64_t bytes = fmt::kPage;  // a new data file's header, if the dump rolls
    for (size_t i = 0; i < n; ++i) bytes += dump_record_bytes(*d, items[i]);
    s = check_space(bytes, "dump of " + std::to_string(n) + " blocks");
  }
  return s;
}

void StoreImpl::dump_mark_present(DumpState* st) {
  // The in-memory fingerprint table first (the writer keeps it exact for its own commits); only a
  // fingerprint hit costs an index get. Duplicates within the task are written once.
  const size_t n = st->items.size();
  std::vector<size_t> hits;
  {
    std::shared_lock<std::shared_mutex> g(table_mu_);
    for (size_t i = 0; i < n; ++i)
      if (table_.contains(fmt::block_fingerprint(st->ns, st->items[i].hash))) hits.push_back(i);
  }
  fmt::BlockRecord cur;
  for (size_t i : hits)
    if (index_->get_block(st->ns, st->items[i].hash, &cur).ok()) st->skip[i] = true;
  if (n > 1) {
    std::set<BlockHash> seen;
    for (size_t i = 0; i < n; ++i)
      if (!st->skip[i] && !seen.insert(st->items[i].hash).second) st->skip[i] = true;
  }
}

Status StoreImpl::dump_reserve(DumpState* st) {
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

Status StoreImpl::dump_write_one(DumpState* st, size_t i) {
  // Encode the KV record (and the repr record right after it) into a page-aligned staging
  // buffer, copying and checksumming in one pass, then write both with one O_DIRECT write.
  thread_local fmt::AlignedBuffer stage;
  const DumpItem& it = st->items[i];
  const NamespaceDesc& d = st->desc;
  const uint64_t kv_rec = fmt::record_size(d.payload_bytes());
  const uint64_t total = dump_record_bytes(d, it);
  if (!stage.reserve(total)) return Status::Internal("out of memory (dump staging buffer of " + std::to_string(total) + " bytes)");
  std::vector<std::pair<const void*, size_t>> pieces;
  if (it.kv) pieces.emplace_back(it.kv, d.payload_bytes());
  else {
    const size_t page = d.payload_bytes() / (size_t(d.num_layers) * 2);
    for (size_t p = 0; p < size_t(d.num_layers) * 2; ++p) pieces.emplace_back(it.kv_pages[p], page);
  }
  fmt::RecordHeader h;
  h.type = fmt::RecordType::kBlockKV;
  h.ns = st->ns;
  h.key = it.hash;
  h.parent = it.parent;
  h.token_count = it.token_count;
  fmt::RecordHeader rh;
  fmt::encode_record(&h, pieces, stage.data());
  if (it.repr_len) {
    rh = h;
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
  if (it.repr_len) {
    r.flags |= 1;
    r.repr_file = r.kv_file;
    r.repr_offset = off + kv_rec;
    r.repr_length = rh.payload_length;
    r.repr_checksum = rh.payload_checksum;
  }
  return Status::OK();
}

Status StoreImpl::dump_sync(DumpState* st) {
  for (auto& f : st->files) {
    if (f->synced_epoch >= st->epoch) continue;  // an fdatasync begun after our writes covered it
    const uint64_t e = write_epoch_.load();
    Status s = f->w->sync();
    if (!s.ok()) return s;
    f->synced_epoch = std::max(f->synced_epoch, e);
  }
  return Status::OK();
}

Status StoreImpl::dump_index(DumpState* st, const std::vector<Status>& bs, std::vector<size_t>* added) {
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
      std::shared_lock<std::shared_mutex> tg(table_mu_);
      maybe = table_.contains(fmt::block_fingerprint(st->ns, h));
    }
    if (maybe && index_->get_block(st->ns, h, &cur).ok()) {
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
  Status s = index_->write(b, true);
  if (s.ok()) {
    std::unique_lock<std::shared_mutex> tg(table_mu_);
    for (size_t i : *added) table_.insert(fmt::block_fingerprint(st->ns, st->items[i].hash));
    applied_seq_ = index_->journal_seq();
  } else {
    // Nothing was indexed; undo the in-memory live bytes.
    for (auto& f : st->files) f->rec.live_bytes -= uint64_t(live[f->w->file_id()]);
  }
  return s;
}

void StoreImpl::dump_commit(const std::shared_ptr<TaskImpl>& t, DumpState* st) {
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
        metrics_.blocks_dumped.fetch_add(1, std::memory_order_relaxed);
        metrics_.bytes_dumped.fetch_add(st->recs[i].bytes(), std::memory_order_relaxed);
      }
    if (!whole.ok())
      for (size_t i = 0; i < n; ++i)
        if (bs[i].ok() && !st->skip[i]) bs[i] = whole;
  }
  for (size_t i = 0; i < n; ++i) {
    if (st->skip[i] && bs[i].ok()) metrics_.dump_skipped.fetch_add(1, std::memory_order_relaxed);
    metrics_.count_error(bs[i].code());
  }
  metrics_.dump_task.observe_ns(elapsed_ns(t->t0));
  t->finish();
}

std::shared_ptr<Task> StoreImpl::dump(const NamespaceId& ns, const DumpItem* items, size_t n) {
  NamespaceDesc d;
  Status s = dump_check(ns, items, n, &d);
  if (!s.ok()) {
    metrics_.count_error(s.code());
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
  st->recs.resize(n);
  st->skip.assign(n, false);
  st->slot_file.resize(n);
  st->slot_off.assign(n, 0);
  dump_mark_present(st.get());
  s = dump_reserve(st.get());
  if (!s.ok()) {
    metrics_.count_error(s.code());
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
    pool_->submit([this, t, st, i, job_finished] {
      t->statuses()[i] = dump_write_one(st.get(), i);
      job_finished();
    });
  }
  return t;
}

}  // namespace ucm::detail
