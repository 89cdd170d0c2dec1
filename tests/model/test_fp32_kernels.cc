// The fp32 path's fused CPU kernels (kernels/include/ucm/kernels/cpu/fp32.h) of every ISA this CPU runs (the
// portable x86-64 baseline on every CPU, AVX2 and AVX-512 where present) against libtorch doing
// the same arithmetic (RMSNorm, SiLU gate, RoPE: transformers' formulas; attention: eager
// attention in fp64), AVX2 against AVX-512 bit for bit, and the model's fused prefill: the same
// K/V and logits with one worker or two, and its logits near the libtorch ops'.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "attn_cases.h"
#include "ucm/model/compute.h"
#include "ucm/model/cpu_runtime.h"
#include "ucm/kernels/cpu/fp32.h"
#include "ucm/model/attn_ops.h"
#include "ucm/model/crew.h"
#include "ucm/model/llama_model.h"
#include "ucm/model/llama_ops.h"

namespace f32 = ucm::kernels::cpu::f32;

namespace {

std::vector<f32::Isa> isas() {
  std::vector<f32::Isa> out = {f32::Isa::kGeneric};
  if (f32::cpu_isa() >= f32::Isa::kAvx2) out.push_back(f32::Isa::kAvx2);
  if (f32::cpu_isa() >= f32::Isa::kAvx512) out.push_back(f32::Isa::kAvx512);
  return out;
}

uint16_t* bits(const torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

torch::Tensor rms_norm(f32::Isa isa, const torch::Tensor& x, const torch::Tensor& w, float eps) {
  auto out = torch::empty_like(x);
  f32::kernels(isa).rms_norm(x.data_ptr<float>(), x.stride(0), w.data_ptr<float>(), x.size(1), eps,
                             out.data_ptr<float>(), x.size(1), 0, x.size(0));
  return out;
}

torch::Tensor silu_mul(f32::Isa isa, const torch::Tensor& gu) {
  const int64_t I = gu.size(1) / 2;
  auto out = torch::empty({gu.size(0), I});
  f32::kernels(isa).silu_mul(gu.data_ptr<float>(), I, out.data_ptr<float>(), 0, gu.size(0));
  return out;
}

// q, k, v of qkv [B * T, (nh + 2 nkv) hd]; k, v in kv (fp32 or bf16).
std::vector<torch::Tensor> qkv_rope(f32::Isa isa, const torch::Tensor& qkv, const torch::Tensor& cos,
                                    const torch::Tensor& sin, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                                    torch::ScalarType kv) {
  auto q = torch::empty({B, T, nh, hd});
  auto k = torch::empty({B, T, nkv, hd}, kv), v = torch::empty({B, T, nkv, hd}, kv);
  const bool b16 = kv == torch::kBFloat16;
  f32::kernels(isa).qkv_rope(qkv.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(), T, nh, nkv, hd,
                             q.data_ptr<float>(), b16 ? nullptr : k.data_ptr<float>(),
                             b16 ? nullptr : v.data_ptr<float>(), b16 ? bits(k) : nullptr, b16 ? bits(v) : nullptr, 0,
                             B * T);
  return {q, k, v};
}

// The kernel of one ISA on q [B, T, nh, hd] and k, v [B, S, nkv, hd] (fp32 or bf16, any strides
// with dims contiguous), every unit on this thread: in one call (deal 0), in `deal` calls that each
// take every deal-th unit (as attention_f32 deals them to threads), or one call per unit (-1).
torch::Tensor attention(f32::Isa isa, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& qpos, int64_t window, float scale, const torch::Tensor& q_len = {},
                        const torch::Tensor& keep = {}, torch::Tensor* probs = nullptr, int64_t deal = 0) {
  f32::AttnArgs a;  // the shapes and pointers as the glue fills them (attn_ops.h)
  const auto hold = ucm::model::ops::detail::fill_attn_args("test", q, k, v, qpos, window, scale, q_len, a);
  auto out = torch::full({a.B, a.T, a.nh, a.hd}, std::numeric_limits<float>::quiet_NaN());
  a.out = out.data_ptr<float>();
  if (keep.defined()) a.keep = keep.data_ptr<uint8_t>();
  if (probs) {
    *probs = torch::full({a.nkv, a.nh / a.nkv * a.T, a.S}, std::numeric_limits<float>::quiet_NaN());
    a.probs = probs->data_ptr<float>();
  }
  EXPECT_TRUE(f32::attention_supported(a));
  std::vector<float> scratch((f32::attention_scratch_bytes(a) + 63) / 4 + 16);
  void* p = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
  const int64_t units = f32::attention_units(a);
  if (deal > 0)
    for (int64_t i = 0; i < deal; ++i) f32::kernels(isa).attention(a, i, units, deal, p);
  else if (deal < 0)
    for (int64_t u = 0; u < units; ++u) f32::kernels(isa).attention(a, u, u + 1, 1, p);
  else
    f32::kernels(isa).attention(a, 0, units, 1, p);
  return out;
}

// Eager attention in fp64 (transformers' formula): softmax(q k^T * scale + mask) v, GQA.
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& qpos, int64_t window, double scale) {
  const int64_t B = q.size(0), T = q.size(1), nh = q.size(2), hd = q.size(3), S = k.size(1), nkv = k.size(2);
  auto qd = q.to(torch::kDouble).permute({0, 2, 1, 3});                                           // [B, nh, T, hd]
  auto kd = k.to(torch::kDouble).repeat_interleave(nh / nkv, 2).permute({0, 2, 3, 1});            // [B, nh, hd, S]
  auto vd = v.to(torch::kDouble).repeat_interleave(nh / nkv, 2).permute({0, 2, 1, 3});            // [B, nh, S, hd]
  auto sc = torch::matmul(qd, kd) * scale;                                                       // [B, nh, T, S]
  auto qi = qpos.view({T, 1}), kj = torch::arange(S, torch::kLong).view({1, S});
  auto masked = kj > qi;
  if (window > 0) masked = masked.logical_or(qi - kj >= window);
  sc = sc.masked_fill(masked, -std::numeric_limits<double>::infinity());
  return torch::matmul(sc.softmax(-1), vd).permute({0, 2, 1, 3}).to(torch::kFloat).view({B, T, nh, hd});
}

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

TEST(Fp32Kernels, RmsNormAndSiluEqualLibtorch) {
  torch::manual_seed(3);
  for (auto isa : isas()) {
    for (int64_t H : {576, 100, 16, 7}) {
      auto x = torch::randn({37, H}) * 3, w = torch::randn({H});
      auto want = ucm::model::ops::rms_norm(x, w, 1e-5);
      auto got = rms_norm(isa, x, w, 1e-5f);
      EXPECT_LT(max_abs(got - want), 4e-6 * max_abs(want)) << f32::isa_name(isa) << " rms_norm, H " << H;
    }
    for (int64_t I : {1536, 40, 9}) {
      auto gu = torch::randn({21, 2 * I}) * 4;
      gu[0][0] = -100.0f;  // exp(-g) clamped: silu -> -0
      gu[1][1] = 100.0f;
      auto want = torch::silu(gu.narrow(1, 0, I)) * gu.narrow(1, I, I);
      auto got = silu_mul(isa, gu);
      EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-6)) << f32::isa_name(isa) << " silu_mul, I " << I << ": max |diff| "
                                                          << max_abs(got - want);
    }
  }
}

