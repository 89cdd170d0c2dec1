// lib/admin/gc_walk.cc: `ucm gc` phases 2-6 in bounded memory (see gc_run.h): documents'
// chains, the scan of every block, the walk from each namespace root (orphans, unreferenced
// blocks, --max-age, subtree recency), --max-bytes eviction in recency order, and the commit.
// Everything per block goes through the scratch database; the index is read in key order.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <unordered_set>

#include "gc_run.h"
#include "ucm/core/data_file_reader.h"
#include "ucm/core/document.h"

namespace ucm::admin::gcrun {

namespace {

constexpr uint8_t kCorrupt = 1, kChanged = 2, kReferenced = 4;
constexpr size_t kReadAhead = 64;  // children read per walk frame at a time

std::string skey(char kind, const NamespaceId& ns, const BlockHash& h) {
  std::string k(1, kind);
  k.append(reinterpret_cast<const char*>(ns.data()), 16);
  k.append(reinterpret_cast<const char*>(h.data()), 16);
  return k;
}
std::string ckey(const NamespaceId& ns, const BlockHash& parent, const BlockHash& h) {
  std::string k = skey('C', ns, parent);
  k.append(reinterpret_cast<const char*>(h.data()), 16);
  return k;
}
BlockHash hash_at(std::string_view k, size_t off) {
  BlockHash h;
  std::memcpy(h.data(), k.data() + off, 16);
  return h;
}
NamespaceId ns_at(std::string_view k, size_t off) {
  NamespaceId n;
  std::memcpy(n.data(), k.data() + off, 16);
  return n;
}
std::string u64s(uint64_t a, uint64_t b, uint8_t c) {
  std::string v(17, '\0');
  fmt::put_le64(reinterpret_cast<uint8_t*>(v.data()), a);
  fmt::put_le64(reinterpret_cast<uint8_t*>(v.data()) + 8, b);
  v[16] = char(c);
  return v;
}
uint64_t le64_at(std::string_view v, size_t off) { return fmt::get_le64(reinterpret_cast<const uint8_t*>(v.data()) + off); }

// 'V' value: why, access, changed.
std::string vval(Why why, uint64_t access, bool changed) {
  std::string v(10, '\0');
  v[0] = char(why);
  fmt::put_le64(reinterpret_cast<uint8_t*>(v.data()) + 1, access);
  v[9] = changed ? 1 : 0;
  return v;
}

}  // namespace

Status GcRun::mark_referenced() {
  // 2. --unreferenced: every block on a registered document's chain (last block back through the
  // parents, in the filter's namespaces) -> 'R'. A chain's walk stops at a missing block or at
  // one it marked recently (a bounded set of fingerprints: documents share prefixes; a block
  // marked twice costs a little time, nothing else).
  if (!opts.unreferenced) return Status::OK();
  Index& idx = *idx_;
  uint64_t marked = 0;
  std::unordered_set<uint64_t> recent;
  const size_t recent_max = std::max<size_t>(1 << 16, opts.memory_budget / 64);
  for (auto& entry : ns_by_id) {
    const auto& id = entry.first;  // not a structured binding: Clang before 16 cannot capture one
    if (!in_filter(id)) continue;
    Status inner;
    Status st = idx.for_each_doc(id, [&](const std::string&, const std::string& js) {
      DocumentEntry d;
      if (!document_from_json(js, &d).ok()) return true;
      BlockHash h = d.last_block;
      for (int guard = 0; guard < (1 << 30); ++guard) {
        fmt::BlockRecord r;
        if (!idx.get_block(id, h, &r).ok()) break;
        if (!recent.insert(fmt::block_fingerprint(id, h)).second) break;
        if (recent.size() >= recent_max) recent.clear();
        inner = scratch->put(skey('R', id, h), "");
        if (!inner.ok()) return false;
        ++marked;
        h = r.parent;
      }
      prog.tick([&] { return "gc: " + std::to_string(marked) + " blocks on document chains"; });
      return true;
    });
    if (!st.ok()) return st;
    if (!inner.ok()) return inner;
  }
  return scratch->settle();
}

Status GcRun::scan_blocks() {
  // 3. Every block, in key order: its access (index value and 'A' records merged), referenced
  // ('R'), corrupt (data file missing or short, or a full read with --verify) -> 'C' under its
  // parent; corrupt ones also -> 'V' (they are removed whatever else happens).
  DataFileReader reader(path, false);
  fmt::AlignedBuffer rbuf;
  auto acur = scratch->cursor();
  acur->seek("A");
  auto rcur = scratch->cursor();
  rcur->seek("R");
  uint64_t seen = 0;
  const std::set<std::pair<NamespaceId, BlockHash>> remove(opts.remove.begin(), opts.remove.end());
  Status inner;
  Status st = idx_->for_each_block(nullptr, [&](const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& r) {
    ++seen;
    const std::string k = bkey(ns, h);
    uint64_t access = r.last_access_ms;
    bool changed = false;
    // 'A' entries are in (ns, h, access) order: skip those of blocks before this one (blocks that
    // no longer exist), take the newest of this one's.
    while (acur->valid() && acur->key().size() == 41 && acur->key()[0] == 'A' &&
           acur->key().substr(1, 32) <= std::string_view(k)) {
      if (acur->key().substr(1, 32) == std::string_view(k)) {
        const uint64_t a = fmt::get_be64(reinterpret_cast<const uint8_t*>(acur->key().data()) + 33);
        if (a > access) {
          access = a;
          changed = true;
        }
      }
      acur->next();
    }
    bool referenced = false;
    while (opts.unreferenced && rcur->valid() && rcur->key()[0] == 'R' &&
           rcur->key().substr(1) <= std::string_view(k)) {
      referenced |= rcur->key().substr(1) == std::string_view(k);
      rcur->next();
    }
    Status c = reader.check_size(r);
    if (c.ok() && !remove.empty() && remove.count(std::make_pair(ns, h)))
      c = Status::Corruption("removal asked for (ucm inspect --audit --fix: the KV is not its tokens')");
    if (c.ok() && opts.verify) {
      const uint8_t* p;
      uint64_t len;
      c = reader.read_block(ns, h, r, false, &rbuf, &p, &len);
      if (c.ok() && r.has_repr()) c = reader.read_block(ns, h, r, true, &rbuf, &p, &len);
    }
    const uint8_t flags = uint8_t((c.ok() ? 0 : kCorrupt) | (changed ? kChanged : 0) | (referenced ? kReferenced : 0));
    inner = scratch->put(ckey(ns, r.parent, h), u64s(access, r.bytes(), flags));
    if (inner.ok() && !c.ok()) {
      inner = scratch->put(skey('V', ns, h), vval(Why::kCorrupt, access, changed));
      ++rep->corrupt_removed;
    }
    if (in_filter(ns)) {
      ++rep->blocks_before;
      rep->bytes_before += r.bytes();
    }
    prog.tick([&] { return std::string(opts.verify ? "gc verify: " : "gc scan: ") + std::to_string(seen) + " blocks"; });
    return inner.ok();
  });
  if (!st.ok()) return st;
  if (!inner.ok()) return inner;
  if (!acur->status().ok()) return acur->status();
  return scratch->settle(true);  // one sorted run: the walk seeks in it
}

Status GcRun::walk_tree(const NamespaceId& id, const BlockHash& root, uint64_t* visited_total) {
  // 4. From each namespace's chain root, depth first, through the blocks that are not corrupt.
  // Pre-order: --unreferenced, then --max-age (a block older than the cutoff goes with its
  // descendants; a descendant as old itself counts as evicted, a newer one as a descendant).
  // Post-order: the subtree recency (newest access among the kept blocks of the subtree) and
  // 'V' (every block reached) / 'L' (the kept blocks of the filter, when --max-bytes).
  struct Child {
    BlockHash h;
    uint64_t access, bytes;
    uint8_t flags;
  };
  struct Frame {
    BlockHash h;
    uint64_t access = 0, bytes = 0, recency = 0;
    int64_t depth = 0;
    Why why = Why::kNone;
    bool changed = false, aged = false;  // aged: this block or an ancestor went by --max-age
    std::vector<Child> ahead;
    size_t next = 0;
    bool more = true, started = false;
    BlockHash last{};
  };
  const uint64_t cutoff = opts.max_age_ms ? (now > *opts.max_age_ms ? now - *opts.max_age_ms : 0) : 0;
  auto cur = scratch->cursor();
  uint64_t& visited = *visited_total;
  {
    const bool filt = in_filter(id);
    std::vector<Frame> stack;
    stack.push_back(Frame{});
    stack.back().h = root;
    stack.back().depth = 0;
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (f.next == f.ahead.size() && f.more) {
        // Read the next children of f: 'C' ns f.h child, after the last one read.
        f.ahead.clear();
        f.next = 0;
        const std::string prefix = skey('C', id, f.h);
        std::string from = prefix;
        if (f.started) from.append(reinterpret_cast<const char*>(f.last.data()), 16);
        cur->seek(from);
        if (f.started && cur->valid() && cur->key() == std::string_view(from)) cur->next();
        while (cur->valid() && f.ahead.size() < kReadAhead && cur->key().size() == 49 &&
               cur->key().substr(0, 33) == std::string_view(prefix)) {
          const auto v = cur->value();
          f.ahead.push_back({hash_at(cur->key(), 33), le64_at(v, 0), le64_at(v, 8), uint8_t(v[16])});
          cur->next();
        }
        if (!cur->status().ok()) return cur->status();
        f.more = f.ahead.size() == kReadAhead;
        f.started = true;
        if (!f.ahead.empty()) f.last = f.ahead.back().h;
      }
      if (f.next < f.ahead.size()) {
        const Child c = f.ahead[f.next++];
        if (c.flags & kCorrupt) continue;  // removed already; its subtree is not reached
        Frame k;
        k.h = c.h;
        k.access = k.recency = c.access;
        k.bytes = c.bytes;
        k.depth = f.depth + 1;
        k.changed = c.flags & kChanged;
        const bool parent_gone = f.depth > 0 && f.why != Why::kNone;
        if (parent_gone && f.why == Why::kUnreferenced) {
          k.why = Why::kUnreferenced;  // (it is unreferenced too: a referenced block's parent is)
        } else if (filt && opts.unreferenced && !(c.flags & kReferenced)) {
          k.why = Why::kUnreferenced;
        } else if (filt && opts.max_age_ms && c.access < cutoff) {
          k.why = Why::kEvicted;
          k.aged = true;
        } else if (f.aged) {
          k.why = Why::kDescendant;
          k.aged = true;
        }
        if (k.why == Why::kUnreferenced) ++rep->unreferenced_removed;
        if (k.why == Why::kDescendant) ++rep->evicted_descendants;
        if (k.why != Why::kNone) {
          ++rep->evicted_blocks;
          rep->evicted_bytes += k.bytes;
          if (opts.dry_run && rep->would_evict.size() < 1000)
            rep->would_evict.push_back(to_hex(id) + ":" + to_hex(k.h));
        }
        stack.push_back(std::move(k));
        continue;
      }
      // Post-order.
      Frame done = std::move(stack.back());
      stack.pop_back();
      if (stack.empty()) break;  // the root
      Status st = scratch->put(skey('V', id, done.h), vval(done.why, done.access, done.changed));
      if (st.ok() && done.why == Why::kNone && filt) {
        live_bytes_in_filter += done.bytes;
        if (opts.max_bytes) {
          std::string k(1, 'L');
          uint8_t be[12];
          fmt::put_be64(be, done.recency);
          fmt::put_be32(be + 8, uint32_t(0xffffffffu - uint32_t(std::min<int64_t>(done.depth, 0xffffffff))));
          k.append(reinterpret_cast<const char*>(be), 12);
          k += bkey(id, done.h);
          st = scratch->put(k, u64s(done.bytes, done.access, done.changed ? 1 : 0));
        }
      }
      if (!st.ok()) return st;
      if (done.why == Why::kNone) stack.back().recency = std::max(stack.back().recency, done.recency);
      ++visited;
      prog.tick([&] { return "gc walk: " + std::to_string(visited) + " blocks"; });
    }
  }
  return Status::OK();
}

