// The launchers of kernels/ on a GPU, each against the host-run harness (harness.h), which the
// host tests tie to libucm's CPU code: scores, sign hash and RoPE bit for bit (the kernels round
// as the host does: no FMA), top-k (alone and fused with scoring) and PSA set for set, the paged
// scatter byte for byte on both paths; and ucm_store_load_ex into cudaMalloc'd paged caches
// against a host paged load of the same blocks, byte for byte (NHD, HND, a TP-4 head range),
// with real streams, events and the per-layer callback. Label "gpu"; every test skips without a
// CUDA device. scripts/device_check.sh runs it.
#include <cuda_runtime_api.h>
#include <algorithm>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "device_store.h"
#include "harness.h"
#include "ucm/blend.h"
#include "ucm/kernels/launch.h"

namespace k = ucm::kernels;

namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"
#define CU(x) ASSERT_EQ((x), cudaSuccess) << #x << ": " << cudaGetErrorString(cudaGetLastError())

// A device copy of a host vector, freed with the object.
template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<T>& h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit Dev(size_t count) : n(count) { EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess); }
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

std::vector<float> randf(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

std::vector<uint8_t> bf16_bytes(const std::vector<float>& f) {
  std::vector<uint8_t> b(f.size() * 2);
  for (size_t i = 0; i < f.size(); ++i) k::store_elem(b.data(), k::kBF16, i, f[i]);
  return b;
}

}  // namespace

TEST(KernelsGpu, ScoresEqualTheHarness) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  // D = 72: four lane steps and a tail of 8 (the half-warp scoring adds the tail first).
  for (const uint32_t D : {128u, 72u})
  for (int32_t kind : {k::kScoreDot, k::kScoreBound}) {
    const uint32_t S = 64, C = 300, n = 290, G = 4, width = kind == k::kScoreDot ? D : 2 * D;
    const auto r = bf16_bytes(randf(size_t(S) * C * width, rng));
    const auto q = randf(size_t(S) * G * D, rng);
    std::vector<uint8_t> valid(n, 1);
    valid[7] = 0;
    Dev<uint8_t> dr(r), dv(valid);
    Dev<float> dq(q), dout(size_t(S) * n);
    k::ScoreArgs a;
    a.kind = kind, a.r = dr.p, a.dtype = k::kBF16, a.q = dq.p, a.valid = dv.p, a.out = dout.p;
    a.S = S, a.C = C, a.n = n, a.D = D, a.G = G;
    CU(k::block_scores(a, nullptr));
    CU(cudaDeviceSynchronize());
    std::vector<float> want(size_t(S) * n);
    k::ScoreArgs h = a;
    h.r = r.data(), h.q = q.data(), h.valid = valid.data(), h.out = want.data();
    k::host::scores(h);
    const auto got = dout.get();
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << "kind " << kind << " D " << D;
    // The fused score + top-k (one CUDA block per set) gives the same scores and marks.
    Dev<float> dfused(size_t(S) * n);
    Dev<uint8_t> dmark(size_t(S) * n);
    Dev<uint32_t> didx(size_t(S) * n), dcount(S);
    CU(cudaMemset(dfused.p, 0, size_t(S) * n * 4));
    k::ScoreArgs f = a;
    f.out = dfused.p;
    k::SelectArgs sel;
    sel.score = dfused.p, sel.valid = dv.p, sel.mark = dmark.p, sel.idx = didx.p, sel.count = dcount.p;
    sel.S = S, sel.n = n, sel.idx_cap = n, sel.sink = 1, sel.local = 4, sel.k = 37;
    CU(k::score_select_topk(f, sel, nullptr));
    CU(cudaDeviceSynchronize());
    const auto fused = dfused.get();
    ASSERT_EQ(0, std::memcmp(fused.data(), want.data(), fused.size() * 4)) << "fused, kind " << kind << " D " << D;
    std::vector<uint8_t> mark(size_t(S) * n);
    std::vector<uint32_t> idx(size_t(S) * n), count(S);
    k::SelectArgs hs = sel;
    hs.score = want.data(), hs.valid = valid.data(), hs.mark = mark.data(), hs.idx = idx.data(), hs.count = count.data();
    k::host::select_topk(hs);
    ASSERT_EQ(dmark.get(), mark) << "fused, kind " << kind << " D " << D;
    ASSERT_EQ(dcount.get(), count);
  }
}

