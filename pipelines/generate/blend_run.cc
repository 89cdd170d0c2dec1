// pipelines/generate/blend_run.cc: run_blend and BlendReport (see ucm/generate/generate.h).
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "blend_engine.h"
#include "generate_internal.h"
#include "session.h"
#include "ucm/generate/generate.h"

namespace ucm::generate {

using namespace detail;

Status blend_rope(const StoreClient& store, const model::LlamaModel& m, ucm_rope_params* rope) {
  const auto& mc = m.config();
  UCM_RETURN_IF_ERROR(store.rope_params(rope));
  if (int64_t(rope->head_dim) != mc.head_dim || std::abs(rope->theta - mc.rope_theta) > 1e-9 * mc.rope_theta)
    return Status::InvalidArgument("the namespace's RoPE (theta " + std::to_string(rope->theta) + ", head_dim " +
                                   std::to_string(rope->head_dim) + ") is not this model's (theta " +
                                   std::to_string(mc.rope_theta) + ", head_dim " + std::to_string(mc.head_dim) +
                                   "): its chunks were made by another model");
  return Status::OK();
}

Status check_position_decay(double decay, const std::string& option) {
  if (decay >= 0 && !std::isinf(decay)) return Status::OK();
  return Status::InvalidArgument(option + ": " + std::to_string(decay) +
                                 " is not a finite number >= 0 (the selection's position prior; 0: none)");
}

Status measure_baselines(const Engine& eng, const BlendPrompt& p, int64_t capacity, uint32_t n_new,
                         BlendBaselines* out) {
  *out = BlendBaselines{};
  Prefill full;
  UCM_RETURN_IF_ERROR(eng.prefill_recompute(p.ids, capacity, &full));
  out->ttft_recompute_ms = full.ttft_ms;
  out->recompute_cache = full.cache;  // shares the tensors; decoding writes rows past the prompt only
  eng.decode(&full, n_new, -1, nullptr, {}, true, &out->ref);
  Prefill pre;
  UCM_RETURN_IF_ERROR(eng.prefill_cached(p.ids, capacity, &pre));
  out->ttft_prefix_ms = pre.ttft_ms;
  out->prefix_served_fraction = double(pre.used_blocks * eng.block_size()) / double(p.ids.size());
  Decode tf;
  eng.decode(&pre, uint32_t(out->ref.tokens.size()), -1, &out->ref.tokens, {}, true, &tf);
  out->prefix = compare_decodes(out->ref, tf);
  return Status::OK();
}

Status measure_blend(const Engine& eng, const StoreClient& store, const ucm_rope_params& rope, const BlendPrompt& p,
                     const Decode& ref, const BlendSettings& s, int64_t capacity, BlendOutcome* out) {
  *out = BlendOutcome{};
  Prefill bl;
  UCM_RETURN_IF_ERROR(prefill_blend(eng, store, rope, p, s, capacity, &bl, &out->stats));
  out->ttft_ms = bl.ttft_ms;
  out->served_fraction = double(out->stats.stored_tokens - out->stats.recomputed_tokens) / double(p.ids.size());
  // Teacher-forced against the reference, then free-running from a copy of the blend cache.
  Prefill fr = bl;
  fr.cache.k.clear();
  fr.cache.v.clear();
  for (const auto& t : bl.cache.k) fr.cache.k.push_back(t.clone());
  for (const auto& t : bl.cache.v) fr.cache.v.push_back(t.clone());
  Decode tf;
  eng.decode(&bl, uint32_t(ref.tokens.size()), -1, &ref.tokens, {}, true, &tf);
  out->vs_ref = compare_decodes(ref, tf);
  Decode free_run;
  eng.decode(&fr, uint32_t(ref.tokens.size()), -1, nullptr, {}, false, &free_run);
  out->tokens = free_run.tokens;
  out->greedy_match = greedy_match(out->tokens, ref.tokens);
  return Status::OK();
}

Status run_blend(const CommonOptions& c, const BlendOptions& bo, BlendReport* r) {
  *r = BlendReport{};
  r->docs = bo.docs;
  r->recompute_ratio = bo.recompute_ratio;
  r->position_decay = bo.position_decay;
  r->relevance_exponent = bo.relevance_exponent;
  if (c.store.empty()) return Status::InvalidArgument("--blend needs --store (the documents' chunks come from it)");
  if (bo.docs.empty()) return Status::InvalidArgument("--blend needs --docs ID,ID,... (corpus ids or files)");
  if (!(bo.recompute_ratio >= 0 && bo.recompute_ratio <= 1))
    return Status::InvalidArgument("--recompute-ratio must be in [0, 1]");
  BlendSettings bs;
  bs.ratio = bo.recompute_ratio;
  UCM_RETURN_IF_ERROR(parse_selection(bo.selection, "--selection", &bs.selection));
  if (bo.check_layer < -1) return Status::InvalidArgument("--check-layer must be >= 0");
  bs.check_layer = bo.check_layer < 0 ? default_check_layer(bs.selection) : uint32_t(bo.check_layer);
  bs.position_decay = bo.position_decay;
  bs.relevance_exponent = bo.relevance_exponent;
  r->selection = selection_name(bs.selection);
  r->check_layer = bs.check_layer;
  UCM_RETURN_IF_ERROR(check_blend_settings(bs, std::numeric_limits<int64_t>::max()));  // before the model loads
  Session s;
  // The default compute dtype (fp32): --compute-dtype is not used with --blend.
  SessionOptions so = session_options(c);
  so.precompute_config = c.precompute_config;
  so.namespace_name = c.namespace_name;
  UCM_RETURN_IF_ERROR(s.open(so));
  UCM_RETURN_IF_ERROR(check_blend_settings(bs, s.model().config().num_hidden_layers));
  const StoreClient& store = *s.store();
  r->namespace_id = store.ns_hex();
  ucm_rope_params rope;
  UCM_RETURN_IF_ERROR(blend_rope(store, s.model(), &rope));
  std::string question;
  UCM_RETURN_IF_ERROR(prompt_text(c.prompt, c.prompt_file, "question", &question));
  BlendPrompt bp;
  UCM_RETURN_IF_ERROR(make_blend_prompt(s.tokenizer(), store, bo.docs, question, &bp));
  r->prompt_tokens = bp.ids.size();
  r->chunk_prefix_tokens = bp.chunk_prefix.size();
  for (const auto& d : bp.docs) r->doc_tokens += d.tokens.size();
  const int64_t capacity = int64_t(bp.ids.size()) + c.max_new_tokens;
  UCM_RETURN_IF_ERROR(s.check_capacity(bp.ids.size(), c.max_new_tokens));
  const Engine eng = s.engine();
  BlendBaselines base;
  UCM_RETURN_IF_ERROR(measure_baselines(eng, bp, capacity, c.max_new_tokens, &base));
  r->ttft_recompute_ms = base.ttft_recompute_ms;
  r->recompute_tokens = base.ref.tokens;
  r->ttft_prefix_ms = base.ttft_prefix_ms;
  r->prefix_served_fraction = base.prefix_served_fraction;
  r->prefix_top1_agreement = base.prefix.top1_agreement;
  r->prefix_mean_kl = base.prefix.mean_kl;
  BlendOutcome b;
  UCM_RETURN_IF_ERROR(measure_blend(eng, store, rope, bp, base.ref, bs, capacity, &b));
  r->ttft_blend_ms = b.ttft_ms;
  r->load_ms = b.stats.load_ms;
  r->relevance_ms = b.stats.relevance_ms;
  r->docs_missing = b.stats.docs_missing;
  r->stored_tokens = b.stats.stored_tokens;
  r->recomputed_tokens = b.stats.recomputed_tokens;
  r->chunk_blocks_loaded = b.stats.blocks_loaded;
  r->chunk_blocks_failed = b.stats.blocks_failed;
  r->served_fraction = b.served_fraction;
  r->steps = b.vs_ref.steps;
  r->top1_agreement = b.vs_ref.top1_agreement;
  r->mean_kl = b.vs_ref.mean_kl;
  r->tokens = b.tokens;
  r->greedy_match = b.greedy_match;
  r->text = s.tokenizer().decode(r->tokens, true);
  return Status::OK();
}

std::string BlendReport::to_json() const {
  nlohmann::ordered_json j = {{"namespace_id", namespace_id},
                              {"docs", docs},
                              {"docs_missing", docs_missing},
                              {"prompt_tokens", prompt_tokens},
                              {"chunk_prefix_tokens", chunk_prefix_tokens},
                              {"doc_tokens", doc_tokens},
                              {"recompute_ratio", recompute_ratio},
                              {"selection", selection},
                              {"check_layer", check_layer},
                              {"position_decay", position_decay},
                              {"relevance_exponent", relevance_exponent},
                              {"stored_tokens", stored_tokens},
                              {"recomputed_tokens", recomputed_tokens},
                              {"chunk_blocks_loaded", chunk_blocks_loaded},
                              {"chunk_blocks_failed", chunk_blocks_failed},
                              {"served_fraction", served_fraction},
                              {"prefix_served_fraction", prefix_served_fraction},
                              {"ttft_blend_ms", ttft_blend_ms},
                              {"load_ms", load_ms},
                              {"relevance_ms", relevance_ms},
                              {"ttft_prefix_ms", ttft_prefix_ms},
                              {"ttft_recompute_ms", ttft_recompute_ms},
                              {"steps", steps},
                              {"top1_agreement", top1_agreement},
                              {"mean_kl", mean_kl},
                              {"prefix_top1_agreement", prefix_top1_agreement},
                              {"prefix_mean_kl", prefix_mean_kl},
                              {"greedy_match", greedy_match},
                              {"tokens", tokens},
                              {"recompute_tokens", recompute_tokens},
                              {"text", text}};
  return j.dump(2);
}

std::string BlendReport::to_text() const {
  std::ostringstream s;
  char buf[512];
  s << text << "\n---\n";
  std::snprintf(buf, sizeof buf,
                "prompt %llu tokens: chunk prefix %llu, %zu documents (%llu tokens, %zu not stored), question\n",
                (unsigned long long)prompt_tokens, (unsigned long long)chunk_prefix_tokens, docs.size(),
                (unsigned long long)doc_tokens, docs_missing.size());
  s << buf;
  std::snprintf(buf, sizeof buf,
                "served from the store: blend %.1f%% (%llu stored, %llu recomputed at %.0f%%, selection %s, "
                "check layer %u, position decay %g, relevance exponent %g), prefix caching %.1f%%\n",
                100 * served_fraction, (unsigned long long)stored_tokens, (unsigned long long)recomputed_tokens,
                100 * recompute_ratio, selection.c_str(), check_layer, position_decay, relevance_exponent,
                100 * prefix_served_fraction);
  s << buf;
  if (chunk_blocks_failed) s << chunk_blocks_failed << " chunk blocks failed to load: their tokens were recomputed\n";
  std::snprintf(buf, sizeof buf,
                "TTFT blend %.1f ms (load %.1f ms, relevance %.1f ms), prefix caching %.1f ms, full recompute %.1f ms: %.2fx vs prefix, "
                "%.2fx vs recompute\n",
                ttft_blend_ms, load_ms, relevance_ms, ttft_prefix_ms, ttft_recompute_ms,
                ttft_blend_ms > 0 ? ttft_prefix_ms / ttft_blend_ms : 0,
                ttft_blend_ms > 0 ? ttft_recompute_ms / ttft_blend_ms : 0);
  s << buf;
  std::snprintf(buf, sizeof buf,
                "vs full recompute over %llu steps: blend top-1 agreement %.3f, mean KL %.4f, greedy match %llu; "
                "prefix caching %.3f, %.4f\n",
                (unsigned long long)steps, top1_agreement, mean_kl, (unsigned long long)greedy_match,
                prefix_top1_agreement, prefix_mean_kl);
  s << buf;
  return s.str();
}

}  // namespace ucm::generate