Status GcRun::walk() {
  uint64_t visited = 0;
  for (auto& [id, n] : ns_by_id) {
    Status st = walk_tree(id, chain_root(n->desc, id), &visited);
    if (!st.ok()) return st;
  }
  if (parent_elsewhere) {
    // Sharded stores (store_v1.md §11.3): a chain may start in another shard. A block whose
    // parent this shard does not hold but another shard does is no orphan: walk from that parent
    // as from a root. 'C' keys are (ns, parent, child), so each parent comes once, in a run.
    Status st = scratch->settle();
    if (!st.ok()) return st;
    auto c = scratch->cursor();
    std::string last;
    std::vector<std::pair<NamespaceId, BlockHash>> roots;
    for (c->seek("C"); c->valid() && c->key()[0] == 'C'; c->next()) {
      const auto k = c->key();
      if (k.size() != 49 || k.substr(0, 33) == std::string_view(last)) continue;
      last.assign(k.substr(0, 33));
      const NamespaceId ns = ns_at(k, 1);
      const BlockHash parent = hash_at(k, 17);
      auto it = ns_by_id.find(ns);
      if (it == ns_by_id.end() || parent == chain_root(it->second->desc, ns)) continue;
      fmt::BlockRecord r;
      if (idx_->get_block(ns, parent, &r).ok()) continue;  // held here: reached (or an orphan) here
      if (parent_elsewhere(ns, parent)) roots.emplace_back(ns, parent);
    }
    if (!c->status().ok()) return c->status();
    rep->foreign_roots += roots.size();
    for (const auto& [ns, parent] : roots) {
      st = walk_tree(ns, parent, &visited);
      if (!st.ok()) return st;
    }
  }
  return scratch->settle();
}

