// Parity of ucm::model::LlamaModel with Hugging Face transformers on SmolLM2-135M-Instruct.
//
// Golden: tests/golden/model_smollm2_parity.safetensors, written by
// scripts/make_golden_model.py (transformers LlamaForCausalLM, fp32, eager attention,
// batch 1). Layout: see that script's docstring.
//
// Model: $UCM_MODEL_DIR, else <repo>/models/SmolLM2-135M-Instruct (made by
// scripts/fetch_model.py). A missing model is a test FAILURE, not a skip.
//
// Tolerances (reference K/V and last-position logits are stored as fp16, so they carry
// a rounding error of up to 2^-11 relative; top-5 logits are stored as fp32):
//   K, V of every layer:  |ours - ref| <= kKvAtol + kKvRtol * |ref|     elementwise
//   top-5 logits (fp32):  |ours - ref| <= kLogitAtol                      every position
//   last logits (fp16):   |ours - ref| <= kLogitAtol + 2^-10 * |ref|      all vocab
//   argmax:               equal to the reference's top-1 at every position, unless the
//                         reference's top-1/top-2 gap is below kLogitAtol (a near tie).
//   batched (padded) vs single-sequence run of the runner: max abs diff <= kBatchAtol.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ucm/model/llama_model.h"
#include "ucm/safetensors/safetensors.h"
#include "parity_check.h"
#include "st_writer.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
namespace st = ucm::safetensors;
using ucm::model::LlamaModel;
using ucm::model::ModelError;

namespace {

using namespace ucm::testing::parity;
using ucm::testing::Prompt;

std::string model_dir() {
  if (const char* e = std::getenv("UCM_MODEL_DIR"); e && *e) return e;
  return std::string(UCM_REPO_DIR) + "/models/SmolLM2-135M-Instruct";
}
std::string golden_path() { return std::string(UCM_REPO_DIR) + "/tests/golden/model_smollm2_parity.safetensors"; }

struct Fixture {
  std::unique_ptr<LlamaModel> model;
  std::vector<Prompt> prompts;
  std::string golden_digest;
  std::string error;
};

Fixture& fixture() {
  static Fixture f = [] {
    Fixture x;
    const std::string dir = model_dir();
    if (!fs::exists(fs::path(dir) / "config.json")) {
      x.error = "model directory " + dir +
                " is missing or incomplete: run `.venv/bin/python scripts/fetch_model.py` (or set UCM_MODEL_DIR)";
      return x;
    }
    try {
      x.model = LlamaModel::load(dir);
      x.prompts = ucm::testing::load_parity_golden(golden_path(), &x.golden_digest);
    } catch (const std::exception& e) {
      x.error = e.what();
    }
    return x;
  }();
  return f;
}

#define REQUIRE_MODEL()                        \
  auto& F = fixture();                         \
  ASSERT_TRUE(F.error.empty()) << F.error;     \
  ASSERT_TRUE(F.model);                        \
  ASSERT_FALSE(F.prompts.empty())

TEST(ModelParity, ConfigAndDigest) {
  REQUIRE_MODEL();
  const auto& c = F.model->config();
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.num_hidden_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_attention_heads, 9);
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_DOUBLE_EQ(c.rope_theta, 100000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  // The golden script computes the digest independently in Python from the file bytes.
  EXPECT_EQ(F.model->weights_digest(), F.golden_digest)
      << "the model directory's weights differ from those the golden was made with";
}

TEST(ModelParity, SingleSequencesMatchTransformers) {
  REQUIRE_MODEL();
  for (size_t i = 0; i < F.prompts.size(); ++i) {
    const auto& p = F.prompts[i];
    const int64_t T = p.ids.size(0);
    auto out = F.model->forward(p.ids.view({1, T}), torch::tensor({T}, torch::kLong), true);
    ASSERT_EQ(out.k.size(), 30u);
    ASSERT_EQ(out.k[0].sizes(), (std::vector<int64_t>{1, T, 3, 64}));
    ASSERT_EQ(out.logits.sizes(), (std::vector<int64_t>{1, T, 49152}));
    const std::string what = "prompt " + std::to_string(i) + " (" + std::to_string(T) + " tokens)";
    check_kv(out, 0, p, what);
    check_logits(out.logits[0], p, what);
  }
}

TEST(ModelParity, PaddedBatchMatchesTransformersAndSingleRuns) {
  REQUIRE_MODEL();
  const int64_t B = static_cast<int64_t>(F.prompts.size());
  int64_t Tmax = 0;
  for (const auto& p : F.prompts) Tmax = std::max(Tmax, p.ids.size(0));
  // Right-pad with a real token (id 2, <|im_end|>) so padding is not trivially zero.
  auto tokens = torch::full({B, Tmax}, 2, torch::kLong);
  auto lengths = torch::empty({B}, torch::kLong);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t T = F.prompts[b].ids.size(0);
    tokens[b].narrow(0, 0, T).copy_(F.prompts[b].ids);
    lengths[b] = T;
  }
  auto out = F.model->forward(tokens, lengths, true);
  ASSERT_EQ(out.k[0].sizes(), (std::vector<int64_t>{B, Tmax, 3, 64}));
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = F.prompts[b];
    const int64_t T = p.ids.size(0);
    const std::string what = "batched row " + std::to_string(b);
    check_kv(out, b, p, what);
    check_logits(out.logits[b], p, what);
    auto single = F.model->forward(p.ids.view({1, T}), torch::tensor({T}, torch::kLong), false);
    double worst = 0;
    for (size_t l = 0; l < out.k.size(); ++l) {
      worst = std::max(worst, (out.k[l][b].narrow(0, 0, T) - single.k[l][0]).abs().max().item<double>());
      worst = std::max(worst, (out.v[l][b].narrow(0, 0, T) - single.v[l][0]).abs().max().item<double>());
    }
    EXPECT_LE(worst, kBatchAtol) << what << " differs from the single-sequence run";
  }
}

