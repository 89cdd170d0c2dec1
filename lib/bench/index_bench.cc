// lib/bench/index_bench.cc: `ucm bench index` (see ucm/bench/index_bench.h, docs/benchmarks.md).
#include "ucm/bench/index_bench.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "ucm/bench/bench_util.h"
#include "ucm/core/index.h"
#include "ucm/format/format.h"
#include "ucm/hash.h"
#include "ucm/store.h"
#include "ucm/fs.h"

extern char** environ;

namespace ucm::bench {
namespace fs = std::filesystem;
namespace {

constexpr double kOpenTarget = 1.0;
constexpr double kIndexLookupTarget = 20e6;
constexpr uint64_t kGcRssTarget = 256ull << 20;

uint64_t dir_bytes(const std::string& d) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(d, ec))
    if (e.is_regular_file(ec)) n += e.file_size(ec);
  return n;
}

void drop_cache(const std::string& path) {
  std::error_code ec;
  auto one = [](const std::string& f) {
    int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  };
  for (auto& e : fs::directory_iterator(fmt::index_dir(path), ec)) one(e.path().string());
  one(fmt::fptable_path(path));
}

uint64_t metric(Store* s, const std::string& name) {
  const std::string t = s->metrics_text();
  const size_t at = t.find("\n" + name + " ");
  return at == std::string::npos ? 0 : std::stoull(t.substr(at + name.size() + 2));
}

/// Runs `exe args...` with stdout captured; wall time and peak RSS from wait4.
Status run_child(const std::string& exe, const std::vector<std::string>& args, const std::string& out_file,
                 ChildRun* r) {
  std::vector<std::string> all{exe};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const double t0 = now_s();
  const int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return Status::FromErrno(rc, "spawn " + exe);
  int st = 0;
  struct rusage ru {};
  // Peak anonymous memory (the command's own, without the pages of its shared libraries) by
  // sampling /proc/PID/status every 5 ms; the total peak comes from wait4.
  const std::string status_path = "/proc/" + std::to_string(pid) + "/status";
  for (;;) {
    const pid_t w = ::wait4(pid, &st, WNOHANG, &ru);
    if (w < 0) return Status::FromErrno(errno, "wait for " + exe);
    if (w == pid) break;
    std::ifstream f(status_path);
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("RssAnon:", 0) == 0)
        r->peak_anon_bytes = std::max<uint64_t>(r->peak_anon_bytes, std::stoull(line.substr(8)) * 1024);
      else if (line.rfind("VmHWM:", 0) == 0)
        r->peak_rss_bytes = std::max<uint64_t>(r->peak_rss_bytes, std::stoull(line.substr(6)) * 1024);
    ::usleep(5000);
  }
  r->seconds = now_s() - t0;
  // Not ru_maxrss: posix_spawn's child shares this process's memory until its exec, and Linux
  // carries that high-water mark over the exec. VmHWM is of the child's own address space.
  r->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  std::ifstream f(out_file);
  r->json.assign(std::istreambuf_iterator<char>(f), {});
  if (r->exit_code != 0)
    return Status::Internal(exe + " " + (args.empty() ? "" : args[0]) + " exited with " +
                            std::to_string(r->exit_code));
  return Status::OK();
}

