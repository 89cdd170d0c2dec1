// tests/model/parity_check.h: the checks of a runner's K/V and logits against a transformers golden
// (the layout scripts/make_golden_model.py and scripts/make_family_models.py write), shared by
// test_model_parity (SmolLM2-135M) and test_family_parity (the small families).
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ucm/model/llama_model.h"
#include "ucm/safetensors/safetensors.h"

namespace ucm::testing {

namespace parity {
// fp16 storage alone accounts for up to 2^-11 = 4.9e-4 relative error in the reference.
constexpr double kKvAtol = 5e-4;
constexpr double kKvRtol = 1e-3;
constexpr double kLogitAtol = 5e-4;
constexpr double kBatchAtol = 1e-4;

}  // namespace parity

struct Prompt {
  torch::Tensor ids;         // int64 [T]
  torch::Tensor k, v;        // fp32 [L, T, nkv, hd]
  torch::Tensor top5_ids;    // int64 [T, 5]
  torch::Tensor top5_logits; // fp32 [T, 5]
  torch::Tensor last_logits; // fp32 [V]
};

inline torch::Tensor to_tensor(const ucm::safetensors::Collection& c, const std::string& name) {
  auto e = c.at(name);
  c10::ScalarType t;
  switch (e.info->dtype) {
    case ucm::safetensors::DType::F32: t = torch::kFloat; break;
    case ucm::safetensors::DType::F16: t = torch::kHalf; break;
    case ucm::safetensors::DType::I64: t = torch::kLong; break;
    default: throw std::runtime_error("unexpected golden dtype for " + name);
  }
  return torch::from_blob(const_cast<std::byte*>(e.data().data()), e.info->shape, t).clone();
}

/// Reads a golden file: p{i}.ids/.k/.v/.top5_ids/.top5_logits/.last_logits for i < num_prompts;
/// `digest` gets __metadata__.weights_digest. Throws on a missing file or tensor.
inline std::vector<Prompt> load_parity_golden(const std::string& path, std::string* digest) {
  auto g = ucm::safetensors::Collection::open_file(path);
  const auto& meta = g.files()[0]->metadata();
  if (digest) *digest = meta.at("weights_digest");
  std::vector<Prompt> out;
  const int n = std::stoi(meta.at("num_prompts"));
  for (int i = 0; i < n; ++i) {
    const std::string p = "p" + std::to_string(i) + ".";
    out.push_back({to_tensor(g, p + "ids"), to_tensor(g, p + "k").to(torch::kFloat), to_tensor(g, p + "v").to(torch::kFloat),
                   to_tensor(g, p + "top5_ids"), to_tensor(g, p + "top5_logits"),
                   to_tensor(g, p + "last_logits").to(torch::kFloat)});
  }
  return out;
}

// Max of (|a - r| - atol - rtol |r|); <= 0 means within tolerance. Also reports max abs diff.
struct Cmp {
  double excess, max_abs, max_rel;
};
inline Cmp compare(const torch::Tensor& a, const torch::Tensor& r, double atol, double rtol) {
  auto d = (a - r).abs();
  return {(d - atol - rtol * r.abs()).max().item<double>(), d.max().item<double>(),
          (d / r.abs().clamp_min(1e-2)).max().item<double>()};
}

// Checks K/V of row `b` of `out` (valid length T) against prompt `p`.
inline void check_kv(const ucm::model::LlamaModel::Output& out, int64_t b, const Prompt& p, const std::string& what) {
  const int64_t T = p.ids.size(0);
  double worst_abs = 0, worst_beyond_fp16 = 0;
  for (size_t l = 0; l < out.k.size(); ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      auto ours = (kv ? out.v : out.k)[l][b].narrow(0, 0, T);
      auto ref = (kv ? p.v : p.k)[static_cast<int64_t>(l)];
      ASSERT_EQ(ours.sizes(), ref.sizes());
      auto c = compare(ours, ref, parity::kKvAtol, parity::kKvRtol);
      worst_abs = std::max(worst_abs, c.max_abs);
      // Error left after allowing for the reference's fp16 rounding (half an fp16 ulp).
      worst_beyond_fp16 = std::max(
          worst_beyond_fp16, ((ours - ref).abs() - ref.abs() * std::ldexp(1.0, -11)).max().item<double>());
      ASSERT_LE(c.excess, 0.0) << what << ": layer " << l << (kv ? " V" : " K") << " max abs diff " << c.max_abs
                               << " max rel diff " << c.max_rel;
    }
  }
  std::cout << "[ parity ] " << what << ": K/V max abs diff " << worst_abs
            << ", beyond fp16 rounding of the reference " << worst_beyond_fp16 << "\n";
}

inline void check_logits(const torch::Tensor& logits, const Prompt& p, const std::string& what) {
  const int64_t T = p.ids.size(0);
  auto lg = logits.narrow(0, 0, T);  // [T, V]
  auto ours_top = lg.gather(1, p.top5_ids);
  auto c = compare(ours_top, p.top5_logits, parity::kLogitAtol, 0);
  EXPECT_LE(c.excess, 0.0) << what << ": top-5 logits max abs diff " << c.max_abs;
  auto argmax = lg.argmax(1);
  for (int64_t t = 0; t < T; ++t) {
    const double gap = (p.top5_logits[t][0] - p.top5_logits[t][1]).item<double>();
    if (gap < parity::kLogitAtol) continue;
    EXPECT_EQ(argmax[t].item<int64_t>(), p.top5_ids[t][0].item<int64_t>()) << what << ": argmax at position " << t;
  }
  auto cl = compare(lg[T - 1], p.last_logits, parity::kLogitAtol, 1.0 / 1024);
  EXPECT_LE(cl.excess, 0.0) << what << ": last-position logits max abs diff " << cl.max_abs;
  std::cout << "[ parity ] " << what << ": top-5 logits max abs diff " << c.max_abs
            << ", last logits (vs fp16) max abs diff " << cl.max_abs << "\n";
}

}  // namespace ucm::testing
