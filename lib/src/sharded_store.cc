// lib/src/sharded_store.cc: ShardedStore (store_v1.md §11): writes to the own shard, reads the
// union of the shards.
#include "ucm/core/sharded_store.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>
#include <sstream>

#include "ucm/core/log.h"
#include "ucm/clock.h"
#include "ucm/core/task_impl.h"
#include "ucm/format/format.h"

namespace ucm::detail {

namespace {
bool away(const Shard& s) { return s.away_until_ms.load(std::memory_order_relaxed) > steady_ms(); }
}  // namespace

ShardedStore::~ShardedStore() {
  {
    std::lock_guard<std::mutex> g(bg_mu_);
    stop_ = true;
  }
  bg_cv_.notify_all();
  if (bg_.joinable()) bg_.join();
  std::lock_guard<std::mutex> g(mu_);
  list_.reset();  // shards close here (the writer's makes its index durable)
}

Status ShardedStore::init() {
  auto l = std::make_shared<ShardList>();
  if (!read_only()) {
    own_name_ = opts_.shard;
    if (own_name_.empty())
      if (const char* e = std::getenv("UCM_SHARD"); e && *e) own_name_ = e;
    if (own_name_.empty()) own_name_ = fmt::sanitize_shard_name(fmt::host_name());
    Status s = fmt::check_shard_name(own_name_);
    if (!s.ok()) return s;
    OpenOptions o = opts_;
    o.create_if_missing = true;  // the writer's shard is created on first use (§11.1)
    auto sh = std::make_shared<Shard>();
    sh->name = own_name_;
    sh->own = true;
    s = open_single_store(fmt::shard_path(root_, own_name_), o, &sh->store);
    if (!s.ok()) {
      if (s.code() == Code::kBusy)
        return Status::Busy(s.message() + " (shard '" + own_name_ + "' of " + root_ +
                            "; give this writer another shard name: UCM_SHARD, or the open's shard parameter)");
      return s;
    }
    l->push_back(std::move(sh));
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    list_ = std::move(l);
  }
  Status s = rescan();
  if (!s.ok()) return s;
  bg_ = std::thread([this] { background(); });
  return Status::OK();
}

std::shared_ptr<const ShardList> ShardedStore::snapshot() const {
  std::lock_guard<std::mutex> g(mu_);
  return list_;
}

Status ShardedStore::rescan() {
  std::lock_guard<std::mutex> rg(rescan_mu_);
  std::vector<std::string> names;
  Status s = fmt::list_shards(root_, &names);
  if (!s.ok()) return s;
  auto cur = snapshot();
  std::set<std::string> have;
  for (const auto& sh : *cur) have.insert(sh->name);
  std::vector<std::shared_ptr<Shard>> added;
  for (const auto& n : names) {
    if (have.count(n)) continue;
    OpenOptions o = opts_;
    o.mode = OpenOptions::Mode::kReadOnly;
    o.create_if_missing = false;
    auto sh = std::make_shared<Shard>();
    sh->name = n;
    Status os = open_single_store(fmt::shard_path(root_, n), o, &sh->store);
    if (!os.ok()) {
      auto& last = open_errors_[n];
      if (last != os.message()) log().warn("store {}: shard {} not opened yet ({}); trying again at the next refresh",
                                           root_, n, os.message());
      last = os.message();
      continue;
    }
    open_errors_.erase(n);
    added.push_back(std::move(sh));
  }
  // Shards no longer listed were retired by gc (§11.3): dropped (the handle closes when the last
  // task using it lets go).
  const std::set<std::string> listed(names.begin(), names.end());
  bool dropped = false;
  for (const auto& sh : *cur) dropped |= !sh->own && !listed.count(sh->name);
  if (added.empty() && !dropped) return Status::OK();
  auto next = std::make_shared<ShardList>();
  for (const auto& sh : *cur)
    if (sh->own || listed.count(sh->name)) next->push_back(sh);
  for (auto& a : added) next->push_back(std::move(a));
  std::stable_sort(next->begin(), next->end(), [](const auto& a, const auto& b) {
    if (a->own != b->own) return a->own;
    return a->name < b->name;
  });
  std::lock_guard<std::mutex> g(mu_);
  list_ = std::move(next);
  return Status::OK();
}

void ShardedStore::background() {
  if (opts_.refresh_interval_ms == 0) return;
  std::unique_lock<std::mutex> l(bg_mu_);
  while (!stop_) {
    bg_cv_.wait_for(l, std::chrono::milliseconds(opts_.refresh_interval_ms));
    if (stop_) break;
    l.unlock();
    Status s = rescan();  // each shard catches up by its own refresh thread
    if (!s.ok()) log().debug("store {}: {}", root_, s.message());
    for (const auto& sh : *snapshot())
      if (away(*sh) && sh->store->refresh().ok()) sh->away_until_ms.store(0);
    l.lock();
  }
}

Status ShardedStore::refresh() {
  Status first = rescan();
  for (const auto& sh : *snapshot()) {
    Status s = sh->store->refresh();
    if (s.ok()) sh->away_until_ms.store(0);
    else if (first.ok()) first = s;
  }
  return first;
}

Status ShardedStore::writer_only(const char* what) const {
  if (!read_only()) return Status::OK();
  return Status::InvalidArgument(std::string(what) + " needs a read-write handle; " + root_ + " was opened read-only");
}

// --------------------------------------------------------------------------- namespaces
Status ShardedStore::register_namespace(const NamespaceDesc& desc, NamespaceId* id) {
  Status s = writer_only("register_namespace");
  if (!s.ok()) return s;
  return snapshot()->front()->store->register_namespace(desc, id);
}

Status ShardedStore::adopt_namespace(const NamespaceId& ns) {
  auto l = snapshot();
  NamespaceDesc desc;
  if (l->front()->store->get_namespace(ns, &desc).ok()) return Status::OK();
  if (!get_namespace(ns, &desc).ok())
    return Status::NotFound("namespace " + to_hex(ns) + " is not registered in any shard of " + root_);
  NamespaceId got{};
  Status s = l->front()->store->register_namespace(desc, &got);
  if (s.ok() && got != ns)
    return Status::Corruption("namespace " + to_hex(ns) + " registers as " + to_hex(got) + " in shard " + own_name_ +
                              ": its descriptor does not give its id");
  return s;
}

Status ShardedStore::find_namespace(const std::string& name_or_id, NamespaceDesc* desc, NamespaceId* id) {
  auto l = snapshot();
  Status last = Status::NotFound("namespace '" + name_or_id + "' is not registered in any shard of " + root_);
  for (const auto& sh : *l) {
    Status s = sh->store->find_namespace(name_or_id, desc, id);
    if (s.ok() || s.code() == Code::kInvalidArgument) return s;
  }
  return last;
}

Status ShardedStore::get_namespace(const NamespaceId& ns, NamespaceDesc* desc) {
  auto l = snapshot();
  for (const auto& sh : *l)
    if (sh->store->get_namespace(ns, desc).ok()) return Status::OK();
  return Status::NotFound("namespace " + to_hex(ns) + " is not registered in any shard of " + root_);
}

std::vector<NamespaceDesc> ShardedStore::namespaces() {
  std::vector<NamespaceDesc> out;
  std::set<std::string> seen;
  for (const auto& sh : *snapshot())
    for (auto& d : sh->store->namespaces())
      if (seen.insert(to_hex(d.id())).second) out.push_back(std::move(d));
  return out;
}

Status ShardedStore::put_attachment(const NamespaceId& ns, const std::string& name, const void* data, size_t len) {
  Status s = writer_only("put_attachment");
  if (s.ok()) s = adopt_namespace(ns);
  if (!s.ok()) return s;
  return snapshot()->front()->store->put_attachment(ns, name, data, len);
}

Status ShardedStore::get_attachment(const NamespaceId& ns, const std::string& name, std::string* data) {
  Status first = Status::NotFound("attachment '" + name + "' of namespace " + to_hex(ns) + " is in no shard of " + root_);
  bool have_first = false;
  for (const auto& sh : *snapshot()) {
    Status s = sh->store->get_attachment(ns, name, data);
    if (s.ok()) return s;
    if (s.code() != Code::kNotFound && !have_first) {  // e.g. Corruption: another shard may hold a good copy
      first = s;
      have_first = true;
    }
  }
  return first;
}

// ------------------------------------------------------------------------------- blocks
void ShardedStore::presence(const ShardList& l, const NamespaceId& ns, const BlockHash* hashes, size_t n,
                            std::vector<std::vector<uint8_t>>* present) {
  present->assign(l.size(), std::vector<uint8_t>(n, 0));
  for (size_t s = 0; s < l.size(); ++s) {
    if (away(*l[s])) continue;
    size_t prefix = 0;
    if (!l[s]->store->lookup(ns, hashes, n, (*present)[s].data(), &prefix).ok()) std::fill((*present)[s].begin(), (*present)[s].end(), 0);
  }
}

Status ShardedStore::lookup(const NamespaceId& ns, const BlockHash* hashes, size_t n, uint8_t* present,
                            size_t* prefix_blocks) {
  if (n && !hashes) return Status::InvalidArgument("lookup: hashes is null with n > 0");
  std::vector<std::vector<uint8_t>> per_shard;
  presence(*snapshot(), ns, hashes, n, &per_shard);
  std::vector<uint8_t> any(n, 0);
  for (const auto& p : per_shard)
    for (size_t i = 0; i < n; ++i) any[i] |= p[i];
  size_t prefix = 0;
  while (prefix < n && any[prefix]) ++prefix;
  if (present) std::copy(any.begin(), any.end(), present);
  if (prefix_blocks) *prefix_blocks = prefix;
  return Status::OK();
}

std::shared_ptr<Task> ShardedStore::load(const NamespaceId& ns, const BlockHash* hashes, size_t n, const LoadDest& dest) {
  NamespaceDesc d;
  Status s = get_namespace(ns, &d);
  if (!s.ok()) return TaskImpl::Failed(n, s);
  if (n && !hashes) return TaskImpl::Failed(n, Status::InvalidArgument("load: hashes is null with n > 0"));
  const size_t per = dest.kind == LoadDest::Kind::kContiguous ? 1 : size_t(d.num_layers) * 2;
  if (dest.ptrs.size() < n * per)
    return TaskImpl::Failed(n, Status::InvalidArgument(
                                   "load: " + std::to_string(dest.ptrs.size()) + " destination pointers, need " +
                                   std::to_string(n * per) +
                                   (dest.kind == LoadDest::Kind::kPaged ? " (n * L * 2, paged)" : " (n)")));
  auto l = snapshot();
  std::vector<std::vector<uint8_t>> present;
  presence(*l, ns, hashes, n, &present);
  std::vector<BlockHash> hs(hashes, hashes + n);
  return run_over_shards(*l, present, n, [ns, hs = std::move(hs), dest, per](Shard& sh, const std::vector<size_t>& idx) {
    std::vector<BlockHash> sub(idx.size());
    LoadDest sd;
    sd.kind = dest.kind;
    sd.heads = dest.heads;
    sd.token_stride = dest.token_stride;
    sd.head_stride = dest.head_stride;
    sd.ptrs.reserve(idx.size() * per);
    for (size_t k = 0; k < idx.size(); ++k) {
      sub[k] = hs[idx[k]];
      for (size_t j = 0; j < per; ++j) sd.ptrs.push_back(dest.ptrs[idx[k] * per + j]);
    }
    return sh.store->load(ns, sub.data(), sub.size(), sd);
  });
}

std::shared_ptr<Task> ShardedStore::load_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n,
                                              void* const* dst, const size_t* cap) {
  if (n && (!hashes || !dst || !cap))
    return TaskImpl::Failed(n, Status::InvalidArgument("load_repr: hashes, dst and cap must not be null"));
  auto l = snapshot();
  std::vector<std::vector<uint8_t>> present;
  presence(*l, ns, hashes, n, &present);
  std::vector<BlockHash> hs(hashes, hashes + n);
  std::vector<void*> ds(dst, dst + n);
  std::vector<size_t> cs(cap, cap + n);
  return run_over_shards(*l, present, n,
                         [ns, hs = std::move(hs), ds = std::move(ds), cs = std::move(cs)](Shard& sh, const std::vector<size_t>& idx) {
                           std::vector<BlockHash> sub(idx.size());
                           std::vector<void*> sd(idx.size());
                           std::vector<size_t> sc(idx.size());
                           for (size_t k = 0; k < idx.size(); ++k) {
                             sub[k] = hs[idx[k]];
                             sd[k] = ds[idx[k]];
                             sc[k] = cs[idx[k]];
                           }
                           return sh.store->load_repr(ns, sub.data(), sub.size(), sd.data(), sc.data());
                         });
}

