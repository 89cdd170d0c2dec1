// test_blend: RAG reuse (CacheBlend) on the real model (SmolLM2-135M-Instruct) and real documents
// of the default corpus, stored as chunks by `ucm precompute --chunks`.
//
//   * Re-rotation is exact: keys the model computes at positions p, moved by ucm_rope_shift to
//     p + delta, equal the keys it computes at p + delta (layer 0, whose pre-RoPE keys depend on the
//     token alone), to fp32 rounding with an fp32 cache and to one bf16 step with a bf16 cache.
//   * A single document at position 0 through the blend path answers like the prefix cache.
//   * Recompute ratio 100% is full recompute exactly (KL 0, same tokens).
//   * Blending several documents serves most of the prompt from the store and tracks full
//     recompute better as the ratio grows.
//   * The question's attention (LlamaModel::key_attention) is a distribution over the kept keys;
//     the relevance and deviation selections, with and without the position prior, recompute as
//     many tokens, different ones.
//   * Three documents under eight settings come from one `ucm eval blend` run (BlendEval), which
//     these tests are also the tests of: one row per setting, means over one prompt are the rows.
//   * Bad input: an unknown document id, a namespace whose RoPE is not the model's or cannot be
//     moved (yarn), and a corrupted chunk block, which is recomputed, never served.
// Model dir: $UCM_MODEL_DIR or <repo>/models/SmolLM2-135M-Instruct.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "corrupt_block.h"
#include "ucm/model/llama_model.h"
#include "ucm/blend.h"
#include "ucm/hash.h"
#include "ucm/store.h"
#include "real_data.h"
#include "shared_fixture.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ucm::test;

namespace {

const std::vector<std::string>& kDocs = kShortDocs;
// Teacher-forced steps per run: each blend run decodes this many tokens four times (the reference,
// the prefix cache and the blend teacher-forced, the blend free-running), each step reading all of
// the model's fp32 weights; 16 halve the decode time of 32 and still separate the ratios.
constexpr uint64_t kNewTokens = 16;
const char* kQuestion =
    "\n\nWhich of these modules reads a line of a source file by its number?<|im_end|>\n<|im_start|>assistant\n";


TEST(BlendRope, ShiftedKeysEqualTheKeysComputedThere) {
  if (!have_model()) GTEST_SKIP() << "model not fetched";
  auto m = ucm::model::LlamaModel::load(model_dir());
  const auto& c = m->config();
  ucm_rope_params p = ucm_rope_default_params();
  p.head_dim = uint32_t(c.head_dim);
  p.theta = c.rope_theta;
  const int64_t n = 40, H = c.num_key_value_heads, D = c.head_dim;
  auto tokens = torch::arange(1000, 1000 + n, torch::kLong) * 7 % c.vocab_size;
  auto filler = torch::arange(0, 1000, torch::kLong) * 13 % c.vocab_size;
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (int64_t delta : {int64_t{1}, int64_t{333}, int64_t{1000}}) {
      auto a = m->make_cache(n, dtype);  // tokens at 0..n-1
      m->extend(tokens, &a);
      auto b = m->make_cache(delta + n, dtype);  // the same tokens at delta..delta+n-1
      m->extend(torch::cat({filler.narrow(0, 0, delta), tokens}), &b);
      auto moved = a.k[0].clone().contiguous();
      const int ud = dtype == torch::kFloat ? UCM_DTYPE_F32 : UCM_DTYPE_BF16;
      ASSERT_EQ(ucm_rope_shift(&p, moved.data_ptr(), ud, size_t(n), uint32_t(H), size_t(H * D), delta), UCM_OK);
      auto want = b.k[0].narrow(0, delta, n).to(torch::kFloat);
      auto got = moved.to(torch::kFloat);
      const double err = (got - want).abs().max().item<double>();
      const double scale = want.abs().max().item<double>();
      // fp32: angles differ only in how delta * w and p * w round (fp32 in the model). bf16: the
      // stored key and the moved one are each rounded once, so one bf16 step (2^-7 relative).
      const double bound = dtype == torch::kFloat ? 2e-4 * scale : scale / 128.0;
      EXPECT_LT(err, bound) << "delta " << delta << (dtype == torch::kFloat ? " fp32" : " bf16");
      // Moving back gives the original positions.
      auto back = b.k[0].narrow(0, delta, n).clone().contiguous();
      ASSERT_EQ(ucm_rope_shift(&p, back.data_ptr(), ud, size_t(n), uint32_t(H), size_t(H * D), -delta), UCM_OK);
      EXPECT_LT((back.to(torch::kFloat) - a.k[0].to(torch::kFloat)).abs().max().item<double>(), bound);
      std::printf("[ rope ] delta %lld %s: max |moved - computed| %.3g (max |k| %.3g)\n", (long long)delta,
                  dtype == torch::kFloat ? "fp32" : "bf16", err, scale);
    }
  }
}

