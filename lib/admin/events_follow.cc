// lib/admin/events_follow.cc: StoreFollower (events_follow.h): snapshot, journal following and
// rescans of every shard of a store.
#include "events_follow.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "admin_internal.h"
#include "ucm/core/data_file_reader.h"
#include "ucm/format/shards.h"

namespace ucm::admin {
namespace {

struct Key {
  NamespaceId ns{};
  BlockHash h{};
  bool operator==(const Key& o) const { return ns == o.ns && h == o.h; }
};
struct KeyHash {
  size_t operator()(const Key& k) const {  // block hashes are MD5 outputs: any 8 bytes spread well
    uint64_t a, b;
    std::memcpy(&a, k.h.data(), 8);
    std::memcpy(&b, k.ns.data(), 8);
    return static_cast<size_t>(a ^ (b * 0x9E3779B97F4A7C15ull));
  }
};

struct NsMeta {
  bool followed = false;
  uint32_t block_size = 0;
  BlockHash root{};
};

struct Shard {
  std::string name;  // "" for a single store
  std::string path;
  std::unique_ptr<ReaderView> view;
  std::unique_ptr<DataFileReader> reader;
  std::string identity;
  uint64_t seq = 0;                         // last journal sequence applied
  std::unordered_set<Key, KeyHash> held;    // published blocks this shard holds
  std::map<NamespaceId, NsMeta> ns;         // namespaces this shard's index registers
};

class Follower final : public StoreFollower {
 public:
  Follower(std::string store, std::string ns, bool sharded)
      : store_(std::move(store)), ns_filter_(std::move(ns)), sharded_(sharded) {}

  Status init() {
    Status st = sync_shard_list(nullptr, 0);
    if (!st.ok()) return st;
    if (!sharded_ && shards_.empty()) return Status::IOError("store " + store_ + ": cannot open its index");
    if (!ns_filter_.empty()) {
      bool found = false;
      std::string known;
      for (auto& s : shards_) {
        std::vector<NsInfo> all;
        if (!load_namespaces(s->view->index(), &all).ok()) continue;
        const NsInfo* p = nullptr;
        if (resolve_namespace(all, ns_filter_, &p).ok()) found = true;
        for (const auto& n : all) known += (known.empty() ? "" : ", ") + n.desc.display_name();
      }
      if (!found)
        return Status::InvalidArgument("store " + store_ + " has no namespace '" + ns_filter_ + "' (it has: " +
                                       (known.empty() ? std::string("none") : known) + ")");
    }
    return Status::OK();
  }

  Status snapshot(std::vector<KvEvent>* out, uint32_t max_run) override {
    for (auto& s : shards_) {
      Status st = rescan(*s, out, max_run);
      if (!st.ok()) return st;
    }
    snapshot_done_ = true;
    return Status::OK();
  }

  Status poll(std::vector<KvEvent>* out, uint32_t max_run) override {
    Status st = sync_shard_list(out, max_run);
    if (!st.ok()) return st;
    for (auto& s : shards_) {
      st = follow(*s, out, max_run);
      if (!st.ok()) return Status(st.code(), where(*s) + st.message());
    }
    return Status::OK();
  }

  Status resend(std::vector<KvEvent>* out, uint32_t max_run) override {
    std::unordered_set<Key, KeyHash> sent;  // a block held by several shards goes once
    for (auto& s : shards_) {
      std::unordered_map<Key, BlockHash, KeyHash> held;  // held block -> parent
      Status st = s->view->index().for_each_block(nullptr, [&](const NamespaceId& ns, const BlockHash& h,
                                                               const fmt::BlockRecord& r) {
        const Key k{ns, h};
        if (s->held.count(k) && !sent.count(k)) held.emplace(k, r.parent);
        return true;
      });
      if (!st.ok()) return Status(st.code(), where(*s) + st.message());
      chain_order(held, [&](const Key& k) {
        sent.insert(k);
        publish_stored(*s, k, *meta(*s, k.ns), out, max_run, /*resend=*/true);
      });
    }
    return Status::OK();
  }

