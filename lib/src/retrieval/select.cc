// lib/src/retrieval/select.cc: windows, budget, top-k and PSA threshold selection (see select.h).
#include "ucm/core/retrieval/select.h"

#include <algorithm>
#include <cmath>

namespace ucm::retrieval {
namespace {

// Strict total order: higher score first, then lower index.
struct Better {
  const float* v;
  bool operator()(uint32_t a, uint32_t b) const { return v[a] > v[b] || (v[a] == v[b] && a < b); }
};

void emit(size_t n, const SelectScratch& s, std::vector<uint32_t>* out) {
  out->clear();
  for (size_t c = 0; c < n; ++c)
    if (s.mark[c]) out->push_back(uint32_t(c));
}

// The best m candidates of s.cand, in rank order, at the front of s.cand.
void best_first(const float* v, size_t m, SelectScratch& s) {
  auto& c = s.cand;
  m = std::min(m, c.size());
  if (m == 0) return;
  if (m < c.size()) std::nth_element(c.begin(), c.begin() + std::ptrdiff_t(m - 1), c.end(), Better{v});
  std::sort(c.begin(), c.begin() + std::ptrdiff_t(m), Better{v});
}

}  // namespace

size_t budget(const ucm_retriever_params& p, size_t n) {
  size_t k;
  if (p.top_k > 0) {
    k = p.top_k;
  } else {
    // ceil(ratio * n), forgiving the float ratio's rounding: 0.3f * 10 = 3.0000001 counts as 3.
    const double x = double(p.sparse_ratio) * double(n);
    const double r = std::ceil(x - 1e-6 * x);
    k = std::max<size_t>(p.min_blocks, r > 0 ? size_t(r) : 0);
  }
  return std::min(k, n);
}

size_t mark_forced(size_t n, const uint8_t* valid, uint32_t sink, uint32_t local, SelectScratch& s) {
  s.mark.assign(n, 0);
  size_t forced = 0;
  for (size_t c = 0; c < std::min<size_t>(sink, n); ++c) s.mark[c] = 1;
  for (size_t c = n - std::min<size_t>(local, n); c < n; ++c) s.mark[c] = 1;
  if (valid)
    for (size_t c = 0; c < n; ++c) s.mark[c] |= valid[c] ? 0 : 1;
  for (size_t c = 0; c < n; ++c) forced += s.mark[c];
  return forced;
}

void select_topk(const float* score, size_t n, const uint8_t* valid, uint32_t sink, uint32_t local, size_t k,
                 SelectScratch& s, std::vector<uint32_t>* out) {
  const size_t forced = mark_forced(n, valid, sink, local, s);
  if (forced < k) {
    s.cand.clear();
    for (size_t c = 0; c < n; ++c)
      if (!s.mark[c]) s.cand.push_back(uint32_t(c));
    const size_t m = k - forced;
    if (m < s.cand.size()) std::nth_element(s.cand.begin(), s.cand.begin() + std::ptrdiff_t(m), s.cand.end(), Better{score});
    for (size_t i = 0; i < std::min(m, s.cand.size()); ++i) s.mark[s.cand[i]] = 1;
  }
  emit(n, s, out);
}

void select_psa(const float* mass, size_t n, const uint8_t* valid, uint32_t sink, uint32_t local, double tau,
                size_t cap, SelectScratch& s, std::vector<uint32_t>* out) {
  size_t count = mark_forced(n, valid, sink, local, s);
  double covered = 0;
  s.cand.clear();
  for (size_t c = 0; c < n; ++c) {
    if (s.mark[c]) covered += (valid && !valid[c]) ? 0.0 : double(mass[c]);
    else s.cand.push_back(uint32_t(c));
  }
  if (count < cap && covered < tau) {
    best_first(mass, cap - count, s);
    for (size_t i = 0; i < s.cand.size() && count < cap && covered < tau; ++i) {
      s.mark[s.cand[i]] = 1;
      covered += double(mass[s.cand[i]]);
      ++count;
    }
  }
  emit(n, s, out);
}

}  // namespace ucm::retrieval
