// ucm/kernels/rope.h: RoPE re-rotation of stored keys on the device (ucm_rope_shift; blend,
// store_v1.md §4.4), one thread per (token, head, rotary pair). rotate_half style: the pair
// (d, d + D/2) of a key turns by delta * w_d, with cos/sin computed on the host in double and
// rounded to float, as libucm's CPU ucm_rope_shift does; the rotation itself avoids FMA, so a
// device result equals the CPU's bit for bit.
#pragma once
#include "ucm/kernels/fp.h"

namespace ucm::kernels {

constexpr uint32_t kMaxRopePairs = 256;  ///< head_dim <= 512

struct RopeShiftArgs {
  void* keys = nullptr;       ///< [n_tokens] rows of token_stride elements; head h at h * D
  int32_t dtype = kBF16;
  uint64_t n_tokens = 0, token_stride = 0;  ///< stride in elements
  uint32_t n_heads = 0, D = 0;
  float cos[kMaxRopePairs];   ///< cos(delta * w_d), d < D/2
  float sin[kMaxRopePairs];
};

/// One thread's work: pair d of head h of token t.
UCM_HD void rope_shift_pair(const RopeShiftArgs& a, uint64_t t, uint32_t h, uint32_t d) {
  const uint32_t half = a.D / 2;
  const size_t i1 = t * a.token_stride + size_t(h) * a.D + d, i2 = i1 + half;
  const float x1 = load_elem(a.keys, a.dtype, i1), x2 = load_elem(a.keys, a.dtype, i2);
  const float c = a.cos[d], s = a.sin[d];
  store_elem(a.keys, a.dtype, i1, sub_rn(mul_rn(x1, c), mul_rn(x2, s)));
  store_elem(a.keys, a.dtype, i2, add_rn(mul_rn(x2, c), mul_rn(x1, s)));
}

}  // namespace ucm::kernels
