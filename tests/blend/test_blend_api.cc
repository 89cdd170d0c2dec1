// test_blend_api: ucm/blend.h through libucm.so only (the C ABI a server links): RoPE
// re-rotation against rotations written out independently here, its composition law, the
// rounding of 16-bit keys, CacheBlend's token selection, and every documented error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ucm/blend.h"

namespace {

ucm_rope_params rope(uint32_t D, double theta = 100000.0) {
  ucm_rope_params p = ucm_rope_default_params();
  p.head_dim = D;
  p.theta = theta;
  return p;
}

std::vector<float> random_keys(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 3.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

float bf16_round(float f) {  // round to nearest even, as a bf16 cache stores it
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(BlendApi, ShiftIsTheRotationOfEachChannelPair) {
  // Written out from store_v1.md §4.4 with frequencies theta^(-2d/D): pair (d, d + D/2) turns by
  // delta * w_d. Keys [n][H][D] with a padded token stride.
  const uint32_t D = 64, H = 3;
  const size_t n = 5, stride = H * D + 7;
  auto k = random_keys(n * stride, 1);
  const auto orig = k;
  const ucm_rope_params p = rope(D);
  for (int64_t delta : {int64_t{1}, int64_t{-37}, int64_t{4093}}) {
    k = orig;
    ASSERT_EQ(ucm_rope_shift(&p, k.data(), UCM_DTYPE_F32, n, H, stride, delta), UCM_OK) << ucm_last_error();
    for (size_t t = 0; t < n; ++t)
      for (uint32_t h = 0; h < H; ++h)
        for (uint32_t d = 0; d < D / 2; ++d) {
          const double w = 1.0 / std::pow(100000.0, double(2 * d) / D), a = double(delta) * w;
          const float* x = &orig[t * stride + h * D];
          const double e1 = x[d] * std::cos(a) - x[d + D / 2] * std::sin(a);
          const double e2 = x[d + D / 2] * std::cos(a) + x[d] * std::sin(a);
          EXPECT_NEAR(k[t * stride + h * D + d], e1, 2e-5 * (1 + std::abs(a))) << t << " " << h << " " << d;
          EXPECT_NEAR(k[t * stride + h * D + d + D / 2], e2, 2e-5 * (1 + std::abs(a)));
        }
    // The padding between tokens is not touched.
    for (size_t t = 0; t < n; ++t)
      for (size_t j = H * D; j < stride; ++j) EXPECT_EQ(k[t * stride + j], orig[t * stride + j]);
  }
}

TEST(BlendApi, ShiftsComposeAndInvert) {
  const uint32_t D = 128, H = 2;
  const size_t n = 7;
  const auto orig = random_keys(n * H * D, 2);
  for (int scaling : {UCM_ROPE_SCALING_NONE, UCM_ROPE_SCALING_LINEAR, UCM_ROPE_SCALING_LLAMA3}) {
    ucm_rope_params p = rope(D, 500000.0);
    p.scaling = scaling;
    p.factor = 8.0;
    auto a = orig, b = orig;
    ASSERT_EQ(ucm_rope_shift(&p, a.data(), UCM_DTYPE_F32, n, H, H * D, 300), UCM_OK);
    ASSERT_EQ(ucm_rope_shift(&p, a.data(), UCM_DTYPE_F32, n, H, H * D, 1200), UCM_OK);
    ASSERT_EQ(ucm_rope_shift(&p, b.data(), UCM_DTYPE_F32, n, H, H * D, 1500), UCM_OK);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4) << "scaling " << scaling;
    ASSERT_EQ(ucm_rope_shift(&p, a.data(), UCM_DTYPE_F32, n, H, H * D, -1500), UCM_OK);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], orig[i], 1e-4);
    // A rotation keeps each pair's length.
    for (size_t t = 0; t < n * H; ++t)
      for (uint32_t d = 0; d < D / 2; ++d) {
        const float* x = &orig[t * D];
        const float* y = &b[t * D];
        EXPECT_NEAR(std::hypot(x[d], x[d + D / 2]), std::hypot(y[d], y[d + D / 2]), 1e-4);
      }
  }
}