/// Writes blocks [first, first + n) of `hs` into the index, records laid out back to back in
/// sparse data files from `*file` on; access times per chain spread over 30 days, a parent never
/// older than its child.
Status write_blocks(Index& ix, const NamespaceId& ns, const NamespaceDesc& d, const std::vector<BlockHash>& hs,
                    const std::vector<BlockHash>& ps, uint64_t first, uint64_t n, uint32_t chain_len,
                    std::mt19937_64& rng, const std::string& store, uint32_t* file, uint64_t* file_off,
                    const std::function<void(uint64_t)>& tick) {
  const uint64_t rec = fmt::record_size(d.payload_bytes());
  const uint64_t now = fmt::now_ms(), month = 30ull * 86400 * 1000;
  Index::Batch b;
  uint64_t in_batch = 0, chain_t = 0;
  std::map<uint32_t, fmt::FileRecord> files;
  auto seal = [&](uint32_t id, uint64_t size) -> Status {
    // A sparse data file: its header page, then size - 4096 bytes of holes.
    const std::string p = fmt::data_file_path(store, id);
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Status::FromErrno(errno, "create " + p);
    uint8_t head[fmt::kPage];
    fmt::FileHeader h;
    h.file_id = id;
    h.created_ms = now;
    fmt::encode_file_header(h, head);
    Status s = fmt::pwrite_full(fd, head, sizeof head, 0, p);
    if (s.ok() && ::ftruncate(fd, off_t(size)) != 0) s = Status::FromErrno(errno, "truncate " + p);
    ::close(fd);
    if (!s.ok()) return s;
    fmt::FileRecord fr;
    fr.size = size;
    fr.live_bytes = size - fmt::kPage;
    fr.state = fmt::FileState::kSealed;
    b.put_file(id, fr);
    return Status::OK();
  };
  for (uint64_t i = first; i < first + n; ++i) {
    if ((i - first) % chain_len == 0) chain_t = now - rng() % month;
    if (*file_off + rec > fmt::kFileRollBytes) {
      Status s = seal(*file, *file_off);
      if (!s.ok()) return s;
      ++*file;
      *file_off = fmt::kPage;
    }
    fmt::BlockRecord r;
    r.token_count = d.block_size;
    r.parent = ps[i];
    r.kv_file = *file;
    r.kv_offset = *file_off;
    r.kv_length = d.payload_bytes();
    r.kv_checksum = rng();
    r.created_ms = chain_t;
    r.last_access_ms = chain_t - (i - first) % chain_len;
    *file_off += rec;
    b.put_block(ns, hs[i], r);
    if (++in_batch == 20000) {
      Status s = ix.write(b, false);
      if (!s.ok()) return s;
      b.clear();
      in_batch = 0;
      if (tick) tick(i + 1 - first);
    }
  }
  Status s = seal(*file, *file_off);  // the last file, sealed as it is (the next call starts a new one)
  if (!s.ok()) return s;
  ++*file;
  *file_off = fmt::kPage;
  b.add_ns_counters(ns, int64_t(n), int64_t(n * d.payload_bytes()));
  b.put_meta_u32(kMetaNextFileId, *file);
  return ix.write(b, true);
}

}  // namespace

namespace {

// The phases of one run over one scratch store: the store, opens, lookups, replay, the children.
class IndexBench {
 public:
  IndexBench(const IndexBenchOptions& o, IndexBenchReport* r, std::string path)
      : o_(o), r_(r), path_(std::move(path)), rng_(o.seed),
        d_(payload_namespace(o.block_bytes, "ucm-bench-index", "bench-index")) {}
  Status build();
  Status time_opens();
  Status time_lookups();
  Status time_replay();
  Status run_children();
  void set_targets();

 private:
  void progress(const std::string& m) const {
    if (o_.progress) o_.progress(m);
  }
  Status open_reader(double* secs, std::unique_ptr<Store>* out) const {
    OpenOptions ro;
    ro.mode = OpenOptions::Mode::kReadOnly;
    const double t0 = now_s();
    Status st = Store::Open(path_, ro, out);
    *secs = now_s() - t0;
    return st;
  }
  Status gc_child(const std::string& out);
  // The store's writer lock, then its index as primary (the index is written directly).
  Status open_index(std::unique_ptr<fmt::WriterLock>* lock, std::unique_ptr<Index>* ix) const {
    Status st = fmt::WriterLock::Acquire(path_, lock);
    return st.ok() ? Index::OpenPrimary(fmt::index_dir(path_), false, ix) : st;
  }