TEST(Fp32Kernels, QkvRopeEqualsLibtorchBitForBit) {
  torch::manual_seed(5);
  const int64_t B = 2, T = 19, nh = 3, nkv = 1;
  for (int64_t hd : {32, 64, 128}) {
    auto qkv = torch::randn({B * T, (nh + 2 * nkv) * hd});
    auto freqs = torch::outer(torch::arange(T).to(torch::kFloat), torch::rand({hd / 2}));
    auto cos = freqs.cos(), sin = freqs.sin();
    auto y = qkv.view({B, T, nh + 2 * nkv, hd});
    auto want_q = ucm::model::ops::apply_rope(y.narrow(2, 0, nh), cos, sin);
    auto want_k = ucm::model::ops::apply_rope(y.narrow(2, nh, nkv), cos, sin);
    auto want_v = y.narrow(2, nh + nkv, nkv).contiguous();
    for (auto isa : isas()) {
      auto got = qkv_rope(isa, qkv, cos, sin, B, T, nh, nkv, hd, torch::kFloat);
      EXPECT_TRUE(torch::equal(got[0], want_q)) << f32::isa_name(isa) << " q, hd " << hd;
      EXPECT_TRUE(torch::equal(got[1], want_k)) << f32::isa_name(isa) << " k, hd " << hd;
      EXPECT_TRUE(torch::equal(got[2], want_v)) << f32::isa_name(isa) << " v, hd " << hd;
      auto g16 = qkv_rope(isa, qkv, cos, sin, B, T, nh, nkv, hd, torch::kBFloat16);
      EXPECT_TRUE(torch::equal(g16[0], want_q)) << f32::isa_name(isa) << " q (bf16 K/V), hd " << hd;
      EXPECT_TRUE(torch::equal(g16[1], want_k.to(torch::kBFloat16))) << f32::isa_name(isa) << " bf16 k, hd " << hd;
      EXPECT_TRUE(torch::equal(g16[2], want_v.to(torch::kBFloat16))) << f32::isa_name(isa) << " bf16 v, hd " << hd;
    }
  }
}

