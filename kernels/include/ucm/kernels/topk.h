// ucm/kernels/topk.h: block selection on the device: the sink and local windows, top-k and the PSA
// threshold, one CUDA block per set. The same rules as libucm's CPU selection
// (lib/src/retrieval/select.h):
//  - forced blocks: the sink window [0, sink), the local window [n - local, n) and every invalid
//    block (valid[c] == 0): always selected;
//  - the others rank by score, higher first, equal scores by lower block index (a NaN score ranks
//    as -inf, and -0 as +0).
// Top-k keeps the best k - forced others. It finds the (k - forced)-th largest rank key with a
// most-significant-digit-first radix search: 8 passes of an 8-bit histogram of the keys that match
// the digits found so far (radix8_select, topk_hist), each pass one shared-memory histogram of the
// whole CUDA block. (Until 2026-11-29: 64 rounds of "how many keys are >= this prefix" by one
// warp, radix_select; 0.13-0.24x of a D2D copy on an H100, docs/device.md.)
// PSA (arXiv:2503.00392 §3.2, Algorithm 1) keeps, after the forced blocks, the others in rank order while
// fewer than cap blocks are selected and the covered mass is below tau: block c is kept iff
// forced + (others ranked above c) < cap and forced mass + (their mass) < tau (psa_keep; O(n) per
// block; the mass sums run in index order in double, the CPU's in rank order: equal on data
// whose sums are exact, within rounding otherwise).
#pragma once
#include "ucm/kernels/fp.h"