  const IndexBenchOptions& o_;
  IndexBenchReport* r_;
  const std::string path_;
  std::mt19937_64 rng_;
  const NamespaceDesc d_;
  NamespaceId ns_{};
  std::vector<BlockHash> hs_, ps_;
  uint32_t file_ = 0;
  uint64_t file_off_ = fmt::kPage;
  std::unique_ptr<Store> reader_;  // from the cold open to the lookups
};

// The store: namespace through the API, then the index written directly and compacted.
Status IndexBench::build() {
  {
    OpenOptions w;
    w.mode = OpenOptions::Mode::kReadWrite;
    w.create_if_missing = true;
    std::unique_ptr<Store> s;
    Status st = Store::Open(path_, w, &s);
    if (!st.ok()) return st;
    st = s->register_namespace(d_, &ns_);
    if (!st.ok()) return st;
  }
  progress("hashing " + std::to_string(o_.blocks + o_.replay) + " blocks");
  make_chains(ns_, o_.blocks + o_.replay, o_.chain_len, d_.block_size, rng_, &hs_, &ps_);
  std::unique_ptr<fmt::WriterLock> lock;
  std::unique_ptr<Index> ix;
  Status st = open_index(&lock, &ix);
  if (!st.ok()) return st;
  uint64_t next_id = 0;
  (void)ix->get_meta_u64(kMetaNextFileId, &next_id);
  file_ = uint32_t(std::max<uint64_t>(next_id, 1));
  double t0 = now_s(), last = t0;
  st = write_blocks(*ix, ns_, d_, hs_, ps_, 0, o_.blocks, o_.chain_len, rng_, path_, &file_, &file_off_,
                    [&](uint64_t k) {
                      if (now_s() - last > 2) {
                        last = now_s();
                        progress("index: " + std::to_string(k) + " / " + std::to_string(o_.blocks) + " blocks");
                      }
                    });
  if (!st.ok()) return st;
  st = ix->flush();
  if (!st.ok()) return st;
  r_->build_s = now_s() - t0;
  progress("index: full compaction");
  t0 = now_s();
  st = ix->compact();
  if (!st.ok()) return st;
  r_->compact_s = now_s() - t0;
  ix.reset();
  r_->index_bytes = dir_bytes(fmt::index_dir(path_));
  return Status::OK();
}

// Open without a table (the scan, the only way before fptable.md; it saves the table), with it,
// and with it from a cold page cache.
Status IndexBench::time_opens() {
  std::error_code ec;
  std::unique_ptr<Store>& reader = reader_;
  fs::remove(fmt::fptable_path(path_), ec);
  progress("open: no fingerprint table (rebuild by a scan of the index)");
  Status st = open_reader(&r_->open_rebuild_s, &reader);
  if (!st.ok()) return st;
  reader.reset();
  r_->fptable_bytes = fs::file_size(fmt::fptable_path(path_), ec);
  progress("open: with the table");
  st = open_reader(&r_->open_warm_s, &reader);
  if (!st.ok()) return st;
  if (metric(reader.get(), "ucm_fptable_loaded") != 1) return Status::Internal("the reader did not use the table");
  reader.reset();
  drop_cache(path_);
  return open_reader(&r_->open_cold_s, &reader);
}

// Whole-chain lookups on one pinned core.
Status IndexBench::time_lookups() {
  std::unique_ptr<Store> reader = std::move(reader_);  // the cold open's
  progress("lookup: " + std::to_string(int(o_.lookup_seconds * 1000)) + " ms on one pinned thread");
  Status ls;
  std::thread th([&] {
    r_->lookup_cpu = pin_to_one_cpu();
    std::mt19937_64 lrng(o_.seed ^ 0x9e3779b97f4a7c15ull);
    const uint64_t chains = o_.blocks / o_.chain_len;
    std::vector<uint8_t> present(o_.chain_len);
    uint64_t probes = 0;
    const double w0 = now_s();
    double w1 = w0;
    while (w1 - w0 < o_.lookup_seconds) {
      for (int k = 0; k < 256; ++k) {
        const uint64_t c = lrng() % chains;
        size_t prefix = 0;
        ls = reader->lookup(ns_, &hs_[c * o_.chain_len], o_.chain_len, present.data(), &prefix);
        if (!ls.ok()) return;
        if (prefix != o_.chain_len) ++r_->lookup_misses;
        probes += o_.chain_len;
      }
      w1 = now_s();
    }
    r_->lookup.seconds = w1 - w0;
    r_->lookup.count = probes;
  });
  th.join();
  return ls;
}

// `replay` more blocks committed after the table was saved.
Status IndexBench::time_replay() {
  if (o_.replay == 0) return Status::OK();
  {
    std::unique_ptr<fmt::WriterLock> lock;
    std::unique_ptr<Index> ix;
    Status st = open_index(&lock, &ix);
    if (!st.ok()) return st;
    st = write_blocks(*ix, ns_, d_, hs_, ps_, o_.blocks, o_.replay, o_.chain_len, rng_, path_, &file_, &file_off_,
                      nullptr);
    if (!st.ok()) return st;
  }
  // The reader must not save what it replays (that would hide the cost from the next open):
  // it only saves at >= 100,000 entries, so time a copy of the table's state.
  std::error_code ec;
  const std::string keep_table = fmt::tmp_dir(path_) + "/fptable.bench";
  fs::copy_file(fmt::fptable_path(path_), keep_table, fs::copy_options::overwrite_existing, ec);
  progress("open: " + std::to_string(o_.replay) + " journal entries behind the table");
  std::unique_ptr<Store> reader;
  Status st = open_reader(&r_->open_replay_s, &reader);
  if (!st.ok()) return st;
  r_->replayed = metric(reader.get(), "ucm_fptable_replayed");
  reader.reset();
  fs::rename(keep_table, fmt::fptable_path(path_), ec);
  return Status::OK();
}

Status IndexBench::gc_child(const std::string& out) {
  // Save the table as of now (a writer open replays and saves), so the open after gc replays
  // exactly gc's removals.
  {
    OpenOptions w;
    w.mode = OpenOptions::Mode::kReadWrite;
    std::unique_ptr<Store> s;
    Status st = Store::Open(path_, w, &s);
    if (!st.ok()) return st;
  }
  const uint64_t total = (o_.blocks + o_.replay) * d_.payload_bytes();
  const uint64_t max_bytes = uint64_t(double(total) * (1.0 - o_.gc_fraction));
  std::vector<std::string> args{"gc", path_, "--max-bytes", std::to_string(max_bytes), "--grace", "0", "--json"};
  args.insert(args.end(), o_.gc_args.begin(), o_.gc_args.end());
  progress("gc: evict " + std::to_string(int(o_.gc_fraction * 100 + 0.5)) + "% of the bytes (LRU)");
  Status st = run_child(o_.ucm_exe, args, out, &r_->gc);
  if (!st.ok()) return st;
  try {
    r_->gc_evicted = nlohmann::json::parse(r_->gc.json).value("evicted_blocks", uint64_t(0));
  } catch (const std::exception&) {
  }
  std::unique_ptr<Store> reader;
  st = open_reader(&r_->open_after_gc_s, &reader);
  if (!st.ok()) return st;
  r_->gc_replayed = metric(reader.get(), "ucm_fptable_replayed");
  return Status::OK();
}

// inspect and gc, each in a child process (its own peak RSS).
Status IndexBench::run_children() {
  if (o_.ucm_exe.empty()) return Status::OK();
  // Outside the store: gc clears STORE/tmp.
  const std::string out =
      (fs::temp_directory_path() / ("ucm-bench-index-" + std::to_string(::getpid()) + ".json")).string();
  progress("baseline: ucm --version");
  Status st = run_child(o_.ucm_exe, {"--version"}, out, &r_->baseline);
  if (!st.ok()) return st;
  progress("inspect: ucm inspect --json");
  st = run_child(o_.ucm_exe, {"inspect", path_, "--json"}, out, &r_->inspect);
  if (!st.ok()) return st;
  if (o_.gc_fraction > 0) {
    st = gc_child(out);
    if (!st.ok()) return st;
  }
  std::error_code ec;
  fs::remove(out, ec);
  return Status::OK();
}

void IndexBench::set_targets() {
  IndexBenchReport* r = r_;
  r->targets.push_back({"open", "reader open <= 1 s (table, cold cache)", r->open_cold_s, kOpenTarget,
                        r->open_cold_s <= kOpenTarget});
  r->targets.push_back({"lookup", "lookups >= 20,000,000 per second on one core", r->lookups_per_s(),
                        kIndexLookupTarget, r->lookups_per_s() >= kIndexLookupTarget && r->lookup_misses == 0});
  if (r->gc.exit_code == 0)
    r->targets.push_back({"gc_memory", "gc peak anonymous RSS <= 256 MiB", double(r->gc.peak_anon_bytes),
                          double(kGcRssTarget), r->gc.peak_anon_bytes <= kGcRssTarget});
}

}  // namespace