Status GcRun::evict_by_size() {
  // 5. --max-bytes: the kept blocks of the filter, oldest subtree recency first, deepest first
  // (so a block's descendants, never more recent and always deeper, go before it, and a parent
  // never goes without its children), until the bytes fit.
  if (!opts.max_bytes) return Status::OK();
  uint64_t cur = live_bytes_in_filter;
  auto c = scratch->cursor();
  for (c->seek("L"); cur > *opts.max_bytes && c->valid() && c->key()[0] == 'L'; c->next()) {
    const uint64_t bytes = le64_at(c->value(), 0);
    Status st = mark_evicted(c->key(), c->value());
    if (!st.ok()) return st;
    cur = cur >= bytes ? cur - bytes : 0;
  }
  if (!c->status().ok()) return c->status();
  return scratch->settle();
}

Status GcRun::mark_evicted(std::string_view k, std::string_view v) {
  const NamespaceId ns = ns_at(k, 13);
  const BlockHash h = hash_at(k, 29);
  const uint64_t bytes = le64_at(v, 0);
  Status st = scratch->put(skey('V', ns, h), vval(Why::kEvicted, le64_at(v, 8), v[16] != 0));
  if (!st.ok()) return st;
  ++rep->evicted_blocks;
  rep->evicted_bytes += bytes;
  if (opts.dry_run && rep->would_evict.size() < 1000) rep->would_evict.push_back(to_hex(ns) + ":" + to_hex(h));
  return Status::OK();
}