TEST(KernelsGpu, SignHashHammingAndFusedTopkEqualTheHarness) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  const uint32_t S = 48, G = 2, D = 64, B = 128, Bb = B / 8, T = 16, C = 200, n = 190;
  const auto q = randf(size_t(S) * G * D, rng), P = randf(size_t(S) * D * B, rng);
  std::vector<uint8_t> codes(size_t(S) * C * T * Bb);
  for (auto& x : codes) x = uint8_t(rng());
  Dev<float> dq(q), dP(P);
  Dev<uint8_t> dcode(size_t(S) * Bb), dcodes(codes), dmark(size_t(S) * n);
  Dev<float> dscore(size_t(S) * n);
  Dev<uint32_t> didx(size_t(S) * 32), dcount(S);
  k::SignHashArgs sh;
  sh.q = dq.p, sh.P = dP.p, sh.code = dcode.p, sh.S = S, sh.G = G, sh.D = D, sh.B = B;
  CU(k::sign_hash(sh, nullptr));
  k::ScoreArgs sc;
  sc.kind = k::kScoreHamming, sc.r = dcodes.p, sc.code = dcode.p, sc.out = dscore.p;
  sc.S = S, sc.C = C, sc.n = n, sc.T = T, sc.Bb = Bb;
  k::SelectArgs sel;
  sel.score = dscore.p, sel.mark = dmark.p, sel.idx = didx.p, sel.count = dcount.p;
  sel.S = S, sel.n = n, sel.idx_cap = 32, sel.sink = 2, sel.local = 3, sel.k = 24;
  CU(k::score_select_topk(sc, sel, nullptr));
  CU(cudaDeviceSynchronize());
  // The harness, step by step.
  std::vector<uint8_t> code(size_t(S) * Bb), mark(size_t(S) * n);
  std::vector<float> score(size_t(S) * n);
  std::vector<uint32_t> idx(size_t(S) * 32), count(S);
  k::SignHashArgs hs = sh;
  hs.q = q.data(), hs.P = P.data(), hs.code = code.data();
  k::host::sign_hash(hs);
  ASSERT_EQ(dcode.get(), code);
  k::ScoreArgs hc = sc;
  hc.r = codes.data(), hc.code = code.data(), hc.out = score.data();
  k::host::scores(hc);
  k::SelectArgs hsel = sel;
  hsel.score = score.data(), hsel.mark = mark.data(), hsel.idx = idx.data(), hsel.count = count.data();
  k::host::select_topk(hsel);
  ASSERT_EQ(dscore.get(), score);
  ASSERT_EQ(dmark.get(), mark);
  ASSERT_EQ(dcount.get(), count);
  ASSERT_EQ(didx.get(), idx);
}

