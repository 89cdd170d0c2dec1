// kernels/cpu/bf16_portable.cc: the portable implementation of bf16.h's kernels
// (cpu::portable::*): plain C++ for any x86-64 CPU, giving the AVX512-BF16 kernels' bits
// (bf16.cc) on the same inputs. Each instruction of those kernels is emulated on 16-lane
// arrays, in their order of operations:
//   * vdpbf16ps (Intel SDM, "VDPBF16PS"): per fp32 lane i, acc += a[2i+1] * b[2i+1], then
//     acc += a[2i] * b[2i], each an FMA rounded to nearest even, bf16 inputs and acc denormals
//     taken as zero (DAZ), denormal results flushed to a zero of their sign (FTZ, tininess after
//     rounding), MXCSR not consulted: dp() below;
//   * vcvtneps2bf16 / vcvtne2ps2bf16 (_mm512_cvtneps_pbh): round to nearest even on the bits,
//     denormal inputs to a zero of their sign, NaN to its top half with the quiet bit set: cvtne();
//   * GCC's _mm512_reduce_add_ps / _mm512_reduce_max_ps (avx512fintrin.h): the 256-bit halves,
//     then the 128-bit halves, then lanes {2, 3, 0, 1}, then {1, 0}; vmaxps keeps its second
//     operand unless the first is greater;
//   * exp16's Cephes polynomial with its FMAs (std::fma) and vscalefps (one rounding).
// Compiled like bf16.cc, with -ffp-contract=off (kernels/cpu/CMakeLists.txt): every product
// and sum is rounded apart unless written std::fma. Tested bit for bit against the hardware
// kernels, and against libtorch on every CPU, in tests/model/test_compute_dtype.cc.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ucm/kernels/cpu/bf16.h"

namespace ucm::kernels::cpu::portable {
namespace {

constexpr int kL = 16;  // the hardware kernels' fp32 lanes

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

// bf16 bits -> fp32, exactly (no flush: the hardware kernels widen with integer shifts).
float widen(uint16_t h) { return as_float(uint32_t(h) << 16); }

// A bf16 operand of vdpbf16ps: a denormal is a zero of its sign (DAZ).
uint16_t daz(uint16_t h) { return (h & 0x7F80u) == 0 ? uint16_t(h & 0x8000u) : h; }

// vcvtneps2bf16 on one lane (Intel SDM, convert_fp32_to_bfloat16).
uint16_t cvtne(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7F800000u) == 0) return uint16_t((u >> 16) & 0x8000u);              // zero, denormal
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40u);       // NaN: quieted
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);                        // RNE (inf stays inf)
}

// bf16.cc's store_bf16_exact on one lane: libtorch's float -> bfloat16 (RNE on the bits,
// subnormals kept, NaN 0xFFFF).
uint16_t bf16_exact(float x) {
  if (std::isnan(x)) return 0xFFFF;
  const uint32_t u = bits_of(x);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// One FMA step of vdpbf16ps: acc + a * b (a, b: widened bf16 operands, already DAZ; acc: zero or
// normal, as every earlier step leaves it). The product is exact in double and so, for the ≤ 16
// significant bits of a bf16 product against acc's 24, is the sum's one rounding to fp32 (a sum
// too wide for double is far from any fp32 rounding boundary). FTZ with tininess after rounding:
// a result whose 24-bit rounding (unbounded exponent) is below FLT_MIN, i.e. |s| < FLT_MIN - 2^-151,
// becomes a zero of its sign; from there to FLT_MIN, the conversion rounds up to FLT_MIN as the
// hardware does.
inline float dp(float acc, float a, float b) {
  constexpr double kTiny = double(FLT_MIN) - 0x1p-151;
  const double s = double(acc) + double(a) * double(b);
  return std::fabs(s) < kTiny ? std::copysign(0.0f, float(s)) : float(s);
}

// dp() where a * b is exact in fp32 (|a b| >= FLT_MIN, or a or b zero): the fp32 sum is then the
// FMA's one rounding, and a sum below FLT_MIN, a multiple of 2^-149, is exact and so tiny before
// and after rounding. About 4x dp()'s speed (fp32 lanes, no double); callers check the premise.
inline float dp_exact_product(float acc, float a, float b) {
  const float s = acc + a * b;
  return std::fabs(s) < FLT_MIN ? std::copysign(0.0f, s) : s;
}

// The smallest nonzero |x| of bf16 bits h[0, n) (+inf when none): with another such minimum m,
// every product of nonzero operands is exact in fp32 when double(m1) * m2 >= FLT_MIN.
float min_nonzero(const uint16_t* h, int64_t n) {
  uint16_t m = 0x7F80;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t a = h[i] & 0x7FFFu;
    if (a != 0 && a < m) m = a;
  }
  return widen(m);
}
bool exact_products(float m1, float m2) { return double(m1) * double(m2) >= double(FLT_MIN); }

