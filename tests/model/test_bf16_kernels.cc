// The bf16 path's fused CPU kernels (kernels/include/ucm/kernels/cpu/bf16.h): the portable implementation
// (kernels/cpu/bf16_portable.cc) gives the AVX512-BF16 one's bits, on random inputs of many shapes with
// values at and next to bf16 rounding ties, denormals, signed zeros, infinities and products below
// FLT_MIN (vdpbf16ps's DAZ and FTZ). Skips where the hardware kernels do not run (no AVX512-BF16,
// or UCM_CPU_NO_BF16=1); the checks of both implementations against libtorch, which run on every
// CPU, are Bf16Kernels.* in test_compute_dtype.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ucm/kernels/cpu/bf16.h"

namespace cpu = ucm::kernels::cpu;
using cpu::Bf16Path;

namespace {

float as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Random fp32 values: mostly normal(0, scale), the rest the cases where roundings and flushes
// differ: bf16 ties and their neighbours, exact bf16 values, denormals, signed zeros, tiny
// normals (their products fall below FLT_MIN), and, when `extremes`, infinities and overflow.
struct Gen {
  std::mt19937 rng;
  bool tiny = true;  // false: no tiny normals, so every product of nonzero bf16s is a normal (the
                     // portable attention's fp32 path; with them, its exact double path)
  explicit Gen(unsigned seed) : rng(seed) {}
  float normal(float scale) { return std::normal_distribution<float>(0.0f, scale)(rng); }
  float value(float scale, bool extremes = false) {
    const float x = normal(scale);
    const uint32_t u = bits_of(x), sign = u & 0x80000000u;
    switch (std::uniform_int_distribution<int>(0, 39)(rng)) {
      case 0: return as_float((u & 0xFFFF0000u) | 0x8000u);  // a tie: to even
      case 1: return as_float((u & 0xFFFF0000u) | 0x7FFFu);
      case 2: return as_float((u & 0xFFFF0000u) | 0x8001u);
      case 3: return as_float(u & 0xFFFF0000u);             // a bf16 value
      case 4: return as_float(sign | (rng() & 0x007FFFFFu));  // a denormal
      case 5: return as_float(sign);                          // +-0
      case 6: return tiny ? std::ldexp(x, -std::uniform_int_distribution<int>(60, 125)(rng)) : x;
      case 7: return extremes ? as_float(sign | 0x7F800000u) : x;                      // +-inf
      case 8: return extremes ? as_float(sign | 0x7F7FFFFFu) : x;                      // rounds to inf
      default: return x;
    }
  }
  std::vector<float> values(size_t n, float scale, bool extremes = false) {
    std::vector<float> v(n);
    for (auto& x : v) x = value(scale, extremes);
    return v;
  }
  // bf16 bits of value(), denormal bf16s (which vdpbf16ps takes as zero) among them.
  std::vector<uint16_t> bf16s(size_t n, float scale, bool extremes = false) {
    std::vector<uint16_t> v(n);
    for (auto& h : v) {
      h = uint16_t(bits_of(value(scale, extremes)) >> 16);
      if (rng() % 40 == 0) h = uint16_t((h & 0x8000u) | (rng() & 0x7Fu));  // a bf16 denormal
    }
    return v;
  }
};

// How many of n elements of a and b differ in their bytes (elem: bytes each), and the first.
template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << ", " << b.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0 && bad++ == 0) first = i;
  if (bad == 0) return ::testing::AssertionSuccess();
  uint32_t x = 0, y = 0;
  std::memcpy(&x, &a[first], sizeof(T));
  std::memcpy(&y, &b[first], sizeof(T));
  char buf[64];
  std::snprintf(buf, sizeof buf, "0x%x (hardware) vs 0x%x (portable)", x, y);
  return ::testing::AssertionFailure() << bad << " of " << a.size() << " elements differ; the first, [" << first
                                       << "]: " << buf;
}

#define NEED_HARDWARE()                                                                      \
  if (!cpu::hardware_kernels()) GTEST_SKIP() << "no AVX512-BF16 kernels on this CPU (or UCM_CPU_NO_BF16=1)"

