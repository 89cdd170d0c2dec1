// pipelines/generate/report.cc: GenerateReport as JSON (--json) and as text.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

#include "ucm/generate/generate.h"

namespace ucm::generate {

std::string GenerateReport::to_json() const {
  nlohmann::json j = {
      {"namespace_id", namespace_id},
      {"namespace_found", namespace_found},
      {"prompt_tokens", prompt_tokens},
      {"block_size", block_size},
      {"prompt_blocks", prompt_blocks},
      {"prefix_hit_blocks", prefix_hit_blocks},
      {"prefix_hit_tokens", prefix_hit_tokens},
      {"blocks_loaded", blocks_loaded},
      {"blocks_failed", blocks_failed},
      {"ttft_cached_ms", ttft_cached_ms},
      {"load_ms", load_ms},
      {"prefill_cached_ms", prefill_cached_ms},
      {"ttft_recompute_ms", ttft_recompute_ms},
      {"ttft_speedup", ttft_speedup},
      {"new_tokens", new_tokens},
      {"decode_tokens_per_second", decode_tokens_per_second},
      {"tokens", tokens},
      {"recompute_tokens", recompute_tokens},
      {"tokens_match", tokens_match},
      {"greedy_match", greedy_match},
      {"first_token_max_logit_diff", first_token_max_logit_diff},
      {"divergence_margin", divergence_margin},
      {"blocks_saved", blocks_saved},
      {"text", text},
  };
  if (has_sparse)
    j["sparse"] = {{"policy", sparse.policy},
                   {"steps", sparse.steps},
                   {"top1_agreement", sparse.top1_agreement},
                   {"mean_kl", sparse.mean_kl},
                   {"greedy_match", sparse.greedy_match},
                   {"mean_selected_fraction", sparse.mean_selected_fraction},
                   {"context_blocks", sparse.context_blocks},
                   {"repr_blocks_loaded", sparse.repr_blocks_loaded},
                   {"repr_blocks_computed", sparse.repr_blocks_computed},
                   {"repr_blocks_failed", sparse.repr_blocks_failed},
                   {"tokens", sparse.tokens}};
  return j.dump();
}

std::string GenerateReport::to_text() const {
  std::ostringstream s;
  char buf[256];
  s << text << "\n---\n";
  std::snprintf(buf, sizeof buf, "prompt %llu tokens (%llu full blocks of %llu); prefix hit %llu tokens",
                (unsigned long long)prompt_tokens, (unsigned long long)prompt_blocks, (unsigned long long)block_size,
                (unsigned long long)prefix_hit_tokens);
  s << buf;
  if (blocks_failed) s << " (" << blocks_failed << " blocks failed to load: recomputed)";
  s << "\n";
  if (ttft_cached_ms > 0) {
    std::snprintf(buf, sizeof buf, "TTFT %.1f ms with the cache (load %.1f ms, prefill %.1f ms)", ttft_cached_ms,
                  load_ms, prefill_cached_ms);
    s << buf;
    if (ttft_recompute_ms > 0) {
      std::snprintf(buf, sizeof buf, ", %.1f ms full recompute: %.1fx", ttft_recompute_ms, ttft_speedup);
      s << buf;
    }
    s << "\n";
  } else if (ttft_recompute_ms > 0) {
    std::snprintf(buf, sizeof buf, "TTFT %.1f ms (full recompute)\n", ttft_recompute_ms);
    s << buf;
  }
  std::snprintf(buf, sizeof buf, "decode %llu tokens, %.1f tokens/s\n", (unsigned long long)new_tokens,
                decode_tokens_per_second);
  s << buf;
  if (!recompute_tokens.empty()) {
    std::snprintf(buf, sizeof buf, "cached vs recompute: %s (greedy match %llu of %zu), first-token max |logit diff| %.3g\n",
                  tokens_match ? "same tokens" : "DIFFERENT tokens", (unsigned long long)greedy_match,
                  recompute_tokens.size(), first_token_max_logit_diff);
    s << buf;
  }
  if (blocks_saved) s << "saved " << blocks_saved << " new blocks\n";
  if (has_sparse) {
    std::snprintf(buf, sizeof buf,
                  "sparse %s: top-1 agreement %.3f, mean KL %.4f nats over %llu steps, greedy match %llu, "
                  "%.1f%% of %llu blocks attended\n",
                  sparse.policy.c_str(), sparse.top1_agreement, sparse.mean_kl, (unsigned long long)sparse.steps,
                  (unsigned long long)sparse.greedy_match, 100 * sparse.mean_selected_fraction,
                  (unsigned long long)sparse.context_blocks);
    s << buf;
  }
  return s.str();
}

}  // namespace ucm::generate
