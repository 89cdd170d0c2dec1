// bench/store_bench.cc: `ucm bench store` (see store_bench.h and docs/benchmarks.md).
#include "ucm/bench/store_bench.h"
#include "ucm/bench/store_bench_phases.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "ucm/bench/bench_util.h"
#include "ucm/bench/raw_io.h"
#include "ucm/core/cuda_plugin.h"
#include "ucm/core/device_load.h"
#include "ucm/hash.h"
#include "ucm/namespace.h"
#include "ucm/store.h"
#include "ucm/fs.h"

namespace ucm::bench {
namespace fs = std::filesystem;
namespace {

constexpr double kDumpTarget = 0.8;
constexpr double kLoadTarget = 0.8;
constexpr double kLoadBestTarget = 0.9;
constexpr double kLookupTarget = 1e6;
constexpr uint32_t kChainLen = 64;  // blocks per hash chain of the dump/load data

Status alloc_aligned(size_t n, AlignedBuf* out) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, n) != 0) {
    return Status::IOError("out of memory allocating " + std::to_string(n) + " bytes");
  }
  out->reset(static_cast<uint8_t*>(p));
  return Status::OK();
}

Status with_phase(const char* phase, const Status& s) {
  if (s.ok()) return s;
  return Status(s.code(), std::string(phase) + ": " + s.message());
}

std::string fmt_int(uint64_t v) {
  const std::string d = std::to_string(v);
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0) s.push_back(',');
    s.push_back(d[i]);
  }
  return s;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

/// Tiny-payload namespace of the lookup index: 1 layer x 16 tokens x 1 head x 1 dim (64 bytes).
NamespaceDesc lookup_namespace() {
  NamespaceDesc d;
  d.model_id = "ucm-bench-lookup";
  d.weights_digest = "00000000000000000000000000000000";
  d.dtype = DType::kBF16;
  d.block_size = 16;
  d.num_layers = 1;
  d.num_kv_heads = 1;
  d.head_dim = 1;
  d.name = "bench-lookup";
  return d;
}

/// Dumps blocks [0, n) in tasks of `batch`, `inflight` tasks outstanding. payload(i) gives the
/// source of block i. Returns the wall time from the first submission to the last completion.
Status dump_all(Store* store, const NamespaceId& ns, const std::vector<BlockHash>& hashes,
                const std::vector<BlockHash>& parents, uint32_t token_count,
                const std::function<const void*(uint64_t)>& payload, uint32_t batch,
                uint32_t inflight, const std::function<void(uint64_t)>& on_done, double* seconds,
                const std::vector<uint32_t>* tokens = nullptr) {
  struct Pending {
    std::vector<DumpItem> items;
    std::shared_ptr<Task> task;
    uint64_t first = 0;
  };
  std::deque<Pending> q;
  const uint64_t n = hashes.size();
  uint64_t next = 0, finished = 0;
  double t0 = now_s();
  while (next < n || !q.empty()) {
    while (next < n && q.size() < inflight) {
      Pending p;
      p.first = next;
      uint64_t cnt = std::min<uint64_t>(batch, n - next);
      p.items.resize(cnt);
      for (uint64_t k = 0; k < cnt; ++k) {
        DumpItem& it = p.items[k];
        it.hash = hashes[next + k];
        it.parent = parents[next + k];
        it.token_count = token_count;
        it.kv = payload(next + k);
        // With ids (store_v1.md §3.2), as precompute and servers write: the dump checks and keeps them.
        if (tokens) it.tokens = tokens->data() + (next + k) * token_count;
      }
      p.task = store->dump(ns, p.items.data(), p.items.size());
      q.push_back(std::move(p));
      next += cnt;
    }
    Pending& front = q.front();
    Status s = front.task->wait(-1);
    if (!s.ok()) {
      // Drain the others so no task outlives the sources it points at.
      for (auto& p : q) (void)p.task->wait(-1);  // draining after an error: the first error is returned
      return Status(s.code(), "dump of blocks " + std::to_string(front.first) + ".." +
                                  std::to_string(front.first + front.items.size() - 1) +
                                  " failed: " + s.message());
    }
    finished += front.items.size();
    q.pop_front();
    if (on_done) on_done(finished);
  }
  *seconds = now_s() - t0;
  return Status::OK();
}

std::vector<std::string> data_files(const std::string& store) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(fs::path(store) / "data", ec)) {
    if (e.path().extension() == ".ucmd") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t data_bytes(const std::string& store) {
  uint64_t total = 0;
  for (auto& f : data_files(store)) {
    std::error_code ec;
    auto sz = fs::file_size(f, ec);
    if (!ec) total += sz;
  }
  return total;
}

/// fdatasync + posix_fadvise(DONTNEED) on every data file.
Status drop_data_cache(const std::string& store) {
  for (auto& f : data_files(store)) {
    int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "open " + f);
    ::fdatasync(fd);
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (rc != 0) return Status::FromErrno(rc, "posix_fadvise(DONTNEED) " + f);
  }
  return Status::OK();
}

