// tests/retrieval/reference.h: synthetic request representations and a brute-force reference of
// the retriever (ucm/retrieval.h), written independently of lib/src/retrieval: double precision,
// full sorts with an explicit comparator, bit-by-bit Hamming distances, std::exp.
//
// Data are small integers (exact in bf16 and fp32, so every dot product and bound is exact in
// float too): selections must match the reference exactly. Where the library's float arithmetic
// could legitimately differ (a GSA projection dot near 0, a PSA cumulative mass near tau), the
// reference reports a margin and the tests skip such draws.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ucm/retrieval.h"

namespace reftest {

inline uint16_t to_bf16(float f) {  // exact for the small integers used here
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}

/// One request's representations for one retriever (all layers), plus queries.
struct Request {
  uint32_t L = 3, H = 3, D = 64, T = 4, B = 128;
  uint32_t h0 = 0, h1 = 3;  // buffer head range
  uint32_t G = 3;           // GQA group
  size_t C = 40;            // capacity
  int32_t dtype = UCM_DTYPE_F32;
  std::vector<float> r0, r1, proj;  // r0 [L][Hs][C][D]; r1 [L][Hs][C][2][D]; proj [L][H][D][B]
  std::vector<uint16_t> r0b, r1b;   // bf16 copies
  std::vector<uint8_t> r4;          // [L][Hs][C][T][B/8]
  uint64_t dense = 0;

  uint32_t Hs() const { return h1 - h0; }
  size_t row(uint32_t l, uint32_t hh, size_t c) const { return (size_t{l} * Hs() + hh) * C + c; }