std::shared_ptr<Task> ShardedStore::visit_repr(const NamespaceId& ns, const BlockHash* hashes, size_t n,
                                               ReprVisitor visit) {
  if (n && !hashes) return TaskImpl::Failed(n, Status::InvalidArgument("visit_repr: hashes is null with n > 0"));
  auto l = snapshot();
  std::vector<std::vector<uint8_t>> present;
  presence(*l, ns, hashes, n, &present);
  std::vector<BlockHash> hs(hashes, hashes + n);
  return run_over_shards(*l, present, n, [ns, hs = std::move(hs), visit](Shard& sh, const std::vector<size_t>& idx) {
    std::vector<BlockHash> sub(idx.size());
    for (size_t k = 0; k < idx.size(); ++k) sub[k] = hs[idx[k]];
    return sh.store->visit_repr(ns, sub.data(), sub.size(),
                                [visit, idx](size_t k, const uint8_t* p, size_t len) { return visit(idx[k], p, len); });
  });
}

std::shared_ptr<Task> ShardedStore::dump(const NamespaceId& ns, const DumpItem* items, size_t n) {
  Status s = writer_only("dump");
  if (s.ok()) s = adopt_namespace(ns);
  if (!s.ok()) return TaskImpl::Failed(n, s);
  return snapshot()->front()->store->dump(ns, items, n);
}

