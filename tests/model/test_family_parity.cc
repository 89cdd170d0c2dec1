// Parity of ucm::model::LlamaModel with Hugging Face transformers on the small model families of
// tests/golden/families/ (Llama 3 with rope_scaling llama3, Qwen 2.5 with q/k/v bias, Qwen 3 with
// q/k RMSNorm, Mistral with a sliding window): random bf16 weights at a fixed seed and their
// goldens, both written by scripts/make_family_models.py with transformers (fp32 compute, eager
// attention, batch 1). The tolerances are SmolLM2's (parity_check.h, test_model_parity.cc).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "ucm/model/llama_model.h"
#include "parity_check.h"

namespace fs = std::filesystem;
using ucm::model::LlamaModel;
using ucm::model::RopeScaling;
using ucm::testing::Prompt;
using namespace ucm::testing::parity;

namespace {

struct Family {
  const char* name;
  const char* model_type;
  int64_t layers, heads, kv_heads, head_dim;
  bool bias, qk_norm, tied;
  int64_t sliding_window;  // 0: none
  RopeScaling::Type rope;
};

const Family kFamilies[] = {
    {"llama3", "llama", 2, 2, 1, 128, false, false, true, 0, RopeScaling::Type::Llama3},
    {"qwen2", "qwen2", 3, 2, 1, 64, true, false, false, 0, RopeScaling::Type::None},
    {"qwen3", "qwen3", 2, 4, 2, 128, false, true, true, 0, RopeScaling::Type::None},
    {"mistral", "mistral", 4, 4, 2, 64, false, false, false, 64, RopeScaling::Type::None},
};

std::string family_dir(const Family& f) { return std::string(UCM_REPO_DIR) + "/tests/golden/families/" + f.name; }

class FamilyParity : public ::testing::TestWithParam<Family> {
 protected:
  void SetUp() override {
    const auto dir = family_dir(GetParam());
    ASSERT_TRUE(fs::exists(fs::path(dir) / "parity.safetensors"))
        << dir << " is missing: it is committed; regenerate with .venv-torch/bin/python scripts/make_family_models.py";
    model_ = LlamaModel::load(dir);
    prompts_ = ucm::testing::load_parity_golden(dir + "/parity.safetensors", &digest_);
    ASSERT_EQ(prompts_.size(), 2u);
  }
  std::unique_ptr<LlamaModel> model_;
  std::vector<Prompt> prompts_;
  std::string digest_;
};

TEST_P(FamilyParity, ConfigIsReadAsTransformersReadsIt) {
  const auto& f = GetParam();
  const auto& c = model_->config();
  EXPECT_EQ(c.model_type, f.model_type);
  EXPECT_EQ(c.num_hidden_layers, f.layers);
  EXPECT_EQ(c.num_attention_heads, f.heads);
  EXPECT_EQ(c.num_key_value_heads, f.kv_heads);
  EXPECT_EQ(c.head_dim, f.head_dim);
  EXPECT_EQ(c.attention_bias, f.bias);
  EXPECT_EQ(c.qk_norm, f.qk_norm);
  EXPECT_EQ(c.tie_word_embeddings, f.tied);
  EXPECT_EQ(c.sliding_window.value_or(0), f.sliding_window);
  EXPECT_EQ(c.rope_scaling.type, f.rope);
  EXPECT_EQ(model_->weights_digest(), digest_) << "the weights differ from those the golden was made with";
}

TEST_P(FamilyParity, SingleSequencesMatchTransformers) {
  const auto& f = GetParam();
  for (size_t i = 0; i < prompts_.size(); ++i) {
    const auto& p = prompts_[i];
    const int64_t T = p.ids.size(0);
    ASSERT_GE(T, 50);
    ASSERT_LE(T, 300);
    auto out = model_->forward(p.ids.view({1, T}), torch::tensor({T}, torch::kLong), true);
    ASSERT_EQ(out.k.size(), size_t(f.layers));
    ASSERT_EQ(out.k[0].sizes(), (std::vector<int64_t>{1, T, f.kv_heads, f.head_dim}));
    const std::string what = std::string(f.name) + " prompt " + std::to_string(i) + " (" + std::to_string(T) + " tokens)";
    ucm::testing::check_kv(out, 0, p, what);
    ucm::testing::check_logits(out.logits[0], p, what);
  }
}

TEST_P(FamilyParity, PaddedBatchMatchesTransformers) {
  const auto& f = GetParam();
  const int64_t B = int64_t(prompts_.size());
  int64_t Tmax = 0;
  for (const auto& p : prompts_) Tmax = std::max(Tmax, p.ids.size(0));
  auto tokens = torch::full({B, Tmax}, 2, torch::kLong);
  auto lengths = torch::empty({B}, torch::kLong);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t T = prompts_[size_t(b)].ids.size(0);
    tokens[b].narrow(0, 0, T).copy_(prompts_[size_t(b)].ids);
    lengths[b] = T;
  }
  auto out = model_->forward(tokens, lengths, true);
  for (int64_t b = 0; b < B; ++b) {
    const std::string what = std::string(f.name) + " batched row " + std::to_string(b);
    ucm::testing::check_kv(out, b, prompts_[size_t(b)], what);
    ucm::testing::check_logits(out.logits[b], prompts_[size_t(b)], what);
  }
}