TEST(BlendApi, Bf16KeysAreRotatedInFp32AndRoundedOnce) {
  const uint32_t D = 64, H = 3;
  const size_t n = 4;
  auto f = random_keys(n * H * D, 3);
  for (auto& x : f) x = bf16_round(x);
  std::vector<uint16_t> h(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &f[i], 4);
    h[i] = uint16_t(u >> 16);
  }
  const ucm_rope_params p = rope(D);
  ASSERT_EQ(ucm_rope_shift(&p, f.data(), UCM_DTYPE_F32, n, H, H * D, 977), UCM_OK);
  ASSERT_EQ(ucm_rope_shift(&p, h.data(), UCM_DTYPE_BF16, n, H, H * D, 977), UCM_OK);
  for (size_t i = 0; i < f.size(); ++i) {
    const uint32_t u = uint32_t(h[i]) << 16;
    float got;
    std::memcpy(&got, &u, 4);
    EXPECT_EQ(got, bf16_round(f[i])) << i;
  }
}

TEST(BlendApi, ShiftErrors) {
  std::vector<float> k(64 * 2, 1.f);
  ucm_rope_params p = rope(64);
  EXPECT_EQ(ucm_rope_shift(nullptr, k.data(), UCM_DTYPE_F32, 1, 2, 128, 1), UCM_E_INVALID);
  EXPECT_EQ(ucm_rope_shift(&p, nullptr, UCM_DTYPE_F32, 1, 2, 128, 1), UCM_E_INVALID);
  EXPECT_EQ(ucm_rope_shift(&p, k.data(), 99, 1, 2, 128, 1), UCM_E_INVALID);
  EXPECT_EQ(ucm_rope_shift(&p, k.data(), UCM_DTYPE_F32, 1, 2, 127, 1), UCM_E_INVALID);  // stride < H * D
  EXPECT_NE(std::string(ucm_last_error()).find("token_stride"), std::string::npos);
  p.head_dim = 63;
  EXPECT_EQ(ucm_rope_shift(&p, k.data(), UCM_DTYPE_F32, 1, 2, 128, 1), UCM_E_INVALID);
  p = rope(64);
  p.scaling = 7;  // e.g. yarn: not a pure rotation
  EXPECT_EQ(ucm_rope_shift(&p, k.data(), UCM_DTYPE_F32, 1, 2, 128, 1), UCM_E_NOT_SUPPORTED);
  p = rope(64);
  p.struct_size = 8;
  EXPECT_EQ(ucm_rope_shift(&p, k.data(), UCM_DTYPE_F32, 1, 2, 128, 1), UCM_E_INVALID);
  // delta 0 and no tokens change nothing.
  p = rope(64);
  EXPECT_EQ(ucm_rope_shift(&p, k.data(), UCM_DTYPE_F32, 1, 2, 128, 0), UCM_OK);
  for (float x : k) EXPECT_EQ(x, 1.f);
}

TEST(BlendApi, SelectTakesTheLargestDeviationsTiesToTheLowerIndex) {
  // 6 tokens, rows of 2: deviations 0, 9, 1, 9, 4, 25.
  const std::vector<float> stored = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<float> fresh = {0, 0, 3, 0, 1, 0, 0, 3, 2, 0, 3, 4};
  std::vector<uint32_t> idx(6);
  std::vector<float> dev(6);
  size_t n = 0;
  ASSERT_EQ(ucm_blend_select(stored.data(), fresh.data(), 6, 2, 0.5, idx.data(), idx.size(), &n, dev.data()), UCM_OK);
  ASSERT_EQ(n, 3u);  // ceil(0.5 * 6)
  EXPECT_EQ(idx[0], 1u);
  EXPECT_EQ(idx[1], 3u);
  EXPECT_EQ(idx[2], 5u);
  EXPECT_EQ(dev, (std::vector<float>{0, 9, 1, 9, 4, 25}));
  ASSERT_EQ(ucm_blend_select(stored.data(), fresh.data(), 6, 2, 0.3, idx.data(), idx.size(), &n, nullptr), UCM_OK);
  ASSERT_EQ(n, 2u);  // ceil(1.8): 25, then the first of the two 9s
  EXPECT_EQ(idx[0], 1u);
  EXPECT_EQ(idx[1], 5u);
  ASSERT_EQ(ucm_blend_select(stored.data(), fresh.data(), 6, 2, 0.0, idx.data(), idx.size(), &n, nullptr), UCM_OK);
  EXPECT_EQ(n, 0u);
  ASSERT_EQ(ucm_blend_select(stored.data(), fresh.data(), 6, 2, 1.0, idx.data(), idx.size(), &n, nullptr), UCM_OK);
  EXPECT_EQ(n, 6u);
  // A NaN row deviates most.
  std::vector<float> nan_fresh = fresh;
  nan_fresh[0] = NAN;
  ASSERT_EQ(ucm_blend_select(stored.data(), nan_fresh.data(), 6, 2, 1.0 / 6, idx.data(), idx.size(), &n, nullptr),
            UCM_OK);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(idx[0], 0u);
}