Status run_index_bench(const IndexBenchOptions& o, IndexBenchReport* r) {
  if (o.blocks < 2 || o.chain_len == 0) return Status::InvalidArgument("--blocks must be at least 2");
  if (o.block_bytes == 0) return Status::InvalidArgument("--block-bytes must be positive");
  *r = IndexBenchReport{};
  r->blocks = o.blocks;
  r->block_bytes = o.block_bytes;
  const std::string path = bench_store_path(o, "ucm-bench-index-");
  RemoveGuard guard{path, !o.keep};
  std::error_code ec;
  if (!o.keep && fs::exists(path, ec)) return Status::InvalidArgument(path + " already exists");
  r->store_path = fs::absolute(path, ec).string();
  IndexBench b(o, r, path);
  Status st = b.build();
  if (st.ok()) st = b.time_opens();
  if (st.ok()) st = b.time_lookups();
  if (st.ok()) st = b.time_replay();
  if (st.ok()) st = b.run_children();
  if (!st.ok()) return st;
  b.set_targets();
  if (!o.keep && o.progress) o.progress("removing " + path);
  return Status::OK();
}

std::string IndexBenchReport::to_json() const {
  using J = nlohmann::ordered_json;
  J j;
  j["store"] = store_path;
  j["blocks"] = blocks;
  j["block_bytes"] = block_bytes;
  j["apparent_payload_bytes"] = blocks * block_bytes;
  j["index_build_s"] = build_s;
  j["index_compact_s"] = compact_s;
  j["index_bytes"] = index_bytes;
  j["fptable_bytes"] = fptable_bytes;
  j["open_rebuild_s"] = open_rebuild_s;
  j["open_warm_s"] = open_warm_s;
  j["open_cold_s"] = open_cold_s;
  j["open_replay_s"] = open_replay_s;
  j["open_replayed_entries"] = replayed;
  j["lookup_cpu"] = lookup_cpu;
  j["lookups"] = lookup.count;
  j["lookup_s"] = lookup.seconds;
  j["lookups_per_s"] = lookups_per_s();
  j["lookup_misses"] = lookup_misses;
  auto child = [](const ChildRun& c) {
    J x;
    x["s"] = c.seconds;
    x["peak_rss_bytes"] = c.peak_rss_bytes;
    x["peak_anon_bytes"] = c.peak_anon_bytes;
    x["exit_code"] = c.exit_code;
    return x;
  };
  if (baseline.exit_code >= 0) j["baseline_ucm_version"] = child(baseline);
  if (inspect.exit_code >= 0) j["inspect"] = child(inspect);
  if (gc.exit_code >= 0) {
    j["gc"] = child(gc);
    j["gc"]["evicted_blocks"] = gc_evicted;
    j["open_after_gc_s"] = open_after_gc_s;
    j["open_after_gc_replayed_entries"] = gc_replayed;
  }
  J t = J::array();
  for (const auto& x : targets) t.push_back({{"name", x.name}, {"rule", x.rule}, {"value", x.value},
                                             {"threshold", x.threshold}, {"pass", x.pass}});
  j["targets"] = t;
  j["all_pass"] = all_pass();
  return j.dump();
}