  void set_sink(std::function<void(std::vector<KvEvent>*)> sink, size_t every) override {
    sink_ = std::move(sink);
    sink_every_ = std::max<size_t>(1, every);
  }

  const FollowStats& stats() const override { return stats_; }
  uint64_t published() const override { return count_.size(); }

 private:
  std::string where(const Shard& s) const { return s.name.empty() ? std::string() : "shard " + s.name + ": "; }

  // Opens shards that appeared (a new writer) and forgets those that vanished. A shard whose
  // index cannot be opened yet (being created) is tried again on the next poll.
  Status sync_shard_list(std::vector<KvEvent>* out, uint32_t max_run) {
    std::vector<std::pair<std::string, std::string>> want;  // name, path
    if (!sharded_) {
      want.emplace_back("", store_);
    } else {
      std::vector<std::string> names;
      Status st = fmt::list_shards(store_, &names);
      if (!st.ok()) return st;
      for (auto& n : names) want.emplace_back(n, fmt::shard_path(store_, n));
    }
    for (auto it = shards_.begin(); it != shards_.end();) {
      bool keep = false;
      for (auto& w : want) keep = keep || w.first == (*it)->name;
      if (keep) { ++it; continue; }
      for (const auto& k : (*it)->held) drop(k, out, max_run);
      it = shards_.erase(it);
    }
    for (auto& [name, path] : want) {
      bool have = false;
      for (auto& s : shards_) have = have || s->name == name;
      if (have) continue;
      auto s = std::make_unique<Shard>();
      s->name = name;
      s->path = path;
      Status st = ReaderView::Open(path, &s->view);
      if (!st.ok()) {
        if (!sharded_) return st;
        continue;  // a shard being created: next poll
      }
      s->reader = std::make_unique<DataFileReader>(path, false);
      shards_.push_back(std::move(s));
      stats_.shards = shards_.size();
      if (snapshot_done_ && out) {  // a writer's new shard: everything in it is new
        st = rescan(*shards_.back(), out, max_run);
        if (!st.ok()) return st;
      }
    }
    return Status::OK();
  }

  const NsMeta* meta(Shard& s, const NamespaceId& ns) {
    auto it = s.ns.find(ns);
    if (it != s.ns.end()) return &it->second;
    std::vector<NsInfo> all;
    if (!load_namespaces(s.view->index(), &all).ok()) return nullptr;
    const NsInfo* chosen = nullptr;
    if (!ns_filter_.empty()) (void)resolve_namespace(all, ns_filter_, &chosen);
    for (const auto& n : all) {
      NsMeta m;
      m.followed = ns_filter_.empty() || (chosen && chosen->id == n.id);
      m.block_size = n.desc.block_size;
      m.root = chain_root(n.desc, n.id);
      s.ns[n.id] = m;
    }
    it = s.ns.find(ns);
    return it == s.ns.end() ? nullptr : &it->second;
  }

  // The block's ids and parent from its record header; false (counted) when gone or unreadable.
  bool read_tokens(Shard& s, const Key& k, std::vector<uint32_t>* tokens, BlockHash* parent) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      fmt::BlockRecord r;
      if (!s.view->index().get_block(k.ns, k.h, &r).ok()) break;
      *parent = r.parent;
      Status st = s.reader->read_block_tokens(k.ns, k.h, r, tokens);
      if (st.ok()) return !tokens->empty();
      if (st.code() != Code::kNotFound) break;
      s.reader->drop(r.kv_file);  // compaction moved it: catch up, read the new location
      (void)s.view->index().try_catch_up();
    }
    ++stats_.unreadable;
    return false;
  }