TEST(Bf16KernelsHwVsPortable, ElementwiseBitForBit) {
  NEED_HARDWARE();
  Gen g(1);
  for (int64_t H : {576, 200, 33, 16, 7}) {  // RMSNorm: multiples of 16, tails, a row shorter than a vector
    const int64_t R = 9, ldx = H + 5;
    for (const float scale : {3.0f, 1e-19f, 1e18f}) {  // 1e-19: sum of squares near FLT_MIN; 1e18: near inf
      const auto x = g.values(size_t(R * ldx), scale);
      auto w = g.values(size_t(H), 1.0f);
      std::vector<uint16_t> a(size_t(R * H)), b(a.size());
      cpu::rms_norm_bf16(x.data(), ldx, w.data(), H, 1e-6f, a.data(), H, 0, R, Bf16Path::kHardware);
      cpu::rms_norm_bf16(x.data(), ldx, w.data(), H, 1e-6f, b.data(), H, 0, R, Bf16Path::kPortable);
      EXPECT_TRUE(same_bits(a, b)) << "rms_norm_bf16, H " << H << ", scale " << scale;
    }
  }
  for (int64_t I : {1536, 200, 17, 7}) {  // SiLU gate: g up to +-100 (exp's clamp), infinities
    const int64_t R = 5;
    for (const float scale : {4.0f, 40.0f}) {
      const auto gu = g.bf16s(size_t(R * 2 * I), scale, /*extremes=*/true);
      std::vector<uint16_t> a(size_t(R * I)), b(a.size());
      cpu::silu_mul_bf16(gu.data(), I, a.data(), 0, R, Bf16Path::kHardware);
      cpu::silu_mul_bf16(gu.data(), I, b.data(), 0, R, Bf16Path::kPortable);
      EXPECT_TRUE(same_bits(a, b)) << "silu_mul_bf16, I " << I << ", scale " << scale;
    }
  }
  for (int64_t n : {1, 15, 16, 17, 1000}) {  // the residual add
    const auto x = g.values(size_t(n), 2.0f, true);
    const auto y = g.bf16s(size_t(n), 2.0f);
    auto a = x, b = x;
    cpu::add_bf16(a.data(), y.data(), n, Bf16Path::kHardware);
    cpu::add_bf16(b.data(), y.data(), n, Bf16Path::kPortable);
    EXPECT_TRUE(same_bits(a, b)) << "add_bf16, n " << n;
  }
  struct Heads {
    int64_t nh, nkv;
  };
  for (int64_t hd : {32, 64, 128}) {  // q/k/v with RoPE, K/V fp32 and bf16 (exact rounding)
    for (const Heads h : {Heads{3, 1}, Heads{2, 2}, Heads{9, 3}}) {
      const int64_t B = 2, T = 7, W = (h.nh + 2 * h.nkv) * hd, rows = B * T;
      const auto qkv = g.bf16s(size_t(rows * W), 3.0f);
      const auto bias = g.values(size_t(W), 1.0f);
      const auto cos = g.values(size_t(T * hd / 2), 1.0f), sin = g.values(size_t(T * hd / 2), 1.0f);
      for (const bool with_bias : {false, true}) {
        const float* bp = with_bias ? bias.data() : nullptr;
        std::vector<float> qa(size_t(rows * h.nh * hd)), qb(qa.size()), ka(size_t(rows * h.nkv * hd)), kb(ka.size()),
            va(ka.size()), vb(ka.size());
        cpu::qkv_rope(qkv.data(), bp, cos.data(), sin.data(), T, h.nh, h.nkv, hd, qa.data(), ka.data(), va.data(), 0,
                      rows, nullptr, nullptr, Bf16Path::kHardware);
        cpu::qkv_rope(qkv.data(), bp, cos.data(), sin.data(), T, h.nh, h.nkv, hd, qb.data(), kb.data(), vb.data(), 0,
                      rows, nullptr, nullptr, Bf16Path::kPortable);
        const std::string what = "qkv_rope, hd " + std::to_string(hd) + ", heads " + std::to_string(h.nh) + "/" +
                                 std::to_string(h.nkv) + (with_bias ? ", bias" : "");
        EXPECT_TRUE(same_bits(qa, qb)) << what << ": q";
        EXPECT_TRUE(same_bits(ka, kb)) << what << ": k";
        EXPECT_TRUE(same_bits(va, vb)) << what << ": v";
        std::vector<uint16_t> k16a(ka.size()), k16b(ka.size()), v16a(ka.size()), v16b(ka.size());
        cpu::qkv_rope(qkv.data(), bp, cos.data(), sin.data(), T, h.nh, h.nkv, hd, qa.data(), nullptr, nullptr, 0, rows,
                      k16a.data(), v16a.data(), Bf16Path::kHardware);
        cpu::qkv_rope(qkv.data(), bp, cos.data(), sin.data(), T, h.nh, h.nkv, hd, qb.data(), nullptr, nullptr, 0, rows,
                      k16b.data(), v16b.data(), Bf16Path::kPortable);
        EXPECT_TRUE(same_bits(qa, qb)) << what << ": q, bf16 K/V";
        EXPECT_TRUE(same_bits(k16a, k16b)) << what << ": bf16 k";
        EXPECT_TRUE(same_bits(v16a, v16b)) << what << ": bf16 v";
      }
    }
  }
}

