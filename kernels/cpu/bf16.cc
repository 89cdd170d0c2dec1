// kernels/cpu/bf16.cc: see bf16.h. The dispatch to cpu::hw or cpu::portable
// (bf16_portable.cc), then the cpu::hw kernels, each compiled for AVX-512F + AVX512-BF16
// through `#pragma GCC target` (the standard headers are included before it, so no library
// template is instantiated with those instructions; the dispatch is compiled before it, for any
// x86-64 CPU).
// The unit is compiled with -ffp-contract=off (kernels/cpu/CMakeLists.txt): a product and a
// sum stay two roundings, as in libtorch's element-wise ops, unless a kernel asks for an FMA.
#include "ucm/kernels/cpu/bf16.h"
#include "ucm/kernels/cpu/features.h"
#include "ucm/kernels/cpu/switches.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ucm::kernels::cpu {

bool hardware_kernels() {
  static const bool on = have_avx512_bf16() && read_switches().no_bf16 != "1";
  return on;
}

Bf16Path kernel_path() {
  return hardware_kernels() && read_switches().bf16_kernels != "portable" ? Bf16Path::kHardware : Bf16Path::kPortable;
}

namespace {
bool hw_path(Bf16Path p) { return (p == Bf16Path::kAuto ? kernel_path() : p) == Bf16Path::kHardware; }
}  // namespace

bool attention_uses_vdpbf16ps() {
  const std::string dot = read_switches().bf16_dot;
  if (dot == "dp") return true;
  if (dot == "fma") return false;
  static const bool amd = cpu_is_amd();
  return amd;
}

void rms_norm_bf16(const float* x, int64_t ldx, const float* w, int64_t H, float eps, uint16_t* out, int64_t ldo,
                   int64_t r0, int64_t r1, Bf16Path path) {
  (hw_path(path) ? hw::rms_norm_bf16 : portable::rms_norm_bf16)(x, ldx, w, H, eps, out, ldo, r0, r1);
}

void silu_mul_bf16(const uint16_t* gu, int64_t I, uint16_t* out, int64_t r0, int64_t r1, Bf16Path path) {
  (hw_path(path) ? hw::silu_mul_bf16 : portable::silu_mul_bf16)(gu, I, out, r0, r1);
}

void qkv_rope(const uint16_t* qkv, const float* bias, const float* cos, const float* sin, int64_t T, int64_t nh,
              int64_t nkv, int64_t hd, float* q, float* k, float* v, int64_t r0, int64_t r1, uint16_t* k16,
              uint16_t* v16, Bf16Path path) {
  (hw_path(path) ? hw::qkv_rope : portable::qkv_rope)(qkv, bias, cos, sin, T, nh, nkv, hd, q, k, v, r0, r1, k16, v16);
}

void add_bf16(float* x, const uint16_t* y, int64_t n, Bf16Path path) {
  (hw_path(path) ? hw::add_bf16 : portable::add_bf16)(x, y, n);
}

void attention_bf16(const AttnArgs& a, int64_t u0, int64_t u1, int64_t step, void* scratch, Bf16Path path) {
  (hw_path(path) ? hw::attention_bf16 : portable::attention_bf16)(a, u0, u1, step < 1 ? 1 : step, scratch);
}

bool attention_supported(const AttnArgs& a) {
  return a.B > 0 && a.T > 0 && a.S > 0 && a.nkv > 0 && a.nh > 0 && a.nh % a.nkv == 0 && a.hd > 0 && a.hd % 32 == 0 &&
         a.hd <= 256;
}