  // Publishes block k (held by shard s, count already 1) as stored; on failure undoes the hold.
  // `resend`: k was published before (resend()): counted apart, nothing undone on failure.
  void publish_stored(Shard& s, const Key& k, const NsMeta& m, std::vector<KvEvent>* out, uint32_t max_run,
                      bool resend = false) {
    std::vector<uint32_t> ids;
    BlockHash parent{};
    if (!read_tokens(s, k, &ids, &parent) || ids.size() != m.block_size) {
      if (resend) return;
      s.held.erase(k);
      count_.erase(k);
      return;
    }
    ++(resend ? stats_.blocks_resent : stats_.blocks_stored);
    if (!out->empty()) {
      KvEvent& b = out->back();
      if (b.kind == KvEvent::Kind::kStored && b.ns == k.ns && b.hashes.back() == parent && b.hashes.size() < max_run) {
        b.hashes.push_back(k.h);
        b.tokens.insert(b.tokens.end(), ids.begin(), ids.end());
        return;
      }
    }
    KvEvent e;
    e.kind = KvEvent::Kind::kStored;
    e.ns = k.ns;
    e.hashes.push_back(k.h);
    e.has_parent = parent != m.root;
    e.parent = parent;
    e.tokens = std::move(ids);
    e.block_size = m.block_size;
    out->push_back(std::move(e));
    if (sink_ && out->size() >= sink_every_) sink_(out);
  }

  // One holder fewer for k; published as removed when it was the last.
  void drop(const Key& k, std::vector<KvEvent>* out, uint32_t max_run) {
    auto it = count_.find(k);
    if (it == count_.end() || --it->second > 0) return;
    count_.erase(it);
    ++stats_.blocks_removed;
    if (!out) return;
    if (!out->empty()) {
      KvEvent& b = out->back();
      if (b.kind == KvEvent::Kind::kRemoved && b.ns == k.ns && b.hashes.size() < max_run) {
        b.hashes.push_back(k.h);
        return;
      }
    }
    KvEvent e;
    e.kind = KvEvent::Kind::kRemoved;
    e.ns = k.ns;
    e.hashes.push_back(k.h);
    out->push_back(std::move(e));
    if (sink_ && out->size() >= sink_every_) sink_(out);
  }

  // Calls visit(k) for every block of `blocks` (block -> parent), parents before children: depth
  // first from the blocks whose parent is not among them.
  template <class F>
  static void chain_order(const std::unordered_map<Key, BlockHash, KeyHash>& blocks, const F& visit) {
    // (parent, child) edges sorted by parent: 48 bytes a block, no allocation per parent (a map
    // of child vectors took about 120 bytes a block at a million blocks).
    struct Edge {
      Key parent;
      BlockHash child;
    };
    std::vector<Edge> edges;
    std::vector<Key> roots;
    for (const auto& [k, parent] : blocks) {
      const Key pk{k.ns, parent};
      if (blocks.count(pk)) edges.push_back({pk, k.h});
      else roots.push_back(k);
    }
    auto before = [](const Key& a, const Key& b) {
      const int c = std::memcmp(a.ns.data(), b.ns.data(), a.ns.size());
      return c ? c < 0 : std::memcmp(a.h.data(), b.h.data(), a.h.size()) < 0;
    };
    std::sort(edges.begin(), edges.end(), [&](const Edge& x, const Edge& y) { return before(x.parent, y.parent); });
    std::vector<Key> stack;
    for (auto r = roots.rbegin(); r != roots.rend(); ++r) {
      stack.push_back(*r);
      while (!stack.empty()) {
        const Key k = stack.back();
        stack.pop_back();
        visit(k);
        auto lo = std::lower_bound(edges.begin(), edges.end(), k,
                                   [&](const Edge& e, const Key& key) { return before(e.parent, key); });
        auto hi = lo;
        while (hi != edges.end() && hi->parent == k) ++hi;
        for (auto e = hi; e != lo;) stack.push_back(Key{k.ns, (--e)->child});
      }
    }
  }