TEST(BlendApi, SelectErrors) {
  const std::vector<float> a(8, 0.f), b(8, 1.f);
  std::vector<uint32_t> idx(4);
  size_t n = 0;
  EXPECT_EQ(ucm_blend_select(a.data(), b.data(), 4, 2, 1.5, idx.data(), 4, &n, nullptr), UCM_E_INVALID);
  EXPECT_EQ(ucm_blend_select(a.data(), b.data(), 4, 2, NAN, idx.data(), 4, &n, nullptr), UCM_E_INVALID);
  EXPECT_EQ(ucm_blend_select(nullptr, b.data(), 4, 2, 0.5, idx.data(), 4, &n, nullptr), UCM_E_INVALID);
  EXPECT_EQ(ucm_blend_select(a.data(), b.data(), 4, 2, 0.5, idx.data(), 4, nullptr, nullptr), UCM_E_INVALID);
  EXPECT_EQ(ucm_blend_select(a.data(), b.data(), 4, 2, 1.0, idx.data(), 3, &n, nullptr), UCM_E_INVALID);
  EXPECT_EQ(n, 4u);  // the count needed
}

TEST(BlendApi, WeightedSelectScoresDeviationTimesThePositionPrior) {
  // Same deviations as above, 0 9 1 9 4 25, at document positions 0 0 0 0 0 256: with tau 128
  // the last token scores 25 * e^-2 = 3.38, below the 4 at position 0.
  const std::vector<float> stored(12, 0.f);
  const std::vector<float> fresh = {0, 0, 3, 0, 1, 0, 0, 3, 2, 0, 3, 4};
  const std::vector<uint32_t> pos = {0, 0, 0, 0, 0, 256};
  ucm_blend_select_params p = ucm_blend_select_default_params();
  EXPECT_EQ(p.struct_size, sizeof(ucm_blend_select_params));
  EXPECT_DOUBLE_EQ(p.ratio, 0.15);
  EXPECT_DOUBLE_EQ(p.position_decay, 128);
  p.ratio = 0.5;
  std::vector<uint32_t> idx(6);
  std::vector<float> score(6);
  size_t n = 0;
  ASSERT_EQ(ucm_blend_select_weighted(&p, stored.data(), fresh.data(), pos.data(), 6, 2, idx.data(), 6, &n,
                                      score.data()),
            UCM_OK);
  ASSERT_EQ(n, 3u);
  EXPECT_EQ(std::vector<uint32_t>(idx.begin(), idx.begin() + 3), (std::vector<uint32_t>{1, 3, 4}));
  EXPECT_FLOAT_EQ(score[5], float(25 * std::exp(-2.0)));
  EXPECT_FLOAT_EQ(score[1], 9.f);
  // No prior (decay 0, or no positions): exactly ucm_blend_select.
  for (int variant = 0; variant < 2; ++variant) {
    p.position_decay = variant ? 128 : 0;
    std::vector<uint32_t> a(6), b(6);
    size_t na = 0, nb = 0;
    ASSERT_EQ(ucm_blend_select_weighted(&p, stored.data(), fresh.data(), variant ? nullptr : pos.data(), 6, 2,
                                        a.data(), 6, &na, nullptr),
              UCM_OK);
    ASSERT_EQ(ucm_blend_select(stored.data(), fresh.data(), 6, 2, 0.5, b.data(), 6, &nb, nullptr), UCM_OK);
    EXPECT_EQ(na, nb);
    EXPECT_EQ(a, b);
  }
  // Later in the document, a larger deviation is needed to be chosen: equal deviations at
  // positions 0, 64, 512 rank in that order.
  const std::vector<float> s3(3, 0.f), f3 = {2, 2, 2};
  const std::vector<uint32_t> p3 = {512, 0, 64};
  p.position_decay = 128;
  p.ratio = 2.0 / 3;
  ASSERT_EQ(ucm_blend_select_weighted(&p, s3.data(), f3.data(), p3.data(), 3, 1, idx.data(), 6, &n, nullptr), UCM_OK);
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(idx[0], 1u);
  EXPECT_EQ(idx[1], 2u);
}

