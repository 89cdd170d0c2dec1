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

#include "llama_model.h"
#include "ucm/safetensors/safetensors.h"
#include "st_writer.h"

namespace fs = std::filesystem;
namespace st = ucm::safetensors;
using ucm::model::LlamaModel;
using ucm::model::ModelError;

namespace {

// fp16 storage alone accounts for up to 2^-11 = 4.9e-4 relative error in the reference.
constexpr double kKvAtol = 5e-4;
constexpr double kKvRtol = 1e-3;
constexpr double kLogitAtol = 5e-4;
constexpr double kBatchAtol = 1e-4;

std::string model_dir() {
  if (const char* e = std::getenv("UCM_MODEL_DIR"); e && *e) return e;
  return std::string(UCM_REPO_DIR) + "/models/SmolLM2-135M-Instruct";
}
std::string golden_path() { return std::string(UCM_REPO_DIR) + "/tests/golden/model_smollm2_parity.safetensors"; }

torch::Tensor to_tensor(const st::Collection& c, const std::string& name) {
  auto e = c.at(name);
  c10::ScalarType t;
  switch (e.info->dtype) {
    case st::DType::F32: t = torch::kFloat; break;
    case st::DType::F16: t = torch::kHalf; break;
    case st::DType::I64: t = torch::kLong; break;
    default: throw std::runtime_error("unexpected golden dtype for " + name);
  }
  return torch::from_blob(const_cast<std::byte*>(e.data().data()), e.info->shape, t).clone();
}

struct Prompt {
  torch::Tensor ids;         // int64 [T]
  torch::Tensor k, v;        // fp32 [L, T, nkv, hd]
  torch::Tensor top5_ids;    // int64 [T, 5]
  torch::Tensor top5_logits; // fp32 [T, 5]
  torch::Tensor last_logits; // fp32 [V]
};

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
      auto g = st::Collection::open_file(golden_path());
      const auto& meta = g.files()[0]->metadata();
      x.golden_digest = meta.at("weights_digest");
      const int n = std::stoi(meta.at("num_prompts"));
      for (int i = 0; i < n; ++i) {
        const std::string p = "p" + std::to_string(i) + ".";
        x.prompts.push_back({to_tensor(g, p + "ids"), to_tensor(g, p + "k").to(torch::kFloat),
                             to_tensor(g, p + "v").to(torch::kFloat), to_tensor(g, p + "top5_ids"),
                             to_tensor(g, p + "top5_logits"), to_tensor(g, p + "last_logits").to(torch::kFloat)});
      }
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

// Max of (|a - r| - atol - rtol |r|); <= 0 means within tolerance. Also reports max abs diff.
struct Cmp {
  double excess, max_abs, max_rel;
};
Cmp compare(const torch::Tensor& a, const torch::Tensor& r, double atol, double rtol) {
  auto d = (a - r).abs();
  return {(d - atol - rtol * r.abs()).max().item<double>(), d.max().item<double>(),
          (d / r.abs().clamp_min(1e-2)).max().item<double>()};
}

// Checks K/V of row `b` of `out` (valid length T) against prompt `p`.
void check_kv(const LlamaModel::Output& out, int64_t b, const Prompt& p, const std::string& what) {
  const int64_t T = p.ids.size(0);
  double worst_abs = 0, worst_beyond_fp16 = 0;
  for (size_t l = 0; l < out.k.size(); ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      auto ours = (kv ? out.v : out.k)[l][b].narrow(0, 0, T);
      auto ref = (kv ? p.v : p.k)[static_cast<int64_t>(l)];
      ASSERT_EQ(ours.sizes(), ref.sizes());
      auto c = compare(ours, ref, kKvAtol, kKvRtol);
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

void check_logits(const torch::Tensor& logits, const Prompt& p, const std::string& what) {
  const int64_t T = p.ids.size(0);
  auto lg = logits.narrow(0, 0, T);  // [T, V]
  auto ours_top = lg.gather(1, p.top5_ids);
  auto c = compare(ours_top, p.top5_logits, kLogitAtol, 0);
  EXPECT_LE(c.excess, 0.0) << what << ": top-5 logits max abs diff " << c.max_abs;
  auto argmax = lg.argmax(1);
  for (int64_t t = 0; t < T; ++t) {
    const double gap = (p.top5_logits[t][0] - p.top5_logits[t][1]).item<double>();
    if (gap < kLogitAtol) continue;
    EXPECT_EQ(argmax[t].item<int64_t>(), p.top5_ids[t][0].item<int64_t>()) << what << ": argmax at position " << t;
  }
  auto cl = compare(lg[T - 1], p.last_logits, kLogitAtol, 1.0 / 1024);
  EXPECT_LE(cl.excess, 0.0) << what << ": last-position logits max abs diff " << cl.max_abs;
  std::cout << "[ parity ] " << what << ": top-5 logits max abs diff " << c.max_abs
            << ", last logits (vs fp16) max abs diff " << cl.max_abs << "\n";
}

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

class TinyModelDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ucm_model_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

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
  std::string load_error() {
    try {
      LlamaModel::load(dir_.string());
    } catch (const ModelError& e) {
      return e.what();
    }
    return "<no error>";
  }
  fs::path dir_;
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
  write_config("llama");
  write_weights("model.layers.0.self_attn.k_proj.weight");
  auto e = load_error();
  EXPECT_NE(e.find("missing tensor 'model.layers.0.self_attn.k_proj.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find(dir_.string()), std::string::npos) << e;
}

TEST_F(TinyModelDir, WrongShapeIsNamed) {
  write_config("llama");
  write_weights("", "model.layers.0.mlp.down_proj.weight");
  auto e = load_error();
  EXPECT_NE(e.find("'model.layers.0.mlp.down_proj.weight' has shape [3], expected [8, 16]"), std::string::npos) << e;
}

TEST_F(TinyModelDir, UnsupportedModelTypeIsNamed) {
  write_config("gpt2");
  write_weights();
  auto e = load_error();
  EXPECT_NE(e.find("unsupported model_type \"gpt2\""), std::string::npos) << e;
  EXPECT_NE(e.find((dir_ / "config.json").string()), std::string::npos) << e;
}

TEST_F(TinyModelDir, UnsupportedRopeScalingAndMissingFieldAreNamed) {
  write_config("llama", R"(,"rope_scaling":{"type":"dynamic","factor":2.0})");
  write_weights();
  auto e = load_error();
  EXPECT_NE(e.find("unsupported rope_scaling type \"dynamic\""), std::string::npos) << e;
  std::ofstream(dir_ / "config.json") << R"({"model_type":"llama","hidden_size":8})";
  e = load_error();
  EXPECT_NE(e.find("missing field \"num_hidden_layers\""), std::string::npos) << e;
}

TEST_F(TinyModelDir, Qwen2NeedsBiasTensors) {
  write_config("qwen2");
  write_weights();
  auto e = load_error();
  EXPECT_NE(e.find("missing tensor 'model.layers.0.self_attn.q_proj.bias'"), std::string::npos) << e;
}

TEST_F(TinyModelDir, MissingDirectoryAndWeights) {
  auto e = [&] {
    try {
      LlamaModel::load((dir_ / "nope").string());
    } catch (const ModelError& x) {
      return std::string(x.what());
    }
    return std::string("<no error>");
  }();
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
  write_config("llama");
  e = load_error();
  EXPECT_NE(e.find("neither model.safetensors nor model.safetensors.index.json"), std::string::npos) << e;
}

}  // namespace