Status GcRun::for_each_decision(const std::function<Status(const NamespaceId&, const BlockHash&,
                                                           const fmt::BlockRecord&, Why, uint64_t, bool)>& fn) {
  auto v = scratch->cursor();
  v->seek("V");
  Status inner;
  Status st = idx_->for_each_block(nullptr, [&](const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& r) {
    const std::string k = bkey(ns, h);
    while (v->valid() && v->key()[0] == 'V' && v->key().substr(1) < std::string_view(k)) v->next();
    Why why = Why::kOrphan;  // not reached from its namespace's root
    uint64_t access = r.last_access_ms;
    bool changed = false;
    if (v->valid() && v->key()[0] == 'V' && v->key().substr(1) == std::string_view(k)) {
      why = Why(uint8_t(v->value()[0]));
      access = le64_at(v->value(), 1);
      changed = v->value()[9] != 0;
    }
    inner = fn(ns, h, r, why, access, changed);
    return inner.ok();
  });
  if (!st.ok()) return st;
  if (!inner.ok()) return inner;
  return v->status();
}

bool GcRun::present_after(const NamespaceId& ns, const BlockHash& h, BlockHash* parent, bool dry) {
  fmt::BlockRecord r;
  if (!idx_->get_block(ns, h, &r).ok()) return false;
  if (dry) {  // nothing is committed: this run's decisions are in 'V'
    std::string v;
    if (!scratch->get(skey('V', ns, h), &v).ok() || Why(uint8_t(v[0])) != Why::kNone) return false;
  }
  *parent = r.parent;
  return true;
}