TEST(Fp32Kernels, AttentionEqualsEagerAttention) {
  torch::manual_seed(11);
  const ucm::testing::AttnCase cases[] = {
      {2, 75, 75, 9, 3, 64, 0, "SmolLM2 heads, T not a multiple of 16"},
      {1, 150, 150, 9, 3, 64, 0, "three row units"},
      {1, 40, 40, 4, 4, 128, 0, "hd 128, no GQA"},
      {2, 90, 90, 8, 2, 64, 17, "sliding window 17"},
      {1, 9, 130, 6, 2, 96, 0, "queries after 121 cached keys (positions 121..129), hd 96"},
      {1, 1, 77, 9, 3, 64, 0, "one decode row after 76 keys"},
      {1, 33, 33, 16, 2, 32, 0, "8 query heads per KV head"},
      {1, 20, 20, 2, 1, 256, 5, "hd 256, window 5"},
      {1, 70, 1300, 9, 3, 64, 0, "70 rows after 1,230 cached keys: key chunks of 512, pass groups"},
      {1, 64, 1100, 8, 2, 128, 300, "hd 128 (key chunks of 256), window 300"},
  };
  for (const auto& c : cases) {
    const auto in = ucm::testing::random_attn_inputs(c);
    const float scale = float(in.scale);
    auto want = reference_attention(in.q, in.k, in.v, in.qpos, c.window, scale);
    for (auto isa : isas()) {
      auto got = attention(isa, in.q, in.k, in.v, in.qpos, c.window, scale);
      const double err = max_abs(got - want);
      EXPECT_LT(err, 2e-5 * max_abs(want)) << f32::isa_name(isa) << ": " << c.what;
    }
  }
  // A row's result does not depend on the rows it shares a unit, a pass group or key chunks with
  // (chunk bounds follow the group's key range): row 10 of 70 rows over 1,300 keys, bit for bit
  // the same as that row alone.
  {
    auto q = torch::randn({1, 70, 9, 64}), k = torch::randn({1, 1300, 3, 64}), v = torch::randn({1, 1300, 3, 64});
    auto qpos = torch::arange(1230, 1300, torch::kLong);
    for (auto isa : isas()) {
      auto full = attention(isa, q, k, v, qpos, 0, 0.125f);
      for (int64_t row : {10, 69}) {
        auto one = attention(isa, q.narrow(1, row, 1).contiguous(), k, v, qpos.narrow(0, row, 1).contiguous(), 0, 0.125f);
        EXPECT_TRUE(torch::equal(one[0][0], full[0][row])) << f32::isa_name(isa) << " row " << row;
      }
    }
  }
  // Right padding: rows t >= q_len[b] are 0; the others are as without it. Strided K/V (views of
  // one projection) and K/V as a bf16 KV cache holds them give the result of the same values.
  auto qkv = torch::randn({2, 70, 6 + 2 + 2, 64});
  auto qv = qkv.narrow(2, 0, 6), kv = qkv.narrow(2, 6, 2), vv = qkv.narrow(2, 8, 2);
  auto pos = torch::arange(70, torch::kLong);
  for (auto isa : isas()) {
    auto full = attention(isa, qv, kv.contiguous(), vv.contiguous(), pos, 0, 0.125f);
    auto strided = attention(isa, qv, kv, vv, pos, 0, 0.125f);
    EXPECT_TRUE(torch::equal(strided, full)) << f32::isa_name(isa) << " strided k, v";
    auto cut = attention(isa, qv, kv, vv, pos, 0, 0.125f, torch::tensor({70, 20}, torch::kLong));
    EXPECT_TRUE(torch::equal(cut[0], full[0])) << f32::isa_name(isa);
    EXPECT_TRUE(torch::equal(cut[1].narrow(0, 0, 20), full[1].narrow(0, 0, 20))) << f32::isa_name(isa);
    EXPECT_EQ(max_abs(cut[1].narrow(0, 20, 50)), 0.0) << f32::isa_name(isa) << " padding rows";
    auto kb = kv.to(torch::kBFloat16), vb = vv.to(torch::kBFloat16);
    auto from16 = attention(isa, qv, kb, vb, pos, 0, 0.125f);
    auto widened = attention(isa, qv, kb.to(torch::kFloat), vb.to(torch::kFloat), pos, 0, 0.125f);
    EXPECT_TRUE(torch::equal(from16, widened)) << f32::isa_name(isa) << " bf16 k, v";
  }
}

