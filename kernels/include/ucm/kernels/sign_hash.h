// ucm/kernels/sign_hash.h: R4 sign-hash codes of queries on the device (GSA's query side), one
// thread per (set, code byte). For set s (one layer and KV head), the GQA group's summed query
// x[d] = sum_g q[s][g][d] (the mean's signs, without the division, as libucm's retriever) is
// projected with the namespace's stored projection P[s] ([D][B] fp32, the slice of r4_projection,
// store_v1.md §4.3) and bit j of the code (LSB first) is (sum_d x[d] * P[d][j] >= 0).
// Sums run in libucm's order (d ascending, no FMA): equal to ucm::retrieval::sign_hash bit for bit.
#pragma once
#include "ucm/kernels/fp.h"

namespace ucm::kernels {

struct SignHashArgs {
  const float* q = nullptr;  ///< [S][G][D] fp32
  const float* P = nullptr;  ///< [S][D][B] fp32
  uint8_t* code = nullptr;   ///< [S][B / 8]
  uint32_t S = 0, G = 1, D = 0, B = 0;
};

/// One thread's work: byte i of set s's code.
UCM_HD void sign_hash_byte(const SignHashArgs& a, uint32_t s, uint32_t i) {
  const float* q = a.q + size_t(s) * a.G * a.D;
  const float* P = a.P + size_t(s) * a.D * a.B;
  float acc[8];
  for (uint32_t k = 0; k < 8; ++k) acc[k] = 0.0f;
  for (uint32_t d = 0; d < a.D; ++d) {
    float x = 0.0f;
    for (uint32_t g = 0; g < a.G; ++g) x = add_rn(x, q[size_t(g) * a.D + d]);
    for (uint32_t k = 0; k < 8; ++k) acc[k] = add_rn(acc[k], mul_rn(x, P[size_t(d) * a.B + 8 * i + k]));
  }
  uint8_t v = 0;
  for (uint32_t k = 0; k < 8; ++k) v = uint8_t(v | (acc[k] >= 0.0f ? 1u << k : 0u));
  a.code[size_t(s) * (a.B / 8) + i] = v;
}

}  // namespace ucm::kernels