struct AttnCase {
  int64_t B, T, S, nh, nkv, hd, window;
  bool kv16, pad;      // K/V as bf16 bits (a bf16 KV cache, denormals kept); q_len right padding
  float qs, ks, vs;    // the scales of q, k, v
  const char* what;
  // Sums whose roundings show in the output (the order of operations matters there): every score
  // 1e5 + O(1) (dims 0 and 1 of q and k large), every value +-1e4 + O(1), alternating by key.
  bool cancel = false;
};

// attention_bf16 of the case on both paths, compared bit for bit.
void attention_case(const AttnCase& c, Gen& g) {
  const size_t nkv = size_t(c.B * c.S * c.nkv * c.hd);
  auto q = g.values(size_t(c.B * c.T * c.nh * c.hd), c.qs);
  auto k = g.values(nkv, c.ks), v = g.values(nkv, c.vs);
  auto k16 = g.bf16s(nkv, c.ks), v16 = g.bf16s(nkv, c.vs);
  if (c.cancel) {
    for (size_t i = 0; i < q.size(); i += size_t(c.hd)) q[i] = q[i + 1] = 2000.0f;
    for (size_t i = 0; i < nkv; i += size_t(c.hd)) {
      k[i] = k[i + 1] = 20.0f;
      k16[i] = k16[i + 1] = 0x41A0;  // 20
    }
    for (size_t i = 0; i < nkv; ++i) {
      const bool odd = (i / size_t(c.nkv * c.hd)) % 2;  // the key's position
      v[i] += odd ? -1e4f : 1e4f;
      v16[i] = odd ? 0xC61C : 0x461C;  // -+10000
    }
  }
  std::vector<int64_t> qpos(size_t(c.T)), q_len(size_t(c.B));
  for (int64_t t = 0; t < c.T; ++t) qpos[size_t(t)] = c.S - c.T + t;
  for (int64_t b = 0; b < c.B; ++b) q_len[size_t(b)] = b % 2 ? c.T / 3 : c.T;
  cpu::AttnArgs a;
  a.B = c.B, a.T = c.T, a.S = c.S, a.nh = c.nh, a.nkv = c.nkv, a.hd = c.hd, a.window = c.window;
  a.q = q.data();
  if (c.kv16) {
    a.k16 = k16.data(), a.v16 = v16.data();
  } else {
    a.k = k.data(), a.v = v.data();
  }
  a.q_sb = c.T * c.nh * c.hd, a.q_st = c.nh * c.hd;
  a.k_sb = a.v_sb = c.S * c.nkv * c.hd, a.k_st = a.v_st = c.nkv * c.hd;
  a.qpos = qpos.data();
  a.q_len = c.pad ? q_len.data() : nullptr;
  a.scale = 1.0f / std::sqrt(float(c.hd));
  ASSERT_TRUE(cpu::attention_supported(a)) << c.what;
  const size_t bytes = (cpu::attention_scratch_bytes(a) + 63) / 64 * 64;
  std::unique_ptr<void, decltype(&std::free)> scratch(std::aligned_alloc(64, bytes), &std::free);
  std::vector<uint16_t> out_hw(size_t(c.B * c.T * c.nh * c.hd), 0xABCD), out_p(out_hw.size(), 0x1234);
  const int64_t units = cpu::attention_units(a);
  EXPECT_EQ(units, c.B * c.nkv * ((c.T + cpu::kAttnUnitRows - 1) / cpu::kAttnUnitRows)) << c.what;
  // The hardware path dealt round-robin in three shares, as three threads run it (a share's later
  // row blocks of a KV head pack only the keys after its earlier ones'), each share on scratch
  // that an earlier share left dirty; the portable one unit after unit.
  std::memset(scratch.get(), 0x5A, bytes);  // nothing left behind is read
  a.out = out_p.data();
  cpu::attention_bf16(a, 0, units, 1, scratch.get(), Bf16Path::kPortable);
  // The hardware path's dot products both ways (cpu::attention_uses_vdpbf16ps): vdpbf16ps, and
  // its arithmetic in two FMAs per pair under the MXCSR's FTZ and DAZ.
  for (const char* dot : {"dp", "fma"}) {
    setenv("UCM_BF16_DOT", dot, 1);
    EXPECT_EQ(cpu::attention_uses_vdpbf16ps(), std::string(dot) == "dp");
    std::fill(out_hw.begin(), out_hw.end(), uint16_t{0xABCD});
    a.out = out_hw.data();
    for (int64_t i = 0; i < 3; ++i) cpu::attention_bf16(a, i, units, 3, scratch.get(), Bf16Path::kHardware);
    EXPECT_TRUE(same_bits(out_hw, out_p)) << c.what << " (" << dot << ")";
  }
  unsetenv("UCM_BF16_DOT");
}