/// Fraction of the data files' pages resident in the page cache (mincore).
double resident_fraction(const std::string& store) {
  const long page = sysconf(_SC_PAGESIZE);
  uint64_t pages = 0, resident = 0;
  std::vector<unsigned char> vec;
  for (auto& f : data_files(store)) {
    int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat sb;
    if (::fstat(fd, &sb) == 0 && sb.st_size > 0) {
      size_t len = static_cast<size_t>(sb.st_size);
      void* m = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) {
        size_t np = (len + page - 1) / page;
        vec.assign(np, 0);
        if (::mincore(m, len, vec.data()) == 0) {
          pages += np;
          for (unsigned char c : vec) resident += c & 1;
        }
        ::munmap(m, len);
      }
    }
    ::close(fd);
  }
  return pages ? static_cast<double>(resident) / pages : 0.0;
}

}  // namespace

/// A paged KV cache in GPU memory for the --device pass, allocated through libucm_cuda.so (so
/// ucm_bench links no CUDA): L * 2 caches of `slots` NHD pages of all heads.
struct DeviceCache {
  const ucm_cuda_plugin* p = nullptr;
  std::vector<void*> caches;
  uint64_t page = 0;
  NamespaceDesc d;
  ~DeviceCache() {
    for (void* c : caches) (void)p->device_free(c);
  }
  Status open(const NamespaceDesc& desc, int device, uint64_t slots) {
    d = desc;
    UCM_RETURN_IF_ERROR(detail::cuda_device(device, &p));
    UCM_RETURN_IF_ERROR(detail::cuda_status(*p, p->set_device(device), "cudaSetDevice"));
    dev = device;
    page = uint64_t(d.block_size) * d.num_kv_heads * d.head_dim * dtype_size(d.dtype);
    for (uint32_t k = 0; k < d.num_layers * 2; ++k) {
      void* c = nullptr;
      UCM_RETURN_IF_ERROR(detail::cuda_status(*p, p->device_malloc(slots * page, &c), "cudaMalloc"));
      caches.push_back(c);
    }
    return Status::OK();
  }
  Status load(Store& reader, const NamespaceId& ns, const BlockHash* h, uint64_t n, uint64_t first_slot,
              std::shared_ptr<Task>* out) {
    detail::DeviceDest dd;
    dd.layer_caches = caches;
    dd.device = dev;
    for (uint64_t k = 0; k < n; ++k) dd.slots.push_back(int64_t(first_slot + k));
    return detail::load_device(reader, ns, h, n, std::move(dd), out);
  }
  /// Layer 0's K page of `slot`, into dst (host).
  Status first_page(uint64_t slot, void* dst) {
    return detail::cuda_status(*p, p->copy_to_host(dst, static_cast<uint8_t*>(caches[0]) + slot * page, page),
                               "cudaMemcpy device to host");
  }
  /// The scatter path the loads since `copy0`/`kernel0` (scatter_path_counts) took: "copies",
  /// "kernel" or "mixed" (the plugin chooses per shape by measurement: ucm/kernels/launch.h).
  static std::string path_since(uint64_t copy0, uint64_t kernel0) {
    uint64_t c = 0, k = 0;
    detail::scatter_path_counts(&c, &k);
    c -= copy0, k -= kernel0;
    return c && k ? "mixed" : c ? "copies" : k ? "kernel" : "none";
  }
  int dev = 0;
};

StoreBenchRun::UnlinkGuard::~UnlinkGuard() {
  if (!path.empty()) ::unlink(path.c_str());
}