// Units of one call that share a sequence and KV head pack its keys once, each later row block only
// the keys after the earlier ones': the result is that of packing every unit afresh (one call per
// unit), bit for bit, however the units are dealt (round-robin to 1, 2 or 3 threads), with a
// sliding window (the packed range moves), bf16 K/V, and query positions out of order (a later row
// block sees fewer keys than the one before).
TEST(Fp32Kernels, AttentionUnitsPackKeysOnceWithTheBitsOfFreshPacking) {
  torch::manual_seed(23);
  struct Case {
    int64_t B, T, S, window;
    bool bf16, shuffled;
    const char* what;
  };
  const Case cases[] = {
      {2, 200, 200, 0, false, false, "causal, 4 row blocks per head, 2 sequences"},
      {1, 150, 150, 40, false, false, "sliding window 40"},
      {1, 130, 300, 0, true, false, "bf16 K/V, 130 rows after 170 cached keys"},
      {1, 200, 200, 0, false, true, "positions out of order"},
  };
  for (const auto& c : cases) {
    auto q = torch::randn({c.B, c.T, 9, 64});
    auto k = torch::randn({c.B, c.S, 3, 64}), v = torch::randn({c.B, c.S, 3, 64});
    if (c.bf16) k = k.to(torch::kBFloat16), v = v.to(torch::kBFloat16);
    auto qpos = torch::arange(c.S - c.T, c.S, torch::kLong);
    if (c.shuffled) qpos = qpos.flip(0).contiguous();  // row block 0 sees the most keys
    const auto want = reference_attention(q, k.to(torch::kFloat), v.to(torch::kFloat), qpos, c.window, 0.125f);
    for (auto isa : isas()) {
      const auto fresh = attention(isa, q, k, v, qpos, c.window, 0.125f, {}, {}, nullptr, -1);
      EXPECT_LT(max_abs(fresh - want), 2e-5 * max_abs(want)) << f32::isa_name(isa) << ": " << c.what;
      for (int64_t deal : {0, 2, 3})
        EXPECT_TRUE(torch::equal(attention(isa, q, k, v, qpos, c.window, 0.125f, {}, {}, nullptr, deal), fresh))
            << f32::isa_name(isa) << ": " << c.what << ", dealt to " << deal;
    }
  }
}