TEST(Bf16KernelsHwVsPortable, AttentionBitForBit) {
  NEED_HARDWARE();
  Gen g(2);
  const AttnCase cases[] = {
      {2, 75, 75, 9, 3, 64, 0, false, false, 2, 2, 1, "SmolLM2 heads, odd T = S"},
      {2, 75, 75, 9, 3, 64, 0, true, false, 2, 2, 1, "SmolLM2 heads, bf16 K/V"},
      {1, 41, 41, 4, 4, 128, 0, false, false, 2, 2, 1, "hd 128, no GQA"},
      {2, 41, 41, 4, 4, 128, 0, true, true, 2, 2, 1, "hd 128, bf16 K/V, q_len padding"},
      {3, 37, 37, 3, 1, 32, 0, false, true, 2, 2, 1, "hd 32, 3 heads per KV head, q_len padding"},
      {3, 37, 37, 3, 1, 32, 0, true, true, 2, 2, 1, "hd 32, bf16 K/V, q_len padding"},
      {2, 51, 51, 6, 2, 64, 17, false, true, 2, 2, 1, "sliding window 17, padding"},
      {2, 51, 51, 6, 2, 64, 17, true, false, 2, 2, 1, "sliding window 17, bf16 K/V"},
      {1, 9, 131, 6, 2, 96, 0, false, false, 2, 2, 1, "queries after 122 cached keys, hd 96"},
      {1, 9, 131, 6, 2, 96, 5, true, false, 2, 2, 1, "queries after 122 cached keys, window 5, bf16 K/V"},
      {1, 33, 33, 16, 2, 32, 0, false, false, 2, 2, 1, "8 query heads per KV head"},
      {1, 45, 45, 3, 1, 64, 0, false, false, 30, 30, 1, "large scores: most probabilities 0"},
      {1, 45, 45, 3, 1, 64, 0, true, false, 1e-20f, 1e-20f, 1, "scores below FLT_MIN (flushed)"},
      {1, 45, 45, 3, 1, 64, 0, false, false, 1, 1, 1e-37f, "products below FLT_MIN in the value sums"},
      {2, 29, 29, 3, 3, 256, 0, true, true, 2, 2, 1, "hd 256"},
      {2, 45, 45, 6, 2, 64, 0, false, false, 1, 1, 1, "cancelling sums", true},
      {2, 45, 45, 6, 2, 64, 9, true, true, 1, 1, 1, "cancelling sums, bf16 K/V, window 9, padding", true},
      {1, 33, 33, 3, 1, 128, 0, false, false, 1, 1, 1, "cancelling sums, hd 128", true},
      // Longer than a key chunk (attention_chunk_keys: 1,024 keys at hd 64, 512 at hd 128), so a
      // pass group's sums resume across chunks, and more row blocks than shares.
      {1, 1100, 1100, 3, 1, 64, 0, false, false, 2, 2, 1, "1,100 tokens: two key chunks, 18 row blocks"},
      {2, 600, 600, 4, 2, 128, 0, true, true, 2, 2, 1, "600 tokens at hd 128, bf16 K/V, q_len padding"},
      {1, 70, 1100, 6, 2, 64, 300, false, false, 2, 2, 1, "70 queries after 1,030 cached keys, window 300"},
      {1, 700, 700, 3, 1, 64, 200, true, false, 2, 2, 1, "700 tokens, window 200: packing from later keys"},
      {1, 1100, 1100, 16, 2, 32, 0, false, false, 1, 1, 1, "8 query heads per KV head, 1,100 tokens, hd 32", true},
  };
  for (const bool tiny : {true, false}) {
    g.tiny = tiny;
    for (const auto& c : cases) attention_case(c, g);
  }
}