  void fill(std::mt19937_64& rng) {
    std::uniform_int_distribution<int> v(-8, 8), w(0, 6), pr(-3, 3), by(0, 255);
    const size_t rows = size_t{L} * Hs() * C;
    r0.resize(rows * D);
    r1.resize(rows * 2 * D);
    for (size_t r = 0; r < rows; ++r)
      for (uint32_t d = 0; d < D; ++d) {
        r0[r * D + d] = float(v(rng));
        const int lo = v(rng);
        r1[r * 2 * D + d] = float(lo);
        r1[r * 2 * D + D + d] = float(lo + w(rng));
      }
    r0b.resize(r0.size());
    r1b.resize(r1.size());
    for (size_t i = 0; i < r0.size(); ++i) r0b[i] = to_bf16(r0[i]);
    for (size_t i = 0; i < r1.size(); ++i) r1b[i] = to_bf16(r1[i]);
    r4.resize(rows * T * (B / 8));
    for (auto& b : r4) b = uint8_t(by(rng));
    proj.resize(size_t{L} * H * D * B);
    for (auto& p : proj) p = float(pr(rng));
  }
  /// Queries of one step: [Hs * G][D] small integers.
  std::vector<float> queries(std::mt19937_64& rng) const {
    std::uniform_int_distribution<int> v(-4, 4);
    std::vector<float> q(size_t{Hs()} * G * D);
    for (auto& x : q) x = float(v(rng));
    return q;
  }
  ucm_repr_buffers buffers() const {
    ucm_repr_buffers b{};
    b.struct_size = sizeof(b);
    b.head_begin = h0;
    b.head_end = h1;
    b.dtype = dtype;
    b.capacity = C;
    const bool bf = dtype == UCM_DTYPE_BF16;
    b.r0 = bf ? (void*)r0b.data() : (void*)r0.data();
    b.r1 = bf ? (void*)r1b.data() : (void*)r1.data();
    b.r4 = const_cast<uint8_t*>(r4.data());
    return b;
  }
  ucm_repr_info info() const {
    ucm_repr_info i{};
    i.struct_size = sizeof(i);
    i.num_layers = L;
    i.num_kv_heads = H;
    i.head_dim = D;
    i.block_size = T;
    i.hash_bits = B;
    i.dtype = UCM_DTYPE_BF16;
    i.sections = UCM_REPR_R0 | UCM_REPR_R1 | UCM_REPR_R4;
    i.dense_layers = dense;
    return i;
  }
};

/// Result of the reference: the sets, and the smallest margin of a float-sensitive decision.
struct RefResult {
  std::vector<std::vector<uint32_t>> sets;
  double margin = 1e300;
};

/// The budget. The ratio is the decimal the user wrote (the float 0.3f is 0.30000001...): rounded
/// to 6 decimals first, so ceil(0.3 x 40) = 12, not 13.
inline size_t ref_budget(const ucm_retriever_params& p, size_t n) {
  const double ratio = std::round(double(p.sparse_ratio) * 1e6) / 1e6;
  size_t k = p.top_k > 0 ? p.top_k : std::max<size_t>(p.min_blocks, size_t(std::ceil(ratio * double(n))));
  return std::min(k, n);
}

inline bool forced(const ucm_retriever_params& p, size_t c, size_t n, const uint8_t* valid) {
  return c < p.sink_blocks || c + p.local_blocks >= n || (valid && !valid[c]);
}

/// Per-query-head score of block c for KV head hh (ESA dot, QUEST bound), exact in double.
inline double qscore(const Request& R, int policy, uint32_t l, uint32_t hh, size_t c, const float* qv) {
  double s = 0;
  for (uint32_t d = 0; d < R.D; ++d) {
    if (policy == UCM_POLICY_ESA) {
      s += double(qv[d]) * R.r0[R.row(l, hh, c) * R.D + d];
    } else {
      const double lo = R.r1[R.row(l, hh, c) * 2 * R.D + d], hi = R.r1[R.row(l, hh, c) * 2 * R.D + R.D + d];
      s += std::max(qv[d] * lo, qv[d] * hi);
    }
  }
  return s;
}

/// GSA score of every block for KV head hh: B - min_t Hamming(code(mean q), token code). The code
/// of the mean has the signs of the group's sum, computed exactly in integers here.
inline std::vector<double> gsa_scores(const Request& R, uint32_t l, uint32_t hh, const float* q, double* margin) {
  (void)margin;
  std::vector<long long> qs(R.D, 0);
  for (uint32_t g = 0; g < R.G; ++g)
    for (uint32_t d = 0; d < R.D; ++d) qs[d] += (long long)q[(size_t{hh} * R.G + g) * R.D + d];
  std::vector<int> bit(R.B);
  const float* P = R.proj.data() + (size_t{l} * R.H + R.h0 + hh) * R.D * R.B;
  for (uint32_t j = 0; j < R.B; ++j) {
    long long dot = 0;
    for (uint32_t d = 0; d < R.D; ++d) dot += qs[d] * (long long)P[size_t{d} * R.B + j];
    bit[j] = dot >= 0;
  }
  std::vector<double> out(R.C);
  const uint32_t Bb = R.B / 8;
  for (size_t c = 0; c < R.C; ++c) {
    int best = 1 << 30;
    for (uint32_t t = 0; t < R.T; ++t) {
      int dist = 0;
      const uint8_t* code = R.r4.data() + (R.row(l, hh, c) * R.T + t) * Bb;
      for (uint32_t j = 0; j < R.B; ++j) dist += ((code[j / 8] >> (j % 8)) & 1) != bit[j];
      best = std::min(best, dist);
    }
    out[c] = double(R.B) - best;
  }
  return out;
}

inline std::vector<uint32_t> topk_set(const ucm_retriever_params& p, const std::vector<double>& score, size_t n,
                                      const uint8_t* valid) {
  std::vector<uint32_t> sel, cand;
  for (size_t c = 0; c < n; ++c) (forced(p, c, n, valid) ? sel : cand).push_back(uint32_t(c));
  std::sort(cand.begin(), cand.end(), [&](uint32_t a, uint32_t b) {
    if (score[a] != score[b]) return score[a] > score[b];
    return a < b;
  });
  const size_t k = ref_budget(p, n);
  for (size_t i = 0; sel.size() < k && i < cand.size(); ++i) sel.push_back(cand[i]);
  std::sort(sel.begin(), sel.end());
  return sel;
}

/// PSA over the given query heads (pairs (hh, g)): mean of per-head softmax masses of the bounds.
inline std::vector<uint32_t> psa_set(const ucm_retriever_params& p, const Request& R, uint32_t l,
                                     const std::vector<std::pair<uint32_t, uint32_t>>& heads, const float* q,
                                     size_t n, const uint8_t* valid, double* margin) {
  std::vector<double> mass(n, 0.0);
  for (auto [hh, g] : heads) {
    const float* qv = q + (size_t{hh} * R.G + g) * R.D;
    std::vector<double> u(n);
    double M = -1e300;
    for (size_t c = 0; c < n; ++c)
      if (!valid || valid[c]) M = std::max(M, u[c] = qscore(R, UCM_POLICY_QUEST, l, hh, c, qv));
    if (M == -1e300) continue;
    double Z = 0;
    for (size_t c = 0; c < n; ++c) Z += (!valid || valid[c]) ? (u[c] = std::exp((u[c] - M) / std::sqrt(double(R.D)))) : 0;
    for (size_t c = 0; c < n; ++c)
      if (!valid || valid[c]) mass[c] += u[c] / Z / double(heads.size());
  }
  std::vector<uint32_t> sel, cand;
  double covered = 0;
  for (size_t c = 0; c < n; ++c) {
    if (forced(p, c, n, valid)) {
      sel.push_back(uint32_t(c));
      covered += mass[c];
    } else {
      cand.push_back(uint32_t(c));
    }
  }
  std::sort(cand.begin(), cand.end(), [&](uint32_t a, uint32_t b) {
    if (mass[a] != mass[b]) return mass[a] > mass[b];
    return a < b;
  });
  const size_t cap = p.psa_max_blocks ? std::min<size_t>(p.psa_max_blocks, n) : ref_budget(p, n);
  *margin = std::min(*margin, std::fabs(covered - p.psa_tau));
  for (size_t i = 0; i < cand.size() && sel.size() < cap && covered < p.psa_tau; ++i) {
    sel.push_back(cand[i]);
    covered += mass[cand[i]];
    *margin = std::min(*margin, std::fabs(covered - p.psa_tau));
    // Distinct but nearly equal masses: float rounding in the library could swap them.
    if (i + 1 < cand.size() && mass[cand[i]] != mass[cand[i + 1]])
      *margin = std::min(*margin, (mass[cand[i]] - mass[cand[i + 1]]) / mass[cand[i]]);
  }
  std::sort(sel.begin(), sel.end());
  return sel;
}

/// The reference of ucm_retriever_select for one computing step (no reuse).
inline RefResult reference(const ucm_retriever_params& p, const Request& R, uint32_t l, const float* q, size_t n,
                           const uint8_t* valid) {
  RefResult res;
  if (p.honor_dense_layers && l < 64 && ((R.dense >> l) & 1)) {
    res.sets.assign(1, {});
    for (size_t c = 0; c < n; ++c) res.sets[0].push_back(uint32_t(c));
    return res;
  }
  const uint32_t Hs = R.Hs(), nsets = p.shared_heads ? 1 : Hs;
  res.sets.resize(nsets);
  for (uint32_t s = 0; s < nsets; ++s) {
    const uint32_t ha = p.shared_heads ? 0 : s, hb = p.shared_heads ? Hs : s + 1;
    if (p.policy == UCM_POLICY_PSA) {
      std::vector<std::pair<uint32_t, uint32_t>> heads;
      for (uint32_t hh = ha; hh < hb; ++hh)
        for (uint32_t g = 0; g < R.G; ++g) heads.emplace_back(hh, g);
      res.sets[s] = psa_set(p, R, l, heads, q, n, valid, &res.margin);
      continue;
    }
    std::vector<double> score(n, -1e300);
    for (uint32_t hh = ha; hh < hb; ++hh) {
      std::vector<double> gs;
      if (p.policy == UCM_POLICY_GSA) gs = gsa_scores(R, l, hh, q, &res.margin);
      for (size_t c = 0; c < n; ++c) {
        double best = -1e300;
        if (p.policy == UCM_POLICY_GSA) best = gs[c];
        else
          for (uint32_t g = 0; g < R.G; ++g)
            best = std::max(best, qscore(R, p.policy, l, hh, c, q + (size_t{hh} * R.G + g) * R.D));
        score[c] = std::max(score[c], best);
      }
    }
    res.sets[s] = topk_set(p, score, n, valid);
  }
  return res;
}

}  // namespace reftest
