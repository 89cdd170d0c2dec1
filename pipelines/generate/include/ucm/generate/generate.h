// `ucm generate`: the reference engine. It serves one prompt the way an inference server with a
// ucm store does, using the store only through libucm's C ABI (ucm/ucm.h, ucm/retrieval.h):
//   1. tokenize the prompt (template applied), hash its full blocks (ucm_hash_blocks),
//   2. look up the cached prefix (ucm_store_lookup) and load it into its own paged KV cache
//      (ucm_store_load, UCM_DEST_PAGED); a block that fails to load is recomputed, never used,
//   3. prefill the rest, decode greedily,
//   4. with --save, dump the new full blocks (ucm_store_dump: the online write path).
// It measures TTFT with the cache against full recompute in the same run, and checks that both
// give the same tokens. Both paths keep their KV cache in the namespace dtype (bf16 by default).
// Reference: docs/generate.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/status.h"

namespace ucm::generate {

/// What every run of the engine needs: the model, the store, the prompt, the decode length.
struct CommonOptions {
  std::string model_dir;       ///< Hugging Face model directory
  /// The runner's GEMM dtype: "fp32" (default: the reference engine is the reference), "bf16" or
  /// "auto" (docs/model.md, "Compute dtype"). Cached and recomputed paths use the same.
  std::string compute_dtype = "fp32";
  std::string tokenizer_file;  ///< default <model_dir>/tokenizer.json
  std::string store;           ///< store directory ("" = none: full recompute only)
  std::string prompt;          ///< prompt text (or prompt_file)
  std::string prompt_file;
  std::string template_file;   ///< prompt template (configs/template_chat.txt), as precompute's
  std::string precompute_config;  ///< YAML of precompute (fingerprint: block_size, dtype, ...)
  std::string namespace_name;  ///< namespace by name or 32-hex id ("" = this model's fingerprint)
  uint32_t max_new_tokens = 32;
  bool stop_at_eos = true;     ///< stop at the model's eos token
};

/// Dense serving (the default): the cached prefix, then full recompute to compare.
struct DenseOptions {
  bool no_cache = false;       ///< full recompute only (no lookup, no load)
  bool recompute = true;       ///< also run full recompute to compare (TTFT ratio, tokens)
  bool save = false;           ///< dump the new full blocks into the store
};

/// --sparse: block-sparse decode against dense decode on the same prompt.
struct SparseOptions {
  std::string policy;          ///< "" = dense decode only; esa | quest | gsa | psa
  std::string retrieval_config;///< YAML of the retriever (configs/retrieval.yaml)
};

/// --blend (CacheBlend, docs/blend.md): the prompt is the namespace's chunk prefix, the
/// documents (separated by a blank line), then the prompt text (the question, used as given).
struct BlendOptions {
  bool enabled = false;
  std::vector<std::string> docs;  ///< corpus ids (registered as chunk:<id>) or files
  double recompute_ratio = 0.15;  ///< share of the stored tokens recomputed (CacheBlend §4.3: 15%)
  /// What ranks the stored tokens: "relevance" (how much the question attends to them, the
  /// default), "deviation" (CacheBlend's V deviation at the check layer) or "both".
  std::string selection = "relevance";
  int64_t check_layer = -1;       ///< layers [0, check_layer) run over every token; -1: 0 for relevance, else 1
  double position_decay = 128;    ///< selection prior: score * exp(-position in document / this); 0 = none
  double relevance_exponent = 2;  ///< score * relevance^this (relevance and both); 0 = relevance ignored
};

/// `ucm generate`, as cmd/generate.cc parses it: the common part, and one part per mode.
/// run_generate reads common, dense and sparse; run_blend (--blend) reads common and blend.
struct GenerateOptions {
  CommonOptions common;
  DenseOptions dense;
  SparseOptions sparse;
  BlendOptions blend;
};

/// Sparse decode against dense decode on the same prompt: teacher-forced top-1 agreement, mean
/// KL(p_dense || p_sparse) and the greedy exact-match length (docs/generate.md, "Sparse decode").
struct SparseReport {
  std::string policy;
  uint64_t steps = 0;
  double top1_agreement = 0;   ///< teacher-forced: fraction of steps whose argmax = dense token
  double mean_kl = 0;          ///< mean KL(p_dense || p_sparse) over the teacher-forced steps (nats)
  uint64_t greedy_match = 0;   ///< free-running sparse tokens equal to dense before the first difference
  double mean_selected_fraction = 0;  ///< blocks attended / context blocks, sparse layers, mean
  uint64_t context_blocks = 0;
  uint64_t repr_blocks_loaded = 0, repr_blocks_computed = 0, repr_blocks_failed = 0;
  std::vector<int32_t> tokens; ///< the free-running sparse tokens
};

struct GenerateReport {
  std::string namespace_id;
  bool namespace_found = false;
  uint64_t prompt_tokens = 0, block_size = 0, prompt_blocks = 0;
  uint64_t prefix_hit_blocks = 0, prefix_hit_tokens = 0;  ///< blocks present (lookup), tokens used
  uint64_t blocks_loaded = 0, blocks_failed = 0;  ///< failed: not used; it and what follows recomputed
  double ttft_cached_ms = 0, load_ms = 0, prefill_cached_ms = 0;
  double ttft_recompute_ms = 0;
  double ttft_speedup = 0;     ///< ttft_recompute_ms / ttft_cached_ms
  uint64_t new_tokens = 0;
  double decode_tokens_per_second = 0;
  std::vector<int32_t> tokens;            ///< generated (cached path, or recompute with no_cache)
  std::vector<int32_t> recompute_tokens;  ///< generated by full recompute
  bool tokens_match = false;              ///< both paths gave the same tokens
  uint64_t greedy_match = 0;              ///< tokens equal before the first difference
  double first_token_max_logit_diff = 0;  ///< max |logits_cached - logits_recompute|, 1st token
  /// When the tokens differ: at the first differing step, full recompute's logit of its token
  /// minus its logit of the cached path's token (a near-tie is a small margin), else 0.
  double divergence_margin = 0;
  std::string text;
  uint64_t blocks_saved = 0;              ///< --save: new blocks dumped
  bool has_sparse = false;
  SparseReport sparse;

