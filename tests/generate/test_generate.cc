// test_generate: `ucm generate` (the reference engine, the store through the C ABI only) on the
// real model (SmolLM2-135M-Instruct) and real documents of the default corpus (python3.11-doc).
//
//   * Four documents are precomputed with `ucm precompute`; each, with a question appended, is
//     answered from the cache and by full recompute in the same run: the 32 greedy tokens are the
//     same for at least three (any other diverges only at a near-tie), the prefix hit covers every
//     full block of the document but the last one, and the first token's logits agree.
//   * A prompt that ends mid-block: the full blocks before it hit; the tokens still agree.
//   * A corrupted block in the prefix: it is reported, not used; it and what follows are
//     recomputed, and the tokens still equal full recompute.
//   * --save on an empty store, then a second run finds the saved blocks.
//   * --sparse: with every block selected, sparse decode is dense decode (KL < 1e-6, same greedy
//     tokens); at the default budget (30%) each policy reads the stored representations and
//     loses less (KL, top-1 agreement) than the sink and local windows alone.
// That the engine reaches the store through the C ABI only is checked at link level:
// test_engine_links.cc.
// Model dir: $UCM_MODEL_DIR or <repo>/models/SmolLM2-135M-Instruct (run scripts/fetch_model.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "corrupt_block.h"
#include "ucm/hash.h"
#include "ucm/store.h"
#include "real_data.h"
#include "shared_fixture.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ucm::test;

namespace {

// Each document is answered twice per run.
const std::vector<std::string>& kDocs = kShortDocs;
const char* kQuestion = "\n\nIn two sentences, what is this module for?<|im_end|>\n<|im_start|>assistant\n";

std::string tmpl() { return std::string(UCM_SOURCE_DIR) + "/configs/template_chat.txt"; }

class Generate : public PrecomputedStoreTest<Generate> {
 protected:
  // The store of the four documents, precomputed once per ctest run (tests/common/shared_fixture.h).
  static void SetUpTestSuite() { set_up_suite(UCM_BIN, "generate", kDocs); }