namespace {

constexpr int64_t kScoreRows = 4;  // query rows per call of the score kernel (4 x 4 key blocks: 16 accumulators)

int64_t pad_keys(int64_t S) { return (S + 31) / 32 * 32; }
size_t align64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

int64_t attention_units(const AttnArgs& a) { return a.B * a.nkv * ((a.T + kAttnUnitRows - 1) / kAttnUnitRows); }

size_t attention_scratch_bytes(const AttnArgs& a) {
  const size_t sp = size_t(pad_keys(a.S)), hd = size_t(a.hd);
  const size_t rows = size_t(attention_group_passes(a.S) * kAttnPassRows);
  return 2 * align64(sp * hd * 2)    // packed K and V, bf16
         + align64(rows * sp * 4)    // score rows of a pass group, fp32
         + align64(rows * sp * 4)    // its probability rows, bf16 values widened
         + align64(rows * hd * 4)    // its query rows, bf16 values widened
         + align64(rows * hd * 4);   // its output rows' sums between key chunks, fp32
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")
#if defined(__clang__)  // Clang ignores GCC's target pragma: the same ISA on every function below
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma"))), apply_to = function)
#endif
// GCC 12 warns inside avx512fintrin.h about the _mm512_undefined_* operands it passes itself
// (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// Everything compiled for AVX512-BF16 lives in cpu::hw, helpers included: the names
// tests/isa/check_isa_confinement.sh allows those instructions in.
namespace hw {
namespace {

inline __mmask16 tail_mask(int64_t n) { return __mmask16((1u << n) - 1u); }

// 16 bf16 bits -> fp32 (exact).
inline __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
// x rounded to bf16 (nearest even, as vcvtneps2bf16), widened back to fp32.
inline __m512 round_to_bf16(__m512 x) { return widen(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x))); }

inline __m512 widen16(const uint16_t* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 widen16(const uint16_t* p, __mmask16 m) {
  return widen(_mm256_maskz_loadu_epi16(m, p));
}
inline void store_bf16(uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
}
inline void store_bf16(uint16_t* p, __m512 v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
}

// exp(x) of 16 lanes, x clamped to +-88.376 (Cephes expf: x = n ln2 + r, a degree-6 polynomial in
// r, times 2^n; within 2 ulp of the correctly rounded value, as Sleef's expf_u10 that libtorch
// uses is within 1).
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f)), _mm512_set1_ps(-88.3762626647949f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, n);
}

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh>(v); }

// vdpbf16ps as two fp32 FMAs: per lane i, acc = fma(a[2i+1], b[2i+1], acc), then
// fma(a[2i], b[2i], acc), both rounded to nearest even: vdpbf16ps's arithmetic (Intel SDM; the
// portable dp()), with its DAZ and FTZ from the MXCSR (FlushDenormals). On Intel's AVX-512 cores
// vdpbf16ps issues once in two cycles where an FMA issues twice a cycle (measured on the AMX
// Xeon: 1.6 against 6.4 G instructions/s, 2026-12-02), so the two FMAs of a widened pair do its
// work in half its time. odd(v) / even(v): the pairs' high / low halves as fp32 (exact).
inline __m512 odd(__m512i v) { return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xFFFF0000u)))); }
inline __m512 even(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }

// The bf16 pair of two widened bf16 values (two[0] the even element, two[1] the odd one), as
// vdpbf16ps reads it: where it is the faster (AMD's Zen 4 and 5 issue it as often as an FMA).
inline int pair_bits(const float* two) {
  uint32_t e, o;
  std::memcpy(&e, two, 4);
  std::memcpy(&o, two + 1, 4);
  return int((o & 0xFFFF0000u) | (e >> 16));
}

// Denormal inputs read as zero (DAZ) and denormal results flushed to zero (FTZ) while alive: the
// FMAs above then round as vdpbf16ps does.
struct FlushDenormals {
  unsigned was = _mm_getcsr();
  FlushDenormals() { _mm_setcsr(was | 0x8040u); }  // FTZ (bit 15), DAZ (bit 6)
  ~FlushDenormals() { _mm_setcsr(was); }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;
};

// Scores of R rows (query pairs qb, hd/2 per row) against key blocks [kb0, kb1) of Kp:
// sc[r * sp + j] for j in [16 kb0, 16 kb1). Four key blocks at a time (4 R independent sums: the
// dot products' latency hidden), then one at a time.
template <int R, bool kDp>
void scores(const uint16_t* Kp, const float* qf, int64_t hd, int64_t kb0, int64_t kb1, float* sc, int64_t sp) {
  constexpr int kB = 4;
  const int64_t np = hd / 2;
  int64_t kb = kb0;
  for (; kb + kB <= kb1; kb += kB) {
    const uint16_t* k0 = Kp + kb * np * 32;
    __m512 acc[R][kB];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int x = 0; x < kB; ++x) acc[r][x] = _mm512_setzero_ps();
    if constexpr (kDp) {
      for (int64_t p = 0; p < np; ++p) {
        __m512bh kz[kB];
#pragma GCC unroll 16
        for (int x = 0; x < kB; ++x) kz[x] = as_bh(_mm512_loadu_si512(k0 + (x * np + p) * 32));
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512bh q = as_bh(_mm512_set1_epi32(pair_bits(qf + r * hd + 2 * p)));
#pragma GCC unroll 16
          for (int x = 0; x < kB; ++x) acc[r][x] = _mm512_dpbf16_ps(acc[r][x], q, kz[x]);
        }
      }
    } else {
      for (int64_t p = 0; p < np; ++p) {
        __m512 k1[kB], k0v[kB];
#pragma GCC unroll 16
        for (int x = 0; x < kB; ++x) {
          const __m512i kz = _mm512_loadu_si512(k0 + (x * np + p) * 32);
          k1[x] = odd(kz);
          k0v[x] = even(kz);
        }
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512 q1 = _mm512_set1_ps(qf[r * hd + 2 * p + 1]), q0 = _mm512_set1_ps(qf[r * hd + 2 * p]);
#pragma GCC unroll 16
          for (int x = 0; x < kB; ++x) acc[r][x] = _mm512_fmadd_ps(q0, k0v[x], _mm512_fmadd_ps(q1, k1[x], acc[r][x]));
        }
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int x = 0; x < kB; ++x) _mm512_storeu_ps(sc + r * sp + (kb + x) * 16, acc[r][x]);
  }
  for (; kb < kb1; ++kb) {
    const uint16_t* k0 = Kp + kb * np * 32;
    __m512 acc[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    if constexpr (kDp) {
      for (int64_t p = 0; p < np; ++p) {
        const __m512bh a = as_bh(_mm512_loadu_si512(k0 + p * 32));
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
          acc[r] = _mm512_dpbf16_ps(acc[r], as_bh(_mm512_set1_epi32(pair_bits(qf + r * hd + 2 * p))), a);
      }
    } else {
      for (int64_t p = 0; p < np; ++p) {
        const __m512i a = _mm512_loadu_si512(k0 + p * 32);
        const __m512 a1 = odd(a), a0 = even(a);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(qf[r * hd + 2 * p]), a0,
                                   _mm512_fmadd_ps(_mm512_set1_ps(qf[r * hd + 2 * p + 1]), a1, acc[r]));
        }
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(sc + r * sp + kb * 16, acc[r]);
  }
}