TEST(KernelsGpu, TopkAndPsaEqualTheHarness) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(9);
  // Top-k runs one CUDA block of 256 threads per set: n above, at and below the thread count.
  for (const uint32_t n : {700u, 256u, 37u}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const uint32_t S = 40;
    std::vector<float> sc(size_t(S) * n);
    for (auto& x : sc) x = float(int(rng() % 50)) / 64.0f;  // ties, exact sums
    std::vector<uint8_t> valid(n, 1);
    valid[n / 3] = 0;
    Dev<float> ds(sc);
    Dev<uint8_t> dv(valid), dmark(size_t(S) * n);
    Dev<uint32_t> didx(size_t(S) * 64), dcount(S);
    for (int psa = 0; psa < 2; ++psa) {
      k::SelectArgs a;
      a.score = ds.p, a.valid = dv.p, a.mark = dmark.p, a.idx = didx.p, a.count = dcount.p;
      a.S = S, a.n = n, a.idx_cap = 64, a.sink = 1, a.local = 4, a.k = 50, a.tau = 8.0, a.cap = 60;
      CU(psa ? k::select_psa(a, nullptr) : k::select_topk(a, nullptr));
      CU(cudaDeviceSynchronize());
      std::vector<uint8_t> mark(size_t(S) * n);
      std::vector<uint32_t> idx(size_t(S) * 64), count(S);
      k::SelectArgs h = a;
      h.score = sc.data(), h.valid = valid.data(), h.mark = mark.data(), h.idx = idx.data(), h.count = count.data();
      if (psa) k::host::select_psa(h);
      else k::host::select_topk(h);
      ASSERT_EQ(dmark.get(), mark) << "psa " << psa;
      ASSERT_EQ(dcount.get(), count);
      // idx holds count[s] entries per set; the slots past them are unspecified (here: the
      // previous selection's, as the buffer is reused), so only the written prefix is compared.
      const auto got = didx.get();
      for (uint32_t s = 0; s < S; ++s) {
        ASSERT_LE(count[s], a.idx_cap);
        const auto row = got.begin() + ptrdiff_t(s) * a.idx_cap;
        const auto want = idx.begin() + ptrdiff_t(s) * a.idx_cap;
        ASSERT_TRUE(std::equal(row, row + count[s], want)) << "psa " << psa << ", set " << s;
      }
    }
  }
}

TEST(KernelsGpu, RopeShiftEqualsTheHarness) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(21);
  const uint32_t H = 8, D = 128;
  const uint64_t Tn = 333, stride = uint64_t(H) * D;
  const auto keys = bf16_bytes(randf(Tn * stride, rng));
  Dev<uint8_t> dk(keys);
  auto a = std::make_unique<k::RopeShiftArgs>();
  a->keys = dk.p, a->dtype = k::kBF16, a->n_tokens = Tn, a->token_stride = stride, a->n_heads = H, a->D = D;
  for (uint32_t d = 0; d < D / 2; ++d) {
    const double ang = 1234.0 * std::pow(500000.0, -2.0 * d / D);
    a->cos[d] = float(std::cos(ang));
    a->sin[d] = float(std::sin(ang));
  }
  CU(k::rope_shift(*a, nullptr));
  CU(cudaDeviceSynchronize());
  auto host = keys;
  a->keys = host.data();
  k::host::rope_shift(*a);
  ASSERT_EQ(dk.get(), host);
}

