// lib/src/repr_encode.cc: the block representation encoder (ucm/core/repr_encode.h), shared by
// `ucm precompute` and the C ABI (ucm_repr_encode), so blocks a server dumps carry the same bytes.
#include "ucm/core/repr_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "ucm/half.h"

namespace ucm::repr {
namespace {

// Sign-magnitude neighbours of a 16-bit float bit pattern.
uint16_t next_down16(uint16_t b) {
  if (b == 0x0000) return 0x8001;            // +0 -> smallest negative subnormal
  return (b & 0x8000) ? uint16_t(b + 1) : uint16_t(b - 1);
}
uint16_t next_up16(uint16_t b) {
  if (b == 0x8000) return 0x0001;            // -0 -> smallest positive subnormal
  return (b & 0x8000) ? uint16_t(b - 1) : uint16_t(b + 1);
}

uint64_t align64(uint64_t x) { return (x + 63) & ~uint64_t{63}; }

void put_u32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }  // little-endian host (x86-64, aarch64)
void put_u64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }

}  // namespace

namespace {
// x rounded toward -inf (down) or +inf (up) in a 16-bit format: the nearest value, stepped once
// when it lies on the wrong side of x.
template <uint16_t (*Nearest)(float), float (*Widen)(uint16_t)>
uint16_t round_directed(float x, bool down) {
  const uint16_t c = Nearest(x);
  if (down) return Widen(c) > x ? next_down16(c) : c;
  return Widen(c) < x ? next_up16(c) : c;
}
}  // namespace

uint16_t bf16_round_nearest(float x) { return f32_to_bf16(x); }
float bf16_to_float(uint16_t b) { return bf16_to_f32(b); }
uint16_t bf16_round_down(float x) { return round_directed<bf16_round_nearest, bf16_to_float>(x, true); }
uint16_t bf16_round_up(float x) { return round_directed<bf16_round_nearest, bf16_to_float>(x, false); }
uint16_t fp16_round_nearest(float x) { return f32_to_f16(x); }
float fp16_to_float(uint16_t h) { return f16_to_f32(h); }
uint16_t fp16_round_down(float x) { return round_directed<fp16_round_nearest, fp16_to_float>(x, true); }
uint16_t fp16_round_up(float x) { return round_directed<fp16_round_nearest, fp16_to_float>(x, false); }

std::vector<ReprSection> repr_layout(const ReprSpec& s, uint64_t* total_bytes) {
  const uint64_t es = dtype_size(s.dtype);
  const uint32_t dt = s.dtype == DType::kBF16 ? kReprBF16 : s.dtype == DType::kFP16 ? kReprFP16 : kReprFP32;
  const uint64_t lhd = uint64_t{s.num_layers} * s.num_kv_heads * s.head_dim;
  std::vector<ReprSection> secs = {
      {kReprMeanKey, dt, 0, lhd * es},
      {kReprKeyBounds, dt, 0, 2 * lhd * es},
      {kReprSignHash, kReprBits, 0,
       uint64_t{s.num_layers} * s.num_kv_heads * s.block_size * (s.hash_bits / 8)},
  };
  uint64_t off = align64(8 + 24 * secs.size());
  for (auto& sec : secs) {
    sec.offset = off;
    off = align64(off + sec.length);
  }
  // The payload ends right after the last section (no trailing padding).
  if (total_bytes) *total_bytes = secs.back().offset + secs.back().length;
  return secs;
}