Status GcRun::finish_dry_run() {
  uint64_t removed_blocks = 0, removed_bytes = 0;
  std::vector<std::string> listed;  // corrupt and orphan blocks, after the evictions listed already
  Status st = for_each_decision([&](const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& r, Why why,
                                    uint64_t, bool) {
    if (why == Why::kOrphan) ++rep->orphans_removed;
    if ((why == Why::kCorrupt || why == Why::kOrphan) && listed.size() < 1000) listed.push_back(to_hex(ns) + ":" + to_hex(h));
    if (why != Why::kNone && in_filter(ns)) {
      ++removed_blocks;
      removed_bytes += r.bytes();
    }
    return Status::OK();
  });
  if (!st.ok()) return st;
  for (auto& x : listed)
    if (rep->would_evict.size() < 1000) rep->would_evict.push_back(std::move(x));
  rep->blocks_after = rep->blocks_before - removed_blocks;
  rep->bytes_after = rep->bytes_before - removed_bytes;
  close_logs();
  st = drop_incomplete_documents(
      *idx_, nss, [&](const NamespaceId& ns, const BlockHash& h, BlockHash* p) { return present_after(ns, h, p, true); },
      true, rep);
  if (!st.ok()) return st;
  return trim_journal(path, *idx_, opts.journal_keep, true, &rep->journal_trimmed);
}

Status GcRun::commit_removals() {
  Index& idx = *idx_;
  // 6. Commit access times and removals, in key order.
  Batcher bt(idx);
  uint64_t done = 0;
  Status st = for_each_decision([&](const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& r, Why why,
                                    uint64_t access, bool changed) {
    ++done;
    prog.tick([&] { return "gc commit: " + std::to_string(done) + " blocks"; });
    if (why != Why::kNone) {
      if (why == Why::kOrphan) ++rep->orphans_removed;
      bt.b().delete_block(ns, h);
      if (ns_by_id.count(ns)) bt.b().add_ns_counters(ns, -1, -static_cast<int64_t>(r.bytes()));
      bt.b().add_file_bytes(r.kv_file, 0, -static_cast<int64_t>(fmt::record_size(r.kv_length)));
      if (r.has_repr()) bt.b().add_file_bytes(r.repr_file, 0, -static_cast<int64_t>(fmt::record_size(r.repr_length)));
      return bt.op();
    }
    referenced_files.insert(r.kv_file);
    if (r.has_repr()) referenced_files.insert(r.repr_file);
    if (!changed) return Status::OK();
    fmt::BlockRecord u = r;
    u.last_access_ms = access;
    bt.b().update_block(ns, h, u);
    return bt.op();
  });
  if (st.ok()) st = bt.flush();
  if (!st.ok()) {
    close_logs();
    return st;
  }
  // Logs of dead owners are merged and durable: delete them.
  for (auto& lg : logs) {
    if (!lg.owner_gone) continue;
    if (::unlink(lg.path.c_str()) == 0) ++rep->access_logs_deleted;
  }
  close_logs();
  // Best effort: the logs' contents are merged and durable in the index already; a lost unlink
  // only leaves a log the next gc merges (as a no-op) and deletes again.
  (void)fmt::fsync_dir(fmt::access_dir(path));
  // The registry follows the removals at once, so that no entry outlives its blocks.
  return drop_incomplete_documents(
      idx, nss, [&](const NamespaceId& ns, const BlockHash& h, BlockHash* p) { return present_after(ns, h, p, false); },
      false, rep);
}

}  // namespace ucm::admin::gcrun