// Block-sparse attention (a key mask per KV head) and the probabilities written out (the engine's
// sparse decode and key_attention): as eager attention with the mask, rows summing to 1.
TEST(Fp32Kernels, KeyMaskAndProbabilities) {
  torch::manual_seed(19);
  const int64_t T = 20, S = 150, nh = 6, nkv = 2, hd = 64, G = nh / nkv;
  auto q = torch::randn({1, T, nh, hd}), k = torch::randn({1, S, nkv, hd}), v = torch::randn({1, S, nkv, hd});
  auto qpos = torch::arange(S - T, S, torch::kLong);
  auto keep = torch::rand({nkv, S}) > 0.3;
  keep.narrow(1, 0, 1).fill_(true);  // every query keeps a key
  auto keep8 = keep.to(torch::kUInt8).contiguous();
  // Reference: the mask's keys at -inf, per KV head.
  auto qd = q.to(torch::kDouble).permute({0, 2, 1, 3});
  auto kd = k.to(torch::kDouble).repeat_interleave(G, 2).permute({0, 2, 3, 1});
  auto vd = v.to(torch::kDouble).repeat_interleave(G, 2).permute({0, 2, 1, 3});
  auto sc = torch::matmul(qd, kd) * 0.125;  // [1, nh, T, S]
  auto causal = torch::arange(S, torch::kLong).view({1, S}) > qpos.view({T, 1});
  auto hidden = causal.view({1, 1, T, S}).logical_or(keep.logical_not().repeat_interleave(G, 0).view({1, nh, 1, S}));
  auto p = sc.masked_fill(hidden, -std::numeric_limits<double>::infinity()).softmax(-1);
  auto want = torch::matmul(p, vd).permute({0, 2, 1, 3}).to(torch::kFloat);
  for (auto isa : isas()) {
    torch::Tensor probs;
    auto got = attention(isa, q, k, v, qpos, 0, 0.125f, {}, keep8, &probs);
    EXPECT_LT(max_abs(got - want), 2e-5 * max_abs(want)) << f32::isa_name(isa);
    // probs [nkv, G * T, S], row g * T + t of KV head h = head h * G + g's row t.
    auto pw = p[0].view({nkv, G, T, S}).reshape({nkv, G * T, S}).to(torch::kFloat);
    EXPECT_LT(max_abs(probs - pw), 1e-5) << f32::isa_name(isa);
  }
}

// The AVX2 unit (8 lanes) and the AVX-512 unit (16) run every dot product in the same order: their
// scores and weighted values agree but for the lane sums of RMSNorm and softmax (fp32 rounding);
// the element-wise kernels (SiLU, RoPE) give the same bits.
TEST(Fp32Kernels, Avx2AndAvx512Agree) {
  if (f32::cpu_isa() < f32::Isa::kAvx512) GTEST_SKIP() << "no AVX-512 on this CPU (the portable path is tested above)";
  torch::manual_seed(17);
  const auto a2 = f32::Isa::kAvx2, a5 = f32::Isa::kAvx512;
  auto x = torch::randn({33, 576}), w = torch::randn({576});
  auto n5 = rms_norm(a5, x, w, 1e-5f);
  EXPECT_LT(max_abs(rms_norm(a2, x, w, 1e-5f) - n5), 1e-6 * max_abs(n5));
  auto gu = torch::randn({17, 2 * 1536}) * 5;
  EXPECT_TRUE(torch::equal(silu_mul(a2, gu), silu_mul(a5, gu)));
  for (int64_t hd : {64, 128}) {
    auto q = torch::randn({2, 130, 9, hd}), k = torch::randn({2, 130, 3, hd}), v = torch::randn({2, 130, 3, hd});
    auto pos = torch::arange(130, torch::kLong);
    for (int64_t window : {0, 33}) {
      auto o5 = attention(a5, q, k, v, pos, window, 0.125f);
      EXPECT_LT(max_abs(attention(a2, q, k, v, pos, window, 0.125f) - o5), 1e-6 * max_abs(o5)) << hd << " " << window;
    }
  }
}