void encode_block_repr(const ReprSpec& s, const float* const* keys, size_t key_stride_t,
                       const float* const* dots, size_t dot_stride_t, const float* projection,
                       std::string* out) {
  if (s.hash_bits == 0 || s.hash_bits % 8 != 0)
    throw std::invalid_argument("hash_bits must be a positive multiple of 8");
  uint64_t total = 0;
  const auto secs = repr_layout(s, &total);
  out->assign(total, '\0');
  char* base = out->data();
  std::memcpy(base, "UCMP", 4);
  put_u32(base + 4, static_cast<uint32_t>(secs.size()));
  for (size_t i = 0; i < secs.size(); ++i) {
    char* e = base + 8 + 24 * i;
    put_u32(e, secs[i].kind);
    put_u32(e + 4, secs[i].dtype);
    put_u64(e + 8, secs[i].offset);
    put_u64(e + 16, secs[i].length);
  }
  const uint32_t L = s.num_layers, H = s.num_kv_heads, D = s.head_dim, T = s.block_size, B = s.hash_bits;
  const size_t es = dtype_size(s.dtype);
  auto store = [&](char* dst, size_t idx, float v, int mode /*0 nearest, -1 down, +1 up*/) {
    if (s.dtype == DType::kFP32) {
      std::memcpy(dst + idx * 4, &v, 4);
      return;
    }
    uint16_t b;
    if (s.dtype == DType::kBF16)
      b = mode == 0 ? bf16_round_nearest(v) : mode < 0 ? bf16_round_down(v) : bf16_round_up(v);
    else
      b = mode == 0 ? fp16_round_nearest(v) : mode < 0 ? fp16_round_down(v) : fp16_round_up(v);
    std::memcpy(dst + idx * 2, &b, 2);
  };
  (void)es;
  char* r0 = base + secs[0].offset;
  char* r1 = base + secs[1].offset;
  uint8_t* r4 = reinterpret_cast<uint8_t*>(base + secs[2].offset);
  // Per dimension: the sum over the block's tokens in token order (double), min and max. Tokens
  // outer, dimensions inner (one row of a token at a time, vectorizable); each dimension's sum
  // still adds its tokens in order 0..T-1.
  std::vector<double> sum(D);
  std::vector<float> mn(D), mx(D);
  for (uint32_t l = 0; l < L; ++l) {
    const float* kl = keys[l];
    for (uint32_t h = 0; h < H; ++h) {
      std::fill(sum.begin(), sum.end(), 0.0);
      std::copy(kl + h * D, kl + h * D + D, mn.begin());
      std::copy(kl + h * D, kl + h * D + D, mx.begin());
      for (uint32_t t = 0; t < T; ++t) {
        const float* row = kl + t * key_stride_t + h * D;
        for (uint32_t d = 0; d < D; ++d) {
          sum[d] += row[d];
          mn[d] = row[d] < mn[d] ? row[d] : mn[d];  // std::min / std::max, in a form that vectorizes
          mx[d] = mx[d] < row[d] ? row[d] : mx[d];
        }
      }
      for (uint32_t d = 0; d < D; ++d) {
        const size_t i0 = (size_t{l} * H + h) * D + d;
        store(r0, i0, static_cast<float>(sum[d] / T), 0);
        store(r1, ((size_t{l} * 2 + 0) * H + h) * D + d, mn[d], -1);
        store(r1, ((size_t{l} * 2 + 1) * H + h) * D + d, mx[d], +1);
      }
      for (uint32_t t = 0; t < T; ++t) {
        uint8_t* bits = r4 + ((size_t{l} * H + h) * T + t) * (B / 8);
        if (dots) {
          // Branch-free: the signs of random projections are coin flips a branch mispredicts.
          const float* dr = dots[l] + t * dot_stride_t + h * B;
          for (uint32_t j = 0; j < B; j += 8) {
            unsigned byte = 0;
            for (uint32_t b = 0; b < 8; ++b) byte |= unsigned(dr[j + b] >= 0.0f) << b;
            bits[j / 8] = uint8_t(byte);
          }
          continue;
        }
        const float* kt = kl + t * key_stride_t + h * D;
        const float* p = projection + (size_t{l} * H + h) * D * B;
        for (uint32_t j = 0; j < B; ++j) {
          double dot = 0;
          for (uint32_t d = 0; d < D; ++d) dot += double(kt[d]) * double(p[size_t{d} * B + j]);
          if (dot >= 0) bits[j / 8] |= uint8_t(1u << (j % 8));
        }
      }
    }
  }
}

// ---- the payload encoder: fp32 dot products, vectorised --------------------------------------

// x86-64 GCC: one copy per ISA level (as lib/src/retrieval/kernels.cc), so the 16-float vectors
// below are one AVX-512 register, two AVX2 ones, or four SSE2 ones.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define UCM_REPR_KERNEL __attribute__((flatten, target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define UCM_REPR_KERNEL __attribute__((flatten))
#endif