TEST(BlendRelevance, KeyAttentionIsADistributionOverTheKeptKeys) {
  // LlamaModel::key_attention, what the relevance selection ranks by: the question's softmax
  // mass on each key, averaged over heads, question tokens and layers. It sums to 1, masked keys
  // get exactly 0, the cache's length is left alone, and the question's K/V rows are extend()'s.
  if (!have_model()) GTEST_SKIP() << "model not fetched";
  auto m = ucm::model::LlamaModel::load(model_dir());
  const auto& c = m->config();
  const int64_t n = 60, Q = 5;
  auto doc = torch::arange(500, 500 + n, torch::kLong) * 11 % c.vocab_size;
  auto q = torch::arange(900, 900 + Q, torch::kLong) * 17 % c.vocab_size;
  auto cache = m->make_cache(n + Q, torch::kFloat);
  m->extend(doc, &cache);
  auto keep = torch::ones({n + Q}, torch::kBool);
  keep.narrow(0, 10, 10).fill_(false);
  keep.narrow(0, n, Q).fill_(false);  // the question's own rows are kept whatever keep says
  auto a = m->key_attention(q, &cache, keep);
  ASSERT_EQ(a.dim(), 1);
  ASSERT_EQ(a.size(0), n + Q);
  EXPECT_EQ(cache.len, n);
  EXPECT_NEAR(a.sum().item<double>(), 1.0, 1e-5);
  EXPECT_GE(a.min().item<double>(), 0.0);
  EXPECT_EQ(a.narrow(0, 10, 10).abs().max().item<double>(), 0.0);
  EXPECT_GT(a.narrow(0, n, Q).min().item<double>(), 0.0);
  // The last key is seen by the last question token alone: at most 1/Q of the mass.
  EXPECT_LE(a[n + Q - 1].item<double>(), 1.0 / Q + 1e-6);
  // Its K/V rows are those extend() writes (no mask in either: the mask only hides keys).
  auto ref = m->make_cache(n + Q, torch::kFloat);
  m->extend(doc, &ref);
  m->extend(q, &ref);
  auto open = m->make_cache(n + Q, torch::kFloat);
  m->extend(doc, &open);
  (void)m->key_attention(q, &open);
  for (size_t l = 0; l < cache.k.size(); ++l)
    EXPECT_TRUE(torch::equal(open.k[l].narrow(0, n, Q), ref.k[l].narrow(0, n, Q))) << "layer " << l;
  // Errors like extend(): a keep of the wrong length, a cache too small.
  EXPECT_THROW(m->key_attention(q, &cache, torch::ones({n}, torch::kBool)), ucm::model::ModelError);
  auto small = m->make_cache(n, torch::kFloat);
  m->extend(doc, &small);
  EXPECT_THROW(m->key_attention(q, &small), ucm::model::ModelError);
}

