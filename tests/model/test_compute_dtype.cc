// The bf16 compute path (LlamaModel::load(..., torch::kBFloat16)) against the fp32 path on the
// default model (SmolLM2-135M-Instruct) and 5 real documents of the default corpus (python3.11-doc),
// the parity bar for making bf16 the default of `ucm precompute`:
//   * teacher-forced top-1 agreement >= 0.99 over 32 steps per document: the next-token argmax of
//     both paths at the documents' last 32 positions, each fed the document's true tokens;
//   * stored K/V (kv_dtype bf16, as precompute stores them): layer 0 within one bf16 step of the
//     fp32 path's value at the layer's scale (max |value|), every layer within 8% of the layer's
//     max |value| (bf16 GEMM rounding compounds through 30 layers; the figures are printed).
// Skips without a CPU that has AMX-BF16 or AVX512-BF16 (bf16 is then refused as slower than fp32).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "compute.h"
#include "llama_model.h"
#include "ucm/tok/tokenizer.h"

namespace fs = std::filesystem;
using ucm::model::LlamaModel;

namespace {

const char* kDocs[] = {"library/grp.rst.txt", "library/copy.rst.txt", "library/netrc.rst.txt",
                       "tutorial/introduction.rst.txt", "library/fnmatch.rst.txt"};
constexpr int64_t kTokens = 512;  // each document's first 512 tokens
constexpr int64_t kSteps = 32;

std::string model_dir() {
  if (const char* e = std::getenv("UCM_MODEL_DIR"); e && *e) return e;
  return std::string(UCM_REPO_DIR) + "/models/SmolLM2-135M-Instruct";
}

TEST(ComputeDtype, Bf16MatchesFp32OnRealDocuments) {
  if (ucm::model::cpu_bf16_isa().empty()) GTEST_SKIP() << "no AMX-BF16 / AVX512-BF16 on this CPU";
  const std::string dir = model_dir();
  ASSERT_TRUE(fs::exists(fs::path(dir) / "model.safetensors")) << dir << ": run scripts/fetch_model.py";
  ucm::model::set_compute_threads(0);
  auto m32 = LlamaModel::load(dir);
  auto m16 = LlamaModel::load(dir, torch::kCPU, torch::kBFloat16);
  EXPECT_EQ(m16->compute_dtype(), torch::kBFloat16);
  auto tok = ucm::tok::Tokenizer::from_file(dir + "/tokenizer.json");
  int64_t agree = 0, total = 0;
  double worst0 = 0, worst = 0;
  for (const char* d : kDocs) {
    const fs::path p = fs::path("/usr/share/doc/python3.11/html/_sources") / d;
    if (!fs::exists(p)) GTEST_SKIP() << p << " missing (apt install python3.11-doc)";
    std::ifstream f(p);
    std::string text((std::istreambuf_iterator<char>(f)), {});
    auto ids = tok.encode(text);
    ASSERT_GE(int64_t(ids.size()), kTokens) << d;
    auto t = torch::from_blob(ids.data(), {1, kTokens}, torch::kInt).to(torch::kLong);
    auto len = torch::tensor({kTokens}, torch::kLong);
    auto a = m32->forward(t, len, true, torch::kBFloat16);
    auto b = m16->forward(t, len, true, torch::kBFloat16);
    auto am = a.logits[0].narrow(0, kTokens - 1 - kSteps, kSteps).argmax(-1);
    auto bm = b.logits[0].narrow(0, kTokens - 1 - kSteps, kSteps).argmax(-1);
    agree += am.eq(bm).sum().item<int64_t>();
    total += kSteps;
    for (size_t l = 0; l < a.k.size(); ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        const auto& x = kv ? a.v[l] : a.k[l];
        const auto& y = kv ? b.v[l] : b.k[l];
        const double scale = x.abs().max().item<double>();
        const double diff = (x - y).abs().max().item<double>();
        if (l == 0) {
          const double step = std::ldexp(1.0, std::ilogb(scale) - 7);  // bf16 spacing at the layer's max
          EXPECT_LE(diff, step) << d << ": layer 0 " << (kv ? "V" : "K") << " beyond one bf16 step";
          worst0 = std::max(worst0, diff / step);
        }
        EXPECT_LE(diff / scale, 0.08) << d << ": layer " << l << (kv ? " V" : " K");
        worst = std::max(worst, diff / scale);
      }
    }
  }
  const double rate = double(agree) / double(total);
  std::printf("[ compute ] teacher-forced top-1 agreement bf16 vs fp32: %lld / %lld = %.4f; layer 0 K/V max diff "
              "%.2f bf16 steps; all layers max diff %.2f%% of the layer's max |value|\n",
              (long long)agree, (long long)total, rate, worst0, 100 * worst);
  EXPECT_GE(rate, 0.99);
}

TEST(ComputeDtype, ChoiceAndRefusals) {
  EXPECT_EQ(ucm::model::choose_compute("fp32", torch::kCPU).dtype, torch::kFloat);
  EXPECT_THROW(ucm::model::choose_compute("fp16", torch::kCPU), std::invalid_argument);
  const auto a = ucm::model::choose_compute("auto", torch::kCPU);
  if (ucm::model::cpu_bf16_isa().empty()) {
    EXPECT_EQ(a.dtype, torch::kFloat);
    EXPECT_EQ(a.path, "fp32");
    EXPECT_THROW(ucm::model::choose_compute("bf16", torch::kCPU), std::invalid_argument);
  } else {
    EXPECT_EQ(a.dtype, torch::kBFloat16);
    EXPECT_EQ(a.path, ucm::model::cpu_bf16_isa());
  }
  EXPECT_GE(ucm::model::set_compute_threads(1), 1);
}

}  // namespace
