// lib/src/retrieval/convert.h: 16-bit float element conversions shared by the representation
// scatter (ucm_store_load_repr) and the scoring kernels. Header-only, inline, portable (no
// intrinsics); bf16 -> f32 is a shift the compiler vectorises.
#pragma once
#include <bit>
#include <cstdint>

namespace ucm::retrieval {

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

/// float -> bfloat16, round to nearest even (NaN kept quiet). For queries given as bf16 in tests
/// and the bench's synthetic data.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

}  // namespace ucm::retrieval