TEST(KernelsGpu, ScatterBothPathsEqualTheHarness) {
  SKIP_WITHOUT_GPU();
  struct Case {
    uint32_t H, D, h0, h1;
    int32_t layout;
  };
  for (const Case c : {Case{8, 128, 0, 8, k::kLayoutNHD}, Case{8, 128, 2, 4, k::kLayoutNHD},
                       Case{3, 64, 0, 3, k::kLayoutNHD}, Case{8, 128, 0, 8, k::kLayoutHND}}) {
    const uint32_t L = 4, T = 16;
    const uint64_t n = 9, row = uint64_t(c.D) * 2, heads = c.h1 - c.h0, page = T * heads * row;
    const uint64_t block_bytes = uint64_t(L) * 2 * T * c.H * row, slots_total = 16;
    uint8_t* staging = nullptr;
    CU(cudaHostAlloc(reinterpret_cast<void**>(&staging), n * block_bytes + n * 8, cudaHostAllocMapped));
    for (uint64_t i = 0; i < n * block_bytes; ++i) staging[i] = uint8_t(i * 2654435761u >> 11);
    auto* slots = reinterpret_cast<int64_t*>(staging + n * block_bytes);
    const int64_t sl[] = {15, 2, -1, 7, 0, 9, 11, 3, 5};
    std::memcpy(slots, sl, sizeof sl);
    // The legacy NULL stream (single copies) and a created stream (one batched copy per layer).
    cudaStream_t created = nullptr;
    CU(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
    // Each path forced, then the path by measurement (scatter_calibrate's choice, remembered).
    for (cudaStream_t stream : {cudaStream_t(nullptr), created})
      for (int32_t force : {0, 1, -1}) {
        Dev<uint8_t> dk(slots_total * page), dv(slots_total * page);
        CU(cudaMemset(dk.p, 0x5A, slots_total * page));
        CU(cudaMemset(dv.p, 0x5A, slots_total * page));
        std::vector<uint8_t> hk(slots_total * page, 0x5A), hv(slots_total * page, 0x5A);
        k::ScatterCalibration cal;
        for (uint32_t l = 0; l < L; ++l) {
          k::ScatterArgs a;
          a.src = staging, a.slots = slots, a.dst_k = dk.p, a.dst_v = dv.p, a.n = n, a.block_bytes = block_bytes;
          a.slot_stride = page, a.layer = l, a.L = L, a.T = T, a.H = c.H, a.h0 = c.h0, a.h1 = c.h1;
          a.row_bytes = uint32_t(row), a.layout = c.layout, a.force_path = force;
          if (force < 0 && l == 0) {
            CU(k::scatter_calibrate(a, stream, &cal));
            EXPECT_TRUE(cal.measured);
            EXPECT_GT(cal.copies_ms, 0.0f);
            EXPECT_GT(cal.kernel_ms, 0.0f);
            EXPECT_EQ(cal.path, cal.copies_ms <= cal.kernel_ms ? k::ScatterPath::kCopies : k::ScatterPath::kKernel);
          }
          k::ScatterPath path;
          CU(k::scatter_layer(a, stream, &path));
          if (force >= 0) EXPECT_EQ(path, force == 0 ? k::ScatterPath::kCopies : k::ScatterPath::kKernel);
          else EXPECT_EQ(path, cal.path) << "the measured path, remembered for the shape";
          k::ScatterArgs h = a;
          h.dst_k = hk.data(), h.dst_v = hv.data(), h.unit = k::scatter_unit_for(h);
          k::host::scatter(h);
          CU(cudaDeviceSynchronize());
          ASSERT_EQ(dk.get(), hk) << "layer " << l << " H " << c.H << " heads " << c.h0 << "-" << c.h1
                                  << (stream ? " (created stream)" : " (NULL stream)") << " force " << force;
          ASSERT_EQ(dv.get(), hv);
        }
      }
    cudaStreamDestroy(created);
    cudaFreeHost(staging);
  }
}

namespace ucm::test {

// ucm_store_load_ex through the real libucm_cuda.so into cudaMalloc'd caches, against a host paged
// load of the same blocks.
class DeviceLoadGpu : public DeviceStore {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    DeviceStore::SetUp();
  }
  void check(const DeviceNs& ns, int kind, uint32_t h0, uint32_t h1) {
    std::vector<uint8_t> hashes = ns.hashes;
    const size_t n = kBlocks, heads = h1 - h0, page = size_t(ns.T) * heads * ns.row(), slots_total = 8;
    const std::vector<int64_t> slots = {6, 1, 0, -1, 3, 7};
    std::vector<void*> caches(ns.L * 2);
    for (auto& c : caches) {
      CU(cudaMalloc(&c, slots_total * page));
      CU(cudaMemset(c, 0x77, slots_total * page));
    }
    cudaStream_t stream;
    CU(cudaStreamCreate(&stream));
    std::vector<cudaEvent_t> events(ns.L);
    for (auto& e : events) CU(cudaEventCreate(&e));
    static std::atomic<int> layers_done;
    layers_done = 0;
    ucm_store_load_params p = ucm_store_default_load_params();
    p.dest_kind = kind;
    p.head_begin = h0, p.head_end = h1;
    p.layer_caches = caches.data();
    p.slots = slots.data();
    p.stream = stream;
    p.layer_events = reinterpret_cast<void* const*>(events.data());
    p.on_layer = [](uint32_t, int status, void*) {
      if (status == UCM_OK) ++layers_done;
    };
    ucm_task_t* t = nullptr;
    ASSERT_EQ(ucm_store_load_ex(store, ns.id, hashes.data(), n, &p, &t), UCM_OK) << ucm_last_error();
    ASSERT_EQ(ucm_task_wait(t, -1), UCM_OK) << ucm_last_error();
    ucm_task_free(t);
    for (auto& e : events) EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
    EXPECT_EQ(layers_done.load(), int(ns.L));
    std::vector<int> st;
    const auto ref = host_pages(ns, hashes, h0, h1, &st);
    for (size_t l = 0; l < ns.L; ++l)
      for (size_t kv = 0; kv < 2; ++kv) {
        std::vector<uint8_t> got(slots_total * page), want(slots_total * page, 0x77);
        CU(cudaMemcpy(got.data(), caches[l * 2 + kv], got.size(), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; ++i) {
          if (slots[i] < 0) continue;
          const auto& src = ref[(i * ns.L + l) * 2 + kv];
          for (size_t tt = 0; tt < ns.T; ++tt)
            for (size_t h = 0; h < heads; ++h) {
              const size_t row = kind == UCM_DEST_DEVICE_PAGED ? tt * heads + h : h * ns.T + tt;
              std::memcpy(want.data() + size_t(slots[i]) * page + row * ns.row(),
                          src.data() + (tt * heads + h) * ns.row(), ns.row());
            }
        }
        ASSERT_EQ(got, want) << "layer " << l << " kv " << kv;
      }
    for (auto& e : events) cudaEventDestroy(e);
    cudaStreamDestroy(stream);
    for (auto& c : caches) cudaFree(c);
  }
};

TEST_F(DeviceLoadGpu, NhdAllHeadsCopies) { check(big, UCM_DEST_DEVICE_PAGED, 0, 8); }
TEST_F(DeviceLoadGpu, NhdAllHeadsKernel) { check(small, UCM_DEST_DEVICE_PAGED, 0, 4); }
TEST_F(DeviceLoadGpu, NhdTp4HeadRange) { check(big, UCM_DEST_DEVICE_PAGED, 2, 4); }
TEST_F(DeviceLoadGpu, Hnd) { check(big, UCM_DEST_DEVICE_PAGED_HND, 0, 8); }

TEST_F(DeviceLoadGpu, RopeShiftDeviceEqualsHost) {
  ucm_rope_params r = ucm_rope_default_params();
  r.head_dim = 128;
  r.theta = 500000;
  std::vector<uint16_t> keys(50 * 8 * 128);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = uint16_t(0x3e00 + (i * 53) % 700);
  auto ref = keys;
  ASSERT_EQ(ucm_rope_shift(&r, ref.data(), UCM_DTYPE_BF16, 50, 8, 1024, -321), UCM_OK);
  void* d = nullptr;
  CU(cudaMalloc(&d, keys.size() * 2));
  CU(cudaMemcpy(d, keys.data(), keys.size() * 2, cudaMemcpyHostToDevice));
  ASSERT_EQ(ucm_rope_shift_device(&r, d, UCM_DTYPE_BF16, 50, 8, 1024, -321, 0, nullptr), UCM_OK) << ucm_last_error();
  CU(cudaMemcpy(keys.data(), d, keys.size() * 2, cudaMemcpyDeviceToHost));
  cudaFree(d);
  EXPECT_EQ(keys, ref);
}

}  // namespace ucm::test