Status ShardedStore::get_block(const NamespaceId& ns, const BlockHash& hash, BlockInfo* info) {
  for (const auto& sh : *snapshot())
    if (!away(*sh) && sh->store->get_block(ns, hash, info).ok()) return Status::OK();
  return Status::NotFound("block " + to_hex(hash) + " is in no shard of " + root_);
}

Status ShardedStore::for_each_block(const NamespaceId& ns,
                                    const std::function<bool(const BlockHash&, const BlockInfo&)>& fn) {
  bool go = true;
  for (const auto& sh : *snapshot()) {
    if (!go) break;
    if (away(*sh)) continue;
    Status s = sh->store->for_each_block(ns, [&](const BlockHash& h, const BlockInfo& i) { return go = fn(h, i); });
    if (!s.ok()) return s;
  }
  return Status::OK();
}

Status ShardedStore::block_tokens(const NamespaceId& ns, const BlockHash& hash, std::vector<uint32_t>* tokens,
                                  BlockHash* parent) {
  // A block may be in several shards (two writers saved it); the first that has ids answers.
  Status first = Status::NotFound("block " + to_hex(hash) + " is in no shard of " + root_);
  bool found = false;
  for (const auto& sh : *snapshot()) {
    if (away(*sh)) continue;
    Status s = sh->store->block_tokens(ns, hash, tokens, parent);
    if (s.ok() && !tokens->empty()) return s;
    if (s.ok() && !found) {
      first = s;
      found = true;
    } else if (!s.ok() && s.code() != Code::kNotFound && !found) {
      first = s;
    }
  }
  tokens->clear();
  return first;
}