std::string model_dir() {
  if (const char* e = std::getenv("UCM_MODEL_DIR"); e && *e) return e;
  return std::string(UCM_REPO_DIR) + "/models/SmolLM2-135M-Instruct";
}

// Runs fn() on the calling thread as the poster of a crew of `workers` (crew.h) whose other
// workers wait as helpers, in the strict mode (they take the parts posted while they are idle).
template <class F>
void on_crew(int workers, const F& fn) {
  using ucm::model::Crew;
  Crew crew(workers);
  std::vector<std::thread> helpers;
  for (int i = 1; i < workers; ++i) helpers.emplace_back([&] {
    c10::InferenceMode guard;
    ucm::model::CrewMember member(&crew);
    crew.help_until_done();
  });
  {
    c10::InferenceMode guard;
    ucm::model::CrewMember member(&crew);
    crew.wait_for_idle(workers - 1);
    ucm::model::crew_strict_for_tests(true);
    fn();
    ucm::model::crew_strict_for_tests(false);
    crew.help_until_done();
  }
  for (auto& t : helpers) t.join();
}

// OpenBLAS's core type asked for in the environment (OPENBLAS_CORETYPE, as ctest's variants of
// these tests set it: tests/model/CMakeLists.txt) is the one that runs, or the CPU cannot run it.
TEST(Fp32Kernels, OpenBlasRunsTheCoreTheEnvironmentNames) {
  const char* want = std::getenv("OPENBLAS_CORETYPE");
  const std::string got = ucm::model::blas_core_name();
  std::printf("[ blas ] OPENBLAS_CORETYPE=%s OPENBLAS_L2_SIZE=%s: OpenBLAS runs %s\n", want ? want : "(unset)",
              std::getenv("OPENBLAS_L2_SIZE") ? std::getenv("OPENBLAS_L2_SIZE") : "(unset)", got.c_str());
  ASSERT_FALSE(got.empty()) << "no OpenBLAS in this process: libtorch's BLAS is another one";
  if (!want || !*want) return;
  auto lower = [](std::string v) {
    for (auto& ch : v) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return v;
  };
  if (lower(got) == lower(want)) return;
  const auto f = ucm::model::cpu_flags();
  const std::string w = lower(want);
  const bool cpu_lacks = (w == "cooperlake" && !f.count("avx512_bf16")) ||
                         ((w == "skylakex" || w == "cooperlake") && !f.count("avx512f")) ||
                         ((w == "haswell" || w == "zen") && !f.count("avx2"));
  if (cpu_lacks) GTEST_SKIP() << "this CPU cannot run OpenBLAS's " << want << " kernels (it runs " << got << ")";
  FAIL() << "OPENBLAS_CORETYPE=" << want << " but OpenBLAS runs " << got;
}

