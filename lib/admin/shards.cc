// lib/admin/shards.cc: the admin commands on sharded stores (store_v1.md §11): inspect per shard
// and in total, migrate of every shard into one store, and the upgrade of a single-writer store
// to a sharded one (§11.4). gc is in gc_shards.cc.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "admin_internal.h"
#include "ucm/format/format.h"

namespace ucm::admin {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// Sums the shards' reports into the store's: counts, the age spread (percentiles weighted by each
// shard's blocks), namespaces by id, --verify's results and --docs' entries.
struct ShardTotals {
  explicit ShardTotals(InspectReport* r) : rep(r) {}
  InspectReport* rep;
  std::map<std::string, size_t> ns_at;  // id hex -> index in rep->namespaces
  double w10 = 0, w50 = 0, w90 = 0;
  uint64_t wblocks = 0;
  ojson docs = ojson::array();

  void add_counts(const InspectReport& s) {
    rep->blocks += s.blocks;
    rep->bytes += s.bytes;
    rep->data_files += s.data_files;
    rep->data_bytes += s.data_bytes;
    rep->dead_bytes += s.dead_bytes;
    rep->retired_files += s.retired_files;
    auto lo = [](uint64_t a, uint64_t b) { return a == 0 ? b : (b == 0 ? a : std::min(a, b)); };
    rep->oldest_created_ms = lo(rep->oldest_created_ms, s.oldest_created_ms);
    rep->newest_created_ms = std::max(rep->newest_created_ms, s.newest_created_ms);
    rep->oldest_access_ms = lo(rep->oldest_access_ms, s.oldest_access_ms);
    rep->newest_access_ms = std::max(rep->newest_access_ms, s.newest_access_ms);
    if (s.blocks) {
      w10 += double(s.access_p10_ms) * double(s.blocks);
      w50 += double(s.access_p50_ms) * double(s.blocks);
      w90 += double(s.access_p90_ms) * double(s.blocks);
      wblocks += s.blocks;
    }
  }
  void add_namespaces(const InspectReport& s) {
    for (auto& ns : s.namespaces) {
      auto it = ns_at.find(ns.id_hex);
      if (it == ns_at.end()) {
        ns_at[ns.id_hex] = rep->namespaces.size();
        rep->namespaces.push_back(ns);
        continue;
      }
      auto& t = rep->namespaces[it->second];
      t.blocks += ns.blocks;
      t.bytes += ns.bytes;
      t.documents += ns.documents;
      t.blocks_with_tokens += ns.blocks_with_tokens;
    }
  }
  void add_verify_and_docs(const std::string& shard, const InspectReport& s, bool want_docs) {
    rep->verified_run |= s.verified_run;
    rep->verified += s.verified;
    rep->verified_bytes += s.verified_bytes;
    rep->verify_seconds += s.verify_seconds;
    rep->corrupt_total += s.corrupt_total;
    for (auto c : s.corrupt) {
      c.shard = shard;
      if (rep->corrupt.size() < 1000) rep->corrupt.push_back(std::move(c));
    }
    if (!want_docs) return;
    rep->docs_run = true;
    auto arr = ojson::parse(s.docs_json.empty() ? "[]" : s.docs_json, nullptr, false);
    if (!arr.is_array()) return;
    for (auto& e : arr) {
      e["shard"] = shard;
      docs.push_back(std::move(e));
    }
  }
  void finish(bool want_docs) {
    if (wblocks) {
      rep->access_p10_ms = uint64_t(w10 / double(wblocks));
      rep->access_p50_ms = uint64_t(w50 / double(wblocks));
      rep->access_p90_ms = uint64_t(w90 / double(wblocks));
    }
    if (want_docs) rep->docs_json = docs.dump();
  }
};

ShardSummary shard_line(const std::string& name, const InspectReport& s) {
  ShardSummary line;
  line.name = name;
  line.state = "ok";
  line.blocks = s.blocks;
  line.bytes = s.bytes;
  line.data_files = s.data_files;
  line.data_bytes = s.data_bytes;
  line.dead_bytes = s.dead_bytes;
  line.verified = s.verified;
  line.corrupt_total = s.corrupt_total;
  return line;
}

// --block in one shard: its record (with "shard") appended to *found; absence is no error.
Status find_block_in_shard(const std::string& sp, const std::string& shard, const InspectOptions& opts,
                           std::vector<std::string>* found) {
  InspectReport b;
  InspectOptions bo;
  bo.block_hex = opts.block_hex;
  bo.ns = opts.ns;
  Status g = inspect_single(sp, bo, &b);
  if (g.code() == Code::kNotFound) return Status::OK();
  if (!g.ok()) return g;
  auto j = ojson::parse(b.block_json, nullptr, false);
  if (j.is_object()) {
    j["shard"] = shard;
    found->push_back(j.dump());
  }
  return Status::OK();
}

Status inspect_sharded(const std::string& root, const InspectOptions& opts, InspectReport* rep) {
  *rep = InspectReport();
  rep->path = root;
  rep->sharded = true;
  rep->now_ms = fmt::now_ms();
  fmt::Superblock sb;
  fmt::RootKind k;
  Status st = fmt::root_kind(root, &k, &sb);
  if (!st.ok()) return st;
  rep->format_version = sb.format_version;
  rep->created_by = sb.created_by;
  rep->created_ms = sb.created_ms;
  std::vector<std::string> names;
  st = fmt::list_shards(root, &names);
  if (!st.ok()) return st;
  ShardTotals tot(rep);
  Status first_error;
  std::vector<std::string> block_found;
  for (const auto& n : names) {
    InspectReport s;
    InspectOptions o = opts;
    o.block_hex.clear();  // looked up below, in each shard, so that absence is no error
    if (opts.progress) o.progress = [&, n](const std::string& line) { opts.progress("shard " + n + ": " + line); };
    const std::string sp = fmt::shard_path(root, n);
    Status r = inspect_single(sp, o, &s);
    if (!r.ok() && r.code() != Code::kCorruption) {
      ShardSummary line;
      line.name = n;
      line.state = r.message();
      rep->shards.push_back(line);
      if (first_error.ok()) first_error = Status(r.code(), "shard " + n + ": " + r.message());
      continue;
    }
    rep->shards.push_back(shard_line(n, s));
    tot.add_counts(s);
    tot.add_namespaces(s);
    tot.add_verify_and_docs(n, s, opts.docs);
    if (!opts.block_hex.empty()) {
      st = find_block_in_shard(sp, n, opts, &block_found);
      if (!st.ok()) return st;
    }
  }
  tot.finish(opts.docs);
  if (!opts.block_hex.empty()) {
    if (block_found.empty())
      return Status::NotFound("block " + opts.block_hex + " is in no shard of " + root);
    rep->block_json = block_found.size() == 1 ? block_found[0] : "[" + [&] {
      std::string j;
      for (size_t i = 0; i < block_found.size(); ++i) j += (i ? "," : "") + block_found[i];
      return j;
    }() + "]";
  }
  if (!first_error.ok()) return first_error;
  if (rep->corrupt_total > 0)
    return Status::Corruption(std::to_string(rep->corrupt_total) + " corrupt block(s) in " + root + "; `ucm gc " +
                              root + " --verify` removes them (they are served as misses meanwhile)");
  return Status::OK();
}

Status migrate_sharded(const std::string& root, const std::string& dst, const MigrateOptions& opts,
                       MigrateReport* rep) {
  *rep = MigrateReport();
  if (dst.empty()) return Status::InvalidArgument("migrate needs a destination store (DST)");
  std::error_code ec;
  if (fs::exists(dst, ec) && fs::equivalent(root, dst, ec))
    return Status::InvalidArgument("source and destination are the same store (" + root + "); pick another DST");
  std::vector<std::string> names;
  Status st = fmt::list_shards(root, &names);
  if (!st.ok()) return st;
  std::vector<std::string> dst_ns;
  for (const auto& n : names) {
    MigrateReport r;
    MigrateOptions o = opts;
    if (opts.progress) o.progress = [&, n](const std::string& line) { opts.progress("shard " + n + ": " + line); };
    st = migrate_single(fmt::shard_path(root, n), dst, o, &r);
    if (!st.ok()) return Status(st.code(), "shard " + n + ": " + st.message());
    rep->blocks_copied += r.blocks_copied;
    rep->blocks_skipped += r.blocks_skipped;
    rep->bytes_copied += r.bytes_copied;
    rep->documents += r.documents;
    rep->attachments += r.attachments;
    for (const auto& id : r.dst_namespaces)
      if (std::find(dst_ns.begin(), dst_ns.end(), id) == dst_ns.end()) dst_ns.push_back(id);
  }
  rep->dst_namespaces = dst_ns;
  rep->namespaces = dst_ns.size();
  rep->message = "copied " + std::to_string(names.size()) + " shard(s) of " + root + " into " + dst;
  return Status::OK();
}

// *sharded: `path` is the root of a sharded store (store_v1.md §11). An upgrade left half done
// is the error returned; any other error of root_kind is left to the single-store path to report.
Status probe_sharded(const std::string& path, bool* sharded) {
  fmt::RootKind k;
  const Status st = fmt::root_kind(path, &k);
  *sharded = st.ok() && k == fmt::RootKind::kSharded;
  return fmt::interrupted_upgrade(st) ? st : Status::OK();
}

}  // namespace