using ScoresFn = void (*)(const uint16_t*, const float*, int64_t, int64_t, int64_t, float*, int64_t);
constexpr ScoresFn kScores[2][kScoreRows + 1] = {
    {nullptr, scores<1, false>, scores<2, false>, scores<3, false>, scores<4, false>},
    {nullptr, scores<1, true>, scores<2, true>, scores<3, true>, scores<4, true>}};

// Softmax of sc[lo, hi) into probabilities rounded to bf16, stored widened: pf[lo, hi); pf's
// entries of the pairs around the range's ends that fall outside it are 0.
void softmax_row(float* sc, float* pf, int64_t lo, int64_t hi) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t j = lo; j < hi; j += 16) {
    const __mmask16 m = tail_mask(std::min<int64_t>(16, hi - j));
    vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, sc + j));
  }
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j = lo; j < hi; j += 16) {
    const __mmask16 m = tail_mask(std::min<int64_t>(16, hi - j));
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sc + j), mx));
    vsum = _mm512_mask_add_ps(vsum, m, vsum, e);
    _mm512_mask_storeu_ps(sc + j, m, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
  for (int64_t j = lo; j < hi; j += 16) {
    const __mmask16 m = tail_mask(std::min<int64_t>(16, hi - j));
    _mm512_mask_storeu_ps(pf + j, m, round_to_bf16(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, sc + j), inv)));
  }
  if (lo & 1) pf[lo - 1] = 0;
  if (hi & 1) pf[hi] = 0;
}

