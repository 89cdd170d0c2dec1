// kernels/bench/kernels_bench.cc: see kernels_bench.h.
#include "kernels_bench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ucm/kernels/launch.h"

namespace ucm::kernels::bench {
namespace {

struct CudaError {
  std::string what;
};
void ck(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw CudaError{std::string(call) + ": " + cudaGetErrorString(e)};
}
#define CK(x) ck((x), #x)

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t n) { CK(cudaMalloc(&p, std::max<size_t>(n, 1))); }
  ~DevBuf() { cudaFree(p); }
};
struct HostBuf {
  void* p = nullptr;
  explicit HostBuf(size_t n) { CK(cudaHostAlloc(&p, std::max<size_t>(n, 1), cudaHostAllocMapped | cudaHostAllocPortable)); }
  ~HostBuf() { cudaFreeHost(p); }
};

// Median milliseconds of iters runs of f (after one warm-up), timed with events on the stream.
double time_ms(cudaStream_t s, uint32_t iters, const std::function<void()>& f) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();
  CK(cudaStreamSynchronize(s));
  std::vector<float> ms;
  for (uint32_t i = 0; i < iters; ++i) {
    CK(cudaEventRecord(a, s));
    f();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// One load's layers scattered vs one H2D copy of the bytes the cache receives.
KernelsBenchReport::Row scatter_case(const std::string& name, cudaStream_t s, uint32_t iters, uint32_t L, uint32_t T,
                                     uint32_t H, uint32_t D, uint32_t h0, uint32_t h1, uint32_t n,
                                     int32_t force_path = -1) {
  const uint64_t row = uint64_t(D) * 2, heads = h1 - h0, page = uint64_t(T) * heads * row;
  const uint64_t block_bytes = uint64_t(L) * 2 * T * H * row, moved = uint64_t(n) * L * 2 * page;
  HostBuf staging(n * block_bytes + n * sizeof(int64_t));
  std::memset(staging.p, 1, n * block_bytes);
  auto* slots = reinterpret_cast<int64_t*>(static_cast<uint8_t*>(staging.p) + n * block_bytes);
  for (uint32_t i = 0; i < n; ++i) slots[i] = int64_t((i * 7) % n);  // a permutation: scattered pages
  std::vector<std::unique_ptr<DevBuf>> caches;
  for (uint32_t k = 0; k < L * 2; ++k) caches.push_back(std::make_unique<DevBuf>(n * page));
  DevBuf flat(moved);
  ScatterPath path = ScatterPath::kKernel;
  KernelsBenchReport::Row r;
  r.name = name;
  r.baseline = "cudaMemcpyAsync H2D of the same bytes";
  r.bytes = double(moved);
  r.target = force_path < 0 ? 0.8 : 0.0;  // a forced path is there to compare, not a target
  if (force_path < 0) {  // what scatter_layer measures on its first load of this shape
    ScatterArgs a;
    a.src = static_cast<const uint8_t*>(staging.p), a.slots = slots, a.dst_k = caches[0]->p, a.dst_v = caches[1]->p;
    a.n = n, a.block_bytes = block_bytes, a.slot_stride = page, a.layer = 0, a.L = L, a.T = T, a.H = H, a.h0 = h0;
    a.h1 = h1, a.row_bytes = uint32_t(row), a.layout = kLayoutNHD;
    ScatterCalibration c;
    CK(scatter_calibrate(a, s, &c));
    r.calib_copies_ms = c.copies_ms, r.calib_kernel_ms = c.kernel_ms;
  }
  r.ms = time_ms(s, iters, [&] {
    for (uint32_t l = 0; l < L; ++l) {
      ScatterArgs a;
      a.src = static_cast<const uint8_t*>(staging.p), a.slots = slots, a.dst_k = caches[2 * l]->p;
      a.dst_v = caches[2 * l + 1]->p, a.n = n, a.block_bytes = block_bytes, a.slot_stride = page, a.layer = l;
      a.L = L, a.T = T, a.H = H, a.h0 = h0, a.h1 = h1, a.row_bytes = uint32_t(row), a.layout = kLayoutNHD;
      a.force_path = force_path;
      CK(scatter_layer(a, s, &path));
    }
  });
  r.path = path == ScatterPath::kCopies ? "copies" : "kernel";
  r.baseline_ms =
      time_ms(s, iters, [&] { CK(cudaMemcpyAsync(flat.p, staging.p, moved, cudaMemcpyHostToDevice, s)); });
  return r;
}

KernelsBenchReport::Row score_case(const std::string& name, int32_t kind, cudaStream_t s, const KernelsBenchOptions& o) {
  const uint32_t S = o.sets, C = o.repr_blocks, D = o.head_dim, G = o.group, T = o.block_size, Bb = 16;
  const uint64_t bytes = kind == kScoreHamming ? uint64_t(S) * C * T * Bb
                                               : uint64_t(S) * C * (kind == kScoreDot ? D : 2 * D) * 2;
  DevBuf r(bytes), r2(bytes), q(uint64_t(S) * G * D * 4), code(uint64_t(S) * Bb), score(uint64_t(S) * C * 4),
      mark(uint64_t(S) * C), idx(uint64_t(S) * C * 4), count(uint64_t(S) * 4);
  CK(cudaMemsetAsync(r.p, 0x3c, bytes, s));
  CK(cudaMemsetAsync(q.p, 0x3c, uint64_t(S) * G * D * 4, s));
  CK(cudaMemsetAsync(code.p, 0x5a, uint64_t(S) * Bb, s));
  ScoreArgs sc;
  sc.kind = kind, sc.r = r.p, sc.dtype = kBF16, sc.q = static_cast<const float*>(q.p);
  sc.code = static_cast<const uint8_t*>(code.p), sc.out = static_cast<float*>(score.p);
  sc.S = S, sc.C = C, sc.n = C, sc.D = D, sc.G = G, sc.T = T, sc.Bb = Bb;
  SelectArgs sel;
  sel.score = sc.out, sel.mark = static_cast<uint8_t*>(mark.p), sel.idx = static_cast<uint32_t*>(idx.p);
  sel.count = static_cast<uint32_t*>(count.p), sel.S = S, sel.n = C, sel.idx_cap = C, sel.sink = 1, sel.local = 4;
  sel.k = C / 8;
  KernelsBenchReport::Row row;
  row.name = name;
  row.baseline = "cudaMemcpyAsync D2D of the representations";
  row.bytes = double(bytes);
  row.target = 0.7;
  row.path = "fused score + top-k";
  row.ms = time_ms(s, o.iters, [&] { CK(score_select_topk(sc, sel, s)); });
  row.baseline_ms = time_ms(s, o.iters, [&] { CK(cudaMemcpyAsync(r2.p, r.p, bytes, cudaMemcpyDeviceToDevice, s)); });
  return row;
}

}  // namespace

