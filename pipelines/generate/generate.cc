// pipelines/generate/generate.cc: run_generate (see ucm/generate/generate.h).
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine.h"
#include "internal.h"
#include "sparse.h"
#include "ucm/corpus/corpus.h"
#include "ucm/generate/generate.h"
#include "model_load.h"
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

Status load_inputs(const std::string& model_dir, const std::string& tokenizer_file, Inputs* in,
                   const std::string& compute) {
  model::LoadOptions lo;
  lo.model_dir = model_dir;
  lo.compute_dtype = compute;
  UCM_RETURN_IF_ERROR(model::load_model(lo, &in->model, nullptr));
  const std::string tp = tokenizer_file.empty() ? (fs::path(model_dir) / "tokenizer.json").string() : tokenizer_file;
  try {
    in->tokenizer = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_file(tp));
  } catch (const std::exception& e) {
    return Status::InvalidArgument("cannot load tokenizer " + tp + ": " + e.what());
  }
  try {
    std::ifstream f(fs::path(model_dir) / "config.json");
    auto j = nlohmann::json::parse(f);
    if (j.contains("eos_token_id") && j["eos_token_id"].is_number_integer()) in->eos = j["eos_token_id"].get<int64_t>();
  } catch (const std::exception&) {
    // the model loaded, so config.json is valid JSON; no eos means "never stop early"
  }
  return Status::OK();
}

Status fingerprint(const model::LlamaModel& m, const std::string& precompute_config, std::string* desc_json,
                   model::FingerprintOptions* fp) {
  if (!precompute_config.empty()) UCM_RETURN_IF_ERROR(model::read_fingerprint_config(precompute_config, fp));
  *desc_json = model::namespace_desc_json(m, *fp);
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
  std::string prompt;
  UCM_RETURN_IF_ERROR(prompt_text(o.prompt, o.prompt_file, "prompt", &prompt));
  if (o.no_cache && o.save) return Status::InvalidArgument("--save needs the store: it cannot go with --no-cache");
  if (!o.sparse.empty() && o.store.empty())
    return Status::InvalidArgument("--sparse needs --store (the block representations come from it)");
  Inputs in;
  UCM_RETURN_IF_ERROR(load_inputs(o.model_dir, o.tokenizer_file, &in, o.compute_dtype));
  std::vector<int32_t> ids;
  try {
    ids = prompt_ids(*in.tokenizer, o.template_file, prompt);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("prompt: ") + e.what());
  }
  const auto& mc = in.model->config();
  const int64_t capacity = int64_t(ids.size()) + o.max_new_tokens;
  if (ids.empty()) return Status::InvalidArgument("the prompt encodes to no tokens");
  if (capacity > mc.max_position_embeddings)
    return Status::InvalidArgument("prompt of " + std::to_string(ids.size()) + " tokens plus " +
                                   std::to_string(o.max_new_tokens) + " new tokens exceeds the model's " +
                                   std::to_string(mc.max_position_embeddings) + " positions");
  std::string desc_json;
  model::FingerprintOptions po;
  UCM_RETURN_IF_ERROR(fingerprint(*in.model, o.precompute_config, &desc_json, &po));
  r->prompt_tokens = ids.size();
  r->block_size = po.block_size;
  r->prompt_blocks = ids.size() / po.block_size;

  std::unique_ptr<StoreClient> store;
  const bool use_store = !o.store.empty() && (!o.no_cache || o.save);
  if (use_store) {
    store = std::make_unique<StoreClient>();
    UCM_RETURN_IF_ERROR(store->open(o.store, o.save));
    UCM_RETURN_IF_ERROR(store->resolve_namespace(o.namespace_name, desc_json, o.save));
    r->namespace_found = store->found();
    static const char* hex = "0123456789abcdef";
    for (uint8_t b : store->ns()) r->namespace_id += {hex[b >> 4], hex[b & 15]};
    if (!store->found()) spdlog::warn("the store holds no namespace for this model and fingerprint: every block misses");
  }
  Engine eng(*in.model, store.get(), po.block_size, torch_dtype_of(po.dtype));
  const int64_t eos = o.stop_at_eos ? in.eos : -1;

  Prefill main;
  if (o.no_cache || !store) {
    UCM_RETURN_IF_ERROR(eng.prefill_recompute(ids, capacity, &main));
    r->ttft_recompute_ms = main.ttft_ms;
  } else {
    UCM_RETURN_IF_ERROR(eng.prefill_cached(ids, capacity, &main));
    r->prefix_hit_blocks = main.hit_blocks;
    r->blocks_loaded = main.used_blocks;
    r->blocks_failed = main.failed_blocks;
    r->prefix_hit_tokens = main.used_blocks * po.block_size;
    r->ttft_cached_ms = main.ttft_ms;
    r->load_ms = main.load_ms;
    r->prefill_cached_ms = main.prefill_ms;
  }
  const torch::Tensor first_logits = main.logits.clone();
  Decode dec;
  eng.decode(&main, o.max_new_tokens, eos, nullptr, {}, false, &dec);
  r->tokens = dec.tokens;
  r->new_tokens = dec.tokens.size();
  if (dec.tokens.size() > 1 && dec.decode_seconds > 0)
    r->decode_tokens_per_second = double(dec.tokens.size() - 1) / dec.decode_seconds;
  r->text = in.tokenizer->decode(dec.tokens, true);

  if (!o.no_cache && store && o.recompute) {
    Prefill full;
    UCM_RETURN_IF_ERROR(eng.prefill_recompute(ids, capacity, &full));
    r->ttft_recompute_ms = full.ttft_ms;
    r->ttft_speedup = r->ttft_cached_ms > 0 ? r->ttft_recompute_ms / r->ttft_cached_ms : 0;
    r->first_token_max_logit_diff = (full.logits - first_logits).abs().max().item<double>();
    Decode d2;
    eng.decode(&full, o.max_new_tokens, eos, nullptr, {}, true, &d2);
    r->recompute_tokens = d2.tokens;
    r->tokens_match = d2.tokens == dec.tokens;
    r->greedy_match = greedy_match(d2.tokens, dec.tokens);
    if (r->greedy_match < d2.logits.size() && r->greedy_match < dec.tokens.size()) {
      // How close full recompute itself was to the cached path's choice at the first difference.
      const auto& l = d2.logits[r->greedy_match];
      r->divergence_margin = (l[d2.tokens[r->greedy_match]] - l[dec.tokens[r->greedy_match]]).item<double>();
    }
  }
  if (o.save) {
    std::vector<int32_t> all = ids;
    all.insert(all.end(), dec.tokens.begin(), dec.tokens.end());
    UCM_RETURN_IF_ERROR(eng.save(all, main.cache, &r->blocks_saved));
  }
  if (!o.sparse.empty()) {
    r->has_sparse = true;
    UCM_RETURN_IF_ERROR(run_sparse(eng, *store, o, ids, capacity, uint32_t(std::max<size_t>(1, dec.tokens.size())), &r->sparse));
  }
  return Status::OK();
}

}  // namespace ucm::generate