// Rows [0, R) += sum over key pairs [jp0, jp1) of pb's pairs (row r at pb + r * sp) times Vp's
// pairs, fp32 accumulation; NDB = hd / 16 (R * NDB <= 16 accumulators). The sums start from 0, or
// (resume) from acc's fp32 rows (row r at acc + r * hd); finish rounds them once to bf16 into
// out[r], else they go back to acc. A sweep in key chunks calls it once per chunk: the same bits
// as one call over all the pairs.
template <int NDB, int R, bool kDp>
void weigh_values(const uint16_t* Vp, const float* pf, int64_t sp, int64_t jp0, int64_t jp1, float* acc_rows,
                  uint16_t* const* out, bool resume, bool finish) {
  __m512 acc[R][NDB];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int d = 0; d < NDB; ++d)
      acc[r][d] = resume ? _mm512_loadu_ps(acc_rows + (r * NDB + d) * 16) : _mm512_setzero_ps();
  if constexpr (kDp) {
    for (int64_t jp = jp0; jp < jp1; ++jp) {
      const uint16_t* vrow = Vp + jp * NDB * 32;
      __m512bh pp[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) pp[r] = as_bh(_mm512_set1_epi32(pair_bits(pf + r * sp + 2 * jp)));
#pragma GCC unroll 16
      for (int d = 0; d < NDB; ++d) {
        const __m512bh vz = as_bh(_mm512_loadu_si512(vrow + d * 32));
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[r][d] = _mm512_dpbf16_ps(acc[r][d], pp[r], vz);
      }
    }
  } else {
    for (int64_t jp = jp0; jp < jp1; ++jp) {
      const uint16_t* vrow = Vp + jp * NDB * 32;
      __m512 p1[R], p0[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        p1[r] = _mm512_set1_ps(pf[r * sp + 2 * jp + 1]);
        p0[r] = _mm512_set1_ps(pf[r * sp + 2 * jp]);
      }
#pragma GCC unroll 16
      for (int d = 0; d < NDB; ++d) {
        const __m512i vz = _mm512_loadu_si512(vrow + d * 32);
        const __m512 v1 = odd(vz), v0 = even(vz);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[r][d] = _mm512_fmadd_ps(p0[r], v0, _mm512_fmadd_ps(p1[r], v1, acc[r][d]));
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int d = 0; d < NDB; ++d) {
      if (finish)
        store_bf16(out[r] + d * 16, acc[r][d]);
      else
        _mm512_storeu_ps(acc_rows + (r * NDB + d) * 16, acc[r][d]);
    }
}

// Rows [0, nr) of weigh_values, in passes of as many rows as 16 accumulators hold.
template <int NDB, bool kDp>
void weigh_rows(const uint16_t* Vp, const float* pb, int64_t sp, int64_t nr, int64_t jp0, int64_t jp1,
                float* acc_rows, uint16_t* const* out, bool resume, bool finish) {
  constexpr int kMax = NDB <= 4 ? 4 : NDB <= 8 ? 2 : 1;
  constexpr int64_t hd = NDB * 16;
  int64_t r = 0;
  for (; r + kMax <= nr; r += kMax)
    weigh_values<NDB, kMax, kDp>(Vp, pb + r * sp, sp, jp0, jp1, acc_rows + r * hd, out + r, resume, finish);
  switch (nr - r) {  // fewer than kMax left
    case 3: weigh_values<NDB, 3, kDp>(Vp, pb + r * sp, sp, jp0, jp1, acc_rows + r * hd, out + r, resume, finish); break;
    case 2: weigh_values<NDB, 2, kDp>(Vp, pb + r * sp, sp, jp0, jp1, acc_rows + r * hd, out + r, resume, finish); break;
    case 1: weigh_values<NDB, 1, kDp>(Vp, pb + r * sp, sp, jp0, jp1, acc_rows + r * hd, out + r, resume, finish); break;
    default: break;
  }
}

using WeighFn = void (*)(const uint16_t*, const float*, int64_t, int64_t, int64_t, int64_t, float*,
                         uint16_t* const*, bool, bool);

template <bool kDp>
WeighFn weigh_for(int64_t hd) {
  switch (hd / 16) {
    case 2: return weigh_rows<2, kDp>;
    case 4: return weigh_rows<4, kDp>;
    case 6: return weigh_rows<6, kDp>;
    case 8: return weigh_rows<8, kDp>;
    case 10: return weigh_rows<10, kDp>;
    case 12: return weigh_rows<12, kDp>;
    case 14: return weigh_rows<14, kDp>;
    default: return weigh_rows<16, kDp>;
  }
}

// 16 fp32 -> 16 bf16 bits exactly as libtorch's vectorised float -> bfloat16 conversion (the
// one Tensor::to runs; round to nearest even on the integer bits, subnormals kept, NaN 0xFFFF).
// vcvtneps2bf16 flushes subnormals, so it is not used where the bytes must equal libtorch's (the
// K/V a store holds).
inline void store_bf16_exact(uint16_t* p, __m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_set1_epi32(0xFFFF));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
}

// 16 fp32 -> 16 bf16 bits at p (round to nearest even).
inline void pack16(uint16_t* p, const float* x, float scale) {
  store_bf16(p, _mm512_mul_ps(_mm512_loadu_ps(x), _mm512_set1_ps(scale)));
}

// 16 fp32 -> rounded as pack16, stored widened back to fp32 at p (exact).
inline void round16(float* p, const float* x, float scale) {
  _mm512_storeu_ps(p, round_to_bf16(_mm512_mul_ps(_mm512_loadu_ps(x), _mm512_set1_ps(scale))));
}

}  // namespace

void rms_norm_bf16(const float* x, int64_t ldx, const float* w, int64_t H, float eps, uint16_t* out, int64_t ldo,
                   int64_t r0, int64_t r1) {
  const int64_t full = H / 16 * 16;
  const __mmask16 tm = tail_mask(H - full);
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * ldx;
    uint16_t* o = out + r * ldo;
    __m512 ss = _mm512_setzero_ps();
    for (int64_t j = 0; j < full; j += 16) {
      const __m512 v = _mm512_loadu_ps(xr + j);
      ss = _mm512_fmadd_ps(v, v, ss);
    }
    if (tm) {
      const __m512 v = _mm512_maskz_loadu_ps(tm, xr + full);
      ss = _mm512_fmadd_ps(v, v, ss);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(_mm512_reduce_add_ps(ss) / float(H) + eps));
    for (int64_t j = 0; j < full; j += 16)
      store_bf16(o + j, _mm512_mul_ps(_mm512_loadu_ps(w + j), _mm512_mul_ps(_mm512_loadu_ps(xr + j), inv)));
    if (tm)
      store_bf16(o + full,
                 _mm512_mul_ps(_mm512_maskz_loadu_ps(tm, w + full), _mm512_mul_ps(_mm512_maskz_loadu_ps(tm, xr + full), inv)),
                 tm);
  }
}

