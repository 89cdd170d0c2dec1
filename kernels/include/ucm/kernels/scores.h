// ucm/kernels/scores.h: per-block retrieval scores of one request on the device, one thread per
// (set, block). A set is one (layer, KV head) run of the request's representations, laid out as
// ucm_repr_buffers (ucm/retrieval.h): C rows per set, block c of set s at row s * C + c.
//
//  R0 (ESA, mean keys):     out[s][c] = max_g sum_d q[s][g][d] * r0[s][c][d]
//  R1 (Quest bounds):       out[s][c] = max_g sum_d max(q[s][g][d] * min[s][c][d], q[s][g][d] * max[s][c][d])
//                           (Quest, Tang et al. 2024, §3)
//  R4 (GSA, Hamming):       out[s][c] = max_t (B - popcount(code[s] ^ r4[s][c][t]))
//  An invalid block (valid[c] == 0) or a NaN score gives -inf.
// The sums run as libucm's CPU kernels do (16 lane accumulators, then the tail, then the lanes in
// order; no FMA), so on the same inputs the results are equal bit for bit.
#pragma once
#include "ucm/kernels/fp.h"

namespace ucm::kernels {

enum : int32_t { kScoreDot = 0, kScoreBound = 1, kScoreHamming = 2 };

struct ScoreArgs {
  int32_t kind = kScoreDot;
  const void* r = nullptr;        ///< dot: [S][C][D] of dtype; bound: [S][C][2][D]; hamming: [S][C][T][Bb] bytes
  int32_t dtype = kBF16;          ///< dot/bound rows: kBF16, kF16 or kF32
  const float* q = nullptr;       ///< dot/bound: [S][G][D] fp32 queries (the G query heads of each set's GQA group)
  const uint8_t* code = nullptr;  ///< hamming: [S][Bb] query codes (sign_hash.h)
  const uint8_t* valid = nullptr; ///< [n] 1 = scorable block (shared by all sets), or null
  float* out = nullptr;           ///< [S][n]
  uint32_t S = 0, C = 0, n = 0;   ///< sets, rows per set, blocks scored (n <= C)
  uint32_t D = 0, G = 1, T = 0, Bb = 0;
};

constexpr uint32_t kLanes = 16;

/// sum_d q[d] * row[d] (row of dtype dt), lanes as libucm's dot_lanes.
UCM_HD float dot_row(const float* q, const void* row, int32_t dt, uint32_t D) {
  float acc[kLanes];
  for (uint32_t j = 0; j < kLanes; ++j) acc[j] = 0.0f;
  uint32_t d = 0;
  for (; d + kLanes <= D; d += kLanes)
    for (uint32_t j = 0; j < kLanes; ++j) acc[j] = add_rn(acc[j], mul_rn(load_elem(row, dt, d + j), q[d + j]));
  float s = 0.0f;
  for (; d < D; ++d) s = add_rn(s, mul_rn(load_elem(row, dt, d), q[d]));
  for (uint32_t j = 0; j < kLanes; ++j) s = add_rn(s, acc[j]);
  return s;
}

/// sum_d max(q[d] * lo[d], q[d] * hi[d]) (lo = row[0..D), hi = row[D..2D)), lanes as bound_lanes.
UCM_HD float bound_row(const float* q, const void* row, int32_t dt, uint32_t D) {
  float acc[kLanes];
  for (uint32_t j = 0; j < kLanes; ++j) acc[j] = 0.0f;
  uint32_t d = 0;
  for (; d + kLanes <= D; d += kLanes)
    for (uint32_t j = 0; j < kLanes; ++j) {
      const float a = mul_rn(q[d + j], load_elem(row, dt, d + j)), b = mul_rn(q[d + j], load_elem(row, dt, D + d + j));
      acc[j] = add_rn(acc[j], a > b ? a : b);
    }
  float s = 0.0f;
  for (; d < D; ++d) {
    const float a = mul_rn(q[d], load_elem(row, dt, d)), b = mul_rn(q[d], load_elem(row, dt, D + d));
    s = add_rn(s, a > b ? a : b);
  }
  for (uint32_t j = 0; j < kLanes; ++j) s = add_rn(s, acc[j]);
  return s;
}

/// Hamming distance of one token's Bb-byte code b to qcode.
UCM_HD uint32_t hamming_token(const uint8_t* b, uint32_t Bb, const uint8_t* qcode) {
  uint32_t pc = 0, i = 0;
  for (; i + 8 <= Bb; i += 8) {
    uint64_t x, y;
    memcpy(&x, b + i, 8);
    memcpy(&y, qcode + i, 8);
    pc += popcount64(x ^ y);
  }
  for (; i < Bb; ++i) pc += popcount64(uint64_t(b[i] ^ qcode[i]));
  return pc;
}

/// max over the block's T token codes of (8 Bb - Hamming distance to qcode); 0 when T == 0.
UCM_HD float hamming_row(const uint8_t* codes, uint32_t T, uint32_t Bb, const uint8_t* qcode) {
  uint32_t best = 0xffffffffu;
  for (uint32_t t = 0; t < T; ++t) {
    const uint32_t pc = hamming_token(codes + size_t(t) * Bb, Bb, qcode);
    best = pc < best ? pc : best;
  }
  return float(8 * Bb - (T ? best : 8 * Bb));
}

/// One thread's work: the score of block c of set s into out[s * n + c].
UCM_HD void score_block(const ScoreArgs& a, uint32_t s, uint32_t c) {
  const float neg_inf = bits_f32(0xff800000u);
  float v;
  const size_t row = size_t(s) * a.C + c;
  if (a.kind == kScoreHamming) {
    v = hamming_row(static_cast<const uint8_t*>(a.r) + row * a.T * a.Bb, a.T, a.Bb, a.code + size_t(s) * a.Bb);
  } else {
    const uint32_t es = dtype_bytes(a.dtype), width = a.kind == kScoreDot ? a.D : 2 * a.D;
    const void* rp = static_cast<const uint8_t*>(a.r) + row * width * es;
    v = 0.0f;
    for (uint32_t g = 0; g < a.G; ++g) {
      const float* q = a.q + (size_t(s) * a.G + g) * a.D;
      const float t = a.kind == kScoreDot ? dot_row(q, rp, a.dtype, a.D) : bound_row(q, rp, a.dtype, a.D);
      v = g == 0 ? t : (t > v ? t : v);
    }
  }
  if (is_nan(v) || (a.valid && !a.valid[c])) v = neg_inf;
  a.out[size_t(s) * a.n + c] = v;
}

}  // namespace ucm::kernels
