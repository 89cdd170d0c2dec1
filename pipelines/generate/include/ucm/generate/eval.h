// `ucm eval retrieval`: how much of the true attention the block-sparse policies keep, on real
// documents and real queries (docs/retrieval.md gives the metric: attention-mass recall R at a
// block budget against the oracle R*, and k_tau).
//
// For each document (template applied, as precompute stores it) a context of C tokens (C a
// multiple of the block size, 2K to 8K) is followed by Q held-out continuation tokens. The model
// runs the context, then the continuation one token at a time; at each continuation step and
// layer the post-RoPE query q of each query head gives the true attention over the context keys,
// p = softmax(q K^T / sqrt(d)) restricted to the context [0, C) and renormalised, and the block
// masses m_j = sum of p over block j. The representations of the context blocks come from the
// store (ucm_store_load_repr; computed from the KV cache for blocks the store lacks). For a
// selection S of a KV head, the recall of each of its query heads is R = sum_{j in S} m_j; R is
// averaged over query heads, steps and documents.
//   * fixed budgets: k = ceil(f n) blocks (windows included) for each fraction f;
//   * oracle R*(k): per KV head, the k blocks of largest group mass (sum over its query heads);
//   * k_tau: the smallest k with R >= tau, per query head (oracle: from the sorted masses);
//   * PSA: its own block count at each tau.
// Results per layer, and averaged over layers >= 2 (layers 0 and 1 are reported apart).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/status.h"

namespace ucm::generate {

struct EvalRetrievalOptions {
  std::string model_dir, tokenizer_file, store, template_file;
  std::string corpus = "/usr/share/doc/python3.11/html/_sources";
  std::string corpus_suffix = ".rst.txt";
  std::vector<std::string> documents;  ///< relative paths under corpus; empty = the first that fit
  uint32_t max_documents = 6;
  uint32_t min_context = 2048, max_context = 8192;  ///< tokens
  uint32_t queries = 8;                             ///< held-out continuation positions per document
  std::vector<double> budgets = {0.025, 0.05, 0.1, 0.2, 0.3};  ///< fractions of the context blocks
  std::vector<double> taus = {0.80, 0.90, 0.95, 0.98};
  std::vector<std::string> policies = {"esa", "quest", "gsa", "psa"};
  std::string retrieval_config;  ///< configs/retrieval.yaml (windows); budgets/taus set here
  std::string csv;               ///< write the per-layer table here ("" = none)
};

struct EvalRetrievalResult {
  struct Row {               ///< one (policy, budget or tau, layer group)
    std::string policy;      ///< esa | quest | gsa | psa | oracle
    std::string group;       ///< "layer0", "layer1", "layers2+" or "l<N>" (one layer)
    double budget = 0;       ///< fraction of blocks (PSA: tau)
    double blocks = 0;       ///< mean blocks selected
    double recall = 0;       ///< mean R
    double oracle = 0;       ///< mean R* at the same number of blocks
  };
  struct KTau {
    std::string policy, group;
    double tau = 0;
    double blocks = 0;       ///< mean k_tau in blocks
    double fraction = 0;     ///< mean k_tau / n
  };
  std::vector<std::string> documents;
  std::vector<uint32_t> contexts;  ///< C per document
  uint64_t queries = 0;            ///< (document, step) pairs
  std::vector<Row> rows;
  std::vector<KTau> k_tau;
  std::string to_json() const;
  std::string to_text() const;
};

Status eval_retrieval(const EvalRetrievalOptions& o, EvalRetrievalResult* out);

/// `ucm eval blend` (docs/blend.md): RAG prompts of k stored documents (chunks) plus a question,
/// served by full recompute, by prefix caching and by CacheBlend at each recompute ratio, all in
/// the same run; quality is measured against full recompute over new_tokens teacher-forced steps.
struct EvalBlendOptions {
  std::string model_dir, tokenizer_file, store, precompute_config;
  std::vector<std::string> documents;       ///< document files, in order (stored with precompute --chunks)
  std::vector<uint32_t> sizes = {2, 4, 8};  ///< documents per prompt
  /// Prompts per size (consecutive windows of the documents): one number for every size, or one
  /// per size, in the order of sizes.
  std::vector<uint32_t> prompts = {2};
  std::vector<double> ratios = {0.0, 0.05, 0.15, 0.30};
  /// Selections compared ("relevance", "deviation", "both": BlendSelection), each with every
  /// position decay; a row's method is "blend-<selection>".
  std::vector<std::string> selections = {"relevance", "deviation"};
  int64_t check_layer = -1;  ///< -1: each selection's default (0 for relevance, 1 otherwise)
  std::vector<double> position_decays = {128};  ///< selection priors compared (0 = none)
  double relevance_exponent = 2;
  /// Also an "oracle" row per ratio: tokens chosen by their deviation over all later layers,
  /// measured against the full recompute (BlendSettings::oracle): what selection could reach.
  bool oracle = false;
  uint32_t new_tokens = 32;
  std::string question =
      "\n\nWhich of the documents above is the most useful to a new Python programmer, and why?<|im_end|>\n"
      "<|im_start|>assistant\n";
  std::string csv, png;  ///< outputs ("" = none); the PNG is drawn with gnuplot
  std::string from_csv;  ///< set: no run; the rows are read from this CSV (of --csv) and the PNG drawn
  bool progress = false;
};

struct EvalBlendResult {
  struct Row {                 ///< one (prompt, method)
    uint32_t size = 0, prompt = 0;
    std::string method;        ///< "recompute" | "prefix" | "blend-<selection>" | "oracle"
    double ratio = 0;          ///< blend: recompute ratio
    double position_decay = 0; ///< blend: the selection's prior (ucm_blend_select_weighted)
    uint64_t prompt_tokens = 0;
    double ttft_ms = 0, served_fraction = 0, top1_agreement = 0, mean_kl = 0;
    uint64_t greedy_match = 0, chunk_blocks_failed = 0;
    /// blend rows: tokens of the prompt whose K/V came from stored chunks, and how many of them
    /// were recomputed (ratio x stored, rounded); the layer the selection ran at; the question's
    /// pass over the loaded cache (relevance selections; 0 otherwise), ms. 0 in the mean rows and
    /// the CSV.
    uint64_t stored_tokens = 0, recomputed_tokens = 0;
    uint32_t check_layer = 0;
    double relevance_ms = 0;
  };
  std::vector<Row> rows;       ///< per prompt
  std::vector<Row> means;      ///< per (size, method, ratio, decay): means over the prompts (prompt = count)
  std::string to_json() const;
  std::string to_text() const;
};

Status eval_blend(const EvalBlendOptions& o, EvalBlendResult* out);

}  // namespace ucm::generate