TEST(ModelParity, ChunkedAttentionEqualsUnchunked) {
  REQUIRE_MODEL();
  // Concatenate the prompts (T = sum of lengths) and force 16-row query chunks.
  std::vector<torch::Tensor> parts;
  for (const auto& p : F.prompts) parts.push_back(p.ids);
  auto ids = torch::cat(parts).view({1, -1});
  const int64_t T = ids.size(1);
  auto len = torch::tensor({T}, torch::kLong);
  auto whole = F.model->forward(ids, len, true);
  auto m = LlamaModel::load(model_dir());
  m->set_score_budget(1);
  auto chunked = m->forward(ids, len, true);
  for (size_t l = 0; l < whole.k.size(); ++l) {
    EXPECT_LE((whole.k[l] - chunked.k[l]).abs().max().item<double>(), 1e-4) << "layer " << l;
    EXPECT_LE((whole.v[l] - chunked.v[l]).abs().max().item<double>(), 1e-4) << "layer " << l;
  }
  EXPECT_LE((whole.logits - chunked.logits).abs().max().item<double>(), 1e-3);
}

TEST(ModelParity, RejectsBadForwardArguments) {
  REQUIRE_MODEL();
  auto ids = torch::zeros({1, 4}, torch::kLong);
  EXPECT_THROW(F.model->forward(ids.to(torch::kInt), torch::tensor({4}, torch::kLong)), ModelError);
  EXPECT_THROW(F.model->forward(ids, torch::tensor({5}, torch::kLong)), ModelError);
  EXPECT_THROW(F.model->forward(ids, torch::tensor({0}, torch::kLong)), ModelError);
  EXPECT_THROW(F.model->forward(ids, torch::tensor({4, 4}, torch::kLong)), ModelError);
  EXPECT_THROW(F.model->forward(ids + 49152, torch::tensor({4}, torch::kLong)), ModelError);
}

// ---- Error paths on tiny hand-written model directories ----

class TinyModelDir : public ucm::test::MkdtempTest {
 protected:
  TinyModelDir() : MkdtempTest("ucm_model_") {}