Status inspect(const std::string& path, const InspectOptions& opts, InspectReport* rep) {
  bool sharded = false;
  const Status st = probe_sharded(path, &sharded);
  if (!st.ok()) return st;
  return sharded ? inspect_sharded(path, opts, rep) : inspect_single(path, opts, rep);
}

Status migrate(const std::string& src, const std::string& dst, const MigrateOptions& opts, MigrateReport* rep) {
  if (opts.to_sharded) {
    *rep = MigrateReport();
    if (!dst.empty()) return Status::InvalidArgument("--to-sharded rewrites SRC in place; give no DST");
    return upgrade_to_sharded(src, opts.shard_name, rep);
  }
  bool sharded = false;
  const Status st = probe_sharded(src, &sharded);
  if (!st.ok()) return st;
  if (sharded) {
    if (opts.upgrade)
      return Status::InvalidArgument(src + " is a sharded store: its shards are upgraded one by one with `ucm migrate " +
                                     src + "/shards/<name> --upgrade`");
    return migrate_sharded(src, dst, opts, rep);
  }
  return migrate_single(src, dst, opts, rep);
}

Status gc(const std::string& path, const GcOptions& opts, GcReport* rep) {
  bool sharded = false;
  const Status st = probe_sharded(path, &sharded);
  if (!st.ok()) return st;
  return sharded ? gc_sharded(path, opts, rep) : gc_single(path, opts, rep);
}