  // Runs `ucm generate --json` on prompt text; returns the parsed report (asserting exit 0).
  static json generate(const std::string& prompt, const fs::path& store, const std::string& extra = "",
                       int new_tokens = 32) {
    static int n = 0;
    const fs::path pf = root_ / ("prompt-" + std::to_string(n++) + ".txt");
    write_file(pf, prompt);
    auto r = run_shell(std::string(UCM_BIN) + " generate --json --ignore-eos --max-new-tokens " + std::to_string(new_tokens) + " --model " +
                       shell_quote(model_dir()) + " --store " + shell_quote(store.string()) + " --template " +
                       shell_quote(tmpl()) + " --prompt-file " + shell_quote(pf.string()) + " " + extra);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? json::parse(r.out) : json::object();
  }
};

TEST_F(Generate, CachedPrefixGivesTheRecomputedTokens) {
  // The cached path reads K/V that precompute rounded to bf16 in its own batches, full recompute
  // rounds its own: last-bit differences, which a near-tie between two next tokens can turn into a
  // different greedy choice (it depends on the CPU's BLAS kernels: on one machine copy.rst.txt
  // flips at step 9 with a margin of a few hundredths of a logit). So: at least 3 of the 4
  // documents give the same 32 tokens, and any that does not diverges only at a near-tie of full
  // recompute's own distribution, after at least 8 equal tokens. A wrong block, position or head
  // moves the logits by whole units and fails both.
  double worst = 0;
  size_t exact = 0;
  for (const auto& d : kDocs) {
    const json j = generate(read_file(fs::path(kDocsDir) / d) + kQuestion, store_);
    ASSERT_TRUE(j.contains("tokens")) << d;
    const uint64_t doc_blocks = j["prompt_blocks"].get<uint64_t>();
    // Every full block of the templated document is stored; the document's last full block may
    // tokenize differently once the question follows it, so at least all blocks but that one hit.
    EXPECT_GE(j["prefix_hit_tokens"].get<uint64_t>(), 16 * (doc_blocks > 8 ? doc_blocks - 8 : 0)) << d << j.dump();
    EXPECT_GT(j["prefix_hit_tokens"].get<uint64_t>(), 0u) << d;
    EXPECT_EQ(j["blocks_failed"].get<uint64_t>(), 0u) << d;
    EXPECT_EQ(j["tokens"].size(), 32u) << d;
    if (j["tokens_match"].get<bool>()) {
      ++exact;
      EXPECT_EQ(j["greedy_match"].get<uint64_t>(), 32u) << d;
    } else {
      EXPECT_GE(j["greedy_match"].get<uint64_t>(), 8u) << d;
      EXPECT_LT(j["divergence_margin"].get<double>(), 0.25) << d << ": not a near-tie";
      std::printf("[ generate ] %s: diverges at step %llu, a near-tie of full recompute (margin %.3g)\n", d.c_str(),
                  (unsigned long long)j["greedy_match"].get<uint64_t>(), j["divergence_margin"].get<double>());
    }
    // Not zero: the cached path prefills only the suffix, so its fp32 sums run in another order,
    // and a last-bit difference can flip a bf16 rounding of a new K/V that later layers amplify
    // (the same happens between two full recomputes of different lengths).
    const double diff = j["first_token_max_logit_diff"].get<double>();
    EXPECT_LT(diff, 0.25) << d;
    worst = std::max(worst, diff);
    std::printf("[ generate ] %s: %llu prompt tokens, %llu hit, TTFT %.1f ms cached vs %.1f ms recompute, "
                "first-token max |logit diff| %.3g\n",
                d.c_str(), (unsigned long long)j["prompt_tokens"].get<uint64_t>(),
                (unsigned long long)j["prefix_hit_tokens"].get<uint64_t>(), j["ttft_cached_ms"].get<double>(),
                j["ttft_recompute_ms"].get<double>(), diff);
  }
  EXPECT_GE(exact, 3u) << "documents whose 32 cached tokens equal full recompute's";
  std::printf("[ generate ] %zu of %zu documents give the same 32 tokens; largest first-token logit difference %.3g\n",
              exact, kDocs.size(), worst);
}

TEST_F(Generate, PromptEndingMidBlockHitsItsFullBlocks) {
  // A prefix of a stored document, cut where its tokens end inside a block.
  const std::string full = read_file(fs::path(kDocsDir) / "copy.rst.txt");
  json j;
  uint64_t n = 0;
  // 1037 ends mid-block with this tokenizer (265 tokens); the others are there in case it does not.
  for (size_t cut : {1037, 1111, 1234, 1000}) {
    j = generate(full.substr(0, cut), store_);
    ASSERT_TRUE(j.contains("tokens"));
    n = j["prompt_tokens"].get<uint64_t>();
    if (n % 16 != 0) break;
  }
  ASSERT_NE(n % 16, 0u) << "no cut ended mid-block";
  // All full blocks but the one the cut may have re-tokenized hit; the partial block is computed.
  EXPECT_GE(j["prefix_hit_tokens"].get<uint64_t>(), (n / 16 - 1) * 16);
  EXPECT_LE(j["prefix_hit_tokens"].get<uint64_t>(), (n / 16) * 16);
  EXPECT_TRUE(j["tokens_match"].get<bool>()) << j.dump();
}

TEST_F(Generate, CorruptBlockIsRecomputedNeverUsed) {
  const fs::path copy = root_ / "store-corrupt";
  fs::copy(store_, copy, fs::copy_options::recursive);
  const std::string prompt = read_file(fs::path(kDocsDir) / "netrc.rst.txt") + kQuestion;
  // Flip one payload byte of block 5 of the prompt (its hash chain from the namespace's seed).
  ASSERT_EQ(ucm::test::corrupt_document_block(copy, "netrc.rst.txt", 5, 1000, 0x5a), "");
  const json j = generate(prompt, copy);
  ASSERT_TRUE(j.contains("tokens"));
  // The document's blocks are all stored (CachedPrefixGivesTheRecomputedTokens): the five before
  // the bad one are loaded, it is reported, and it and everything after it are recomputed.
  ASSERT_GT(j["prompt_blocks"].get<uint64_t>(), 10u);
  EXPECT_EQ(j["blocks_failed"].get<uint64_t>(), 1u) << j.dump();
  EXPECT_EQ(j["blocks_loaded"].get<uint64_t>(), 5u);
  EXPECT_EQ(j["prefix_hit_tokens"].get<uint64_t>(), 5u * 16);
  // The same 32 greedy tokens as full recompute of the same prompt in the same run.
  EXPECT_TRUE(j["tokens_match"].get<bool>()) << j.dump();
  EXPECT_EQ(j["greedy_match"].get<uint64_t>(), 32u);
}

TEST_F(Generate, SaveWritesBlocksTheNextRunFinds) {
  const fs::path fresh = root_ / "store-save";
  const std::string prompt = read_file(fs::path(kDocsDir) / "pwd.rst.txt").substr(0, 1500) + kQuestion;
  const json a = generate(prompt, fresh, "--save");
  ASSERT_TRUE(a.contains("tokens"));
  EXPECT_EQ(a["prefix_hit_tokens"].get<uint64_t>(), 0u);
  const uint64_t total = a["prompt_tokens"].get<uint64_t>() + 32 - 1;  // the last token is not fed back
  EXPECT_EQ(a["blocks_saved"].get<uint64_t>(), total / 16);
  const json b = generate(prompt, fresh);
  ASSERT_TRUE(b.contains("tokens"));
  EXPECT_EQ(b["prefix_hit_tokens"].get<uint64_t>(), (a["prompt_tokens"].get<uint64_t>() - 1) / 16 * 16);
  EXPECT_TRUE(b["tokens_match"].get<bool>());
  EXPECT_EQ(b["tokens"], a["tokens"]);
}

// Writes a retrieval YAML: the defaults (configs/retrieval.yaml) with `overrides` appended.
fs::path retrieval_config(const fs::path& dir, const std::string& name, const std::string& overrides) {
  std::string base = read_file(std::string(UCM_SOURCE_DIR) + "/configs/retrieval.yaml");
  // Later keys would be duplicates: drop the defaults' lines for the overridden keys.
  std::string out;
  std::istringstream in(base);
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    const std::string key = line.empty() || line[0] == '#' || colon == std::string::npos ? "" : line.substr(0, colon);
    if (!key.empty() && overrides.find(key + ":") != std::string::npos) continue;
    out += line + "\n";
  }
  const fs::path p = dir / (name + ".yaml");
  write_file(p, out + overrides);
  return p;
}

