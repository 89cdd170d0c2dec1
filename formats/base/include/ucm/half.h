// ucm/half.h: 16-bit float element conversions (bfloat16, IEEE binary16) to and from float.
// Header-only, inline, portable (no intrinsics): the representation scatter, the scoring
// kernels, RoPE shifts and the admin dtype conversion all use these; bf16 -> f32 is a shift the
// compiler vectorises. The CUDA kernels carry their own host/device copies (ucm/kernels/hd.h).
#pragma once
#include <bit>
#include <cstdint>

namespace ucm {

/// bfloat16 bit pattern -> float (exact).
inline float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }

/// IEEE binary16 bit pattern -> float (exact, subnormals, inf and NaN included).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    const float f = float(man) * 0x1p-24f;  // zero or subnormal: man * 2^-24
    return sign ? -f : f;
  }
  const uint32_t bits = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112u) << 23) | (man << 13));
  return std::bit_cast<float>(bits);
}

/// float -> bfloat16, round to nearest even (NaN kept, made quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// float -> IEEE binary16, round to nearest even (subnormals, overflow to inf, NaN kept quiet).
inline uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65536 or inf: inf
  if (a < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (a < 0x33000000u) return sign;  // < 2^-25 rounds to zero
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const int exp = static_cast<int>(a >> 23);  // biased
    const int shift = 126 - exp;                // 113 - exp + 13
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((a - 0x38000000u) >> 13);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into inf: correct
  return static_cast<uint16_t>(sign | half);
}

}  // namespace ucm