// The invariant of the prefill's GEMMs (attn_ops.h, for_gemm_pieces; docs/model.md, "One result
// whatever the workers"): linear_f32 and add_linear_f32_ (with a bias, without, and added to the
// output with beta 1) give the same bits with no crew and on crews of 2 and 3 workers whose helpers
// take pieces, whatever kernels OpenBLAS runs (ctest runs this under each OPENBLAS_CORETYPE this
// CPU can run). The control: where OpenBLAS's kernels give a row other bits in a call of other
// rows (its Haswell and Zen cores: rows in a 4-row edge tile, measured), the split the workers
// made before (the rows halved between two workers) must differ from the whole GEMM at least once,
// or this test would prove nothing on that core.
TEST(Fp32Kernels, GemmPiecesGiveTheSameBitsWhateverTheWorkers) {
  namespace ops = ucm::model::ops;
  ucm::model::set_blas_threads(1);
  c10::InferenceMode guard;
  torch::manual_seed(5);
  const std::string core = ucm::model::blas_core_name();
  const bool row_sensitive = core == "Haswell" || core == "Zen";
  const int64_t shapes[][2] = {{960, 576}, {3072, 576}, {576, 1536}};
  int control_differs = 0, control_cases = 0;
  for (const auto& nk : shapes) {
    const int64_t N = nk[0], K = nk[1];
    auto w = torch::randn({N, K}), b = torch::randn({N});
    for (int64_t M : {128, 333, 682, 1100, 2048}) {
      auto x = torch::randn({M, K}), acc = torch::randn({M, N});
      const auto alone = ops::linear_f32(x, w), alone_b = ops::linear_f32(x, w, b);
      auto alone_acc = acc.clone();
      ops::add_linear_f32_(alone_acc, x, w);
      for (int workers : {2, 3}) {
        torch::Tensor y, yb, ya = acc.clone();
        on_crew(workers, [&] {
          y = ops::linear_f32(x, w);
          yb = ops::linear_f32(x, w, b);
          ops::add_linear_f32_(ya, x, w);
        });
        const std::string at = std::to_string(M) + " x " + std::to_string(N) + " x " + std::to_string(K) + ", " +
                               std::to_string(workers) + " workers, OpenBLAS " + core;
        EXPECT_TRUE(torch::equal(y, alone)) << at;
        EXPECT_TRUE(torch::equal(yb, alone_b)) << at << " (bias)";
        EXPECT_TRUE(torch::equal(ya, alone_acc)) << at << " (beta 1)";
      }
      if (M >= 256) {  // the old split: rows halved (starts on multiples of 16), against one call
        const int64_t cut = M / 2 / 16 * 16;
        auto halves = torch::cat({torch::mm(x.narrow(0, 0, cut), w.t()), torch::mm(x.narrow(0, cut, M - cut), w.t())});
        ++control_cases;
        control_differs += !torch::equal(halves, torch::mm(x, w.t()));
      }
    }
  }
  std::printf("[ blas ] OpenBLAS %s: the rows halved differ from one call in %d of %d GEMMs\n", core.c_str(),
              control_differs, control_cases);
  if (row_sensitive) {
    EXPECT_GT(control_differs, 0) << "OpenBLAS " << core << " gave the halves the whole GEMM's bits every time";
  }
}

// The crew itself (no model): parts are split only with idle helpers, every part runs once, a
// part's exception reaches the poster after every part has ended, and the crew ends.
TEST(Fp32Kernels, CrewRunsEveryPartOnceAndPassesErrorsOn) {
  using ucm::model::Crew;
  {
    Crew alone(1);
    int calls = 0, parts_seen = 0;
    alone.share(8, [&](int p, int n) {
      ++calls;
      parts_seen = n;
      EXPECT_EQ(p, 0);
    });
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(parts_seen, 1);  // no helper: one part
    alone.help_until_done();   // the only worker: returns at once
  }
  // Three workers: two help at once, the first posts tasks.
  Crew crew(3);
  std::vector<std::thread> helpers;
  for (int i = 0; i < 2; ++i) helpers.emplace_back([&] { crew.help_until_done(); });
  auto both_idle = [&] {
    while (crew.idle_helpers() < 2) std::this_thread::yield();
  };
  both_idle();
  int parts = 0;
  crew.share(16, [&](int p, int n) {
    if (p == 0) parts = n;
  });
  EXPECT_EQ(parts, 3) << "two idle helpers give three parts";
  both_idle();
  crew.share(2, [&](int p, int n) {
    if (p == 0) parts = n;
  });
  EXPECT_EQ(parts, 2) << "max_parts caps the parts";
  std::vector<std::atomic<int>> hits(64);
  for (int round = 0; round < 2000; ++round) {
    crew.share(16, [&](int p, int n) {
      for (int i = p; i < 64; i += n) hits[size_t(i)].fetch_add(1);
    });
  }
  for (auto& h : hits) EXPECT_EQ(h.load(), 2000);
  // Whether a helper ran any of those is up to the scheduler (the poster takes what is left); in
  // the strict mode the two idle helpers take at least two of three parts (all three when they
  // claim before the poster does).
  both_idle();
  const int64_t helped = crew.helped_parts();
  ucm::model::crew_strict_for_tests(true);
  crew.share(3, [&](int, int) {});
  ucm::model::crew_strict_for_tests(false);
  EXPECT_GE(crew.helped_parts() - helped, 2);
  EXPECT_LE(crew.helped_parts() - helped, 3);
  both_idle();
  std::atomic<int> ended{0};
  EXPECT_THROW(crew.share(3,
                          [&](int p, int) {
                            ended.fetch_add(1);
                            if (p == 1) throw std::runtime_error("part 1");
                          }),
               std::runtime_error);
  EXPECT_EQ(ended.load(), 3) << "share returns after every part has ended";
  crew.help_until_done();
  for (auto& t : helpers) t.join();
}