namespace ucm::kernels {

struct SelectArgs {
  const float* score = nullptr;   ///< [S][n] scores (top-k) or estimated attention masses (PSA)
  const uint8_t* valid = nullptr; ///< [n] or null
  uint8_t* mark = nullptr;        ///< [S][n] out: 1 = selected
  uint32_t* idx = nullptr;        ///< [S][idx_cap] out (may be null): selected blocks, ascending
  uint32_t* count = nullptr;      ///< [S] out (may be null): selected blocks per set
  uint32_t S = 0, n = 0, idx_cap = 0;
  uint32_t sink = 0, local = 0;
  uint32_t k = 0;                 ///< top-k budget in blocks (>= forced: only forced are selected)
  double tau = 0;                 ///< PSA: mass to cover
  uint32_t cap = 0;               ///< PSA: most blocks
};

UCM_HD bool is_forced(const SelectArgs& a, uint32_t c) {
  const uint32_t local = a.local < a.n ? a.local : a.n;
  return c < a.sink || c >= a.n - local || (a.valid && !a.valid[c]);
}

/// A distinct 64-bit key per block whose order is the rank order: the score's bits made
/// monotone (NaN as -inf, -0 as +0) above the complement of the index.
UCM_HD uint64_t rank_key(float score, uint32_t c) {
  if (is_nan(score)) score = bits_f32(0xff800000u);
  if (score == 0.0f) score = 0.0f;
  uint32_t b = f32_bits(score);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (uint64_t(b) << 32) | uint64_t(0xffffffffu - c);
}

/// Forced blocks of set s, counted by thread tid of nt (blocks tid, tid + nt, ...).
UCM_HD uint32_t topk_count_forced(const SelectArgs& a, uint32_t tid, uint32_t nt) {
  uint32_t m = 0;
  for (uint32_t c = tid; c < a.n; c += nt) m += is_forced(a, c) ? 1u : 0u;
  return m;
}

/// Others (not forced) of set s with rank key >= prefix, counted by thread tid of nt.
UCM_HD uint32_t topk_count_ge(const SelectArgs& a, uint32_t s, uint32_t tid, uint32_t nt, uint64_t prefix) {
  const float* sc = a.score + size_t(s) * a.n;
  uint32_t m = 0;
  for (uint32_t c = tid; c < a.n; c += nt) m += (!is_forced(a, c) && rank_key(sc[c], c) >= prefix) ? 1u : 0u;
  return m;
}

/// The m-th largest key (m >= 1) among those count_ge(prefix) counts, by 64 rounds; 0 when fewer
/// than m exist (then every key is >= it). count_ge(prefix) must return the total over the set.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class CountGe>
UCM_HD uint64_t radix_select(uint32_t m, CountGe count_ge) {
  uint64_t p = 0;
  for (int b = 63; b >= 0; --b) {
    const uint64_t cand = p | (uint64_t(1) << b);
    if (count_ge(cand) >= m) p = cand;
  }
  return p;
}

/// radix_select's result in 8 passes of 8 bits, most significant first (the device's top-k: 8
/// block-wide shared-memory histograms instead of 64 warp-wide counts, launch.cu). hist(prefix,
/// mask, shift, h) adds to h[256] (zeroed here) the keys k with (k & mask) == prefix, by digit
/// (k >> shift) & 255, summed over the whole set. Keys are distinct (rank_key), so the digit
/// chosen at each pass is that of the m-th largest key, and the result equals radix_select's; 0
/// when fewer than m keys exist. The device picks the digit with a warp scan over the same
/// histogram (topk_pick_digit's rule).
UCM_HD bool topk_pick_digit(const uint32_t* h, uint32_t* m, uint32_t* digit) {
  uint32_t above = 0;
  for (int d = 255; d >= 0; --d) {
    if (above + h[d] >= *m) {
      *m -= above;
      *digit = uint32_t(d);
      return true;
    }
    above += h[d];
  }
  return false;  // fewer than m keys in this bucket: only possible at the first pass
}

#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class Hist>
UCM_HD uint64_t radix8_select(uint32_t m, Hist hist) {
  uint64_t prefix = 0, mask = 0;
  for (int pass = 7; pass >= 0; --pass) {
    const int shift = 8 * pass;
    uint32_t h[256];
    for (uint32_t& x : h) x = 0;
    hist(prefix, mask, shift, h);
    uint32_t digit = 0;
    if (!topk_pick_digit(h, &m, &digit)) return 0;
    prefix |= uint64_t(digit) << shift;
    mask |= uint64_t(0xff) << shift;
  }
  return prefix;
}

/// One thread's share of a radix8_select histogram pass over set s: for each other (not forced)
/// block among tid, tid + nt, ... whose key matches prefix under mask, add(its digit) (the host
/// increments an array, the device a shared-memory bin atomically).
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class Add>
UCM_HD void topk_hist(const SelectArgs& a, uint32_t s, uint32_t tid, uint32_t nt, uint64_t prefix, uint64_t mask,
                      int shift, Add add) {
  const float* sc = a.score + size_t(s) * a.n;
  for (uint32_t c = tid; c < a.n; c += nt) {
    if (is_forced(a, c)) continue;
    const uint64_t k = rank_key(sc[c], c);
    if ((k & mask) == prefix) add(uint32_t(k >> shift) & 0xffu);
  }
}

/// One thread's final step of top-k: marks block c of set s (m = k - forced others to keep,
/// threshold = radix_select's key).
UCM_HD void topk_mark(const SelectArgs& a, uint32_t s, uint32_t c, uint32_t m, uint64_t threshold) {
  const bool sel = is_forced(a, c) || (m > 0 && rank_key(a.score[size_t(s) * a.n + c], c) >= threshold);
  a.mark[size_t(s) * a.n + c] = sel ? 1 : 0;
}

/// One thread's work of PSA: marks block c of set s.
UCM_HD void psa_mark(const SelectArgs& a, uint32_t s, uint32_t c) {
  const float* m = a.score + size_t(s) * a.n;
  uint8_t sel = 1;
  if (!is_forced(a, c)) {
    uint32_t forced = 0, above = 0;
    double covered = 0;
    const uint64_t kc = rank_key(m[c], c);
    for (uint32_t j = 0; j < a.n; ++j) {
      if (is_forced(a, j)) {
        ++forced;
        if (!a.valid || a.valid[j]) covered = dadd_rn(covered, double(m[j]));
      }
    }
    for (uint32_t j = 0; j < a.n; ++j)
      if (!is_forced(a, j) && rank_key(m[j], j) > kc) {
        ++above;
        covered = dadd_rn(covered, double(m[j]));
      }
    sel = (forced + above < a.cap && covered < a.tau) ? 1 : 0;
  }
  a.mark[size_t(s) * a.n + c] = sel;
}

/// Compaction, per thread tid of nt: the contiguous range of blocks [lo, hi) it owns.
UCM_HD void chunk_range(uint32_t n, uint32_t tid, uint32_t nt, uint32_t* lo, uint32_t* hi) {
  const uint32_t per = (n + nt - 1) / nt;
  *lo = tid * per < n ? tid * per : n;
  *hi = *lo + per < n ? *lo + per : n;
}
/// Selected blocks in thread tid's range.
UCM_HD uint32_t chunk_selected(const SelectArgs& a, uint32_t s, uint32_t tid, uint32_t nt) {
  uint32_t lo, hi, m = 0;
  chunk_range(a.n, tid, nt, &lo, &hi);
  for (uint32_t c = lo; c < hi; ++c) m += a.mark[size_t(s) * a.n + c];
  return m;
}
/// Writes thread tid's selected blocks at idx[s][offset...] (offset: the selected blocks of the
/// threads before it); entries at or beyond idx_cap are dropped (count still says how many).
UCM_HD void chunk_write(const SelectArgs& a, uint32_t s, uint32_t tid, uint32_t nt, uint32_t offset) {
  uint32_t lo, hi;
  chunk_range(a.n, tid, nt, &lo, &hi);
  for (uint32_t c = lo; c < hi; ++c)
    if (a.mark[size_t(s) * a.n + c]) {
      if (offset < a.idx_cap) a.idx[size_t(s) * a.idx_cap + offset] = c;
      ++offset;
    }
}

}  // namespace ucm::kernels