// _mm512_reduce_add_ps / _mm512_reduce_max_ps of 16 lanes (GCC 12 avx512fintrin.h).
float reduce_add(const float* v) {
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = v[8 + i] + v[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[4 + i] + t3[i];
  return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}
float vmax(float a, float b) { return a > b ? a : b; }  // vmaxps
float vmin(float a, float b) { return a < b ? a : b; }  // vminps
float reduce_max(const float* v) {
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = vmax(v[8 + i], v[i]);
  for (int i = 0; i < 4; ++i) t6[i] = vmax(t3[4 + i], t3[i]);
  return vmax(vmax(t6[0], t6[2]), vmax(t6[1], t6[3]));
}

// bf16.cc's exp16 on one lane.
float exp1(float x) {
  x = vmax(vmin(x, 88.3762626647949f), -88.3762626647949f);
  const float n = std::nearbyint(x * 1.44269504088896341f);  // vrndscaleps, round to nearest even
  float r = std::fma(-n, 0.693359375f, x);
  r = std::fma(-n, -2.12194440e-4f, r);
  float y = 1.9875691500e-4f;
  y = std::fma(y, r, 1.3981999507e-3f);
  y = std::fma(y, r, 8.3334519073e-3f);
  y = std::fma(y, r, 4.1665795894e-2f);
  y = std::fma(y, r, 1.6666665459e-1f);
  y = std::fma(y, r, 5.0000001201e-1f);
  y = std::fma(y, r * r, r + 1.0f);
  return float(double(y) * std::ldexp(1.0, int(n)));  // vscalefps: y 2^n, exact in double, rounded once
}

constexpr int64_t kRows = 4;  // bf16.cc's query rows per pass (its scratch layout)
int64_t pad_keys(int64_t S) { return (S + 31) / 32 * 32; }
size_t align64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

void rms_norm_bf16(const float* x, int64_t ldx, const float* w, int64_t H, float eps, uint16_t* out, int64_t ldo,
                   int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * ldx;
    uint16_t* o = out + r * ldo;
    float ss[kL] = {};
    for (int64_t j = 0; j < H; ++j) ss[j % kL] = std::fma(xr[j], xr[j], ss[j % kL]);
    const float inv = 1.0f / std::sqrt(reduce_add(ss) / float(H) + eps);
    for (int64_t j = 0; j < H; ++j) o[j] = cvtne(w[j] * (xr[j] * inv));
  }
}

void qkv_rope(const uint16_t* qkv, const float* bias, const float* cos, const float* sin, int64_t T, int64_t nh,
              int64_t nkv, int64_t hd, float* q, float* k, float* v, int64_t r0, int64_t r1, uint16_t* k16,
              uint16_t* v16) {
  const int64_t W = (nh + 2 * nkv) * hd, half = hd / 2;
  const bool kv16 = k16 && v16;
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* row = qkv + r * W;
    auto load = [&](int64_t i) { return bias ? widen(row[i]) + bias[i] : widen(row[i]); };
    const float* c = cos + (r % T) * half;
    const float* s = sin + (r % T) * half;
    for (int64_t head = 0; head < nh + nkv; ++head) {
      const int64_t base = head * hd;
      const bool to16 = kv16 && head >= nh;
      float* dst = head < nh ? q + (r * nh + head) * hd : to16 ? nullptr : k + (r * nkv + head - nh) * hd;
      uint16_t* dst16 = to16 ? k16 + (r * nkv + head - nh) * hd : nullptr;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = load(base + i), x2 = load(base + half + i);
        const float lo = x1 * c[i] - x2 * s[i];
        const float hi = x2 * c[i] + x1 * s[i];
        if (to16) {
          dst16[i] = bf16_exact(lo);
          dst16[half + i] = bf16_exact(hi);
        } else {
          dst[i] = lo;
          dst[half + i] = hi;
        }
      }
    }
    for (int64_t i = 0; i < nkv * hd; ++i) {
      const float x = load((nh + nkv) * hd + i);
      if (kv16)
        v16[r * nkv * hd + i] = bf16_exact(x);
      else
        v[r * nkv * hd + i] = x;
    }
  }
}