TEST(BlendApi, WeightedSelectErrors) {
  const std::vector<float> a(8, 0.f), b(8, 1.f);
  std::vector<uint32_t> idx(4);
  size_t n = 0;
  ucm_blend_select_params p = ucm_blend_select_default_params();
  EXPECT_EQ(ucm_blend_select_weighted(nullptr, a.data(), b.data(), nullptr, 4, 2, idx.data(), 4, &n, nullptr),
            UCM_E_INVALID);
  // 0.4's struct (ratio, position_decay) is still accepted; anything shorter is not.
  const size_t v04 = offsetof(ucm_blend_select_params, position_decay) + sizeof(double);
  p.struct_size = v04;
  EXPECT_EQ(ucm_blend_select_weighted(&p, a.data(), b.data(), nullptr, 4, 2, idx.data(), 4, &n, nullptr), UCM_OK);
  p.struct_size = v04 - 1;
  EXPECT_EQ(ucm_blend_select_weighted(&p, a.data(), b.data(), nullptr, 4, 2, idx.data(), 4, &n, nullptr),
            UCM_E_INVALID);
  EXPECT_NE(std::string(ucm_last_error()).find("struct_size"), std::string::npos);
  p = ucm_blend_select_default_params();
  p.position_decay = -1;
  EXPECT_EQ(ucm_blend_select_weighted(&p, a.data(), b.data(), nullptr, 4, 2, idx.data(), 4, &n, nullptr),
            UCM_E_INVALID);
  p.position_decay = NAN;
  EXPECT_EQ(ucm_blend_select_weighted(&p, a.data(), b.data(), nullptr, 4, 2, idx.data(), 4, &n, nullptr),
            UCM_E_INVALID);
  p = ucm_blend_select_default_params();
  p.ratio = 1.5;
  EXPECT_EQ(ucm_blend_select_weighted(&p, a.data(), b.data(), nullptr, 4, 2, idx.data(), 4, &n, nullptr),
            UCM_E_INVALID);
  p.ratio = 1.0;
  EXPECT_EQ(ucm_blend_select_weighted(&p, a.data(), b.data(), nullptr, 4, 2, idx.data(), 3, &n, nullptr),
            UCM_E_INVALID);
  EXPECT_EQ(n, 4u);  // the count needed
  EXPECT_EQ(ucm_blend_select_weighted(&p, nullptr, b.data(), nullptr, 4, 2, idx.data(), 4, &n, nullptr),
            UCM_E_INVALID);
}

TEST(BlendApi, RelevantSelectScoresDeviationPriorAndRelevance) {
  // Deviations 0 9 1 9 4 25 (rows of 2), positions 0 0 0 0 0 256, relevance .1 .1 .5 .2 .3 .4:
  // with beta 2 and tau 128 the scores are 0, 0.09, 0.25, 0.36, 0.36, 25 e^-2 0.16 = 0.541.
  const std::vector<float> stored(12, 0.f);
  const std::vector<float> fresh = {0, 0, 3, 0, 1, 0, 0, 3, 2, 0, 3, 4};
  const std::vector<uint32_t> pos = {0, 0, 0, 0, 0, 256};
  const std::vector<float> rel = {.1f, .1f, .5f, .2f, .3f, .4f};
  ucm_blend_select_params p = ucm_blend_select_default_params();
  EXPECT_DOUBLE_EQ(p.relevance_exponent, 2);
  p.ratio = 0.5;
  std::vector<uint32_t> idx(6);
  std::vector<float> score(6);
  size_t n = 0;
  ASSERT_EQ(ucm_blend_select_relevant(&p, stored.data(), fresh.data(), pos.data(), rel.data(), 6, 2, idx.data(), 6,
                                      &n, score.data()),
            UCM_OK);
  for (size_t i = 0; i < 6; ++i) {
    const double d = std::pow(fresh[2 * i], 2) + std::pow(fresh[2 * i + 1], 2);
    EXPECT_FLOAT_EQ(score[i], float(d * std::exp(-double(pos[i]) / 128.0) * double(rel[i]) * double(rel[i]))) << i;
  }
  ASSERT_EQ(n, 3u);  // 0.541 (5), then the tie 0.36 (3, 4): the lower index first, both fit
  EXPECT_EQ(std::vector<uint32_t>(idx.begin(), idx.begin() + 3), (std::vector<uint32_t>{3, 4, 5}));
  // Without the rows (no deviation): prior x relevance^2 = .01 .01 .25 .04 .09 .16 e^-2 = .022.
  ASSERT_EQ(ucm_blend_select_relevant(&p, nullptr, nullptr, pos.data(), rel.data(), 6, 2, idx.data(), 6, &n,
                                      score.data()),
            UCM_OK);
  EXPECT_FLOAT_EQ(score[2], 0.25f);
  EXPECT_FLOAT_EQ(score[5], float(0.16 * std::exp(-2.0)));
  ASSERT_EQ(n, 3u);
  EXPECT_EQ(std::vector<uint32_t>(idx.begin(), idx.begin() + 3), (std::vector<uint32_t>{2, 3, 4}));
  // No relevance, or exponent 0: exactly ucm_blend_select_weighted.
  for (int variant = 0; variant < 2; ++variant) {
    ucm_blend_select_params q = p;
    if (variant) q.relevance_exponent = 0;
    std::vector<uint32_t> a(6), b(6);
    size_t na = 0, nb = 0;
    ASSERT_EQ(ucm_blend_select_relevant(&q, stored.data(), fresh.data(), pos.data(), variant ? rel.data() : nullptr,
                                        6, 2, a.data(), 6, &na, nullptr),
              UCM_OK);
    ASSERT_EQ(ucm_blend_select_weighted(&q, stored.data(), fresh.data(), pos.data(), 6, 2, b.data(), 6, &nb, nullptr),
              UCM_OK);
    EXPECT_EQ(na, nb);
    EXPECT_EQ(a, b);
  }
  // A 0.4 caller (struct without relevance_exponent) gets the default exponent, 2.
  ucm_blend_select_params old = p;
  old.struct_size = offsetof(ucm_blend_select_params, position_decay) + sizeof(double);
  old.relevance_exponent = 7;  // not read
  std::vector<float> s_old(6);
  ASSERT_EQ(ucm_blend_select_relevant(&old, nullptr, nullptr, pos.data(), rel.data(), 6, 2, idx.data(), 6, &n,
                                      s_old.data()),
            UCM_OK);
  EXPECT_FLOAT_EQ(s_old[2], 0.25f);
}