  std::string to_json() const;
  std::string to_text() const;
};

/// `ucm generate --blend`: the prompt served three ways in one run, each to its first token and
/// then 32 (max_new_tokens) greedy tokens: full recompute (the reference), prefix caching only,
/// and CacheBlend (stored documents moved to their positions, ratio of their tokens recomputed).
struct BlendReport {
  std::string namespace_id;
  std::vector<std::string> docs;           ///< as given
  std::vector<std::string> docs_missing;   ///< not stored (prefilled normally)
  uint64_t prompt_tokens = 0, chunk_prefix_tokens = 0, doc_tokens = 0;
  double recompute_ratio = 0;
  std::string selection;
  uint32_t check_layer = 0;
  double position_decay = 0, relevance_exponent = 0;
  double relevance_ms = 0;          ///< the question's pass over the loaded cache (part of TTFT)
  uint64_t stored_tokens = 0;       ///< prompt tokens whose K/V came from the store (all layers)
  uint64_t recomputed_tokens = 0;   ///< of those, recomputed after the check layer
  uint64_t chunk_blocks_loaded = 0, chunk_blocks_failed = 0;  ///< failed: recomputed, never used
  double served_fraction = 0;       ///< (stored - recomputed) / prompt tokens
  double prefix_served_fraction = 0;///< prefix caching: hit tokens / prompt tokens
  double ttft_blend_ms = 0, load_ms = 0, ttft_prefix_ms = 0, ttft_recompute_ms = 0;
  // Against full recompute, teacher-forced over the new tokens (docs/blend.md):
  uint64_t steps = 0;
  double top1_agreement = 0, mean_kl = 0;
  double prefix_top1_agreement = 0, prefix_mean_kl = 0;
  uint64_t greedy_match = 0;         ///< free-running blend tokens equal to recompute's
  std::vector<int32_t> tokens, recompute_tokens;
  std::string text;

  std::string to_json() const;
  std::string to_text() const;
};
/// Runs one blended prompt (c.prompt is the question). c.store is required, and must hold the
/// namespace (NotFound naming the store and the fingerprint otherwise); c.compute_dtype is not
/// used (fp32). Errors: InvalidArgument (options, model, an unknown document, a RoPE that cannot
/// be moved, prompt too long), the store's codes.
Status run_blend(const CommonOptions& c, const BlendOptions& b, BlendReport* report);

/// Runs one prompt (o.blend is not read: see run_blend). A store that lacks the namespace misses
/// every block (a warning), except with --save (registered) and --sparse (NotFound naming the
/// store and the fingerprint); a namespace asked for by name must exist (NotFound). Errors:
/// InvalidArgument (options, model, tokenizer, prompt too long), the store's codes (opening,
/// loading, saving).
Status run_generate(const GenerateOptions& o, GenerateReport* report);

/// `ucm bench generate`: TTFT with the cache against full recompute for cached prefixes of each
/// length in `prefix_tokens`, in one run (docs/benchmarks.md). `store` must already hold
/// `corpus_file`, precomputed with `template_file` and precompute's default fingerprint options
/// (cmd/bench_generate.cc runs that precompute first). NotFound when it holds no namespace of the
/// model; InvalidArgument for bad options or a document shorter than the longest prefix.
struct BenchGenerateOptions {
  std::string model_dir, tokenizer_file, store, template_file, corpus_file;
  std::vector<uint32_t> prefix_tokens = {1024, 4096, 8192};
  uint32_t repeats = 3;  ///< runs per length; the median is reported
};
struct BenchGeneratePoint {
  uint32_t prefix_tokens = 0, prompt_tokens = 0, hit_tokens = 0;
  double ttft_cached_ms = 0, ttft_recompute_ms = 0, speedup = 0, load_ms = 0;
  bool tokens_match = false;
};
Status bench_generate(const BenchGenerateOptions& o, std::vector<BenchGeneratePoint>* out);

}  // namespace ucm::generate