void silu_mul_bf16(const uint16_t* gu, int64_t I, uint16_t* out, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* g = gu + r * 2 * I;
    const uint16_t* u = g + I;
    uint16_t* o = out + r * I;
    for (int64_t i = 0; i < I; ++i) {
      const float gv = widen(g[i]);
      const float s = gv / (1.0f + exp1(0.0f - gv));
      o[i] = cvtne(s * widen(u[i]));
    }
  }
}

void add_bf16(float* x, const uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] + widen(y[i]);
}

namespace {

// bf16.cc's softmax_row for one row: the probabilities of sc[lo, hi), rounded to bf16 and
// widened back, in place; the entries of the pairs around the range's ends that fall outside it
// are 0 (as weigh_values reads them, in pairs).
void softmax_row(float* sc, int64_t lo, int64_t hi) {
  float mx16[kL], sum16[kL] = {};
  std::fill(mx16, mx16 + kL, -INFINITY);
  for (int64_t j = lo; j < hi; ++j) mx16[(j - lo) % kL] = vmax(mx16[(j - lo) % kL], sc[j]);
  const float mx = reduce_max(mx16);
  for (int64_t j = lo; j < hi; ++j) {
    sc[j] = exp1(sc[j] - mx);
    sum16[(j - lo) % kL] = sum16[(j - lo) % kL] + sc[j];
  }
  const float inv = 1.0f / reduce_add(sum16);
  for (int64_t j = lo; j < hi; ++j) sc[j] = widen(cvtne(sc[j] * inv));
  if (lo & 1) sc[lo - 1] = 0;
  if (hi & 1) sc[hi] = 0;
}

}  // namespace