class Blend : public PrecomputedStoreTest<Blend> {
 protected:
  // The chunk store of the four documents, precomputed once per ctest run
  // (tests/common/shared_fixture.h).
  static void SetUpTestSuite() { set_up_suite(UCM_BIN, "blend", kDocs, "--chunks"); }
  static ucm::test::CliRun blend_run(const fs::path& store, const std::string& docs, const std::string& extra) {
    return run_shell(std::string(UCM_BIN) + " generate --blend --json --max-new-tokens " + std::to_string(kNewTokens) +
                     " --model " + shell_quote(model_dir()) + " --store " + shell_quote(store.string()) + " --docs " +
                     shell_quote(docs) + " --prompt " + shell_quote(kQuestion) + " " + extra);
  }
  static json blend(const fs::path& store, const std::string& docs, const std::string& extra = "") {
    auto r = blend_run(store, docs, extra);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? json::parse(r.out) : json::object();
  }
};

TEST_F(Blend, SingleDocumentAtPositionZeroAnswersLikeThePrefixCache) {
  const json j = blend(store_, "copy.rst.txt", "--recompute-ratio 0");
  ASSERT_TRUE(j.contains("tokens")) << j.dump();
  // The document follows the chunk prefix as it did in precompute: nothing moves (delta 0).
  EXPECT_EQ(j["docs_missing"].size(), 0u);
  EXPECT_GT(j["stored_tokens"].get<uint64_t>(), 700u);
  EXPECT_EQ(j["recomputed_tokens"].get<uint64_t>(), 0u);
  EXPECT_DOUBLE_EQ(j["prefix_top1_agreement"].get<double>(), 1.0);
  // Layers 0..check_layer are recomputed (rounding-level differences from the stored ones); the
  // answer is the prefix cache's, which is full recompute's.
  EXPECT_EQ(j["greedy_match"].get<uint64_t>(), kNewTokens) << j.dump();
  EXPECT_DOUBLE_EQ(j["top1_agreement"].get<double>(), 1.0);
  EXPECT_LT(j["mean_kl"].get<double>(), 1e-3);
  // The defaults, as reported: the relevance selection at layer 0, exponent 2, prior 128.
  EXPECT_EQ(j["selection"], "relevance");
  EXPECT_EQ(j["check_layer"].get<int>(), 0);
  EXPECT_DOUBLE_EQ(j["relevance_exponent"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["position_decay"].get<double>(), 128.0);
}

// ---------------------------------------------------------------------------------------------
// The three documents' prompt under every setting the tests below compare comes from one
// `ucm eval blend` run, shared by the test processes (tests/common/shared_fixture.h): full
// recompute and prefix caching once, then a blend prefill and its decodes per setting, where a
// `ucm generate --blend` per setting would prefill the baselines again each time (this suite's
// time went there: docs/testing.md).
const char* kEvalDocs = "linecache.rst.txt,codeop.rst.txt,netrc.rst.txt";
const std::vector<double> kEvalRatios = {0.0, 0.15};  // none, and the default

class BlendEval : public Blend {
 protected:
  static void SetUpTestSuite() {
    Blend::SetUpTestSuite();
    if (::testing::Test::IsSkipped() || ::testing::Test::HasFailure()) return;
    eval_fixture_ = ucm::test::shared_fixture("blend-eval", [](const fs::path& dir) -> std::string {
      auto r = run_shell(std::string(UCM_BIN) + " eval blend --json --model " + shell_quote(model_dir()) + " --store " +
                         shell_quote(store_.string()) + " --documents " + kEvalDocs +
                         " --sizes 3 --prompts 1 --ratios 0,0.15 --selections relevance,deviation"
                         " --position-decays 128,0 --new-tokens " +
                         std::to_string(kNewTokens) + " --question " + shell_quote(kQuestion));
      if (r.code != 0) return "eval blend exit " + std::to_string(r.code) + ": " + r.err;
      std::ofstream(dir / "eval.json") << r.out;
      return "";
    });
    ASSERT_EQ(eval_fixture_.error, "");
    std::ifstream f(eval_fixture_.dir / "eval.json");
    eval_ = json::parse(f, nullptr, false);
    ASSERT_FALSE(eval_.is_discarded()) << "eval.json is not JSON";
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (eval_fixture_.owned) fs::remove_all(eval_fixture_.dir, ec);
    Blend::TearDownTestSuite();
  }
  // The per-prompt row of `method` ("recompute", "prefix", "blend-relevance", ...), at ratio and
  // decay for the blend rows; an empty object (and a failure) when there is not exactly one.
  static json row(const std::string& method, double ratio = 0, double decay = 0) {
    json found = json::object();
    int n = 0;
    for (const auto& r : eval_["rows"]) {
      if (r["method"] != method) continue;
      if (method.rfind("blend", 0) == 0 &&
          (std::abs(r["ratio"].get<double>() - ratio) > 1e-9 || r["position_decay"].get<double>() != decay))
        continue;
      found = r;
      ++n;
    }
    EXPECT_EQ(n, 1) << method << " ratio " << ratio << " decay " << decay;
    return n == 1 ? found : json::object();
  }
  static ucm::test::FixtureDir eval_fixture_;
  static json eval_;  // the report of `ucm eval blend --json`
};
ucm::test::FixtureDir BlendEval::eval_fixture_;
json BlendEval::eval_;

TEST_F(BlendEval, OneRowPerPromptAndSettingAndMeansOverOnePrompt) {
  // Full recompute, prefix caching, then selection x decay x ratio, in that order; with one prompt
  // the means are the rows.
  const auto& rows = eval_["rows"];
  ASSERT_EQ(rows.size(), 2u + 2 * 2 * kEvalRatios.size()) << eval_.dump();
  EXPECT_EQ(rows[0]["method"], "recompute");
  EXPECT_EQ(rows[1]["method"], "prefix");
  size_t i = 2;
  for (const char* sel : {"blend-relevance", "blend-deviation"})
    for (double decay : {128.0, 0.0})
      for (double ratio : kEvalRatios) {
        EXPECT_EQ(rows[i]["method"], sel) << i;
        EXPECT_DOUBLE_EQ(rows[i]["ratio"].get<double>(), ratio) << i;
        EXPECT_DOUBLE_EQ(rows[i]["position_decay"].get<double>(), decay) << i;
        EXPECT_EQ(rows[i]["size"], 3) << i;
        EXPECT_EQ(rows[i]["prompt_tokens"], rows[0]["prompt_tokens"]) << i;
        EXPECT_EQ(rows[i]["chunk_blocks_failed"], 0) << i;
        ++i;
      }
  const auto& means = eval_["means"];
  ASSERT_EQ(means.size(), rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    EXPECT_EQ(means[k]["method"], rows[k]["method"]) << k;
    EXPECT_EQ(means[k]["prompt"], 1) << k;  // the number of prompts averaged
    EXPECT_DOUBLE_EQ(means[k]["mean_kl"].get<double>(), rows[k]["mean_kl"].get<double>()) << k;
    EXPECT_DOUBLE_EQ(means[k]["top1_agreement"].get<double>(), rows[k]["top1_agreement"].get<double>()) << k;
  }
  // Full recompute is the reference: agreement 1, KL 0, every new token its own.
  EXPECT_DOUBLE_EQ(rows[0]["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(rows[0]["mean_kl"].get<double>(), 0.0);
  EXPECT_EQ(rows[0]["greedy_match"].get<uint64_t>(), kNewTokens);
}

TEST_F(BlendEval, DocumentsServedFromTheStoreAndRatioBuysQuality) {
  // Three documents (about 2,300 tokens).
  const json prefix = row("prefix");
  const uint64_t n = prefix["prompt_tokens"].get<uint64_t>();
  // Prefix caching serves the first document only.
  EXPECT_LT(prefix["served_fraction"].get<double>(), 0.35);
  for (const char* sel : {"blend-relevance", "blend-deviation"})
    for (double decay : {128.0, 0.0}) {
      const json r0 = row(sel, 0, decay), r15 = row(sel, 0.15, decay);
      ASSERT_TRUE(r0.contains("stored_tokens") && r15.contains("stored_tokens")) << sel;
      // Every full block of every chunk is used: all but the documents' tails and the separators.
      EXPECT_GT(r0["stored_tokens"].get<uint64_t>(), n * 9 / 10) << sel;
      EXPECT_EQ(r15["stored_tokens"], r0["stored_tokens"]) << sel;
      EXPECT_EQ(r0["recomputed_tokens"].get<uint64_t>(), 0u) << sel;
      EXPECT_GT(r0["served_fraction"].get<double>(), 0.9) << sel;
      EXPECT_NEAR(double(r15["recomputed_tokens"].get<uint64_t>()), 0.15 * r15["stored_tokens"].get<double>(), 1.0);
      // Documents that never saw each other: not exact; recomputing 15% of the stored tokens
      // tracks full recompute better, whichever tokens the selection picks.
      EXPECT_GT(r0["mean_kl"].get<double>(), 0.0) << sel;
      EXPECT_LT(r15["mean_kl"].get<double>(), r0["mean_kl"].get<double>()) << sel << " decay " << decay;
      std::printf("[ blend ] 3 docs, %llu tokens, %s, decay %g: ratio 0: top-1 %.3f KL %.4f; 0.15: top-1 %.3f KL "
                  "%.4f\n",
                  (unsigned long long)n, sel, decay, r0["top1_agreement"].get<double>(), r0["mean_kl"].get<double>(),
                  r15["top1_agreement"].get<double>(), r15["mean_kl"].get<double>());
    }
}

TEST_F(BlendEval, PositionPriorIsTheSelectionsAndOnlyChangesWhichTokens) {
  // ucm_blend_select_weighted with the default decay (128) and with none (CacheBlend's plain
  // deviation), for both selections: the same number of tokens recomputed, other tokens chosen.
  for (const char* sel : {"blend-relevance", "blend-deviation"}) {
    const json with = row(sel, 0.15, 128), without = row(sel, 0.15, 0);
    ASSERT_TRUE(with.contains("recomputed_tokens") && without.contains("recomputed_tokens")) << sel;
    EXPECT_EQ(with["recomputed_tokens"], without["recomputed_tokens"]) << sel;
    EXPECT_NEAR(double(with["recomputed_tokens"].get<uint64_t>()), 0.15 * with["stored_tokens"].get<double>(), 1.0);
    EXPECT_NE(with["mean_kl"].get<double>(), without["mean_kl"].get<double>()) << sel << ": the same tokens?";
  }
  // A negative decay is a usage error naming the option, before the model loads.
  auto bad = blend_run(store_, kEvalDocs, "--position-decay -1");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE((bad.out + bad.err).find("--position-decay"), std::string::npos) << bad.out << bad.err;
}

TEST_F(BlendEval, SelectionsRankByTheQuestionsAttentionOrByDeviation) {
  // The default selection ranks by how much the question attends to a token (check layer 0,
  // the question's pass reported as relevance_ms); deviation is CacheBlend's V deviation at
  // layer 1. Same number of tokens recomputed, other tokens chosen. A deviation at layer 0
  // (always 0) and an unknown selection are usage errors.
  const json rel = row("blend-relevance", 0.15, 128), dev = row("blend-deviation", 0.15, 128);
  ASSERT_TRUE(rel.contains("check_layer") && dev.contains("check_layer"));
  EXPECT_EQ(rel["check_layer"].get<int>(), 0);
  EXPECT_GT(rel["relevance_ms"].get<double>(), 0.0);
  EXPECT_EQ(dev["check_layer"].get<int>(), 1);
  EXPECT_EQ(dev["relevance_ms"].get<double>(), 0.0);
  EXPECT_EQ(rel["recomputed_tokens"], dev["recomputed_tokens"]);
  EXPECT_NE(rel["mean_kl"].get<double>(), dev["mean_kl"].get<double>());
  std::printf("[ blend ] 3 docs at 15%%: relevance top-1 %.3f KL %.4f (question pass %.0f ms); deviation top-1 %.3f "
              "KL %.4f\n",
              rel["top1_agreement"].get<double>(), rel["mean_kl"].get<double>(), rel["relevance_ms"].get<double>(),
              dev["top1_agreement"].get<double>(), dev["mean_kl"].get<double>());
  auto bad = blend_run(store_, kEvalDocs, "--selection deviation --check-layer 0");
  EXPECT_NE(bad.code, 0) << bad.out << bad.err;
  EXPECT_NE((bad.out + bad.err).find("--check-layer 0"), std::string::npos) << bad.out << bad.err;
  bad = blend_run(store_, kEvalDocs, "--selection sideways");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE((bad.out + bad.err).find("--selection"), std::string::npos) << bad.out << bad.err;
}

TEST_F(Blend, UnknownDocumentIsAnError) {
  auto r = blend_run(store_, "copy.rst.txt,no-such-doc.rst.txt", "");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("unknown document 'no-such-doc.rst.txt'"), std::string::npos) << r.err;
}

// Copies `store` to `copy` and rewrites the copy's rope attachment.
fs::path with_rope(const fs::path& store, const fs::path& copy, const std::string& rope_json) {
  fs::copy(store, copy, fs::copy_options::recursive);
  std::unique_ptr<ucm::Store> s;
  ucm::OpenOptions oo;
  oo.mode = ucm::OpenOptions::Mode::kReadWrite;
  EXPECT_TRUE(ucm::Store::Open(copy.string(), oo, &s).ok());
  const auto ns = s->namespaces().at(0).id();
  EXPECT_TRUE(s->put_attachment(ns, "rope", rope_json.data(), rope_json.size()).ok());
  return copy;
}

TEST_F(Blend, RopeThatCannotBeMovedOrIsAnotherModelsIsRefused) {
  const fs::path yarn = with_rope(store_, root_ / "store-yarn",
                                  R"({"style":"rotate_half","theta":100000.0,"head_dim":64,)"
                                  R"("scaling":{"type":"yarn","factor":4.0}})");
  auto r = blend_run(yarn, "copy.rst.txt", "");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("NOT_SUPPORTED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("yarn"), std::string::npos) << r.err;
  const fs::path other = with_rope(store_, root_ / "store-theta",
                                   R"({"style":"rotate_half","theta":10000.0,"head_dim":64,"scaling":{"type":"none"}})");
  r = blend_run(other, "copy.rst.txt", "");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("is not this model's"), std::string::npos) << r.err;
}

TEST_F(Blend, FullRecomputeRatioIsFullRecomputeExactlyAndACorruptChunkBlockIsNeverServed) {
  // Ratio 1 recomputes every stored token: bit-identical logits and the same tokens as full
  // recompute. Then one chunk block corrupted in a copy of the store (block 10 of
  // chunk:netrc.rst.txt): it is reported and its tokens computed, never served, and the answer is
  // still full recompute's, bit for bit.
  const std::string docs = "copy.rst.txt,netrc.rst.txt";
  const json clean = blend(store_, docs, "--recompute-ratio 1");
  ASSERT_TRUE(clean.contains("tokens")) << clean.dump();
  EXPECT_EQ(clean["chunk_blocks_failed"].get<uint64_t>(), 0u);
  EXPECT_EQ(clean["recomputed_tokens"], clean["stored_tokens"]);
  EXPECT_EQ(clean["mean_kl"].get<double>(), 0.0);  // bit-identical logits
  EXPECT_DOUBLE_EQ(clean["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(clean["greedy_match"].get<uint64_t>(), kNewTokens);
  EXPECT_EQ(clean["tokens"], clean["recompute_tokens"]);

  const fs::path copy = root_ / "store-corrupt";
  fs::copy(store_, copy, fs::copy_options::recursive);
  ASSERT_EQ(ucm::test::corrupt_document_block(copy, "chunk:netrc.rst.txt", 10, 777, 0x21), "");
  const json bad = blend(copy, docs, "--recompute-ratio 1");
  ASSERT_TRUE(bad.contains("tokens")) << bad.dump();
  EXPECT_EQ(bad["chunk_blocks_failed"].get<uint64_t>(), 1u);
  EXPECT_EQ(bad["stored_tokens"].get<uint64_t>() + 16, clean["stored_tokens"].get<uint64_t>());
  EXPECT_EQ(bad["mean_kl"].get<double>(), 0.0);
  EXPECT_EQ(bad["tokens"], bad["recompute_tokens"]);
}

}  // namespace