void qkv_rope(const uint16_t* qkv, const float* bias, const float* cos, const float* sin, int64_t T, int64_t nh,
              int64_t nkv, int64_t hd, float* q, float* k, float* v, int64_t r0, int64_t r1, uint16_t* k16,
              uint16_t* v16) {
  const int64_t W = (nh + 2 * nkv) * hd, half = hd / 2;
  const bool kv16 = k16 && v16;
  auto load = [&](const uint16_t* row, int64_t i) {
    const __m512 x = widen16(row + i);
    return bias ? _mm512_add_ps(x, _mm512_loadu_ps(bias + i)) : x;
  };
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* row = qkv + r * W;
    const float* c = cos + (r % T) * half;
    const float* s = sin + (r % T) * half;
    for (int64_t head = 0; head < nh + nkv; ++head) {
      const int64_t base = head * hd;
      const bool to16 = kv16 && head >= nh;
      float* dst = head < nh ? q + (r * nh + head) * hd : to16 ? nullptr : k + (r * nkv + head - nh) * hd;
      uint16_t* dst16 = to16 ? k16 + (r * nkv + head - nh) * hd : nullptr;
      for (int64_t i = 0; i < half; i += 16) {
        const __m512 x1 = load(row, base + i), x2 = load(row, base + half + i);
        const __m512 cv = _mm512_loadu_ps(c + i), sv = _mm512_loadu_ps(s + i);
        const __m512 lo = _mm512_sub_ps(_mm512_mul_ps(x1, cv), _mm512_mul_ps(x2, sv));
        const __m512 hi = _mm512_add_ps(_mm512_mul_ps(x2, cv), _mm512_mul_ps(x1, sv));
        if (to16) {
          store_bf16_exact(dst16 + i, lo);
          store_bf16_exact(dst16 + half + i, hi);
        } else {
          _mm512_storeu_ps(dst + i, lo);
          _mm512_storeu_ps(dst + half + i, hi);
        }
      }
    }
    for (int64_t i = 0; i < nkv * hd; i += 16) {
      const __m512 x = load(row, (nh + nkv) * hd + i);
      if (kv16)
        store_bf16_exact(v16 + r * nkv * hd + i, x);
      else
        _mm512_storeu_ps(v + r * nkv * hd + i, x);
    }
  }
}

void silu_mul_bf16(const uint16_t* gu, int64_t I, uint16_t* out, int64_t r0, int64_t r1) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* g = gu + r * 2 * I;
    const uint16_t* u = g + I;
    uint16_t* o = out + r * I;
    for (int64_t i = 0; i < I; i += 16) {
      const __mmask16 m = tail_mask(std::min<int64_t>(16, I - i));
      const __m512 gv = widen16(g + i, m);
      const __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
      store_bf16(o + i, _mm512_mul_ps(s, widen16(u + i, m)), m);
    }
  }
}

void add_bf16(float* x, const uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_add_ps(_mm512_loadu_ps(x + i), widen16(y + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), widen16(y + i, m)));
  }
}

// One pass of query rows (attention_bf16 below): tokens [t, t + nt), heads g0.. of the KV head's
// group, row r = i * ng + g; its key range [lu, hu) and each row's [lo, hi), relative to the
// unit's first packed key.
// Its rows' sums end at ne distinct key-pair ends E[0] < E[1] < ...: rows [f[m], f[m + 1]) end at
// E[m] (the pass's tokens in order of position; f[ne] = nr).
struct Pass {
  int64_t t, nt, g0, ng, nr, lu, hu, ne;
  int64_t lo[kAttnPassRows], hi[kAttnPassRows], E[kAttnPassRows], f[kAttnPassRows + 1];
  uint16_t* out[kAttnPassRows];
};