double StoreBenchReport::dump_ratio() const {
  return raw_seq_write.gbps() > 0 ? dump.gbps() / raw_seq_write.gbps() : 0;
}
double StoreBenchReport::load_ratio() const {
  return raw_rand_read.gbps() > 0 ? load.gbps() / raw_rand_read.gbps() : 0;
}
double StoreBenchReport::raw_best_gbps() const {
  return std::max({raw_rand_read.gbps(), raw_rand_read_deep.gbps(), raw_rand_read_buffered.gbps(),
                   raw_rand_read_buffered_readahead.gbps()});
}
double StoreBenchReport::load_best_gbps() const {
  return std::max({load.gbps(), load_deep.gbps(), load_buffered.gbps()});
}
std::string StoreBenchReport::raw_best_mode() const {
  const double b = raw_best_gbps();
  if (b == raw_rand_read_buffered.gbps() && b > 0)
    return "buffered, " + std::to_string(buffered_threads) + " threads, readahead off";
  if (b == raw_rand_read_buffered_readahead.gbps() && b > 0)
    return "buffered, " + std::to_string(buffered_threads) + " threads, kernel readahead";
  if (b == raw_rand_read_deep.gbps() && b > 0) return "O_DIRECT, queue depth " + std::to_string(deep_queue_depth);
  return "O_DIRECT, queue depth " + std::to_string(queue_depth);
}
std::string StoreBenchReport::load_best_mode() const {
  const double b = load_best_gbps();
  if (b == load_buffered.gbps() && b > 0)
    return "direct_io off, io_threads " + std::to_string(buffered_threads);
  if (b == load_deep.gbps() && b > 0) return "direct_io on, io_threads " + std::to_string(deep_queue_depth);
  return "direct_io on, io_threads " + std::to_string(io_threads);
}
std::string StoreBenchReport::to_json() const {
  using J = nlohmann::ordered_json;
  auto fig = [](const Figure& f) {
    J j;
    j["seconds"] = f.seconds;
    j["bytes"] = f.bytes;
    j["count"] = f.count;
    j["gbps"] = f.gbps();
    return j;
  };
  J j;
  j["store"] = store_path;
  j["kept"] = kept;
  j["blocks"] = blocks;
  j["block_bytes"] = block_bytes;
  j["data_bytes"] = blocks * block_bytes;
  j["queue_depth"] = queue_depth;
  j["io_threads"] = io_threads;
  j["batch_blocks"] = batch;
  j["inflight_tasks"] = inflight;
  j["raw"] = {{"engine", raw_engine},
              {"o_direct", true},
              {"seq_write", fig(raw_seq_write)},
              {"rand_read", fig(raw_rand_read)},
              {"rand_read_deep", fig(raw_rand_read_deep)},
              {"deep_queue_depth", deep_queue_depth},
              {"rand_read_buffered", fig(raw_rand_read_buffered)},
              {"rand_read_buffered_readahead", fig(raw_rand_read_buffered_readahead)},
              {"buffered_threads", buffered_threads},
              {"rand_read_best_gbps", raw_best_gbps()},
              {"rand_read_best_mode", raw_best_mode()}};
  J d = fig(dump);
  d["disk_bytes"] = dump_disk_bytes;
  d["ratio_vs_raw_seq_write"] = dump_ratio();
  j["dump"] = d;
  J l = fig(load);
  l["cache_policy"] = cache_policy;
  l["resident_before_load"] = resident_before_load;
  l["verified_samples"] = load_verified_samples;
  l["ratio_vs_raw_rand_read"] = load_ratio();
  j["load"] = l;
  if (load_device.count) {
    J dv = fig(load_device);
    dv["scatter_path"] = device_path;
    dv["ratio_vs_host_load"] = load.gbps() > 0 ? load_device.gbps() / load.gbps() : 0.0;
    j["load_device"] = dv;
  }
  // Every load mode against every raw mode.
  J modes = J::array();
  auto ratios = [&](const Figure& f) {
    auto r = [&](const Figure& raw) { return raw.gbps() > 0 ? f.gbps() / raw.gbps() : 0.0; };
    return J{{"vs_o_direct_qd", r(raw_rand_read)}, {"vs_o_direct_deep", r(raw_rand_read_deep)},
             {"vs_buffered", r(raw_rand_read_buffered)},
             {"vs_buffered_readahead", r(raw_rand_read_buffered_readahead)}, {"vs_best", raw_best_gbps() > 0 ? f.gbps() / raw_best_gbps() : 0.0}};
  };
  modes.push_back({{"mode", "direct_io on, io_threads " + std::to_string(io_threads)}, {"load", fig(load)}, {"ratios", ratios(load)}});
  if (load_deep.count)
    modes.push_back({{"mode", "direct_io on, io_threads " + std::to_string(deep_queue_depth)}, {"load", fig(load_deep)},
                     {"ratios", ratios(load_deep)}});
  if (load_buffered.count)
    modes.push_back({{"mode", "direct_io off, io_threads " + std::to_string(buffered_threads)},
                     {"load", fig(load_buffered)}, {"ratios", ratios(load_buffered)}});
  j["load_modes"] = modes;
  j["load_best"] = {{"mode", load_best_mode()}, {"gbps", load_best_gbps()},
                    {"ratio_vs_raw_best", raw_best_gbps() > 0 ? load_best_gbps() / raw_best_gbps() : 0.0}};
  J k;
  k["index_blocks"] = lookup_index_blocks;
  k["index_build_s"] = lookup_index_build_s;
  k["open_s"] = lookup_open_s;
  k["batch"] = lookup_batch;
  k["cpu"] = lookup_cpu;
  k["lookups"] = lookup.count;
  k["seconds"] = lookup.seconds;
  k["cpu_s"] = lookup_cpu_s;
  k["misses"] = lookup_misses;
  k["lookups_per_s"] = lookups_per_s();
  k["lookups_per_cpu_s"] = lookups_per_cpu_s();
  j["lookup"] = k;
  J t = J::array();
  for (auto& x : targets) {
    t.push_back({{"name", x.name}, {"rule", x.rule}, {"value", x.value},
                 {"threshold", x.threshold}, {"pass", x.pass}});
  }
  j["targets"] = t;
  j["pass"] = all_pass();
  return j.dump(2);
}