TEST(Bf16KernelsPortable, VdpBf16PsTininessAfterRounding) {
  // vdpbf16ps flushes a result whose rounding to 24 bits with an unbounded exponent is below
  // FLT_MIN (Intel SDM: FTZ; tininess after rounding, as measured on the hardware), which no random
  // input reaches: query row 1 sees keys 0 and 1 with scores 0 and 18 (scale 1), so its
  // probabilities are bf16(e^-18), about 2^-26, and 1; with v1 = FLT_MIN and v0 = -FLT_MIN each
  // output dim sums 1 * FLT_MIN (the odd key first), then FLT_MIN - 2^-26 FLT_MIN, which rounds to
  // FLT_MIN: bf16 0x0080, not 0. Runs on every CPU; on both paths where the hardware is present.
  const int64_t hd = 32;
  std::vector<float> q(2 * hd, 0.0f);
  q[hd] = 1.0f;
  std::vector<uint16_t> k16(2 * hd, 0), v16(2 * hd, 0);
  k16[hd] = 0x4190;  // 18
  for (int64_t d = 0; d < hd; ++d) {
    v16[size_t(d)] = 0x8080;       // -FLT_MIN
    v16[size_t(hd + d)] = 0x0080;  // FLT_MIN
  }
  const int64_t qpos[2] = {0, 1};
  cpu::AttnArgs a;
  a.B = 1, a.T = 2, a.S = 2, a.nh = 1, a.nkv = 1, a.hd = hd, a.scale = 1.0f;
  a.q = q.data(), a.k16 = k16.data(), a.v16 = v16.data(), a.qpos = qpos;
  a.q_sb = a.k_sb = a.v_sb = 2 * hd, a.q_st = a.k_st = a.v_st = hd;
  const size_t bytes = (cpu::attention_scratch_bytes(a) + 63) / 64 * 64;
  std::unique_ptr<void, decltype(&std::free)> scratch(std::aligned_alloc(64, bytes), &std::free);
  std::vector<Bf16Path> paths = {Bf16Path::kPortable};
  if (cpu::hardware_kernels()) paths.push_back(Bf16Path::kHardware);
  for (const Bf16Path p : paths)
    for (const char* dot : {"dp", "fma"}) {  // the hardware path's two ways (the portable one ignores it)
      setenv("UCM_BF16_DOT", dot, 1);
      std::vector<uint16_t> out(size_t(2 * hd), 0xFFFF);
      a.out = out.data();
      cpu::attention_bf16(a, 0, cpu::attention_units(a), 1, scratch.get(), p);
      const std::string what = std::string(p == Bf16Path::kHardware ? "hardware" : "portable") + ", " + dot;
      EXPECT_EQ(out[0], 0x8080) << what << ": row 0 is v0";
      for (int64_t d = 0; d < hd; ++d) EXPECT_EQ(out[size_t(hd + d)], 0x0080) << what << ", dim " << d;
    }
  unsetenv("UCM_BF16_DOT");
}

}  // namespace