// The window is real: layer 1's key at the last position (289) depends on layer 0's outputs at
// positions within the window (226..289), which see inputs from 163 on, so changing token 0 leaves
// it bit for bit unchanged with mistral's 64-token window and changes it under full attention.
TEST_P(FamilyParity, SlidingWindowHidesTokensBeyondIt) {
  const auto& f = GetParam();
  const auto& p = prompts_[1];
  const int64_t T = p.ids.size(0);
  auto out = model_->forward(p.ids.view({1, T}), torch::tensor({T}, torch::kLong), false);
  auto ids2 = p.ids.clone();
  ids2[0] = (ids2[0].item<int64_t>() + 7) % 512;
  auto out2 = model_->forward(ids2.view({1, T}), torch::tensor({T}, torch::kLong), false);
  const double d = (out.k[1][0][T - 1] - out2.k[1][0][T - 1]).abs().max().item<double>();
  if (f.sliding_window) EXPECT_EQ(d, 0.0) << f.name << ": position " << T - 1 << " saw token 0 beyond the window";
  else EXPECT_GT(d, 0.0) << f.name << ": position " << T - 1 << " did not see token 0";
}

// Precompute stores forward()'s K/V; the reference engine recomputes with extend(). Both run the
// one decoder layer (llama_layer.cc), so the same tokens give the same K/V bit for bit (fp32
// cache, fp32 compute). The last-token logits differ by rounding only (extend() runs the LM head
// on one row, forward() on all T), as does a prefill split in two extend() calls (a cached
// prefix, then the rest: GEMMs over fewer rows).
TEST_P(FamilyParity, PrefillAndCachedForwardAreOneDecoderLayer) {
  const auto& f = GetParam();
  const auto& p = prompts_[1];
  const int64_t T = p.ids.size(0), half = T / 2;
  auto out = model_->forward(p.ids.view({1, T}), torch::tensor({T}, torch::kLong), true);
  auto whole = model_->make_cache(T, torch::kFloat);
  auto logits = model_->extend(p.ids, &whole);
  auto split = model_->make_cache(T, torch::kFloat);
  model_->extend(p.ids.narrow(0, 0, half), &split);
  auto logits2 = model_->extend(p.ids.narrow(0, half, T - half), &split);
  for (int64_t l = 0; l < f.layers; ++l) {
    EXPECT_TRUE(torch::equal(whole.k[size_t(l)], out.k[size_t(l)][0])) << f.name << " K of layer " << l;
    EXPECT_TRUE(torch::equal(whole.v[size_t(l)], out.v[size_t(l)][0])) << f.name << " V of layer " << l;
    const double scale = out.k[size_t(l)].abs().max().item<double>();
    EXPECT_LT((split.k[size_t(l)] - out.k[size_t(l)][0]).abs().max().item<double>(), 1e-4 * scale)
        << f.name << " split prefill, K of layer " << l;
  }
  EXPECT_LT((logits[0] - out.logits[0][T - 1]).abs().max().item<double>(), 1e-4) << f.name;
  EXPECT_LT((logits2[0] - out.logits[0][T - 1]).abs().max().item<double>(), 1e-3) << f.name;
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyParity, ::testing::ValuesIn(kFamilies),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
