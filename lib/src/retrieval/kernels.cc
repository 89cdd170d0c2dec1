// lib/src/retrieval/kernels.cc: scoring kernels (see kernels.h). Built with -O3 (lib/CMakeLists.txt).
#include "ucm/core/retrieval/kernels.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "ucm/half.h"

// x86-64 GCC: one copy of each entry point per ISA level, chosen by the loader (ifunc). The
// templates below are inlined into each copy (flatten), so they vectorise for that level.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define UCM_KERNEL __attribute__((flatten, target_clones("arch=x86-64-v4", "arch=x86-64-v3", "popcnt", "default")))
#else
#define UCM_KERNEL __attribute__((flatten))
#endif

namespace ucm::retrieval {
namespace {

constexpr uint32_t kLanes = 16;  // one AVX-512 register of floats, two AVX2 ones
constexpr uint32_t kMaxRow = 2048;  // floats of a converted row ([2][D] for D <= 1024)

struct BF16 {
  using T = uint16_t;
  static float cvt(uint16_t v) { return bf16_to_f32(v); }
};
struct F16 {
  using T = uint16_t;
  static float cvt(uint16_t v) { return f16_to_f32(v); }
};
struct F32 {
  using T = float;
  static float cvt(float v) { return v; }
};

// Row of n elements as floats: the row itself for fp32, else converted into buf.
template <class E>
inline const float* as_floats(const typename E::T* src, uint32_t n, float* buf) {
  if constexpr (std::is_same_v<E, F32>) {
    (void)n;
    (void)buf;
    return src;
  } else {
    for (uint32_t d = 0; d < n; ++d) buf[d] = E::cvt(src[d]);
    return buf;
  }
}

// sum_d a[d] * b[d] with kLanes independent partial sums (vectorisable without reassociation).
template <uint32_t DC>
inline float dot_lanes(const float* a, const float* b, uint32_t Dr) {
  const uint32_t D = DC ? DC : Dr;
  float acc[kLanes] = {};
  uint32_t d = 0;
  for (; d + kLanes <= D; d += kLanes)
    for (uint32_t j = 0; j < kLanes; ++j) acc[j] += a[d + j] * b[d + j];
  float s = 0;
  for (; d < D; ++d) s += a[d] * b[d];
  for (uint32_t j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

// sum_d max(q[d] * lo[d], q[d] * hi[d]), lanes as above.
template <uint32_t DC>
inline float bound_lanes(const float* q, const float* lo, const float* hi, uint32_t Dr) {
  const uint32_t D = DC ? DC : Dr;
  float acc[kLanes] = {};
  uint32_t d = 0;
  for (; d + kLanes <= D; d += kLanes)
    for (uint32_t j = 0; j < kLanes; ++j) {
      const float a = q[d + j] * lo[d + j], b = q[d + j] * hi[d + j];
      acc[j] += a > b ? a : b;
    }
  float s = 0;
  for (; d < D; ++d) {
    const float a = q[d] * lo[d], b = q[d] * hi[d];
    s += a > b ? a : b;
  }
  for (uint32_t j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

template <class E, uint32_t DC>
inline void dot_impl(const void* rv, size_t C, uint32_t Dr, const float* q, uint32_t G, float* out) {
  const uint32_t D = DC ? DC : Dr;
  const auto* r = static_cast<const typename E::T*>(rv);
  alignas(64) float buf[kMaxRow];
  for (size_t c = 0; c < C; ++c) {
    const float* row = as_floats<E>(r + c * D, D, buf);
    for (uint32_t g = 0; g < G; ++g) out[g * C + c] = dot_lanes<DC>(row, q + size_t{g} * D, D);
  }
}

template <class E, uint32_t DC>
inline void bound_impl(const void* rv, size_t C, uint32_t Dr, const float* q, uint32_t G, float* out) {
  const uint32_t D = DC ? DC : Dr;
  const auto* r = static_cast<const typename E::T*>(rv);
  alignas(64) float buf[kMaxRow];
  for (size_t c = 0; c < C; ++c) {
    const float* row = as_floats<E>(r + c * 2 * D, 2 * D, buf);
    for (uint32_t g = 0; g < G; ++g) out[g * C + c] = bound_lanes<DC>(q + size_t{g} * D, row, row + D, D);
  }
}

template <class E>
inline void dot_dispatch_d(const void* r, size_t C, uint32_t D, const float* q, uint32_t G, float* out) {
  if (D == 64) dot_impl<E, 64>(r, C, D, q, G, out);
  else if (D == 128) dot_impl<E, 128>(r, C, D, q, G, out);
  else dot_impl<E, 0>(r, C, D, q, G, out);
}
template <class E>
inline void bound_dispatch_d(const void* r, size_t C, uint32_t D, const float* q, uint32_t G, float* out) {
  if (D == 64) bound_impl<E, 64>(r, C, D, q, G, out);
  else if (D == 128) bound_impl<E, 128>(r, C, D, q, G, out);
  else bound_impl<E, 0>(r, C, D, q, G, out);
}

inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// W 64-bit words per token code (B = 64 W).
template <uint32_t WC>
inline void hamming_words(const uint8_t* r, size_t C, uint32_t T, uint32_t Wr, const uint8_t* qh, float* out) {
  const uint32_t W = WC ? WC : Wr;
  uint64_t q[64];
  for (uint32_t w = 0; w < W; ++w) q[w] = load64(qh + 8 * w);
  const size_t stride = size_t{W} * 8;
  for (size_t c = 0; c < C; ++c) {
    const uint8_t* b = r + c * T * stride;
    uint32_t best = ~0u;
    for (uint32_t t = 0; t < T; ++t) {
      uint32_t pc = 0;
      for (uint32_t w = 0; w < W; ++w) pc += uint32_t(__builtin_popcountll(load64(b + t * stride + 8 * w) ^ q[w]));
      best = pc < best ? pc : best;
    }
    out[c] = float(64 * W - (T ? best : 64 * W));
  }
}

// Any Bb (bytes per code): byte-wise.
inline void hamming_bytes(const uint8_t* r, size_t C, uint32_t T, uint32_t Bb, const uint8_t* qh, float* out) {
  for (size_t c = 0; c < C; ++c) {
    const uint8_t* b = r + c * T * Bb;
    uint32_t best = ~0u;
    for (uint32_t t = 0; t < T; ++t) {
      uint32_t pc = 0;
      for (uint32_t i = 0; i < Bb; ++i) pc += uint32_t(__builtin_popcount(unsigned(b[t * Bb + i] ^ qh[i])));
      best = pc < best ? pc : best;
    }
    out[c] = float(8 * Bb - (T ? best : 8 * Bb));
  }
}

}  // namespace

size_t elem_size(Elem e) {
  return e == UCM_DTYPE_BF16 || e == UCM_DTYPE_F16 ? 2 : e == UCM_DTYPE_F32 ? 4 : 0;
}

UCM_KERNEL void dot_scores(const void* r, Elem e, size_t C, uint32_t D, const float* q, uint32_t G, float* out) {
  if (e == UCM_DTYPE_BF16) dot_dispatch_d<BF16>(r, C, D, q, G, out);
  else if (e == UCM_DTYPE_F16) dot_dispatch_d<F16>(r, C, D, q, G, out);
  else dot_dispatch_d<F32>(r, C, D, q, G, out);
}

UCM_KERNEL void bound_scores(const void* r, Elem e, size_t C, uint32_t D, const float* q, uint32_t G, float* out) {
  if (e == UCM_DTYPE_BF16) bound_dispatch_d<BF16>(r, C, D, q, G, out);
  else if (e == UCM_DTYPE_F16) bound_dispatch_d<F16>(r, C, D, q, G, out);
  else bound_dispatch_d<F32>(r, C, D, q, G, out);
}

UCM_KERNEL void hamming_scores(const uint8_t* r, size_t C, uint32_t T, uint32_t Bb, const uint8_t* qh, float* out) {
  if (Bb == 16) hamming_words<2>(r, C, T, 2, qh, out);
  else if (Bb == 32) hamming_words<4>(r, C, T, 4, qh, out);
  else if (Bb % 8 == 0 && Bb <= 512) hamming_words<0>(r, C, T, Bb / 8, qh, out);
  else hamming_bytes(r, C, T, Bb, qh, out);
}

UCM_KERNEL void sign_hash(const float* x, const float* P, uint32_t D, uint32_t B, float* tmp, uint8_t* out) {
  for (uint32_t j = 0; j < B; ++j) tmp[j] = 0;
  for (uint32_t d = 0; d < D; ++d) {
    const float xd = x[d];
    const float* row = P + size_t{d} * B;
    for (uint32_t j = 0; j < B; ++j) tmp[j] += xd * row[j];
  }
  for (uint32_t i = 0; i < B / 8; ++i) {
    uint8_t v = 0;
    for (uint32_t k = 0; k < 8; ++k) v |= uint8_t(tmp[8 * i + k] >= 0.0f ? 1u << k : 0u);
    out[i] = v;
  }
}

UCM_KERNEL void exp_nonpositive(float* x, size_t n) {
  // exp(x) = 2^k exp(r), k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2]; exp(r) by its
  // degree-6 Taylor polynomial (|error| < 3.1e-7 relative at |r| = 0.347).
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187e-06f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  for (size_t i = 0; i < n; ++i) {
    float v = x[i];
    v = v < -87.0f ? -87.0f : v;
    v = v > 0.0f ? 0.0f : v;
    const float k = (v * kLog2e + kRound) - kRound;
    const float r = (v - k * kLn2Hi) - k * kLn2Lo;
    const float p =
        1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    const int32_t e = int32_t(k) + 127;
    uint32_t bits = uint32_t(e) << 23;
    float scale;
    std::memcpy(&scale, &bits, 4);
    x[i] = p * scale;
  }
}

}  // namespace ucm::retrieval
