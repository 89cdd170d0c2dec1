// pipelines/generate/blend_engine.h: the CacheBlend prefill of the reference engine (docs/blend.md),
// through libucm's C ABI only (ucm/ucm.h, ucm/blend.h).
#pragma once
#include <string>
#include <vector>

#include "engine.h"
#include "store_client.h"
#include "ucm/blend.h"
#include "ucm/tok/tokenizer.h"

namespace ucm::generate {

/// One document of a blend prompt.
struct BlendDoc {
  std::string name;             ///< as given (corpus id or file)
  std::vector<int32_t> tokens;  ///< the document tokenized on its own (store_v1.md §4.4)
  size_t offset = 0;            ///< its first position in the prompt
};

/// chunk prefix ++ doc 1 ++ "\n\n" ++ doc 2 ... ++ doc n ++ question (each part tokenized apart).
struct BlendPrompt {
  std::vector<int32_t> chunk_prefix;
  std::vector<BlendDoc> docs;
  std::vector<int32_t> ids;
};

/// Resolves each name (a file, or a corpus id registered as chunk:<id> whose source is read) and
/// builds the prompt. InvalidArgument for a name that is neither; NotFound when the namespace
/// holds no chunks.
Status make_blend_prompt(const tok::Tokenizer& tk, const StoreClient& store, const std::vector<std::string>& names,
                         const std::string& question, BlendPrompt* out);

struct BlendPrefillStats {
  std::vector<std::string> docs_missing;
  uint64_t stored_tokens = 0, recomputed_tokens = 0, blocks_loaded = 0, blocks_failed = 0;
  double load_ms = 0;
  double relevance_ms = 0;  ///< the question's pass over the loaded cache (query-driven selection)
};

/// What the selection ranks the stored tokens by (docs/blend.md "Choosing the tokens"); each
/// score is also weighted by the position prior.
enum class BlendSelection {
  kRelevance,  ///< how much the question attends to the token (ucm_blend_select_relevant, no deviation)
  kDeviation,  ///< CacheBlend: the V deviation at the check layer (ucm_blend_select_weighted)
  kBoth,       ///< deviation x relevance
};
/// "relevance" | "deviation" | "both".
const char* selection_name(BlendSelection s);
/// InvalidArgument naming `option` for any other name.
Status parse_selection(const std::string& name, const std::string& option, BlendSelection* out);
/// 0 for kRelevance (nothing needs a layer over every token), 1 otherwise (CacheBlend's).
uint32_t default_check_layer(BlendSelection s);

/// How the blend prefill chooses the tokens it recomputes.
struct BlendSettings {
  double ratio = 0.15;  ///< share of the stored tokens recomputed (CacheBlend §4.3)
  BlendSelection selection = BlendSelection::kRelevance;
  uint32_t check_layer = 0;     ///< layers [0, check_layer) run over every token; selection there
  double position_decay = 128;  ///< the selections' prior (tokens); 0 = none
  double relevance_exponent = 2;  ///< ucm_blend_select_params::relevance_exponent
  /// `ucm eval blend --oracle` only: the full recompute's cache of the same prompt. Tokens are then
  /// chosen by how far their stored V is from the recomputed V over all the layers after the check
  /// layer (squared L2, each layer divided by its mean squared norm), which needs the full
  /// recompute blending avoids: an upper bound for selection by deviation, not a way to serve.
  const KvCache* oracle = nullptr;
};

/// InvalidArgument unless s can run on a model of n_layers: check_layer < n_layers, and >= 1
/// when the deviation is used (layer 0's stored and fresh V both come from the embedding alone).
Status check_blend_settings(const BlendSettings& s, int64_t n_layers);

/// InvalidArgument naming `option` unless decay is finite and >= 0 (what ucm_blend_select_weighted
/// accepts), so that a bad value fails before the model is loaded.
Status check_position_decay(double decay, const std::string& option);

/// The blend prefill: every document's stored chunk blocks loaded (a block that fails is left
/// to be computed), its keys moved by ucm_rope_shift to the document's position; for the
/// relevance selections, the question (the text after the last document) run over that cache
/// (LlamaModel::key_attention, stored and question rows only); then LlamaModel::blend with
/// ucm_blend_select_relevant choosing `s.ratio` of the stored tokens at s.check_layer. rope: the
/// namespace's (ucm_store_rope_params). out->ttft_ms runs from hashing to first token.
Status prefill_blend(const Engine& eng, const StoreClient& store, const ucm_rope_params& rope, const BlendPrompt& p,
                     const BlendSettings& s, int64_t capacity, Prefill* out, BlendPrefillStats* stats);

/// Full recompute (the reference decode of n_new tokens, logits kept) and prefix caching
/// (teacher-forced against it) of one blend prompt.
struct BlendBaselines {
  Decode ref;
  KvCache recompute_cache;  ///< full recompute's cache: rows [0, prompt) are the prompt's K/V
  double ttft_recompute_ms = 0, ttft_prefix_ms = 0, prefix_served_fraction = 0;
  Agreement prefix;
};
Status measure_baselines(const Engine& eng, const BlendPrompt& p, int64_t capacity, uint32_t n_new,
                         BlendBaselines* out);

/// The blend prefill of p with s, then teacher-forced (against ref) and free-running decodes.
struct BlendOutcome {
  BlendPrefillStats stats;
  double ttft_ms = 0, served_fraction = 0;
  Agreement vs_ref;
  uint64_t greedy_match = 0;
  std::vector<int32_t> tokens;
};
Status measure_blend(const Engine& eng, const StoreClient& store, const ucm_rope_params& rope, const BlendPrompt& p,
                     const Decode& ref, const BlendSettings& s, int64_t capacity, BlendOutcome* out);

/// The namespace's RoPE (ucm_store_rope_params), checked against the model: NotSupported for a
/// scaling the library cannot move exactly, InvalidArgument when it is another model's.
Status blend_rope(const StoreClient& store, const model::LlamaModel& m, ucm_rope_params* rope);

}  // namespace ucm::generate