std::string IndexBenchReport::to_text() const {
  char b[2048];
  std::string o;
  std::snprintf(b, sizeof b,
                "index bench: %llu blocks (%.2f TB of payload, not written)\n"
                "  index build %.1f s + compaction %.1f s; index %.0f MB, fingerprint table %.0f MB\n"
                "  reader open: no table (scan) %.3f s; table warm %.3f s; table cold %.3f s; "
                "%llu entries behind %.3f s\n"
                "  lookups: %.1f M/s on one core (cpu %d), %llu misses\n",
                (unsigned long long)blocks, blocks * double(block_bytes) / 1e12, build_s, compact_s,
                index_bytes / 1e6, fptable_bytes / 1e6, open_rebuild_s, open_warm_s, open_cold_s,
                (unsigned long long)replayed, open_replay_s, lookups_per_s() / 1e6, lookup_cpu,
                (unsigned long long)lookup_misses);
  o += b;
  if (inspect.exit_code >= 0) {
    std::snprintf(b, sizeof b, "  inspect: %.2f s, peak RSS %.0f MiB (anonymous %.0f MiB; `ucm --version` alone: %.0f MiB)\n",
                  inspect.seconds, inspect.peak_rss_bytes / 1048576.0, inspect.peak_anon_bytes / 1048576.0,
                  baseline.peak_rss_bytes / 1048576.0);
    o += b;
  }
  if (gc.exit_code >= 0) {
    std::snprintf(b, sizeof b, "  gc: %.2f s, peak RSS %.0f MiB (anonymous %.0f MiB), %llu blocks evicted; next open %.3f s (%llu replayed)\n",
                  gc.seconds, gc.peak_rss_bytes / 1048576.0, gc.peak_anon_bytes / 1048576.0, (unsigned long long)gc_evicted, open_after_gc_s,
                  (unsigned long long)gc_replayed);
    o += b;
  }
  for (const auto& t : targets) o += "  " + t.rule + ": " + (t.pass ? "PASS" : "MISS") + "\n";
  return o;
}

}  // namespace ucm::bench