TEST_F(Generate, SparseDecodeWithEveryBlockSelectedIsDense) {
  // sparse_ratio 1: every block is selected on every layer, so the masked attention must give
  // the dense distributions (up to fp32 summation order) and the same greedy tokens.
  const fs::path cfg = retrieval_config(root_, "all", "sparse_ratio: 1.0\n");
  const json j = generate(read_file(fs::path(kDocsDir) / "copy.rst.txt") + kQuestion, store_,
                          "--no-recompute --sparse quest --retrieval-config " + shell_quote(cfg.string()));
  ASSERT_TRUE(j.contains("sparse")) << j.dump();
  const json& s = j["sparse"];
  EXPECT_EQ(s["steps"].get<uint64_t>(), 31u);
  EXPECT_DOUBLE_EQ(s["mean_selected_fraction"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(s["top1_agreement"].get<double>(), 1.0);
  EXPECT_LT(s["mean_kl"].get<double>(), 1e-6);
  EXPECT_EQ(s["greedy_match"].get<uint64_t>(), 32u);
}

TEST_F(Generate, SparseDecodeReadsStoredReprsAndRetrievalBeatsWindowsAlone) {
  // The same budget twice: k blocks chosen by each policy from the stored representations, and
  // the sink/local windows alone (k = sink + local). Retrieval must lose less than the windows.
  const std::string prompt = read_file(fs::path(kDocsDir) / "linecache.rst.txt") + kQuestion;
  const fs::path windows = retrieval_config(root_, "windows", "sparse_ratio: 0.0\nmin_blocks: 3\n");
  // 16 decode steps per run (five runs, each decoding sparse and dense): the means still separate
  // retrieval from the windows.
  const json w = generate(prompt, store_, "--no-recompute --sparse quest --retrieval-config " +
                                              shell_quote(windows.string()), 16);
  ASSERT_TRUE(w.contains("sparse")) << w.dump();
  const uint64_t n = w["sparse"]["context_blocks"].get<uint64_t>();
  ASSERT_GE(n, 40u);
  const double windows_kl = w["sparse"]["mean_kl"].get<double>();
  EXPECT_GT(windows_kl, 0.0);
  for (const char* policy : {"esa", "quest", "gsa", "psa"}) {
    const json j = generate(prompt, store_, std::string("--no-recompute --sparse ") + policy, 16);
    ASSERT_TRUE(j.contains("sparse")) << policy << j.dump();
    const json& s = j["sparse"];
    // The prompt's stored blocks give their representations; only the blocks past the hit are computed.
    EXPECT_EQ(s["repr_blocks_loaded"].get<uint64_t>(), j["prefix_hit_blocks"].get<uint64_t>()) << policy;
    EXPECT_EQ(s["repr_blocks_failed"].get<uint64_t>(), 0u) << policy;
    EXPECT_EQ(s["repr_blocks_loaded"].get<uint64_t>() + s["repr_blocks_computed"].get<uint64_t>(), n) << policy;
    const double frac = s["mean_selected_fraction"].get<double>();
    if (std::string(policy) == "psa") {
      EXPECT_LE(frac, 0.31) << policy;  // capped by the top-k budget
    } else {
      EXPECT_NEAR(frac, 0.3, 0.02) << policy;
    }
    EXPECT_GT(s["mean_kl"].get<double>(), 0.0) << policy << ": no block was dropped?";
    EXPECT_LT(s["mean_kl"].get<double>(), windows_kl) << policy;
    EXPECT_GE(s["top1_agreement"].get<double>(), w["sparse"]["top1_agreement"].get<double>()) << policy;
    std::printf("[ sparse ] %s: %.1f%% of %llu blocks, top-1 agreement %.3f, mean KL %.4f, greedy match %llu "
                "(windows alone: agreement %.3f, KL %.4f)\n",
                policy, 100 * frac, (unsigned long long)n, s["top1_agreement"].get<double>(),
                s["mean_kl"].get<double>(), (unsigned long long)s["greedy_match"].get<uint64_t>(),
                w["sparse"]["top1_agreement"].get<double>(), windows_kl);
  }
}

}  // namespace
