// lib/src/retrieval/kernels.h: the scoring kernels of the retriever (CPU, portable C++).
//
// Each kernel streams one (layer, KV head) run of a request's representations, laid out as in
// ucm_repr_buffers (ucm/retrieval.h): C blocks contiguous, block c's row at c * row_elems. They
// are written as loops the compiler vectorises (fixed-width lane accumulators instead of float
// reductions, so no -ffast-math is needed) and, on x86-64 with GCC, compiled for x86-64-v4
// (AVX-512), v3 (AVX2 + FMA), popcnt and baseline, picked at load time (target_clones); no
// intrinsics. Results may differ between those builds in the last bits (FMA contraction, lane
// order); selections are exact on integer-valued data (the tests use such data).
#pragma once
#include <cstddef>
#include <cstdint>

#include "ucm/retrieval.h"

namespace ucm::retrieval {

/// Element type of R0/R1 arrays: UCM_DTYPE_BF16, UCM_DTYPE_F16 or UCM_DTYPE_F32.
using Elem = int32_t;
/// Bytes per element of an Elem (2, 2, 4); 0 for anything else.
size_t elem_size(Elem e);

/// Dot products with the mean keys (ESA). r: [C][D] of e; q: [G][D] fp32.
/// out[g * C + c] = sum_d q[g][d] * r[c][d].
void dot_scores(const void* r, Elem e, size_t C, uint32_t D, const float* q, uint32_t G, float* out);

/// Quest upper bounds. r: [C][2][D] of e (row 0 = per-channel min, row 1 = max); q: [G][D] fp32.
/// out[g * C + c] = sum_d max(q[g][d] * min[c][d], q[g][d] * max[c][d]) >= q[g] . k for every key
/// k of block c whose channels lie within the bounds (Quest, Tang et al. 2024, §3).
void bound_scores(const void* r, Elem e, size_t C, uint32_t D, const float* q, uint32_t G, float* out);

/// Best Hamming similarity between a query code and the block's token codes (GSA on device).
/// r: [C][T][Bb] bytes (Bb = B / 8); qh: [Bb]. out[c] = max_t (8 Bb - popcount(qh ^ r[c][t])).
void hamming_scores(const uint8_t* r, size_t C, uint32_t T, uint32_t Bb, const uint8_t* qh, float* out);

/// Sign hash of one (query) vector: bit j of out (LSB first) = (sum_d x[d] * P[d][j] >= 0).
/// x: [D] fp32; P: [D][B] fp32 (one (layer, KV head) slice of r4_projection); out: [B/8] bytes.
/// tmp: B floats of scratch.
void sign_hash(const float* x, const float* P, uint32_t D, uint32_t B, float* tmp, uint8_t* out);

/// x[i] = exp(x[i]) for x[i] <= 0 (inputs above 0 are clamped to 0, below -87 give 0-ish
/// subnormals or 0): a vectorisable polynomial exp, relative error < 2e-7 on [-87, 0].
void exp_nonpositive(float* x, size_t n);

}  // namespace ucm::retrieval