  void write_config(const std::string& model_type, const std::string& extra = "") {
    std::ofstream(dir_ / "config.json") << R"({"model_type":")" << model_type
                                        << R"(","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,)"
                                        << R"("num_key_value_heads":1,"intermediate_size":16,"vocab_size":10,)"
                                        << R"("max_position_embeddings":64,"rms_norm_eps":1e-5,"rope_theta":10000.0,)"
                                        << R"("tie_word_embeddings":true)" << extra << "}";
  }
  // All tensors of the tiny model except `skip`; `bad_shape` gets shape [3].
  void write_weights(const std::string& skip = "", const std::string& bad_shape = "") {
    std::vector<std::pair<std::string, std::vector<int64_t>>> spec = {
        {"model.embed_tokens.weight", {10, 8}},
        {"model.norm.weight", {8}},
        {"model.layers.0.input_layernorm.weight", {8}},
        {"model.layers.0.post_attention_layernorm.weight", {8}},
        {"model.layers.0.self_attn.q_proj.weight", {8, 8}},
        {"model.layers.0.self_attn.k_proj.weight", {4, 8}},
        {"model.layers.0.self_attn.v_proj.weight", {4, 8}},
        {"model.layers.0.self_attn.o_proj.weight", {8, 8}},
        {"model.layers.0.mlp.gate_proj.weight", {16, 8}},
        {"model.layers.0.mlp.up_proj.weight", {16, 8}},
        {"model.layers.0.mlp.down_proj.weight", {8, 16}},
    };
    std::vector<ucm::testing::StTensor> ts;
    for (auto [name, shape] : spec) {
      if (name == skip) continue;
      if (name == bad_shape) shape = {3};
      int64_t n = 1;
      for (auto s : shape) n *= s;
      std::vector<float> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.01f * static_cast<float>((i * 7) % 13) - 0.05f;
      ts.push_back({name, "F32", shape, ucm::testing::st_bytes(v)});
    }
    ucm::testing::st_write((dir_ / "model.safetensors").string(), ts);
  }
  // The ModelError of loading the model in `dir` (dir_ unless given).
  std::string load_error(const fs::path& dir = {}) {
    try {
      LlamaModel::load((dir.empty() ? dir_ : dir).string());
    } catch (const ModelError& e) {
      return e.what();
    }
    return "<no error>";
  }
  // load_error() of a tiny model of `model_type` (write_config, write_weights).
  std::string error_of(const std::string& model_type, const std::string& extra = "", const std::string& skip = "",
                       const std::string& bad_shape = "") {
    write_config(model_type, extra);
    write_weights(skip, bad_shape);
    return load_error();
  }
};

TEST_F(TinyModelDir, CompleteTinyModelLoadsAndRuns) {
  write_config("llama");
  write_weights();
  auto m = LlamaModel::load(dir_.string());
  auto out = m->forward(torch::tensor({{1, 2, 3}}, torch::kLong), torch::tensor({3}, torch::kLong), true);
  ASSERT_EQ(out.k.size(), 1u);
  EXPECT_EQ(out.k[0].sizes(), (std::vector<int64_t>{1, 3, 1, 4}));
  EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{1, 3, 10}));
  EXPECT_EQ(m->weights_digest().size(), 32u);
}

TEST_F(TinyModelDir, MissingTensorIsNamed) {
  auto e = error_of("llama", "", "model.layers.0.self_attn.k_proj.weight");
  EXPECT_NE(e.find("missing tensor 'model.layers.0.self_attn.k_proj.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find(dir_.string()), std::string::npos) << e;
}

TEST_F(TinyModelDir, WrongShapeIsNamed) {
  auto e = error_of("llama", "", "", "model.layers.0.mlp.down_proj.weight");
  EXPECT_NE(e.find("'model.layers.0.mlp.down_proj.weight' has shape [3], expected [8, 16]"), std::string::npos) << e;
}

TEST_F(TinyModelDir, UnsupportedModelTypeIsNamed) {
  auto e = error_of("gpt2");
  EXPECT_NE(e.find("unsupported model_type \"gpt2\""), std::string::npos) << e;
  EXPECT_NE(e.find((dir_ / "config.json").string()), std::string::npos) << e;
}

TEST_F(TinyModelDir, UnsupportedRopeScalingAndMissingFieldAreNamed) {
  auto e = error_of("llama", R"(,"rope_scaling":{"type":"dynamic","factor":2.0})");
  EXPECT_NE(e.find("unsupported rope_scaling type \"dynamic\""), std::string::npos) << e;
  std::ofstream(dir_ / "config.json") << R"({"model_type":"llama","hidden_size":8})";
  e = load_error();
  EXPECT_NE(e.find("missing field \"num_hidden_layers\""), std::string::npos) << e;
}

TEST_F(TinyModelDir, Qwen2NeedsBiasTensors) {
  auto e = error_of("qwen2");
  EXPECT_NE(e.find("missing tensor 'model.layers.0.self_attn.q_proj.bias'"), std::string::npos) << e;
}

TEST_F(TinyModelDir, MissingDirectoryAndWeights) {
  auto e = load_error(dir_ / "nope");
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
  write_config("llama");
  e = load_error();
  EXPECT_NE(e.find("neither model.safetensors nor model.safetensors.index.json"), std::string::npos) << e;
}

}  // namespace
