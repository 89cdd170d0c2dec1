// ucm/kernels/hd.h: what lets one function be a CUDA thread's work and a host loop's body.
//
// Every kernel of kernels/ is a launcher around a per-thread function over explicit indices
// (the grid position is an argument, never threadIdx). Those functions are UCM_HD: __host__
// __device__ under nvcc, plain inline C++ under the host compiler. The host test harness
// (tests/kernels) runs the same function over the whole grid and compares the result with libucm's
// CPU reference code, so every kernel's arithmetic and indexing is tested without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define UCM_HD __host__ __device__ __forceinline__
#else
#define UCM_HD inline
#endif

namespace ucm::kernels {

/// Element types (equal to UCM_DTYPE_* of ucm/ucm.h).
enum : int32_t { kBF16 = 1, kF16 = 2, kF32 = 3 };

/// Bytes per element of a dtype above; 0 for anything else.
UCM_HD uint32_t dtype_bytes(int32_t dt) { return dt == kF32 ? 4u : (dt == kF16 || dt == kBF16) ? 2u : 0u; }

UCM_HD uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
UCM_HD float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/// bfloat16 bit pattern -> float (exact).
UCM_HD float bf16_to_f32(uint16_t b) { return bits_f32(uint32_t{b} << 16); }

/// float -> bfloat16, round to nearest even, NaN kept quiet.
UCM_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// IEEE binary16 bit pattern -> float (exact: subnormals, inf, NaN).
UCM_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    const float f = float(man) * 5.9604644775390625e-8f;  // man * 2^-24
    return sign ? -f : f;
  }
  return bits_f32(exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112u) << 23) | (man << 13)));
}

/// float -> IEEE binary16, round to nearest even (subnormals, overflow to inf, NaN kept quiet).
UCM_HD uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  if (a >= 0x47800000u) return uint16_t(sign | 0x7c00u);
  if (a < 0x38800000u) {
    if (a < 0x33000000u) return sign;
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const int shift = 126 - int(a >> 23);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = (a - 0x38000000u) >> 13;
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return uint16_t(sign | half);
}

/// Element i of an array of dtype dt, as float.
UCM_HD float load_elem(const void* p, int32_t dt, size_t i) {
  if (dt == kF32) return static_cast<const float*>(p)[i];
  const uint16_t v = static_cast<const uint16_t*>(p)[i];
  return dt == kBF16 ? bf16_to_f32(v) : f16_to_f32(v);
}

/// Stores x into element i of an array of dtype dt (rounded to nearest even).
UCM_HD void store_elem(void* p, int32_t dt, size_t i, float x) {
  if (dt == kF32) static_cast<float*>(p)[i] = x;
  else static_cast<uint16_t*>(p)[i] = dt == kBF16 ? f32_to_bf16(x) : f32_to_f16(x);
}

UCM_HD uint32_t popcount64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return uint32_t(__popcll(x));
#else
  return uint32_t(__builtin_popcountll(x));
#endif
}

}  // namespace ucm::kernels
