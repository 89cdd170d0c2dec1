// pipelines/generate/generate.cc: run_generate (see ucm/generate/generate.h).
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine.h"
#include "generate_internal.h"
#include "session.h"
#include "sparse.h"
#include "ucm/corpus/corpus.h"
#include "ucm/generate/generate.h"
#include "ucm/tok/tokenizer.h"

namespace ucm::generate {

namespace fs = std::filesystem;

namespace detail {

Status prompt_text(const std::string& prompt, const std::string& prompt_file, const char* what, std::string* out) {
  *out = prompt;
  if (!prompt_file.empty()) {
    std::ifstream f(prompt_file, std::ios::binary);
    if (!f) return Status::InvalidArgument("cannot read prompt file " + prompt_file);
    std::stringstream ss;
    ss << f.rdbuf();
    *out = ss.str();
  }
  if (out->empty())
    return Status::InvalidArgument(std::string("empty ") + what + ": pass --prompt TEXT or --prompt-file FILE");
  return Status::OK();
}

torch::ScalarType torch_dtype_of(const std::string& dtype) {
  return dtype == "bf16" ? torch::kBFloat16 : dtype == "fp16" ? torch::kHalf : torch::kFloat;
}

std::vector<int32_t> prompt_ids(const tok::Tokenizer& t, const std::string& template_file, const std::string& prompt) {
  corpus::Template tmpl;
  if (!template_file.empty()) tmpl = corpus::Template::from_file(template_file);
  return t.encode(tmpl.apply(prompt));
}

}  // namespace detail

using namespace detail;

Status run_generate(const GenerateOptions& o, GenerateReport* r) {
  *r = GenerateReport{};
  const CommonOptions& c = o.common;
  std::string prompt;
  UCM_RETURN_IF_ERROR(prompt_text(c.prompt, c.prompt_file, "prompt", &prompt));
  if (o.dense.no_cache && o.dense.save) return Status::InvalidArgument("--save needs the store: it cannot go with --no-cache");
  if (!o.sparse.policy.empty() && c.store.empty())
    return Status::InvalidArgument("--sparse needs --store (the block representations come from it)");
  if (!o.sparse.policy.empty() && o.dense.no_cache)
    return Status::InvalidArgument("--sparse needs the store: it cannot go with --no-cache");
  Session s;
  SessionOptions so = session_options(c);
  if (o.dense.no_cache) so.store.clear();  // --no-cache: no lookup, no load
  so.compute_dtype = c.compute_dtype;
  so.precompute_config = c.precompute_config;
  so.namespace_name = c.namespace_name;
  // --save registers the namespace; --sparse needs its representations; dense serving from a
  // store that lacks it only misses every block.
  so.need = o.dense.save               ? NamespaceNeed::kRegister
            : !o.sparse.policy.empty() ? NamespaceNeed::kRequired
                                       : NamespaceNeed::kOptional;
  UCM_RETURN_IF_ERROR(s.load(so));
  std::vector<int32_t> ids;
  try {
    ids = prompt_ids(s.tokenizer(), c.template_file, prompt);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("prompt: ") + e.what());
  }
  const int64_t capacity = int64_t(ids.size()) + c.max_new_tokens;
  if (ids.empty()) return Status::InvalidArgument("the prompt encodes to no tokens");
  UCM_RETURN_IF_ERROR(s.check_capacity(ids.size(), c.max_new_tokens));
  r->prompt_tokens = ids.size();
  r->block_size = s.block_size();
  r->prompt_blocks = ids.size() / s.block_size();
  UCM_RETURN_IF_ERROR(s.open_store());
  const StoreClient* store = s.store();
  if (store) {
    r->namespace_found = store->found();
    r->namespace_id = store->ns_hex();
  }
  const Engine eng = s.engine();
  const int64_t eos = c.stop_at_eos ? s.eos() : -1;

  Prefill main;
  if (o.dense.no_cache || !store) {
    UCM_RETURN_IF_ERROR(eng.prefill_recompute(ids, capacity, &main));
    r->ttft_recompute_ms = main.ttft_ms;
  } else {
    UCM_RETURN_IF_ERROR(eng.prefill_cached(ids, capacity, &main));
    r->prefix_hit_blocks = main.hit_blocks;
    r->blocks_loaded = main.used_blocks;
    r->blocks_failed = main.failed_blocks;
    r->prefix_hit_tokens = main.used_blocks * s.block_size();
    r->ttft_cached_ms = main.ttft_ms;
    r->load_ms = main.load_ms;
    r->prefill_cached_ms = main.prefill_ms;
  }
  const torch::Tensor first_logits = main.logits.clone();
  Decode dec;
  eng.decode(&main, c.max_new_tokens, eos, nullptr, {}, false, &dec);
  r->tokens = dec.tokens;
  r->new_tokens = dec.tokens.size();
  if (dec.tokens.size() > 1 && dec.decode_seconds > 0)
    r->decode_tokens_per_second = double(dec.tokens.size() - 1) / dec.decode_seconds;
  r->text = s.tokenizer().decode(dec.tokens, true);

  if (!o.dense.no_cache && store && o.dense.recompute) {
    Prefill full;
    UCM_RETURN_IF_ERROR(eng.prefill_recompute(ids, capacity, &full));
    r->ttft_recompute_ms = full.ttft_ms;
    r->ttft_speedup = r->ttft_cached_ms > 0 ? r->ttft_recompute_ms / r->ttft_cached_ms : 0;
    r->first_token_max_logit_diff = (full.logits - first_logits).abs().max().item<double>();
    Decode d2;
    eng.decode(&full, c.max_new_tokens, eos, nullptr, {}, true, &d2);
    r->recompute_tokens = d2.tokens;
    r->tokens_match = d2.tokens == dec.tokens;
    r->greedy_match = greedy_match(d2.tokens, dec.tokens);
    if (r->greedy_match < d2.logits.size() && r->greedy_match < dec.tokens.size()) {
      // How close full recompute itself was to the cached path's choice at the first difference.
      const auto& l = d2.logits[r->greedy_match];
      r->divergence_margin = (l[d2.tokens[r->greedy_match]] - l[dec.tokens[r->greedy_match]]).item<double>();
    }
  }
  if (o.dense.save) {
    std::vector<int32_t> all = ids;
    all.insert(all.end(), dec.tokens.begin(), dec.tokens.end());
    UCM_RETURN_IF_ERROR(eng.save(all, main.cache, &r->blocks_saved));
  }
  if (!o.sparse.policy.empty()) {
    r->has_sparse = true;
    UCM_RETURN_IF_ERROR(run_sparse(eng, *store, o.sparse, ids, capacity, uint32_t(std::max<size_t>(1, dec.tokens.size())),
                                   &r->sparse));
  }
  return Status::OK();
}

}  // namespace ucm::generate