namespace {

// The scratch of one attention_bf16 call, carved as attention_scratch_bytes sizes it: one unit's
// packed K and V, and one group of passes' scores, probabilities, rounded queries and sums.
struct AttnBufs {
  uint16_t *Kp, *Vp;
  float *sc, *pb, *qb, *accb;
  int64_t sp, hd, chunk;
  bool dp;
  WeighFn weigh;
};

AttnBufs carve_scratch(const AttnArgs& a, void* scratch) {
  AttnBufs w{};
  w.hd = a.hd;
  w.sp = pad_keys(a.S);
  w.chunk = attention_chunk_keys(a.hd);
  const size_t rows_g = size_t(attention_group_passes(a.S) * kAttnPassRows);
  auto* base = static_cast<unsigned char*>(scratch);
  w.Kp = reinterpret_cast<uint16_t*>(base);
  base += align64(size_t(w.sp * w.hd * 2));
  w.Vp = reinterpret_cast<uint16_t*>(base);
  base += align64(size_t(w.sp * w.hd * 2));
  w.sc = reinterpret_cast<float*>(base);
  base += align64(rows_g * size_t(w.sp) * 4);
  w.pb = reinterpret_cast<float*>(base);
  base += align64(rows_g * size_t(w.sp) * 4);
  w.qb = reinterpret_cast<float*>(base);
  base += align64(rows_g * size_t(w.hd) * 4);
  w.accb = reinterpret_cast<float*>(base);
  w.dp = attention_uses_vdpbf16ps();
  w.weigh = w.dp ? weigh_for<true>(w.hd) : weigh_for<false>(w.hd);
  return w;
}

// K of keys k0 + [from, kpad) of sequence b's KV head h, in blocks of 16 keys, each key's dims in
// pairs: Kp[((jr / 16) * np + p) * 32 + (jr % 16) * 2 + e] = k[k0 + jr][2p + e] (the layout
// vdpbf16ps reads as 16 dot products). Keys past kmax are 0.
void pack_keys(const AttnArgs& a, int64_t b, int64_t h, int64_t k0, int64_t kmax, int64_t from, int64_t kpad,
               uint16_t* Kp) {
  const int64_t hd = a.hd, np = hd / 2;
  alignas(64) uint16_t tmp[256];
  for (int64_t jr = from; jr < kpad; ++jr) {
    const int64_t j = k0 + jr;
    uint32_t* kd = reinterpret_cast<uint32_t*>(Kp) + (jr / 16) * np * 16 + (jr % 16);
    if (j >= kmax) {
      for (int64_t p = 0; p < np; ++p) kd[p * 16] = 0;
      continue;
    }
    const uint32_t* t32;
    if (a.k16) {
      t32 = reinterpret_cast<const uint32_t*>(a.k16 + b * a.k_sb + j * a.k_st + h * hd);
    } else {
      const float* kr = a.k + b * a.k_sb + j * a.k_st + h * hd;
      for (int64_t d = 0; d < hd; d += 16) pack16(tmp + d, kr + d, 1.0f);
      t32 = reinterpret_cast<const uint32_t*>(tmp);
    }
    for (int64_t p = 0; p < np; ++p) kd[p * 16] = t32[p];
  }
}

// V of the same keys in pairs of keys: Vp[((jr / 2) * ndb + d / 16) * 32 + (d % 16) * 2 + jr % 2]
// = v[k0 + jr][d]. Keys past kmax are 0.
void pack_values(const AttnArgs& a, int64_t b, int64_t h, int64_t k0, int64_t kmax, int64_t from, int64_t kpad,
                 uint16_t* Vp) {
  const int64_t hd = a.hd, ndb = hd / 16;
  // The 16-bit interleave of two 16-value halves: out[2i] = lo[i], out[2i + 1] = hi[i].
  alignas(64) static constexpr uint16_t kZip[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i zip = _mm512_load_si512(kZip);
  for (int64_t jr = from; jr < kpad; jr += 2) {
    const int64_t j = k0 + jr;
    uint16_t* vd = Vp + (jr / 2) * ndb * 32;
    for (int64_t d = 0; d < hd; d += 16) {
      __m512i both;  // [bf16(v[j]) 16 dims, bf16(v[j + 1]) 16 dims]
      if (a.v16) {
        const uint16_t* v0 = a.v16 + b * a.v_sb + j * a.v_st + h * hd + d;
        const __m256i lo = j < kmax ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v0)) : _mm256_setzero_si256();
        const __m256i hi =
            j + 1 < kmax ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v0 + a.v_st)) : _mm256_setzero_si256();
        both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      } else {
        __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
        if (j < kmax) lo = _mm512_loadu_ps(a.v + b * a.v_sb + j * a.v_st + h * hd + d);
        if (j + 1 < kmax) hi = _mm512_loadu_ps(a.v + b * a.v_sb + (j + 1) * a.v_st + h * hd + d);
        both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
      }
      _mm512_storeu_si512(vd + d * 2, _mm512_permutexvar_epi16(zip, both));
    }
  }
}