  // Reads the shard's blocks at one catch-up point and publishes the difference with what it
  // held: removals, then the new blocks in chain order (parents first).
  Status rescan(Shard& s, std::vector<KvEvent>* out, uint32_t max_run) {
    Index& idx = s.view->index();
    (void)idx.try_catch_up();
    s.ns.clear();
    (void)idx.identity(&s.identity);
    s.seq = idx.journal_seq();
    std::unordered_map<Key, BlockHash, KeyHash> cur;  // block -> parent
    Status st = idx.for_each_block(nullptr, [&](const NamespaceId& ns, const BlockHash& h, const fmt::BlockRecord& r) {
      const NsMeta* m = meta(s, ns);
      if (!m || !m->followed) return true;
      if (!r.has_tokens()) {
        ++stats_.without_tokens;
        return true;
      }
      cur.emplace(Key{ns, h}, r.parent);
      return true;
    });
    if (!st.ok()) return Status(st.code(), where(s) + st.message());
    if (snapshot_done_) ++stats_.rescans;
    std::vector<Key> gone;
    for (const auto& k : s.held)
      if (!cur.count(k)) gone.push_back(k);
    for (const auto& k : gone) {
      s.held.erase(k);
      drop(k, out, max_run);
    }
    // New blocks, parents before children.
    for (auto it = cur.begin(); it != cur.end();) it = s.held.count(it->first) ? cur.erase(it) : std::next(it);
    chain_order(cur, [&](const Key& k) {
      s.held.insert(k);
      if (++count_[k] == 1) publish_stored(s, k, *meta(s, k.ns), out, max_run);
    });
    return Status::OK();
  }

  // Applies the shard's journal after s.seq; a gap (trimmed past us) or a new index identity
  // (rebuilt) makes it a rescan.
  Status follow(Shard& s, std::vector<KvEvent>* out, uint32_t max_run) {
    Index& idx = s.view->index();
    Status st = idx.try_catch_up();
    if (!st.ok()) return st;
    std::string identity;
    (void)idx.identity(&identity);
    if (identity != s.identity) return rescan(s, out, max_run);
    const uint64_t last = idx.journal_seq();
    if (last == s.seq) return Status::OK();
    std::vector<std::pair<uint64_t, fmt::JournalEntry>> entries;
    uint64_t expect = s.seq + 1;
    bool gap = false;
    st = idx.for_each_journal(s.seq, [&](uint64_t seq, const fmt::JournalEntry& e) {
      if (seq != expect) {
        gap = true;
        return false;
      }
      entries.emplace_back(seq, e);
      ++expect;
      return true;
    });
    if (!st.ok()) return st;
    if (gap || expect <= last) return rescan(s, out, max_run);
    for (const auto& [seq, e] : entries) {
      const Key k{e.ns, e.hash};
      const NsMeta* m = meta(s, e.ns);
      if (!m || !m->followed) continue;
      if (e.op == fmt::JournalOp::kRemove) {
        if (s.held.erase(k)) drop(k, out, max_run);
        continue;
      }
      if (s.held.count(k)) continue;
      fmt::BlockRecord r;
      if (!idx.get_block(e.ns, e.hash, &r).ok()) continue;  // removed later in the journal
      if (!r.has_tokens()) {
        ++stats_.without_tokens;
        continue;
      }
      s.held.insert(k);
      if (++count_[k] == 1) publish_stored(s, k, *m, out, max_run);
    }
    s.seq = expect - 1;
    return Status::OK();
  }

  std::string store_;
  std::string ns_filter_;
  bool sharded_;
  bool snapshot_done_ = false;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::unordered_map<Key, uint32_t, KeyHash> count_;
  std::function<void(std::vector<KvEvent>*)> sink_;  // set_sink()
  size_t sink_every_ = 0;  // published block -> shards holding it
  FollowStats stats_;
};

}  // namespace

Status StoreFollower::Open(const std::string& store, const std::string& ns, std::unique_ptr<StoreFollower>* out) {
  fmt::RootKind kind;
  Status st = fmt::root_kind(store, &kind);
  if (!st.ok()) return st;
  auto f = std::make_unique<Follower>(store, ns, kind == fmt::RootKind::kSharded);
  st = f->init();
  if (!st.ok()) return st;
  *out = std::move(f);
  return Status::OK();
}

}  // namespace ucm::admin