std::string StoreBenchReport::to_text() const {
  std::string s;
  s += "ucm bench store: " + fmt_int(blocks) + " blocks x " + fmt_int(block_bytes) + " B (" +
       fmt("%.2f", blocks * block_bytes / 1e9) + " GB) in " + store_path +
       (kept ? " (kept)" : " (removed at the end)") + "\n";
  s += "raw disk: " + raw_engine + ", O_DIRECT, queue depth " + std::to_string(queue_depth) +
       ", scratch file in the store's tmp/; order: raw write, dump, raw read, load\n";
  s += "store: io_threads " + std::to_string(io_threads) + ", tasks of " + std::to_string(batch) +
       " blocks, " + std::to_string(inflight) + " in flight\n";
  s += "page cache: " + cache_policy + "; resident before load: " +
       fmt("%.1f", resident_before_load * 100) + "%\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-34s %12s %12s %8s %9s  %s\n", "figure", "value", "raw",
                "ratio", "target", "result");
  s += line;
  auto row = [&](const char* name, const std::string& v, const std::string& raw,
                 const std::string& ratio, const std::string& tgt, const char* res) {
    std::snprintf(line, sizeof line, "%-34s %12s %12s %8s %9s  %s\n", name, v.c_str(),
                  raw.c_str(), ratio.c_str(), tgt.c_str(), res);
    s += line;
  };
  auto result = [&](const std::string& name) -> const char* {
    for (auto& t : targets)
      if (t.name == name) return t.pass ? "PASS" : "FAIL";
    return "-";
  };
  row("raw sequential write", fmt("%.2f GB/s", raw_seq_write.gbps()), "", "", "", "");
  row("raw random read", fmt("%.2f GB/s", raw_rand_read.gbps()), "", "", "", "");
  row(("raw random read, O_DIRECT qd " + std::to_string(deep_queue_depth)).c_str(),
      fmt("%.2f GB/s", raw_rand_read_deep.gbps()), "", "", "", "");
  row(("raw random read, buffered x" + std::to_string(buffered_threads)).c_str(),
      fmt("%.2f GB/s", raw_rand_read_buffered.gbps()), "", "", "", "");
  row(("raw random read, buffered x" + std::to_string(buffered_threads) + " +ra").c_str(),
      fmt("%.2f GB/s", raw_rand_read_buffered_readahead.gbps()), "", "", "", "");
  row("dump (durable)", fmt("%.2f GB/s", dump.gbps()), fmt("%.2f GB/s", raw_seq_write.gbps()),
      fmt("%.2fx", dump_ratio()), fmt(">=%.2fx", kDumpTarget), result("dump"));
  row("load (verified, cold, random)", fmt("%.2f GB/s", load.gbps()),
      fmt("%.2f GB/s", raw_rand_read.gbps()), fmt("%.2fx", load_ratio()),
      fmt(">=%.2fx", kLoadTarget), result("load"));
  row(("load, O_DIRECT x" + std::to_string(deep_queue_depth)).c_str(), fmt("%.2f GB/s", load_deep.gbps()),
      fmt("%.2f GB/s", raw_rand_read_deep.gbps()),
      fmt("%.2fx", raw_rand_read_deep.gbps() > 0 ? load_deep.gbps() / raw_rand_read_deep.gbps() : 0), "", "");
  row(("load, buffered x" + std::to_string(buffered_threads)).c_str(), fmt("%.2f GB/s", load_buffered.gbps()),
      fmt("%.2f GB/s", raw_rand_read_buffered.gbps()),
      fmt("%.2fx", raw_rand_read_buffered.gbps() > 0 ? load_buffered.gbps() / raw_rand_read_buffered.gbps() : 0), "", "");
  row("best load / best raw read", fmt("%.2f GB/s", load_best_gbps()), fmt("%.2f GB/s", raw_best_gbps()),
      fmt("%.2fx", raw_best_gbps() > 0 ? load_best_gbps() / raw_best_gbps() : 0), fmt(">=%.2fx", kLoadBestTarget),
      result("load_best"));
  s += "best raw read: " + raw_best_mode() + "; best load: " + load_best_mode() + "\n";
  if (load_device.count)
    row(("load into GPU memory (" + device_path + ")").c_str(), fmt("%.2f GB/s", load_device.gbps()),
        fmt("%.2f GB/s", load.gbps()), fmt("%.2fx", load.gbps() > 0 ? load_device.gbps() / load.gbps() : 0), "", "");
  if (lookup_index_blocks) {
    row("lookups (1 thread, wall)", fmt("%.2f M/s", lookups_per_s() / 1e6), "", "",
        fmt(">=%.1f M/s", kLookupTarget / 1e6), result("lookup"));
    row("lookups (per CPU second)", fmt("%.2f M/s", lookups_per_cpu_s() / 1e6), "", "", "", "");
    s += "\nlookup: " + fmt_int(lookup_index_blocks) + "-block index (built in " +
         fmt("%.1f", lookup_index_build_s) + " s, read-only open " + fmt("%.2f", lookup_open_s) +
         " s), prefix batches of " + std::to_string(lookup_batch) + " hashes, CPU " +
         std::to_string(lookup_cpu) + ", " + fmt_int(lookup.count) + " lookups in " +
         fmt("%.2f", lookup.seconds) + " s, misses " + fmt_int(lookup_misses) + "\n";
  }
  s += "dump: " + fmt_int(dump_disk_bytes) + " bytes added to the data files (" +
       fmt("%.2f", dump.seconds) + " s); load: " + fmt("%.2f", load.seconds) + " s, " +
       fmt_int(load_verified_samples) + " blocks byte-compared with their source\n";
  s += std::string("overall: ") + (all_pass() ? "PASS" : "FAIL") + "\n";
  return s;
}