namespace {

using V16 = float __attribute__((vector_size(64)));  // 16 floats (GCC vector extension)

// Tokens [t0, t0 + N) of one (layer, head), bits [j0, j0 + 16) (kFull) or [j0, j0 + 8) (the last
// 8 of a B that is not a multiple of 16). The accumulators stay in registers; each step reads one
// row of P and broadcasts one key element per token.
template <uint32_t N, bool kFull>
inline void dots_tile(const float* rows, size_t ld, uint32_t D, const float* P, uint32_t B, uint32_t j0, float* out,
                      size_t ldo) {
  constexpr size_t kBytes = kFull ? 64 : 32;
  V16 acc[N] = {};
  for (uint32_t d = 0; d < D; ++d) {
    V16 p = {};
    std::memcpy(&p, P + size_t{d} * B + j0, kBytes);
    for (uint32_t i = 0; i < N; ++i) acc[i] += rows[i * ld + d] * p;
  }
  for (uint32_t i = 0; i < N; ++i) std::memcpy(out + i * ldo + j0, &acc[i], kBytes);
}

template <bool kFull>
inline void dots_columns(const float* rows, size_t ld, uint32_t T, uint32_t D, const float* P, uint32_t B,
                         uint32_t j0, float* out, size_t ldo) {
  uint32_t t = 0;
  for (; t + 8 <= T; t += 8) dots_tile<8, kFull>(rows + t * ld, ld, D, P, B, j0, out + t * ldo, ldo);
  for (; t < T; ++t) dots_tile<1, kFull>(rows + t * ld, ld, D, P, B, j0, out + t * ldo, ldo);
}

}  // namespace

UCM_REPR_KERNEL void repr_dots_fp32(const ReprSpec& s, const float* const* keys, size_t key_stride_t,
                                    const float* projection, float* dots) {
  const uint32_t L = s.num_layers, H = s.num_kv_heads, D = s.head_dim, T = s.block_size, B = s.hash_bits;
  for (uint32_t l = 0; l < L; ++l)
    for (uint32_t h = 0; h < H; ++h) {
      const float* P = projection + (size_t{l} * H + h) * D * B;
      const float* rows = keys[l] + size_t{h} * D;
      float* out = dots + (size_t{l} * T * H + h) * B;  // token t at + t * H * B
      const size_t ldo = size_t{H} * B;
      for (uint32_t j0 = 0; j0 < B; j0 += 16) {
        if (B - j0 >= 16)
          dots_columns<true>(rows, key_stride_t, T, D, P, B, j0, out, ldo);
        else
          dots_columns<false>(rows, key_stride_t, T, D, P, B, j0, out, ldo);
      }
    }
}

void encode_block_repr_payload(const ReprSpec& s, const void* const* keys, DType key_dtype, size_t key_stride_t,
                               const float* projection, std::string* out) {
  if (!projection) throw std::invalid_argument("encode_block_repr_payload: projection is required");
  if (s.hash_bits == 0 || s.hash_bits % 8 != 0) throw std::invalid_argument("hash_bits must be a positive multiple of 8");
  const uint32_t L = s.num_layers, H = s.num_kv_heads, D = s.head_dim, T = s.block_size, B = s.hash_bits;
  const size_t row = size_t{H} * D;
  // Per thread: the block's keys widened ([L][T][H * D]) and its dot products ([L][T][H][B]).
  // fp32 keys are read where they are; 16-bit ones are widened first.
  thread_local std::vector<float> wide, dots;
  thread_local std::vector<const float*> kp, dp;
  const bool widen = key_dtype != DType::kFP32;
  const size_t ld = widen ? row : key_stride_t;
  if (widen) wide.resize(size_t{L} * T * row);
  dots.resize(size_t{L} * T * H * B);
  kp.resize(L);
  dp.resize(L);
  for (uint32_t l = 0; l < L; ++l) {
    dp[l] = dots.data() + size_t{l} * T * H * B;
    if (!widen) {
      kp[l] = static_cast<const float*>(keys[l]);
      continue;
    }
    float* w = wide.data() + size_t{l} * T * row;
    for (uint32_t t = 0; t < T; ++t) {
      const size_t at = t * key_stride_t;
      float* wr = w + t * row;
      switch (key_dtype) {
        case DType::kBF16: {
          const uint16_t* k = static_cast<const uint16_t*>(keys[l]) + at;
          for (size_t i = 0; i < row; ++i) wr[i] = bf16_to_f32(k[i]);
          break;
        }
        case DType::kFP16: {
          const uint16_t* k = static_cast<const uint16_t*>(keys[l]) + at;
          for (size_t i = 0; i < row; ++i) wr[i] = f16_to_f32(k[i]);
          break;
        }
        case DType::kFP32: break;  // not widened (above)
      }
    }
    kp[l] = w;
  }
  repr_dots_fp32(s, kp.data(), ld, projection, dots.data());
  encode_block_repr(s, kp.data(), ld, dp.data(), size_t{H} * B, nullptr, out);
}

}  // namespace ucm::repr