// The fused fp32 prefill of the default model: two workers give one worker's K/V and logits bit
// for bit (a batch of sequences of unequal lengths: the worker with the two short ones then
// usually helps the other, crew.h), and a batch of one sequence with two workers (one runs it, one
// helps) gives them too.
TEST(Fp32Kernels, PrefillWorkersGiveTheOneThreadResultBitForBit) {
  auto m = ucm::model::LlamaModel::load(model_dir(), torch::kCPU, torch::kFloat);
  ASSERT_FALSE(m->fused_fp32().empty()) << "the fp32 model runs libtorch's ops (UCM_FP32_KERNELS=0?)";
  torch::manual_seed(23);
  // 600 tokens: 2 GEMM pieces (for_gemm_pieces), which the idle worker takes while the other has
  // its two short sequences.
  auto tokens = torch::randint(0, 49152, {3, 600}, torch::kLong);
  auto lengths = torch::tensor({600, 61, 17}, torch::kLong);
  ucm::model::set_blas_threads(1);
  at::set_num_threads(1);
  m->set_prefill_workers(1);
  auto one = m->forward(tokens, lengths, true, torch::kBFloat16);
  m->set_prefill_workers(2);
  ucm::model::crew_strict_for_tests(true);  // helpers idle at a post run parts (crew.h)
  const int64_t helped0 = ucm::model::crew_helped_parts_total();
  auto par = m->forward(tokens, lengths, true, torch::kBFloat16);
  const int64_t helped1 = ucm::model::crew_helped_parts_total();
  auto alone = m->forward(tokens.narrow(0, 0, 1), lengths.narrow(0, 0, 1), true, torch::kBFloat16);
  const int64_t helped2 = ucm::model::crew_helped_parts_total();
  ucm::model::crew_strict_for_tests(false);
  // Whether the worker of the two short sequences helped depends on the scheduler (it usually
  // does; on a loaded machine it can finish last): reported, not asserted. The worker dealt none
  // is idle before the lone sequence starts (strict mode) and must help.
  std::printf("[ crew ] parts helped: %lld in the batch of three, %lld for the lone sequence\n",
              static_cast<long long>(helped1 - helped0), static_cast<long long>(helped2 - helped1));
  EXPECT_GT(helped2, helped1) << "one sequence on two workers: the second never helped";
  for (size_t l = 0; l < one.k.size(); ++l) {
    EXPECT_TRUE(torch::equal(par.k[l], one.k[l])) << "layer " << l;
    EXPECT_TRUE(torch::equal(par.v[l], one.v[l])) << "layer " << l;
    EXPECT_TRUE(torch::equal(alone.k[l][0], one.k[l][0])) << "one sequence, two threads, layer " << l;
    EXPECT_TRUE(torch::equal(alone.v[l][0], one.v[l][0])) << "one sequence, two threads, layer " << l;
  }
  EXPECT_TRUE(torch::equal(par.logits, one.logits));
  EXPECT_TRUE(torch::equal(alone.logits[0], one.logits[0]));
  // Real rows of a padded sequence are those of the sequence alone.
  auto short_one = m->forward(tokens.narrow(0, 2, 1).narrow(1, 0, 17), torch::tensor({17}, torch::kLong), true,
                              torch::kBFloat16);
  EXPECT_TRUE(torch::equal(short_one.k[5][0], one.k[5][2].narrow(0, 0, 17)));
  m->set_prefill_workers(1);
}

}  // namespace