// ------------------------------------------------------------------ upgrade (§11.4)
Status upgrade_to_sharded(const std::string& path, const std::string& shard_name, MigrateReport* rep) {
  std::string name = shard_name.empty() ? fmt::sanitize_shard_name(fmt::host_name()) : shard_name;
  Status st = fmt::check_shard_name(name);
  if (!st.ok()) return st;
  fmt::RootKind k;
  fmt::Superblock sb;
  st = fmt::root_kind(path, &k, &sb);
  const bool resuming = fmt::interrupted_upgrade(st);
  if (!st.ok() && !resuming) return st;
  if (st.ok() && k == fmt::RootKind::kSharded) {
    rep->message = "store " + path + " is already sharded; nothing to do";
    return Status::OK();
  }
  if (st.ok() && sb.format_version < fmt::kMinWriterVersion)
    return Status::NotSupported("store " + path + " has format version " + std::to_string(sb.format_version) +
                                "; run `ucm migrate " + path + " --upgrade` first");
  // Under the writer lock of the single store: no writer runs meanwhile.
  std::unique_ptr<fmt::WriterLock> lock;
  st = fmt::WriterLock::Acquire(path, &lock);
  if (!st.ok()) return st;
  const std::string shards = fmt::shards_dir(path);
  st = fmt::make_dirs(shards);
  if (!st.ok()) return st;
  // A resumed upgrade keeps the name it started with.
  std::error_code ec;
  std::string staging;
  for (const auto& e : fs::directory_iterator(shards, ec)) {
    const std::string n = e.path().filename().string();
    const std::string suffix = ".upgrading";
    if (n.size() > suffix.size() + 1 && n[0] == '.' && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
      staging = e.path().string();
      name = n.substr(1, n.size() - 1 - suffix.size());
    }
  }
  const std::string final_dir = fmt::shard_path(path, name);
  if (staging.empty()) {
    if (fs::exists(final_dir, ec) && !fs::exists(fmt::superblock_path(path), ec)) {
      staging.clear();  // everything moved already: only the root superblock is left to write
    } else {
      if (fs::exists(final_dir, ec))
        return Status::InvalidArgument("shard " + final_dir + " exists already; pick another --shard-name");
      staging = shards + "/." + name + ".upgrading";
      if (::mkdir(staging.c_str(), 0755) != 0) return Status::FromErrno(errno, "create " + staging);
    }
  }
  if (!staging.empty()) {
    // Every entry but UCMSTORE, shards/, LOCK and gc/ (renames in one file system); UCMSTORE last.
    std::vector<std::string> entries;
    for (const auto& e : fs::directory_iterator(path, ec)) entries.push_back(e.path().filename().string());
    if (ec) return Status::IOError("cannot list " + path + ": " + ec.message());
    for (const auto& n : entries) {
      if (n == "UCMSTORE" || n == "shards" || n == "LOCK" || n == "gc") continue;
      if (::rename((path + "/" + n).c_str(), (staging + "/" + n).c_str()) != 0)
        return Status::FromErrno(errno, "move " + path + "/" + n + " into " + staging);
    }
    st = fmt::fsync_dir(staging);
    if (st.ok()) st = fmt::fsync_dir(path);
    if (!st.ok()) return st;
    if (fs::exists(fmt::superblock_path(path), ec)) {
      if (::rename(fmt::superblock_path(path).c_str(), (staging + "/UCMSTORE").c_str()) != 0)
        return Status::FromErrno(errno, "move " + fmt::superblock_path(path));
      st = fmt::fsync_dir(staging);
      if (st.ok()) st = fmt::fsync_dir(path);
      if (!st.ok()) return st;
    }
    if (::rename(staging.c_str(), final_dir.c_str()) != 0)
      return Status::FromErrno(errno, "rename " + staging + " to " + final_dir);
    st = fmt::fsync_dir(shards);
    if (!st.ok()) return st;
  }
  st = fmt::make_dirs(fmt::gc_dir(path));
  if (!st.ok()) return st;
  fmt::Superblock root;
  root.format_version = root.min_reader_version = fmt::kShardedFormatVersion;
  root.created_ms = fmt::now_ms();
  st = fmt::write_superblock(path, root);
  if (!st.ok()) return st;
  ::unlink(fmt::lock_path(path).c_str());  // the root has no writer lock (§11); we still hold its fd
  (void)fmt::fsync_dir(path);
  rep->upgraded = true;
  rep->message = "store " + path + " is now sharded (format version 3): its blocks are shard '" + name + "' (" +
                 final_dir + ")" + (resuming ? "; an interrupted upgrade was finished" : "") +
                 "; writers on other machines get shards of their own";
  return Status::OK();
}

}  // namespace ucm::admin