// Scores of the group's passes chunk by chunk of keys (each dot product as in one sweep), the
// softmax of every row, then the weighted values chunk by chunk (each row's sums in key-pair
// order, resumed from accb): the same bits as one pass at a time over all its keys. A row's
// probabilities are 0 over the rest of its pass's range; its sums take the pairs before its
// own (exact zeros added to +0) but stop at its own last pair: a zero added after a sum that
// vdpbf16ps flushed to -0 would make it +0.
void run_group(const AttnBufs& w, int64_t S, Pass* passes, int64_t n) {
  const int64_t hd = w.hd, sp = w.sp, chunk = w.chunk;
  int64_t LU = S, HU = 0;
  for (int64_t i = 0; i < n; ++i) LU = std::min(LU, passes[i].lu), HU = std::max(HU, passes[i].hu);
  const int64_t c_first = LU / 32 * 32;
  {
    const FlushDenormals ftz;
    for (int64_t c0 = c_first; c0 < HU; c0 += chunk)
      for (int64_t i = 0; i < n; ++i) {
        const Pass& ps = passes[i];
        const int64_t b0 = std::max(ps.lu / 16, c0 / 16), b1 = std::min((ps.hu + 15) / 16, (c0 + chunk) / 16);
        if (b0 >= b1) continue;
        const float* q = w.qb + i * kAttnPassRows * hd;
        float* s = w.sc + i * kAttnPassRows * sp;
        for (int64_t r = 0; r < ps.nr; r += kScoreRows)
          kScores[w.dp][std::min(kScoreRows, ps.nr - r)](w.Kp, q + r * hd, hd, b0, b1, s + r * sp, sp);
      }
  }
  for (int64_t i = 0; i < n; ++i) {
    const Pass& ps = passes[i];
    const int64_t pl = ps.lu & ~int64_t{1}, ph = (ps.hu + 1) & ~int64_t{1};  // the pass's pairs
    for (int64_t r = 0; r < ps.nr; ++r) {
      float* s = w.sc + (i * kAttnPassRows + r) * sp;
      float* p = w.pb + (i * kAttnPassRows + r) * sp;
      const int64_t lo = ps.lo[r], hi = ps.hi[r];
      softmax_row(s, p, lo, hi);
      for (int64_t j = pl; j < lo; ++j) p[j] = 0;
      for (int64_t j = hi; j < ph; ++j) p[j] = 0;
    }
  }
  const FlushDenormals ftz;
  for (int64_t c0 = c_first; c0 < HU; c0 += chunk)
    for (int64_t i = 0; i < n; ++i) {
      Pass& ps = passes[i];
      const float* p = w.pb + i * kAttnPassRows * sp;
      float* acc = w.accb + i * kAttnPassRows * hd;
      const int64_t pl = ps.lu / 2;
      // Segment m, pairs [E[m - 1], E[m]): the rows from f[m] on; those before f[m + 1] end in it.
      for (int64_t m = 0; m < ps.ne; ++m) {
        const int64_t jp0 = std::max(c0 / 2, m ? ps.E[m - 1] : pl), jp1 = std::min((c0 + chunk) / 2, ps.E[m]);
        if (jp0 >= jp1) continue;
        const int64_t r0 = ps.f[m], r1 = jp1 >= ps.E[m] ? ps.f[m + 1] : r0;  // rows [r0, r1) finish
        if (r1 > r0) w.weigh(w.Vp, p + r0 * sp, sp, r1 - r0, jp0, jp1, acc + r0 * hd, ps.out + r0, jp0 > pl, true);
        if (ps.nr > r1)
          w.weigh(w.Vp, p + r1 * sp, sp, ps.nr - r1, jp0, jp1, acc + r1 * hd, ps.out + r1, jp0 > pl, false);
      }
    }
}

// Fills pass ps: tokens [t, t + nt) (each seeing a key), heads [g0, g0 + ng) of KV head h's group;
// its queries rounded and scaled into q. lo_of / hi_of: a token's key range relative to k0.
template <class Lo, class Hi>
void fill_pass(const AttnArgs& a, int64_t b, int64_t h, int64_t t, int64_t nt, int64_t g0, int64_t ng, const Lo& lo_of,
               const Hi& hi_of, float* q, Pass& ps) {
  const int64_t hd = a.hd, G = a.nh / a.nkv;
  ps.t = t, ps.nt = nt, ps.g0 = g0, ps.ng = ng, ps.nr = nt * ng, ps.lu = lo_of(t), ps.hu = hi_of(t + nt - 1);
  ps.ne = 0;
  for (int64_t i = 0; i < nt; ++i) {
    const int64_t l1 = lo_of(t + i), h1 = hi_of(t + i), e = (h1 + 1) / 2;
    if (ps.ne == 0 || e > ps.E[ps.ne - 1]) ps.f[ps.ne] = i * ng, ps.E[ps.ne++] = e;
    for (int64_t g = 0; g < ng; ++g) {
      const int64_t r = i * ng + g;
      ps.lo[r] = l1;
      ps.hi[r] = h1;
      ps.out[r] = a.out + ((b * a.T + t + i) * a.nh + h * G + g0 + g) * hd;
      const float* qr = a.q + b * a.q_sb + (t + i) * a.q_st + (h * G + g0 + g) * hd;
      for (int64_t d = 0; d < hd; d += 16) round16(q + r * hd + d, qr + d, a.scale);
    }
  }
  ps.f[ps.ne] = ps.nr;
}

}  // namespace

