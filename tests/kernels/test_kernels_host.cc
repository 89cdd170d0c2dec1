// The kernels of kernels/ run on the CPU through their own per-thread functions (harness.h), and
// compared with libucm's CPU code: scoring (R0 dot, R1 bound, R4 Hamming) and the sign hash bit
// for bit, top-k and PSA selections set for set, the RoPE shift bit for bit, the conversions on
// every 16-bit pattern, and the paged scatter (both its paths) against an index-by-index
// reference built from the layouts' definitions. Only the launch is left to the GPU tests.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "harness.h"
#include "ucm/core/blend/rope.h"
#include "ucm/half.h"
#include "ucm/core/retrieval/kernels.h"
#include "ucm/core/retrieval/select.h"

namespace k = ucm::kernels;
namespace r = ucm::retrieval;

namespace {

std::vector<float> randf(size_t n, std::mt19937& rng, float lo = -2, float hi = 2) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Rows of dtype dt from floats (bytes).
std::vector<uint8_t> encode(const std::vector<float>& f, int32_t dt) {
  std::vector<uint8_t> b(f.size() * k::dtype_bytes(dt));
  for (size_t i = 0; i < f.size(); ++i) k::store_elem(b.data(), dt, i, f[i]);
  return b;
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

}  // namespace

TEST(KernelsHost, ConversionsMatchLibucmOnEveryPattern) {
  for (uint32_t v = 0; v < 65536; ++v) {
    const float a = k::bf16_to_f32(uint16_t(v)), b = ucm::bf16_to_f32(uint16_t(v));
    ASSERT_EQ(bits(a), bits(b)) << v;
    const float c = k::f16_to_f32(uint16_t(v)), d = ucm::f16_to_f32(uint16_t(v));
    ASSERT_EQ(bits(c), bits(d)) << v;
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(uint32_t(rng()));
    ASSERT_EQ(k::f32_to_bf16(f), ucm::f32_to_bf16(f)) << f;
    ASSERT_EQ(k::f32_to_f16(f), ucm::f32_to_f16(f)) << f;
  }
}

// R0 and R1 scores for several dtypes, head dims (lane-sized, 128, ragged) and GQA groups,
// against libucm's dot_scores / bound_scores and the retriever's max over the group: bit for bit
// on integer-valued data (every sum exact, so libucm's FMA-contracting AVX builds agree too),
// within 2e-6 of the terms' magnitude on random data.
void check_scores(bool integers);
TEST(KernelsHost, DotAndBoundScoresEqualLibucmOnExactData) { check_scores(true); }
TEST(KernelsHost, DotAndBoundScoresMatchLibucmOnRandomData) { check_scores(false); }

void check_scores(bool integers) {
  std::mt19937 rng(7);
  auto data = [&](size_t n) {
    auto v = randf(n, rng, integers ? -8.0f : -2.0f, integers ? 9.0f : 2.0f);
    if (integers)
      for (auto& x : v) x = std::floor(x);
    return v;
  };
  for (int32_t dt : {k::kBF16, k::kF16, k::kF32})
    for (uint32_t D : {64u, 128u, 72u})
      for (uint32_t G : {1u, 4u})
        for (int32_t kind : {k::kScoreDot, k::kScoreBound}) {
          const uint32_t S = 3, C = 37, n = 33, width = kind == k::kScoreDot ? D : 2 * D;
          const auto rf = data(size_t(S) * C * width);
          const auto rb = encode(rf, dt);
          const auto q = data(size_t(S) * G * D);
          std::vector<uint8_t> valid(n, 1);
          valid[5] = 0;
          std::vector<float> out(size_t(S) * n);
          k::ScoreArgs a;
          a.kind = kind;
          a.r = rb.data();
          a.dtype = dt;
          a.q = q.data();
          a.valid = valid.data();
          a.out = out.data();
          a.S = S, a.C = C, a.n = n, a.D = D, a.G = G;
          k::host::scores(a);
          const size_t es = k::dtype_bytes(dt);
          for (uint32_t s = 0; s < S; ++s) {
            std::vector<float> ref(size_t(G) * n);
            const uint8_t* rows = rb.data() + size_t(s) * C * width * es;
            if (kind == k::kScoreDot) r::dot_scores(rows, dt, n, D, q.data() + size_t(s) * G * D, G, ref.data());
            else r::bound_scores(rows, dt, n, D, q.data() + size_t(s) * G * D, G, ref.data());
            for (uint32_t c = 0; c < n; ++c) {
              float m = ref[c];
              for (uint32_t g = 1; g < G; ++g) m = ref[size_t(g) * n + c] > m ? ref[size_t(g) * n + c] : m;
              if (!valid[c]) m = -INFINITY;
              const float got = out[size_t(s) * n + c];
              if (integers || !valid[c])
                ASSERT_EQ(bits(got), bits(m)) << "dtype " << dt << " D " << D << " G " << G << " kind " << kind
                                              << " set " << s << " block " << c;
              else
                ASSERT_NEAR(got, m, 2e-6 * 4.0 * D) << "dtype " << dt << " D " << D << " kind " << kind;
            }
          }
        }
}

TEST(KernelsHost, HammingScoresEqualLibucm) {
  std::mt19937 rng(11);
  for (uint32_t Bb : {16u, 32u, 5u, 24u}) {
    const uint32_t S = 2, C = 20, n = 17, T = 16;
    std::vector<uint8_t> codes(size_t(S) * C * T * Bb), q(size_t(S) * Bb);
    for (auto& x : codes) x = uint8_t(rng());
    for (auto& x : q) x = uint8_t(rng());
    std::vector<float> out(size_t(S) * n);
    k::ScoreArgs a;
    a.kind = k::kScoreHamming;
    a.r = codes.data();
    a.code = q.data();
    a.out = out.data();
    a.S = S, a.C = C, a.n = n, a.T = T, a.Bb = Bb;
    k::host::scores(a);
    for (uint32_t s = 0; s < S; ++s) {
      std::vector<float> ref(n);
      r::hamming_scores(codes.data() + size_t(s) * C * T * Bb, n, T, Bb, q.data() + size_t(s) * Bb, ref.data());
      for (uint32_t c = 0; c < n; ++c) ASSERT_EQ(out[size_t(s) * n + c], ref[c]) << "Bb " << Bb << " set " << s;
    }
  }
}

// The group's summed query, then libucm's sign_hash: the retriever's GSA query side.
TEST(KernelsHost, SignHashEqualsLibucm) {
  std::mt19937 rng(13);
  for (uint32_t G : {1u, 3u}) {
    const uint32_t S = 4, D = 64, B = 128;
    const auto q = randf(size_t(S) * G * D, rng), P = randf(size_t(S) * D * B, rng);
    std::vector<uint8_t> code(size_t(S) * B / 8);
    k::SignHashArgs a;
    a.q = q.data(), a.P = P.data(), a.code = code.data(), a.S = S, a.G = G, a.D = D, a.B = B;
    k::host::sign_hash(a);
    for (uint32_t s = 0; s < S; ++s) {
      std::vector<float> x(D, 0.0f), tmp(B);
      for (uint32_t d = 0; d < D; ++d)
        for (uint32_t g = 0; g < G; ++g) x[d] += q[(size_t(s) * G + g) * D + d];
      std::vector<uint8_t> ref(B / 8);
      r::sign_hash(x.data(), P.data() + size_t(s) * D * B, D, B, tmp.data(), ref.data());
      for (uint32_t i = 0; i < B / 8; ++i) ASSERT_EQ(code[size_t(s) * B / 8 + i], ref[i]) << "G " << G << " set " << s;
    }
  }
}

// Top-k with windows and invalid blocks: the same set as libucm's select_topk for scores full of
// ties (small integers), -inf, -0 and +0, budgets below, at and above the forced count.
TEST(KernelsHost, TopkSelectsLibucmSets) {
  std::mt19937 rng(17);
  int cases = 0;
  for (uint32_t n : {1u, 5u, 40u, 300u})
    for (uint32_t sink : {0u, 1u, 4u})
      for (uint32_t local : {0u, 2u})
        for (uint32_t kk : {0u, 1u, 3u, 10u, 1000u}) {
          const uint32_t S = 2;
          std::vector<float> sc(size_t(S) * n);
          for (auto& x : sc) {
            const int v = int(rng() % 9) - 4;
            x = v == -4 ? -INFINITY : v == 0 ? ((rng() & 1) ? -0.0f : 0.0f) : float(v);
          }
          std::vector<uint8_t> valid(n, 1);
          if (n > 3) valid[n / 2] = 0;
          std::vector<uint8_t> mark(size_t(S) * n);
          const uint32_t cap = 6;
          std::vector<uint32_t> idx(size_t(S) * cap), count(S);
          k::SelectArgs a;
          a.score = sc.data(), a.valid = valid.data(), a.mark = mark.data(), a.idx = idx.data();
          a.count = count.data(), a.S = S, a.n = n, a.idx_cap = cap, a.sink = sink, a.local = local, a.k = kk;
          k::host::select_topk(a, (n + kk) % 2 ? 7 : 32);
          for (uint32_t s = 0; s < S; ++s) {
            r::SelectScratch scr;
            std::vector<uint32_t> ref;
            r::select_topk(sc.data() + size_t(s) * n, n, valid.data(), sink, local, std::min(kk, n), scr, &ref);
            std::vector<uint32_t> got;
            for (uint32_t c = 0; c < n; ++c)
              if (mark[size_t(s) * n + c]) got.push_back(c);
            ASSERT_EQ(got, ref) << "n " << n << " sink " << sink << " local " << local << " k " << kk;
            ASSERT_EQ(count[s], ref.size());
            for (uint32_t i = 0; i < std::min<uint32_t>(cap, count[s]); ++i) ASSERT_EQ(idx[size_t(s) * cap + i], ref[i]);
            ++cases;
          }
        }
  EXPECT_EQ(cases, 4 * 3 * 2 * 5 * 2);
}

// The device's 8-pass radix search finds radix_select's threshold (the m-th largest rank key) for
// every m, on scores with ties, -inf, NaN and both zeros, with forced blocks left out of both.
TEST(KernelsHost, Radix8SelectEqualsTheBitwiseSearch) {
  std::mt19937 rng(5);
  int cases = 0;
  for (uint32_t n : {1u, 2u, 33u, 256u, 700u}) {
    std::vector<float> sc(n);
    for (auto& x : sc) {
      const uint32_t r = rng() % 12;
      x = r == 0 ? -INFINITY : r == 1 ? NAN : r == 2 ? -0.0f : r == 3 ? 0.0f : r < 7 ? float(int(rng() % 5) - 2)
                                                                              : std::ldexp(float(rng() % 1000), -int(rng() % 40));
    }
    std::vector<uint8_t> valid(n, 1);
    if (n > 10) valid[n / 3] = 0;
    k::SelectArgs a;
    a.score = sc.data(), a.valid = valid.data(), a.S = 1, a.n = n, a.sink = n > 4 ? 2 : 0, a.local = n > 4 ? 1 : 0;
    for (uint32_t m = 1; m <= n + 2; ++m) {
      const uint64_t bitwise = k::radix_select(m, [&](uint64_t p) { return k::topk_count_ge(a, 0, 0, 1, p); });
      const uint64_t radix8 = k::radix8_select(m, [&](uint64_t prefix, uint64_t mask, int shift, uint32_t* h) {
        for (uint32_t t = 0; t < 3; ++t) k::topk_hist(a, 0, t, 3, prefix, mask, shift, [h](uint32_t d) { ++h[d]; });
      });
      ASSERT_EQ(radix8, bitwise) << "n " << n << " m " << m;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 3 + 4 + 35 + 258 + 702);
}

// PSA: dyadic masses (exact sums in any order) summing to 1 over the valid blocks.
TEST(KernelsHost, PsaSelectsLibucmSets) {
  std::mt19937 rng(19);
  for (uint32_t n : {4u, 33u, 200u})
    for (double tau : {0.0, 0.5, 0.9, 1.0})
      for (uint32_t cap : {2u, 10u, 1000u}) {
        std::vector<uint8_t> valid(n, 1);
        valid[n - 2] = 0;
        std::vector<float> m(n, 0.0f);
        uint32_t total = 0;
        for (uint32_t c = 0; c < n; ++c)
          if (valid[c]) total += (m[c] = float(rng() % 5));
        const float scale = total ? 1.0f / 1024.0f : 0.0f;  // exact: small integers over 2^10
        for (auto& x : m) x *= scale;
        std::vector<uint8_t> mark(n);
        std::vector<uint32_t> count(1);
        k::SelectArgs a;
        a.score = m.data(), a.valid = valid.data(), a.mark = mark.data(), a.count = count.data();
        a.S = 1, a.n = n, a.sink = 1, a.local = 1, a.tau = tau * total / 1024.0, a.cap = std::min(cap, n);
        k::host::select_psa(a);
        r::SelectScratch scr;
        std::vector<uint32_t> ref;
        r::select_psa(m.data(), n, valid.data(), 1, 1, a.tau, a.cap, scr, &ref);
        std::vector<uint32_t> got;
        for (uint32_t c = 0; c < n; ++c)
          if (mark[c]) got.push_back(c);
        ASSERT_EQ(got, ref) << "n " << n << " tau " << tau << " cap " << cap;
        ASSERT_EQ(count[0], ref.size());
      }
}

TEST(KernelsHost, RopeShiftEqualsLibucmBitForBit) {
  std::mt19937 rng(23);
  for (int32_t dt : {k::kBF16, k::kF16, k::kF32})
    for (int64_t delta : {int64_t(1), int64_t(-37), int64_t(5000)}) {
      ucm_rope_params p = ucm::blend::default_rope();
      p.head_dim = 64;
      p.theta = 500000;
      const uint32_t H = 3, Tn = 21;
      const size_t stride = size_t(H) * 64 + 8;
      const auto kb = encode(randf(Tn * stride, rng), dt);
      auto mine = kb, ref = kb;
      auto a = std::make_unique<k::RopeShiftArgs>();
      a->keys = mine.data(), a->dtype = dt, a->n_tokens = Tn, a->token_stride = stride, a->n_heads = H, a->D = 64;
      const auto w = ucm::blend::inv_freq(p);
      ucm::blend::shift_table(w, delta, a->cos, a->sin);
      k::host::rope_shift(*a);
      ucm::blend::shift_keys(w, ref.data(), dt, Tn, H, 64, stride, delta);
      ASSERT_EQ(mine, ref) << "dtype " << dt << " delta " << delta;
      ASSERT_NE(mine, kb);
    }
}

// Paged scatter: every (block, layer, K|V, token, head) element lands where the destination
// layout says, from where the staging layout says, for both paths and both layouts; skipped
// blocks and the bytes between pages stay untouched.
TEST(KernelsHost, ScatterPlacesEveryElement) {
  struct Case {
    uint32_t L, T, H, D, es, h0, h1;
    int32_t layout;
    uint64_t extra;  // slot stride beyond one page
  };
  const Case cases[] = {{2, 16, 4, 64, 2, 0, 4, k::kLayoutNHD, 0},   {2, 16, 4, 64, 2, 1, 3, k::kLayoutNHD, 0},
                        {3, 16, 8, 128, 2, 0, 8, k::kLayoutHND, 64}, {2, 4, 2, 6, 2, 1, 2, k::kLayoutHND, 0},
                        {1, 16, 8, 128, 4, 0, 8, k::kLayoutNHD, 32},  {2, 16, 3, 64, 1, 0, 3, k::kLayoutNHD, 8}};
  for (const auto& c : cases) {
    const uint64_t n = 5, row = uint64_t(c.D) * c.es, heads = c.h1 - c.h0;
    const uint64_t block_bytes = uint64_t(c.L) * 2 * c.T * c.H * row, page = uint64_t(c.T) * heads * row;
    const uint64_t stride = page + c.extra, slots_total = 9;
    std::vector<uint8_t> src(n * block_bytes);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 2654435761u >> 13);
    const std::vector<int64_t> slots = {7, -1, 0, 3, 8};
    for (uint32_t layer = 0; layer < c.L; ++layer)
      for (int path = 0; path < 2; ++path) {
        std::vector<uint8_t> dk(slots_total * stride, 0xEE), dv(slots_total * stride, 0xDD);
        k::ScatterArgs a;
        a.src = src.data(), a.slots = slots.data(), a.dst_k = dk.data(), a.dst_v = dv.data();
        a.n = n, a.block_bytes = block_bytes, a.slot_stride = stride, a.layer = layer, a.L = c.L, a.T = c.T;
        a.H = c.H, a.h0 = c.h0, a.h1 = c.h1, a.row_bytes = uint32_t(row), a.layout = c.layout;
        a.unit = k::scatter_unit_for(a);
        if (path == 0) k::host::scatter(a);
        else k::host::scatter_copies(a);
        // Reference, from the layouts' definitions.
        std::vector<uint8_t> ek(slots_total * stride, 0xEE), ev(slots_total * stride, 0xDD);
        for (uint64_t i = 0; i < n; ++i) {
          if (slots[i] < 0) continue;
          for (uint32_t kv = 0; kv < 2; ++kv)
            for (uint32_t t = 0; t < c.T; ++t)
              for (uint32_t h = c.h0; h < c.h1; ++h) {
                const uint8_t* s = src.data() + i * block_bytes + ((uint64_t(layer) * 2 + kv) * c.T + t) * c.H * row + h * row;
                const uint64_t rr = c.layout == k::kLayoutNHD ? uint64_t(t) * heads + (h - c.h0) : (h - c.h0) * c.T + t;
                std::memcpy((kv ? ev : ek).data() + uint64_t(slots[i]) * stride + rr * row, s, row);
              }
        }
        ASSERT_EQ(dk, ek) << "layer " << layer << " path " << path << " D " << c.D << " h " << c.h0 << "-" << c.h1;
        ASSERT_EQ(dv, ev) << "layer " << layer << " path " << path;
      }
  }
}

TEST(KernelsHost, ScatterChoosesCopiesForRunsOf28KiB) {
  k::ScatterArgs a;
  a.T = 16, a.H = 8, a.h0 = 0, a.h1 = 8, a.row_bytes = 256, a.layout = k::kLayoutNHD;  // 32 KiB pages
  EXPECT_EQ(k::scatter_run_bytes(a), 32768u);
  EXPECT_GE(k::scatter_run_bytes(a), k::kMinCopyRunBytes);
  a.h0 = 2, a.h1 = 4;  // a TP-4 shard: 512-byte runs -> the gather kernel
  EXPECT_EQ(k::scatter_run_bytes(a), 512u);
  a.h0 = 0, a.h1 = 8, a.H = 3, a.h1 = 3, a.row_bytes = 128;  // SmolLM2: 6 KiB pages -> kernel
  EXPECT_LT(k::scatter_run_bytes(a), k::kMinCopyRunBytes);
  EXPECT_EQ(k::scatter_unit_bytes(256), 16u);
  EXPECT_EQ(k::scatter_unit_bytes(12), 4u);
  EXPECT_EQ(k::scatter_unit_bytes(3), 1u);
}
