// Each retrieval policy through the C ABI (libucm.so) against the brute-force reference of
// tests/retrieval/reference.h: random integer representations, random lengths, validity masks,
// head ranges, both buffer dtypes, per-head and shared sets, several head dims and hash widths.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "reference.h"
#include "retriever_util.h"
#include "ucm/retrieval.h"

using reftest::Request;

namespace {

struct Variant {
  int policy;
  uint32_t D, B, G, h0, h1;
  int32_t dtype;
  int shared;
};

std::string name(const Variant& v) {
  return "policy " + std::to_string(v.policy) + " D " + std::to_string(v.D) + " B " + std::to_string(v.B) + " G " +
         std::to_string(v.G) + " heads [" + std::to_string(v.h0) + "," + std::to_string(v.h1) + ") dtype " +
         std::to_string(v.dtype) + " shared " + std::to_string(v.shared);
}

// Runs `draws` random steps of variant v; returns how many were compared (the rest had a margin
// below 1e-5 and were skipped).
int run_variant(const Variant& v, int draws, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Request R;
  R.D = v.D;
  R.B = v.B;
  R.G = v.G;
  R.h0 = v.h0;
  R.h1 = v.h1;
  R.dtype = v.dtype;
  R.C = 48;
  R.fill(rng);
  ucm_retriever_params p = reftest::policy_params(v.policy);
  p.shared_heads = v.shared;
  p.sink_blocks = 1;
  p.local_blocks = 2;
  p.sparse_ratio = 0.25f;
  p.min_blocks = 4;
  p.psa_tau = 0.6f;
  ucm_retriever_t* ret = reftest::make_retriever(p, R);
  if (!ret) return 0;
  const ucm_repr_buffers bufs = R.buffers();
  int compared = 0;
  for (int i = 0; i < draws; ++i) {
    const uint32_t l = uint32_t(rng() % R.L);
    const size_t n = 1 + rng() % R.C;
    std::vector<uint8_t> valid(n, 1);
    const bool use_valid = rng() % 2;
    for (auto& x : valid) x = (rng() % 8) != 0;
    std::vector<float> q = R.queries(rng);
    ucm_retrieval_query qq{};
    qq.struct_size = sizeof(qq);
    qq.layer = l;
    qq.q = q.data();
    qq.q_dtype = UCM_DTYPE_F32;
    qq.n_q_heads = R.Hs() * R.G;
    qq.group_size = R.G;
    qq.reprs = &bufs;
    qq.n_blocks = n;
    qq.valid = use_valid ? valid.data() : nullptr;
    std::vector<uint32_t> idx(R.Hs() * n + 1, 0xdeadbeef), counts(R.Hs(), 0xdeadbeef);
    uint32_t nsets = 0;
    EXPECT_EQ(ucm_retriever_select(ret, &qq, idx.data(), n, counts.data(), &nsets), UCM_OK) << ucm_last_error();
    const auto ref = reftest::reference(p, R, l, q.data(), n, qq.valid);
    if (ref.margin < 1e-5) continue;
    ++compared;
    EXPECT_EQ(nsets, ref.sets.size()) << name(v);
    for (size_t s = 0; s < ref.sets.size() && s < nsets; ++s) {
      std::vector<uint32_t> got(idx.begin() + std::ptrdiff_t(s * n), idx.begin() + std::ptrdiff_t(s * n + counts[s]));
      EXPECT_EQ(got, ref.sets[s]) << name(v) << " draw " << i << " layer " << l << " n " << n << " set " << s;
    }
  }
  ucm_retriever_free(ret);
  return compared;
}

void run_all(int policy) {
  const Variant vs[] = {
      {policy, 64, 128, 3, 0, 3, UCM_DTYPE_BF16, 0},  // the default model's shape
      {policy, 64, 128, 3, 0, 3, UCM_DTYPE_F32, 1},
      {policy, 128, 256, 2, 1, 3, UCM_DTYPE_BF16, 0},  // a head range, B = 256
      {policy, 40, 24, 1, 2, 3, UCM_DTYPE_F32, 0},     // odd D (runtime path), B not a multiple of 64
      {policy, 72, 192, 4, 0, 2, UCM_DTYPE_BF16, 1},   // B = 192 (3 words)
  };
  for (const auto& v : vs) {
    const int compared = run_variant(v, 40, 1000 + uint64_t(v.D) * 7 + v.G);
    EXPECT_GE(compared, 30) << name(v) << ": too many draws skipped for float margins";
  }
}

TEST(RetrievalPolicies, EsaMatchesReference) { run_all(UCM_POLICY_ESA); }
TEST(RetrievalPolicies, QuestMatchesReference) { run_all(UCM_POLICY_QUEST); }
TEST(RetrievalPolicies, GsaMatchesReference) { run_all(UCM_POLICY_GSA); }
TEST(RetrievalPolicies, PsaMatchesReference) { run_all(UCM_POLICY_PSA); }

// PSA params with threshold `tau` (the rest: the defaults).
ucm_retriever_params psa(float tau) {
  ucm_retriever_params p = reftest::policy_params(UCM_POLICY_PSA);
  p.psa_tau = tau;
  return p;
}

// PSA with a cap: psa_max_blocks bounds the set (windows included) whatever tau asks.
TEST(RetrievalPolicies, PsaCapAndTauOne) {
  std::mt19937_64 rng(5);
  Request R;
  R.fill(rng);
  ucm_retriever_params p = psa(1.0f);
  p.shared_heads = 1;
  p.psa_max_blocks = 10;
  ucm_retriever_t* ret = reftest::make_retriever(p, R, /*with_proj=*/false);
  ASSERT_NE(ret, nullptr);
  std::vector<float> q = R.queries(rng);
  const std::vector<uint32_t> set = reftest::select_first_set(ret, R, 1, q, R.Hs() * R.G, R.G);
  EXPECT_EQ(set.size(), 10u);  // tau = 1 is never reached before the cap
  double margin = 1e300;
  std::vector<std::pair<uint32_t, uint32_t>> heads;
  for (uint32_t hh = 0; hh < 3; ++hh)
    for (uint32_t g = 0; g < 3; ++g) heads.emplace_back(hh, g);
  const auto want = reftest::psa_set(p, R, 1, heads, q.data(), 40, nullptr, &margin);
  EXPECT_EQ(set, want);
  // psa_max_blocks 0: the cap is the budget k = max(4, ceil(0.3 * 40)) = 12.
  ucm_retriever_free(ret);
  p.psa_max_blocks = 0;
  ret = reftest::make_retriever(p, R, /*with_proj=*/false);
  ASSERT_NE(ret, nullptr);
  EXPECT_EQ(reftest::select_first_set(ret, R, 1, q, R.Hs() * R.G, R.G).size(), 12u);
  ucm_retriever_free(ret);
}

// A query concentrated on one block: PSA stops early (fewer blocks than the top-k budget).
TEST(RetrievalPolicies, PsaStopsWhenMassIsCovered) {
  std::mt19937_64 rng(9);
  Request R;
  R.H = R.h1 = 1;
  R.G = 1;
  R.fill(rng);
  // Every block's bounds are [0, 0] except block 20's max row, which is large: q . bound >> others.
  std::fill(R.r1.begin(), R.r1.end(), 0.0f);
  for (uint32_t l = 0; l < R.L; ++l)
    for (uint32_t d = 0; d < R.D; ++d) R.r1[R.row(l, 0, 20) * 2 * R.D + R.D + d] = 8.0f;
  ucm_retriever_params p = psa(0.9f);
  p.sink_blocks = 0;
  p.local_blocks = 0;
  ucm_retriever_t* ret = reftest::make_retriever(p, R, /*with_proj=*/false);
  ASSERT_NE(ret, nullptr);
  const std::vector<uint32_t> set = reftest::select_first_set(ret, R, 0, std::vector<float>(R.D, 1.0f), 1, 1);
  // Bound of block 20: 64 * 8 = 512, others 0; mass of block 20 = e^64 / (e^64 + 39) ~ 1.
  ASSERT_EQ(set.size(), 1u);
  EXPECT_EQ(set[0], 20u);
  ucm_retriever_free(ret);
}

}  // namespace