void attention_bf16(const AttnArgs& a, int64_t u0, int64_t u1, int64_t step, void* scratch) {
  const int64_t hd = a.hd, G = a.nh / a.nkv;
  const int64_t ntb = (a.T + kAttnUnitRows - 1) / kAttnUnitRows;
  const int64_t group = attention_group_passes(a.S);
  const AttnBufs w = carve_scratch(a, scratch);
  Pass passes[8];
  // Keys [pk_k0, pk_end) of sequence pk_b's KV head pk_h, packed by an earlier unit of this call
  // (real keys, not padding): a later row block of the same head packs only the keys after them.
  int64_t pk_b = -1, pk_h = -1, pk_k0 = -1, pk_end = 0;
  for (int64_t u = u0; u < u1; u += step) {
    const int64_t b = u / (a.nkv * ntb), h = (u / ntb) % a.nkv, tb = u % ntb;
    const int64_t t0 = tb * kAttnUnitRows, t1 = std::min(a.T, t0 + kAttnUnitRows);
    const int64_t rows = a.q_len ? std::clamp<int64_t>(a.q_len[b], 0, a.T) : a.T;  // query rows past it: padding
    const int64_t tr = std::min(t1, rows);
    for (int64_t t = std::max(t0, rows); t < t1; ++t)
      std::memset(a.out + ((b * a.T + t) * a.nh + h * G) * hd, 0, size_t(G * hd * 2));
    if (t0 >= tr) continue;
    // The keys these rows see: [kmin, kmax); packed from k0 (a multiple of 32) on.
    int64_t kmax = 0, kmin = a.S;
    for (int64_t t = t0; t < tr; ++t) {
      kmax = std::max(kmax, std::min(a.S, a.qpos[t] + 1));
      kmin = std::min(kmin, first_visible_key(a.qpos[t], a.window));
    }
    const int64_t k0 = std::min(kmin, kmax) / 32 * 32, kpad = pad_keys(std::max<int64_t>(0, kmax - k0));
    const int64_t packed =
        b == pk_b && h == pk_h && k0 == pk_k0 ? std::max<int64_t>(0, std::min(pk_end, kmax) - k0) / 32 * 32 : 0;
    pk_b = b, pk_h = h, pk_k0 = k0, pk_end = std::max(kmax, k0);
    pack_keys(a, b, h, k0, kmax, packed, kpad, w.Kp);
    pack_values(a, b, h, k0, kmax, packed, kpad, w.Vp);
    // Passes of query rows: every head of the KV head's group for as many consecutive tokens as
    // kAttnPassRows holds (groups wider than that: kAttnPassRows heads of one token at a time),
    // taken in groups of up to attention_group_passes() that share one sweep of the keys.
    const int64_t tpp = G <= kAttnPassRows ? kAttnPassRows / G : 1, hpp = G <= kAttnPassRows ? G : kAttnPassRows;
    auto lo_of = [&](int64_t t) { return first_visible_key(a.qpos[t], a.window) - k0; };
    auto hi_of = [&](int64_t t) { return std::min(a.S, a.qpos[t] + 1) - k0; };
    int64_t n_in = 0;
    for (int64_t t = t0; t < tr;) {
      if (hi_of(t) <= lo_of(t)) {  // a token that sees no key (not reached by a causal mask): zero outputs
        std::memset(a.out + ((b * a.T + t) * a.nh + h * G) * hd, 0, size_t(G * hd * 2));
        ++t;
        continue;
      }
      // The pass's tokens: up to tpp, in order of position, each seeing a key.
      int64_t nt = 1;
      while (nt < tpp && t + nt < tr && a.qpos[t + nt] >= a.qpos[t + nt - 1] && hi_of(t + nt) > lo_of(t + nt)) ++nt;
      for (int64_t g0 = 0; g0 < G; g0 += hpp) {
        fill_pass(a, b, h, t, nt, g0, std::min(hpp, G - g0), lo_of, hi_of, w.qb + n_in * kAttnPassRows * hd,
                  passes[n_in]);
        if (++n_in == group) {
          run_group(w, a.S, passes, n_in);
          n_in = 0;
        }
      }
      t += nt;
    }
    if (n_in > 0) run_group(w, a.S, passes, n_in);
  }
}

}  // namespace hw

#pragma GCC diagnostic pop
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

}  // namespace ucm::kernels::cpu