void attention_bf16(const AttnArgs& a, int64_t u0, int64_t u1, int64_t step, void* scratch) {
  const int64_t hd = a.hd, np = hd / 2, G = a.nh / a.nkv, sp = pad_keys(a.S);
  const int64_t ntb = (a.T + kAttnUnitRows - 1) / kAttnUnitRows;
  // Within attention_scratch_bytes(a) (bf16.cc's layout): K in blocks of 16 keys, each block
  // [hd][16] (dim-major: lane l = key 16 blk + l, as the hardware's score lanes); V rows [key][hd];
  // both bf16 with vdpbf16ps's DAZ applied; then one score row (fp32 [sp], within the hardware's
  // score rows) and one query row (fp32 [hd], within its probability rows).
  auto* base = static_cast<unsigned char*>(scratch);
  auto* Kt = reinterpret_cast<uint16_t*>(base);
  auto* Vr = reinterpret_cast<uint16_t*>(base + align64(size_t(sp * hd * 2)));
  auto* sc = reinterpret_cast<float*>(base + 2 * align64(size_t(sp * hd * 2)));
  auto* qf = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(sc) + align64(size_t(sp * 4)));
  for (int64_t u = u0; u < u1; u += step) {  // unit u: sequence b, KV head h, query rows [t0, t1)
    const int64_t b = u / (a.nkv * ntb), h = (u / ntb) % a.nkv, tb = u % ntb;
    const int64_t t0 = tb * kAttnUnitRows, t1 = std::min(a.T, t0 + kAttnUnitRows);
    const int64_t rows = std::min(t1, a.q_len ? std::clamp<int64_t>(a.q_len[b], 0, a.T) : a.T);
    int64_t kmax = 0;
    for (int64_t t = t0; t < rows; ++t) kmax = std::max(kmax, std::min(a.S, a.qpos[t] + 1));
    const int64_t kpad = std::min(sp, (kmax + 31) / 32 * 32);
    for (int64_t j = 0; j < kpad; ++j) {
      uint16_t* kd = Kt + (j / kL) * hd * kL + j % kL;
      uint16_t* vd = Vr + j * hd;
      for (int64_t d = 0; d < hd; ++d) {
        uint16_t kb = 0, vb = 0;  // keys past kmax: 0
        if (j < kmax && a.k16) {
          kb = a.k16[b * a.k_sb + j * a.k_st + h * hd + d];
          vb = a.v16[b * a.v_sb + j * a.v_st + h * hd + d];
        } else if (j < kmax) {
          kb = cvtne(a.k[b * a.k_sb + j * a.k_st + h * hd + d] * 1.0f);
          vb = cvtne(a.v[b * a.v_sb + j * a.v_st + h * hd + d]);
        }
        kd[d * kL] = daz(kb);
        vd[d] = daz(vb);
      }
    }
    const float kmin = min_nonzero(Kt, kpad * hd), vmin = min_nonzero(Vr, kpad * hd);
    for (int64_t t = std::max(t0, rows); t < t1; ++t)
      std::memset(a.out + ((b * a.T + t) * a.nh + h * G) * hd, 0, size_t(G * hd * 2));
    for (int64_t t = t0; t < rows; ++t) {
      const int64_t hi = std::min(a.S, a.qpos[t] + 1);
      const int64_t lo = first_visible_key(a.qpos[t], a.window);
      for (int64_t g = 0; g < G; ++g) {
        uint16_t* o = a.out + ((b * a.T + t) * a.nh + h * G + g) * hd;
        if (hi <= lo) {
          std::memset(o, 0, size_t(hd * 2));
          continue;
        }
        const float* qr = a.q + b * a.q_sb + t * a.q_st + (h * G + g) * hd;
        uint16_t q16[256];
        for (int64_t d = 0; d < hd; ++d) q16[d] = cvtne(qr[d] * a.scale);  // never denormal: no DAZ
        for (int64_t d = 0; d < hd; ++d) qf[d] = widen(q16[d]);
        // Scores of keys [lo, hi): per key, the pairs p in order, the odd element first.
        const bool fast_scores = exact_products(min_nonzero(q16, hd), kmin);
        for (int64_t j0 = lo / kL * kL; j0 < hi; j0 += kL) {
          const uint16_t* kb = Kt + (j0 / kL) * hd * kL;
          float acc[kL] = {};
          for (int64_t p = 0; p < np; ++p) {
            const float q1 = qf[2 * p + 1], q0 = qf[2 * p];
            const uint16_t* k1 = kb + (2 * p + 1) * kL;
            const uint16_t* k0 = kb + 2 * p * kL;
            if (fast_scores)
              for (int l = 0; l < kL; ++l)
                acc[l] = dp_exact_product(dp_exact_product(acc[l], q1, widen(k1[l])), q0, widen(k0[l]));
            else
              for (int l = 0; l < kL; ++l) acc[l] = dp(dp(acc[l], q1, widen(k1[l])), q0, widen(k0[l]));
          }
          for (int64_t j = std::max(j0, lo); j < std::min(j0 + kL, hi); ++j) sc[j] = acc[j - j0];
        }
        softmax_row(sc, lo, hi);
        // Output dims d: the key pairs [lo / 2, (hi + 1) / 2) in order, the odd key first.
        float pmin = INFINITY;
        for (int64_t j = lo; j < hi; ++j)
          if (sc[j] != 0) pmin = std::min(pmin, std::fabs(sc[j]));
        const bool fast_values = exact_products(pmin, vmin);
        float acc[256] = {};
        for (int64_t jp = lo / 2; jp < (hi + 1) / 2; ++jp) {
          const float p1 = sc[2 * jp + 1], p0 = sc[2 * jp];
          const uint16_t* v1 = Vr + (2 * jp + 1) * hd;
          const uint16_t* v0 = Vr + 2 * jp * hd;
          for (int64_t d0 = 0; d0 < hd; d0 += kL) {  // 16 dims at a time (hd: a multiple of 32)
            float* ac = acc + d0;
            if (fast_values)
              for (int l = 0; l < kL; ++l)
                ac[l] = dp_exact_product(dp_exact_product(ac[l], p1, widen(v1[d0 + l])), p0, widen(v0[d0 + l]));
            else
              for (int l = 0; l < kL; ++l) ac[l] = dp(dp(ac[l], p1, widen(v1[d0 + l])), p0, widen(v0[d0 + l]));
          }
        }
        for (int64_t d = 0; d < hd; ++d) o[d] = cvtne(acc[d]);
      }
    }
  }
}

}  // namespace ucm::kernels::cpu::portable