namespace store_phases {

Status prepare(StoreBenchRun* b) {
  const StoreBenchOptions& o = b->o;
  StoreBenchReport* r = b->r;
  if (o.blocks == 0) return Status::InvalidArgument("--blocks must be at least 1");
  if (o.block_bytes == 0 || o.block_bytes % 4096 != 0) {
    return Status::InvalidArgument("--block-bytes " + std::to_string(o.block_bytes) +
                                   " must be a positive multiple of 4096 (the raw passes use "
                                   "O_DIRECT; the default model's block is 368640)");
  }
  if (o.queue_depth == 0 || o.batch == 0 || o.inflight == 0) {
    return Status::InvalidArgument("queue depth, batch and inflight must be at least 1");
  }
  *r = StoreBenchReport{};
  r->blocks = o.blocks;
  r->block_bytes = o.block_bytes;
  r->queue_depth = o.queue_depth;
  r->io_threads = o.io_threads ? o.io_threads : o.queue_depth;
  r->batch = o.batch;
  r->inflight = o.inflight;
  r->kept = o.keep;

  // ---- where
  b->path = bench_store_path(o, "ucm-bench-");
  std::error_code ec;
  if (!o.keep) {
    if (fs::exists(b->path, ec)) {
      return Status::InvalidArgument(b->path + " already exists; remove it or pass another --store");
    }
    fs::create_directories(fs::path(b->path).parent_path(), ec);
    b->guard.path = b->path;
    b->guard.armed = true;
  }
  r->store_path = fs::absolute(b->path, ec).string();

  b->seed = o.seed;
  if (b->seed == 0) b->seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  b->rng.seed(b->seed);

  b->wopts.mode = OpenOptions::Mode::kReadWrite;
  b->wopts.create_if_missing = true;
  b->wopts.io_threads = r->io_threads;
  b->wopts.direct_io = true;
  b->ropts.mode = OpenOptions::Mode::kReadOnly;
  b->ropts.io_threads = r->io_threads;
  b->ropts.direct_io = true;
  b->ropts.refresh_interval_ms = 1000;

  Status s = Store::Open(b->path, b->wopts, &b->store);
  if (!s.ok()) return with_phase("open store (writer)", s);
  return Status::OK();
}

Status raw_write(StoreBenchRun* b) {
  // Raw disk, same directory, same block size and queue depth. Phases run in the order raw
  // write, dump, raw read, load, so that each read pass reads data written one phase before it
  // (a virtual disk's host cache favours freshly written data equally in both).
  const StoreBenchOptions& o = b->o;
  std::error_code ec;
  fs::create_directories(fs::path(b->path) / "tmp", ec);
  b->scratch = (fs::path(b->path) / "tmp" / ("bench-raw-" + std::to_string(::getpid()) + ".dat")).string();
  b->unlink_scratch.path = b->scratch;
  b->progress("raw: sequential write of " + fmt_int(o.blocks) + " x " + fmt_int(o.block_bytes) +
              " B, O_DIRECT, queue depth " + std::to_string(o.queue_depth));
  RawIoResult w;
  Status s = raw_seq_write(b->scratch, o.block_bytes, o.blocks, o.queue_depth, b->eng, &w, &b->r->raw_engine);
  if (!s.ok()) return with_phase("raw sequential write", s);
  b->r->raw_seq_write = {w.seconds, w.bytes, w.ios};
  return Status::OK();
}

Status dump(StoreBenchRun* b) {
  const StoreBenchOptions& o = b->o;
  StoreBenchReport* r = b->r;
  b->desc = payload_namespace(o.block_bytes, "ucm-bench", "bench");
  Status s = b->store->register_namespace(b->desc, &b->ns);
  if (!s.ok()) {
    return with_phase("register namespace \"bench\" (a --keep store must have been benched with "
                      "the same --block-bytes)", s);
  }
  if (b->desc.payload_bytes() != o.block_bytes) {
    return Status::Internal("bench namespace payload " + std::to_string(b->desc.payload_bytes()) +
                            " != block bytes " + std::to_string(o.block_bytes));
  }
  std::vector<uint32_t> tokens;
  make_chains(b->ns, o.blocks, kChainLen, b->desc.block_size, b->rng, &b->hashes, &b->parents, &tokens);
  constexpr uint64_t kPool = 64;
  b->pool_n = std::min<uint64_t>(kPool, o.blocks);
  b->src.resize(b->pool_n);
  for (auto& buf : b->src) {
    s = alloc_aligned(o.block_bytes, &buf);
    if (!s.ok()) return s;
    auto* w = reinterpret_cast<uint64_t*>(buf.get());
    for (uint64_t k = 0; k < o.block_bytes / 8; ++k) w[k] = b->rng();
  }
  uint64_t before = data_bytes(b->path);
  b->progress("dump: " + fmt_int(o.blocks) + " blocks into namespace \"bench\"");
  b->last_progress = now_s();
  s = dump_all(
      b->store.get(), b->ns, b->hashes, b->parents, b->desc.block_size,
      [&](uint64_t i) -> const void* { return b->src[i % b->pool_n].get(); }, o.batch, o.inflight,
      [&](uint64_t done) {
        if (now_s() - b->last_progress > 2) {
          b->last_progress = now_s();
          b->progress("dump: " + fmt_int(done) + " / " + fmt_int(o.blocks));
        }
      },
      &r->dump.seconds, &tokens);
  if (!s.ok()) return with_phase("dump", s);
  r->dump.bytes = o.blocks * o.block_bytes;
  r->dump.count = o.blocks;
  r->dump_disk_bytes = data_bytes(b->path) - before;
  b->store.reset();
  return Status::OK();
}

Status raw_reads(StoreBenchRun* b) {
  const StoreBenchOptions& o = b->o;
  StoreBenchReport* r = b->r;
  Status s = drop_data_cache(b->path);
  if (!s.ok()) return with_phase("drop page cache", s);
  b->progress("raw: random read of " + fmt_int(o.blocks) + " x " + fmt_int(o.block_bytes) + " B");
  RawIoResult rd;
  s = raw_rand_read(b->scratch, o.block_bytes, o.blocks, o.queue_depth, b->rng(), b->eng, &rd, &r->raw_engine);
  if (!s.ok()) return with_phase("raw random read", s);
  r->raw_rand_read = {rd.seconds, rd.bytes, rd.ios};
  r->deep_queue_depth = o.deep_queue_depth;
  r->buffered_threads = o.buffered_threads;
  if (o.deep_queue_depth) {
    b->progress("raw: random read, O_DIRECT, queue depth " + std::to_string(o.deep_queue_depth));
    s = raw_rand_read(b->scratch, o.block_bytes, o.blocks, o.deep_queue_depth, b->rng(), b->eng, &rd, &r->raw_engine);
    if (!s.ok()) return with_phase("raw random read (deep queue)", s);
    r->raw_rand_read_deep = {rd.seconds, rd.bytes, rd.ios};
  }
  if (o.buffered_threads) {
    b->progress("raw: random read, buffered, " + std::to_string(o.buffered_threads) + " threads, page cache dropped");
    s = raw_rand_read_buffered(b->scratch, o.block_bytes, o.blocks, o.buffered_threads, /*readahead=*/false, b->rng(),
                               &rd);
    if (!s.ok()) return with_phase("raw random read (buffered)", s);
    r->raw_rand_read_buffered = {rd.seconds, rd.bytes, rd.ios};
    b->progress("raw: random read, buffered, " + std::to_string(o.buffered_threads) +
                " threads, kernel readahead, page cache dropped");
    s = raw_rand_read_buffered(b->scratch, o.block_bytes, o.blocks, o.buffered_threads, /*readahead=*/true, b->rng(),
                               &rd);
    if (!s.ok()) return with_phase("raw random read (buffered, readahead)", s);
    r->raw_rand_read_buffered_readahead = {rd.seconds, rd.bytes, rd.ios};
  }
  ::unlink(b->scratch.c_str());
  return Status::OK();
}

Status load_pass(StoreBenchRun* b, const OpenOptions& lo, Figure* out, DeviceCache* dev) {
  const StoreBenchOptions& o = b->o;
  Status s = drop_data_cache(b->path);
  if (!s.ok()) return with_phase("drop page cache", s);
  std::unique_ptr<Store> reader;
  s = Store::Open(b->path, lo, &reader);
  if (!s.ok()) return with_phase("open store (read-only) for load", s);
  std::vector<uint64_t> order(o.blocks);
  for (uint64_t i = 0; i < o.blocks; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), b->rng);
  const uint64_t slots = static_cast<uint64_t>(o.batch) * o.inflight;
  std::vector<AlignedBuf> dst(slots);
  for (auto& buf : dst) {
    s = alloc_aligned(o.block_bytes, &buf);
    if (!s.ok()) return s;
  }
  struct Pending {
    std::shared_ptr<Task> task;
    std::vector<BlockHash> hashes;
    uint64_t first = 0;  // index into order
    uint32_t slot = 0;
    LoadDest dest;
  };
  std::deque<Pending> q;
  std::vector<uint32_t> free_slots;
  for (uint32_t k = 0; k < o.inflight; ++k) free_slots.push_back(k);
  b->progress("load: " + fmt_int(o.blocks) + " blocks in random order");
  uint64_t next = 0;
  double t0 = now_s();
  b->last_progress = t0;
  while (next < o.blocks || !q.empty()) {
    while (next < o.blocks && !free_slots.empty()) {
      Pending p;
      p.slot = free_slots.back();
      free_slots.pop_back();
      p.first = next;
      uint64_t cnt = std::min<uint64_t>(o.batch, o.blocks - next);
      p.hashes.resize(cnt);
      p.dest.kind = LoadDest::Kind::kContiguous;
      for (uint64_t k = 0; k < cnt; ++k) {
        p.hashes[k] = b->hashes[order[next + k]];
        p.dest.ptrs.push_back(dst[p.slot * o.batch + k].get());
      }
      if (dev) {
        s = dev->load(*reader, b->ns, p.hashes.data(), cnt, p.slot * o.batch, &p.task);
        if (!s.ok()) {
          for (auto& pp : q) (void)pp.task->wait(-1);
          return with_phase("device load", s);
        }
      } else {
        p.task = reader->load(b->ns, p.hashes.data(), cnt, p.dest);
      }
      q.push_back(std::move(p));
      next += cnt;
    }
    Pending& f = q.front();
    Status ws = f.task->wait(-1);
    if (!ws.ok()) {
      for (auto& p : q) (void)p.task->wait(-1);  // draining after an error: the first error is returned
      return with_phase("load", ws);
    }
    // Sample check: the first block of every task equals its source (on a device: its layer-0
    // K page).
    uint64_t bi = order[f.first];
    if (dev) {
      s = dev->first_page(f.slot * o.batch, dst[f.slot * o.batch].get());
      if (!s.ok()) return with_phase("device load: copy back", s);
    }
    if (std::memcmp(dst[f.slot * o.batch].get(), b->src[bi % b->pool_n].get(), dev ? dev->page : o.block_bytes) != 0) {
      for (auto& p : q) (void)p.task->wait(-1);  // draining after an error: the first error is returned
      return Status::Internal("load: block " + to_hex(b->hashes[bi]) +
                              " came back with bytes different from those dumped");
    }
    ++b->r->load_verified_samples;
    free_slots.push_back(f.slot);
    q.pop_front();
    if (now_s() - b->last_progress > 2) {
      b->last_progress = now_s();
      b->progress("load: " + fmt_int(next) + " / " + fmt_int(o.blocks));
    }
  }
  out->seconds = now_s() - t0;
  out->bytes = o.blocks * o.block_bytes;
  out->count = o.blocks;
  return Status::OK();
}

