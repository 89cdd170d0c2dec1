// The retriever's rules through the C ABI (libucm.so): windows and budgets, invalid blocks,
// reuse_steps, shared heads, dense layers, bf16 queries, the defaults and their YAML file,
// and every error of ucm/retrieval.h's retriever calls.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "reference.h"
#include "retriever_util.h"
#include "ucm/retrieval.h"

using reftest::Request;
namespace fs = std::filesystem;

namespace {

// A one-KV-head ESA request whose block c scores exactly c (R0 = c e_0, q = e_0): the ranking is
// known without any reference.
struct Ramp {
  Request R;
  std::vector<float> q;
  ucm_repr_buffers bufs{};
  explicit Ramp(size_t C = 32) {
    R.H = R.h1 = 1;
    R.G = 1;
    R.L = 4;
    R.C = C;
    std::mt19937_64 rng(1);
    R.fill(rng);
    std::fill(R.r0.begin(), R.r0.end(), 0.0f);
    for (uint32_t l = 0; l < R.L; ++l)
      for (size_t c = 0; c < C; ++c) R.r0[R.row(l, 0, c) * R.D] = float(c);
    q.assign(R.D, 0.0f);
    q[0] = 1.0f;
    bufs = R.buffers();
  }
  std::vector<uint32_t> select(ucm_retriever_t* r, size_t n, const uint8_t* valid = nullptr, uint32_t layer = 0) {
    ucm_retrieval_query qq{sizeof(qq), layer, q.data(), UCM_DTYPE_F32, 1, 1, &bufs, n, valid, 0};
    std::vector<uint32_t> idx(n + 1), counts(1);
    uint32_t ns = 0;
    EXPECT_EQ(ucm_retriever_select(r, &qq, idx.data(), n + 1, counts.data(), &ns), UCM_OK) << ucm_last_error();
    EXPECT_EQ(ns, 1u);
    idx.resize(counts[0]);
    return idx;
  }
};

ucm_retriever_params esa() { return reftest::policy_params(UCM_POLICY_ESA); }

// ESA with windows of `sink` and `local` blocks and a budget of `top_k` blocks.
ucm_retriever_params esa(uint32_t sink, uint32_t local, uint32_t top_k) {
  ucm_retriever_params p = esa();
  p.sink_blocks = sink;
  p.local_blocks = local;
  p.top_k = top_k;
  return p;
}

ucm_retriever_t* make(const ucm_retriever_params& p, const Request& R) { return reftest::make_retriever(p, R); }

std::vector<uint32_t> range(uint32_t a, uint32_t b) {
  std::vector<uint32_t> v;
  for (uint32_t i = a; i < b; ++i) v.push_back(i);
  return v;
}
std::vector<uint32_t> cat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(RetrievalApi, WindowsAndBudget) {
  Ramp m;
  ucm_retriever_params p = esa();
  p.sink_blocks = 2;
  p.local_blocks = 3;
  p.sparse_ratio = 0.25f;
  p.min_blocks = 4;
  ucm_retriever_t* r = make(p, m.R);
  // n = 32: k = max(4, 8) = 8 = sink {0,1} + local {29,30,31} + the 3 best others {26,27,28}.
  EXPECT_EQ(m.select(r, 32), cat(cat(range(0, 2), range(26, 29)), range(29, 32)));
  // n = 12: k = max(4, 3) = 4 < 5 window blocks: the windows only.
  EXPECT_EQ(m.select(r, 12), cat(range(0, 2), range(9, 12)));
  // n = 4: windows overlap and cover everything.
  EXPECT_EQ(m.select(r, 4), range(0, 4));
  EXPECT_TRUE(m.select(r, 0).empty());
  ucm_retriever_free(r);
  // top_k overrides ratio and min_blocks.
  p.top_k = 6;
  r = make(p, m.R);
  EXPECT_EQ(m.select(r, 32), cat(cat(range(0, 2), range(28, 29)), range(29, 32)));
  ucm_retriever_free(r);
  // No windows; ceil(0.3 x 10) = 3 (the float ratio's rounding forgiven), min_blocks 1.
  p = esa();
  p.sink_blocks = p.local_blocks = 0;
  p.sparse_ratio = 0.3f;
  p.min_blocks = 1;
  r = make(p, m.R);
  EXPECT_EQ(m.select(r, 10), range(7, 10));
  EXPECT_EQ(m.select(r, 11), range(7, 11));  // ceil(3.3) = 4
  ucm_retriever_free(r);
}

TEST(RetrievalApi, EqualScoresPreferLowerIndices) {
  Ramp m;
  std::fill(m.R.r0.begin(), m.R.r0.end(), 1.0f);  // every block scores the same
  ucm_retriever_t* r = make(esa(0, 0, 5), m.R);
  EXPECT_EQ(m.select(r, 32), range(0, 5));
  ucm_retriever_free(r);
}

TEST(RetrievalApi, InvalidBlocksAreAlwaysSelected) {
  Ramp m;
  ucm_retriever_t* r = make(esa(1, 1, 4), m.R);
  std::vector<uint8_t> valid(32, 1);
  valid[3] = valid[7] = 0;
  // forced {0, 3, 7, 31}: the budget is spent; with 5 invalid it is exceeded.
  EXPECT_EQ(m.select(r, 32, valid.data()), (std::vector<uint32_t>{0, 3, 7, 31}));
  valid[30] = 0;  // invalid block 30 scores below nothing: still selected, never ranked
  EXPECT_EQ(m.select(r, 32, valid.data()), (std::vector<uint32_t>{0, 3, 7, 30, 31}));
  valid.assign(32, 1);
  valid[30] = 0;  // the best ranked block is invalid: selected as forced, the next best fills the budget
  EXPECT_EQ(m.select(r, 32, valid.data()), (std::vector<uint32_t>{0, 29, 30, 31}));
  ucm_retriever_free(r);
}

TEST(RetrievalApi, ReuseStepsKeepsTheSelectionThenRecomputes) {
  Ramp m;
  ucm_retriever_params p = esa(0, 1, 3);
  p.reuse_steps = 3;
  ucm_retriever_t* r = make(p, m.R);
  const auto first = m.select(r, 20);  // computed: {18, 19} + local {19}... = {17, 18, 19}
  EXPECT_EQ(first, range(17, 20));
  m.q[0] = -1.0f;  // now the lowest blocks score best
  EXPECT_EQ(m.select(r, 20), first);                     // step 2: reused
  EXPECT_EQ(m.select(r, 21), cat(first, {20}));          // step 3: reused, the new block appended
  EXPECT_EQ(m.select(r, 21), (std::vector<uint32_t>{0, 1, 20}));  // step 4: recomputed
  EXPECT_EQ(m.select(r, 21, nullptr, 1), (std::vector<uint32_t>{0, 1, 20}));  // layers are independent
  EXPECT_EQ(m.select(r, 21), (std::vector<uint32_t>{0, 1, 20}));  // reused (q unchanged anyway)
  m.q[0] = 1.0f;
  EXPECT_EQ(m.select(r, 15), range(12, 15));  // fewer blocks than the state: recomputed
  m.q[0] = -1.0f;
  ucm_retriever_reset(r);
  EXPECT_EQ(m.select(r, 15), (std::vector<uint32_t>{0, 1, 14}));  // reset: recomputed
  ucm_retriever_free(r);
}

TEST(RetrievalApi, SharedHeadsGiveOneSetPerHeadOtherwise) {
  std::mt19937_64 rng(3);
  Request R;
  R.fill(rng);
  std::vector<float> q = R.queries(rng);
  const ucm_repr_buffers bufs = R.buffers();
  for (int shared : {0, 1}) {
    ucm_retriever_params p = esa();
    p.shared_heads = shared;
    ucm_retriever_t* r = make(p, R);
    ucm_retrieval_query qq{sizeof(qq), 2, q.data(), UCM_DTYPE_F32, 9, 3, &bufs, 40, nullptr, 0};
    std::vector<uint32_t> idx(3 * 40), counts(3, 0);
    uint32_t ns = 0;
    ASSERT_EQ(ucm_retriever_select(r, &qq, idx.data(), 40, counts.data(), &ns), UCM_OK) << ucm_last_error();
    const auto ref = reftest::reference(p, R, 2, q.data(), 40, nullptr);
    ASSERT_EQ(ns, shared ? 1u : 3u);
    for (uint32_t s = 0; s < ns; ++s)
      EXPECT_EQ(std::vector<uint32_t>(idx.begin() + s * 40, idx.begin() + s * 40 + counts[s]), ref.sets[s]);
    ucm_retriever_free(r);
  }
}

TEST(RetrievalApi, DenseLayersSelectEveryBlock) {
  Ramp m;
  m.R.dense = 0b0101;  // layers 0 and 2
  ucm_retriever_params p = esa();
  p.top_k = 2;
  p.sink_blocks = p.local_blocks = 0;
  ucm_retriever_t* r = make(p, m.R);
  EXPECT_EQ(m.select(r, 10, nullptr, 0), range(0, 10));
  EXPECT_EQ(m.select(r, 10, nullptr, 1), range(8, 10));
  EXPECT_EQ(m.select(r, 10, nullptr, 2), range(0, 10));
  ucm_retriever_free(r);
  p.honor_dense_layers = 0;
  r = make(p, m.R);
  EXPECT_EQ(m.select(r, 10, nullptr, 0), range(8, 10));
  ucm_retriever_free(r);
}

TEST(RetrievalApi, Bf16QueriesSelectAsTheirFloatValues) {
  std::mt19937_64 rng(4);
  Request R;
  R.dtype = UCM_DTYPE_BF16;
  R.fill(rng);
  const ucm_repr_buffers bufs = R.buffers();
  for (int policy : {UCM_POLICY_ESA, UCM_POLICY_QUEST, UCM_POLICY_GSA, UCM_POLICY_PSA}) {
    ucm_retriever_params p = reftest::policy_params(policy);
    p.shared_heads = 0;
    ucm_retriever_t* r = make(p, R);
    std::vector<float> q = R.queries(rng);
    std::vector<uint16_t> qb(q.size());
    for (size_t i = 0; i < q.size(); ++i) qb[i] = reftest::to_bf16(q[i]);
    std::vector<uint32_t> a(3 * 40), b(3 * 40), ca(3), cb(3);
    ucm_retrieval_query qq{sizeof(qq), 1, q.data(), UCM_DTYPE_F32, 9, 3, &bufs, 40, nullptr, 0};
    ASSERT_EQ(ucm_retriever_select(r, &qq, a.data(), 40, ca.data(), nullptr), UCM_OK) << ucm_last_error();
    qq.q = qb.data();
    qq.q_dtype = UCM_DTYPE_BF16;
    ASSERT_EQ(ucm_retriever_select(r, &qq, b.data(), 40, cb.data(), nullptr), UCM_OK) << ucm_last_error();
    EXPECT_EQ(ca, cb) << policy;
    EXPECT_EQ(a, b) << policy;
    const auto ref = reftest::reference(p, R, 1, q.data(), 40, nullptr);
    if (ref.margin >= 1e-5) {
      for (uint32_t s = 0; s < 3; ++s)
        EXPECT_EQ(std::vector<uint32_t>(b.begin() + s * 40, b.begin() + s * 40 + cb[s]), ref.sets[s]) << policy;
    }
    ucm_retriever_free(r);
  }
}

}  // namespace