// ---------------------------------------------------------------------------- documents
Status ShardedStore::put_document(const NamespaceId& ns, const DocumentEntry& doc) {
  Status s = writer_only("put_document");
  if (s.ok()) s = adopt_namespace(ns);
  if (!s.ok()) return s;
  return snapshot()->front()->store->put_document(ns, doc);
}

Status ShardedStore::put_documents(const NamespaceId& ns, const DocumentEntry* docs, size_t n) {
  Status s = writer_only("put_documents");
  if (s.ok()) s = adopt_namespace(ns);
  if (!s.ok()) return s;
  return snapshot()->front()->store->put_documents(ns, docs, n);
}

Status ShardedStore::get_document(const NamespaceId& ns, const std::string& id, DocumentEntry* doc) {
  for (const auto& sh : *snapshot())
    if (sh->store->get_document(ns, id, doc).ok()) return Status::OK();
  return Status::NotFound("document '" + id + "' is registered in no shard of " + root_);
}

std::vector<DocumentEntry> ShardedStore::documents(const NamespaceId& ns) {
  std::vector<DocumentEntry> out;
  std::set<std::string> seen;
  for (const auto& sh : *snapshot())
    for (auto& d : sh->store->documents(ns))
      if (seen.insert(d.id).second) out.push_back(std::move(d));
  return out;
}

// ------------------------------------------------------------------------------ metrics
std::string ShardedStore::metrics_text() const {
  // Every shard's exposition, each sample labelled shard="<name>", grouped by metric family
  // (a family's HELP / TYPE once, then its samples from every shard).
  std::vector<std::string> order;
  std::map<std::string, std::string> head, body;
  auto family_of = [](const std::string& sample) {
    std::string n = sample.substr(0, sample.find_first_of("{ "));
    for (const char* suf : {"_bucket", "_sum", "_count"}) {
      const std::string x(suf);
      if (n.size() > x.size() && n.compare(n.size() - x.size(), x.size(), x) == 0) return n.substr(0, n.size() - x.size());
    }
    return n;
  };
  auto l = snapshot();
  for (const auto& sh : *l) {
    std::istringstream in(sh->store->metrics_text());
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      if (line[0] == '#') {
        std::istringstream w(line);
        std::string hash, kind, name;
        w >> hash >> kind >> name;
        if (!head.count(name) && !body.count(name)) order.push_back(name);
        if (head[name].find(line + "\n") == std::string::npos) head[name] += line + "\n";
        continue;
      }
      std::string f = family_of(line);
      if (!head.count(f) && !body.count(f)) order.push_back(f);
      const size_t brace = line.find('{'), space = line.find(' ');
      std::string labelled;
      if (brace != std::string::npos && brace < space)
        labelled = line.substr(0, brace + 1) + "shard=\"" + sh->name + "\"," + line.substr(brace + 1);
      else
        labelled = line.substr(0, space) + "{shard=\"" + sh->name + "\"}" + line.substr(space);
      body[f] += labelled + "\n";
    }
  }
  std::string out = "# ucm sharded store " + root_ + ": " + std::to_string(l->size()) + " shards open\n";
  for (const auto& f : order) out += head[f] + body[f];
  return out;
}

}  // namespace ucm::detail