Status load_passes(StoreBenchRun* b) {
  const StoreBenchOptions& o = b->o;
  StoreBenchReport* r = b->r;
  r->resident_before_load = resident_fraction(b->path);
  r->cache_policy =
      "data files fdatasync'd and dropped with posix_fadvise(DONTNEED) after the dump and before "
      "every load pass; the first load pass reads with O_DIRECT (OpenOptions::direct_io=true), the "
      "others as their mode says";
  Status s = load_pass(b, b->ropts, &r->load);
  if (!s.ok()) return s;
  if (o.device >= 0) {
    DeviceCache dc;
    s = dc.open(b->desc, o.device, uint64_t(o.batch) * o.inflight);
    if (!s.ok()) return with_phase("device cache", s);
    b->progress("load: into GPU " + std::to_string(o.device) + " (paged NHD cache), page cache dropped");
    uint64_t copy0 = 0, kernel0 = 0;
    detail::scatter_path_counts(&copy0, &kernel0);
    s = load_pass(b, b->ropts, &r->load_device, &dc);
    if (!s.ok()) return s;
    r->device_path = DeviceCache::path_since(copy0, kernel0);
  }
  if (o.deep_queue_depth) {
    OpenOptions lo = b->ropts;
    lo.io_threads = o.deep_queue_depth;
    b->progress("load: O_DIRECT, " + std::to_string(lo.io_threads) + " I/O threads");
    s = load_pass(b, lo, &r->load_deep);
    if (!s.ok()) return s;
  }
  if (o.buffered_threads) {
    OpenOptions lo = b->ropts;
    lo.io_threads = o.buffered_threads;
    lo.direct_io = false;
    b->progress("load: buffered, " + std::to_string(lo.io_threads) + " I/O threads, page cache dropped");
    s = load_pass(b, lo, &r->load_buffered);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

Status build_lookup_index(StoreBenchRun* b, uint32_t chain, NamespaceId* lns, std::vector<BlockHash>* lh,
                          std::vector<BlockHash>* lp) {
  const StoreBenchOptions& o = b->o;
  NamespaceDesc ldesc = lookup_namespace();
  Status s = Store::Open(b->path, b->wopts, &b->store);
  if (!s.ok()) return with_phase("open store (writer) for the lookup index", s);
  s = b->store->register_namespace(ldesc, lns);
  if (!s.ok()) return with_phase("register namespace \"bench-lookup\"", s);
  make_chains(*lns, o.lookup_blocks, chain, ldesc.block_size, b->rng, lh, lp);
  AlignedBuf tiny;
  s = alloc_aligned(4096, &tiny);
  if (!s.ok()) return s;
  std::memset(tiny.get(), 0x5a, 4096);
  b->progress("lookup: building a " + fmt_int(o.lookup_blocks) + "-block index (namespace \"bench-lookup\", " +
              fmt_int(ldesc.payload_bytes()) + "-byte payloads)");
  b->last_progress = now_s();
  s = dump_all(
      b->store.get(), *lns, *lh, *lp, ldesc.block_size, [&](uint64_t) -> const void* { return tiny.get(); }, 4096, 2,
      [&](uint64_t done) {
        if (now_s() - b->last_progress > 2) {
          b->last_progress = now_s();
          b->progress("lookup index: " + fmt_int(done) + " / " + fmt_int(o.lookup_blocks));
        }
      },
      &b->r->lookup_index_build_s);
  if (!s.ok()) return with_phase("lookup index dump", s);
  b->store.reset();
  return Status::OK();
}

Status lookup(StoreBenchRun* b) {
  const StoreBenchOptions& o = b->o;
  StoreBenchReport* r = b->r;
  r->lookup_index_blocks = o.lookup_blocks;
  if (o.lookup_blocks == 0) return Status::OK();
  const uint32_t chain =
      static_cast<uint32_t>(std::min<uint64_t>(std::max<uint32_t>(o.lookup_batch, 1), o.lookup_blocks));
  r->lookup_batch = chain;
  NamespaceId lns{};
  std::vector<BlockHash> lh, lp;
  Status s = build_lookup_index(b, chain, &lns, &lh, &lp);
  if (!s.ok()) return s;
  std::unique_ptr<Store> reader;
  double t0 = now_s();
  s = Store::Open(b->path, b->ropts, &reader);
  if (!s.ok()) return with_phase("open store (read-only) for lookups", s);
  r->lookup_open_s = now_s() - t0;
  const uint64_t chains = (o.lookup_blocks + chain - 1) / chain;
  b->progress("lookup: " + fmt("%.1f", o.lookup_seconds) + " s of " + std::to_string(chain) +
              "-hash prefix lookups on one pinned thread");
  Status ls;
  std::thread th([&] {
    r->lookup_cpu = pin_to_one_cpu();
    std::mt19937_64 lrng(b->seed ^ 0x9e3779b97f4a7c15ull);
    std::vector<uint8_t> present(chain);
    auto one = [&](uint64_t c) -> Status {
      uint64_t first = c * chain;
      uint64_t len = std::min<uint64_t>(chain, o.lookup_blocks - first);
      size_t prefix = 0;
      Status st = reader->lookup(lns, &lh[first], len, present.data(), &prefix);
      if (st.ok() && prefix != len) ++r->lookup_misses;
      return st;
    };
    for (int w = 0; w < 1000; ++w) {  // warm-up, not counted
      ls = one(lrng() % chains);
      if (!ls.ok()) return;
    }
    r->lookup_misses = 0;
    uint64_t probes = 0;
    double c0 = thread_cpu_s();
    double w0 = now_s();
    double w1 = w0;
    for (;;) {
      for (int k = 0; k < 64; ++k) {
        uint64_t c = lrng() % chains;
        ls = one(c);
        if (!ls.ok()) return;
        probes += std::min<uint64_t>(chain, o.lookup_blocks - c * chain);
      }
      w1 = now_s();
      if (w1 - w0 >= o.lookup_seconds) break;
    }
    r->lookup_cpu_s = thread_cpu_s() - c0;
    r->lookup.seconds = w1 - w0;
    r->lookup.count = probes;
  });
  th.join();
  if (!ls.ok()) return with_phase("lookup", ls);
  return Status::OK();
}

void set_targets(StoreBenchRun* b) {
  StoreBenchReport* r = b->r;
  r->targets.push_back({"dump", "dump >= 0.80 x raw sequential write", r->dump_ratio(), kDumpTarget,
                        r->dump_ratio() >= kDumpTarget});
  r->targets.push_back({"load", "load >= 0.80 x raw random read", r->load_ratio(), kLoadTarget,
                        r->load_ratio() >= kLoadTarget});
  const double best = r->raw_best_gbps() > 0 ? r->load_best_gbps() / r->raw_best_gbps() : 0;
  r->targets.push_back({"load_best", "best load >= 0.90 x best raw random read (" + r->raw_best_mode() + ")", best,
                        kLoadBestTarget, best >= kLoadBestTarget});
  if (b->o.lookup_blocks > 0) {
    r->targets.push_back({"lookup", "lookups >= 1,000,000 per second on one core", r->lookups_per_s(), kLookupTarget,
                          r->lookups_per_s() >= kLookupTarget && r->lookup_misses == 0});
  }
}

}  // namespace store_phases

Status run_store_bench(const StoreBenchOptions& o, StoreBenchReport* r) {
  using namespace store_phases;
  StoreBenchRun b(o, r);
  Status s = prepare(&b);
  if (s.ok()) s = raw_write(&b);
  if (s.ok()) s = dump(&b);
  if (s.ok()) s = raw_reads(&b);
  if (s.ok()) s = load_passes(&b);
  if (s.ok()) s = lookup(&b);
  if (!s.ok()) return s;
  set_targets(&b);
  if (!o.keep) b.progress("removing " + b.path);
  return Status::OK();
}

}  // namespace ucm::bench