TEST(BlendApi, RelevantSelectErrors) {
  const std::vector<float> a(8, 0.f), b(8, 1.f);
  std::vector<float> rel(4, 0.25f);
  std::vector<uint32_t> idx(4);
  size_t n = 0;
  ucm_blend_select_params p = ucm_blend_select_default_params();
  EXPECT_EQ(ucm_blend_select_relevant(nullptr, a.data(), b.data(), nullptr, rel.data(), 4, 2, idx.data(), 4, &n,
                                      nullptr),
            UCM_E_INVALID);
  // Rows: both or neither.
  EXPECT_EQ(ucm_blend_select_relevant(&p, a.data(), nullptr, nullptr, rel.data(), 4, 2, idx.data(), 4, &n, nullptr),
            UCM_E_INVALID);
  EXPECT_EQ(ucm_blend_select_relevant(&p, nullptr, b.data(), nullptr, rel.data(), 4, 2, idx.data(), 4, &n, nullptr),
            UCM_E_INVALID);
  for (float bad : {-0.1f, NAN}) {
    rel[2] = bad;
    EXPECT_EQ(ucm_blend_select_relevant(&p, a.data(), b.data(), nullptr, rel.data(), 4, 2, idx.data(), 4, &n, nullptr),
              UCM_E_INVALID);
    EXPECT_NE(std::string(ucm_last_error()).find("relevance[2]"), std::string::npos) << ucm_last_error();
  }
  rel[2] = 0.25f;
  for (double beta : {-1.0, double(INFINITY), double(NAN)}) {
    p.relevance_exponent = beta;
    EXPECT_EQ(ucm_blend_select_relevant(&p, a.data(), b.data(), nullptr, rel.data(), 4, 2, idx.data(), 4, &n, nullptr),
              UCM_E_INVALID);
  }
  p = ucm_blend_select_default_params();
  EXPECT_EQ(ucm_blend_select_relevant(&p, a.data(), b.data(), nullptr, rel.data(), 4, 2, idx.data(), 4, &n, nullptr),
            UCM_OK);
  EXPECT_EQ(n, 1u);  // ceil(0.15 * 4)
  p.ratio = 1.0;
  EXPECT_EQ(ucm_blend_select_relevant(&p, nullptr, nullptr, nullptr, rel.data(), 4, 2, idx.data(), 3, &n, nullptr),
            UCM_E_INVALID);
  EXPECT_EQ(n, 4u);  // the count needed
}

}  // namespace