bool KernelsBenchReport::all_pass() const {
  return std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.pass(); });
}

std::string KernelsBenchReport::to_json() const {
  nlohmann::json j;
  j["device"] = device_name;
  j["cases"] = nlohmann::json::array();
  for (const auto& r : rows)
    j["cases"].push_back({{"name", r.name}, {"path", r.path}, {"bytes", r.bytes}, {"ms", r.ms},
                          {"gb_per_s", r.bytes / r.ms / 1e6}, {"baseline", r.baseline}, {"baseline_ms", r.baseline_ms},
                          {"baseline_gb_per_s", r.bytes / r.baseline_ms / 1e6}, {"ratio", r.ratio()},
                          {"target", r.target}, {"pass", r.pass()}});
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].calib_copies_ms > 0)
      j["cases"][i]["calibration_ms_per_layer"] = {{"copies", rows[i].calib_copies_ms}, {"kernel", rows[i].calib_kernel_ms}};
  j["all_pass"] = all_pass();
  return j.dump(2);
}

std::string KernelsBenchReport::to_text() const {
  std::ostringstream s;
  s << "device: " << device_name << "\n";
  char line[256];
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%-34s %-8s %8.1f MiB %8.3f ms %7.1f GB/s  baseline %7.1f GB/s  %.2fx (target %.1fx) %s\n",
                  r.name.c_str(), r.path.substr(0, 8).c_str(), r.bytes / 1048576.0, r.ms, r.bytes / r.ms / 1e6,
                  r.bytes / r.baseline_ms / 1e6, r.ratio(), r.target, r.pass() ? "ok" : "MISSED");
    s << line;
    if (r.calib_copies_ms > 0) {
      std::snprintf(line, sizeof line, "%-34s measured per layer: copies %.3f ms, kernel %.3f ms\n", "", r.calib_copies_ms,
                    r.calib_kernel_ms);
      s << line;
    }
  }
  return s.str();
}

Status run_kernels_bench(const KernelsBenchOptions& o, KernelsBenchReport* out) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || o.device < 0 || o.device >= count)
    return Status::NotSupported("CUDA device " + std::to_string(o.device) + " is not available (" +
                                std::to_string(count) + " devices): ucm bench kernels needs a GPU");
  try {
    CK(cudaSetDevice(o.device));
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, o.device));
    out->device_name = prop.name;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const uint32_t H = o.kv_heads, per = std::max(1u, H / o.tp);
    out->rows.push_back(scatter_case("scatter whole blocks", s, o.iters, o.layers, o.block_size, H, o.head_dim, 0, H,
                                     o.blocks));
    out->rows.push_back(scatter_case("scatter TP-" + std::to_string(o.tp) + " head range", s, o.iters, o.layers,
                                     o.block_size, H, o.head_dim, per, 2 * per <= H ? 2 * per : H, o.blocks));
    out->rows.push_back(scatter_case("scatter SmolLM2-135M blocks", s, o.iters, 30, o.block_size, 3, 64, 0, 3,
                                     o.blocks * 8));
    // The other path on the first and last shapes (no target): what kMinCopyRunBytes should be.
    out->rows.push_back(scatter_case("scatter whole blocks, kernel forced", s, o.iters, o.layers, o.block_size, H,
                                     o.head_dim, 0, H, o.blocks, 1));
    out->rows.push_back(scatter_case("scatter SmolLM2-135M blocks, copies forced", s, o.iters, 30, o.block_size, 3,
                                     64, 0, 3, o.blocks * 8, 0));
    out->rows.push_back(score_case("R0 dot + top-k", kScoreDot, s, o));
    out->rows.push_back(score_case("R1 bound + top-k", kScoreBound, s, o));
    out->rows.push_back(score_case("R4 Hamming + top-k (GSA)", kScoreHamming, s, o));
    cudaStreamDestroy(s);
  } catch (const CudaError& e) {
    return Status::IOError(e.what);
  }
  return Status::OK();
}

}  // namespace ucm::kernels::bench
