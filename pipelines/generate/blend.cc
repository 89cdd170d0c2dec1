// pipelines/generate/blend.cc: see blend.h.
#include "blend_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "generate_internal.h"

namespace ucm::generate {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using detail::ms_since;

Status read_text(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::InvalidArgument("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return Status::OK();
}

// The text of a registered document from its source: a file, or "<file>:<line>" of a JSONL corpus.
Status text_of_source(const std::string& source, std::string* text) {
  if (fs::is_regular_file(source)) return read_text(source, text);
  const auto colon = source.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("document source " + source + " cannot be read");
  const std::string file = source.substr(0, colon);
  const uint64_t line = std::stoull(source.substr(colon + 1));
  std::ifstream f(file);
  std::string l;
  for (uint64_t i = 1; std::getline(f, l); ++i)
    if (i == line) {
      auto j = nlohmann::json::parse(l, nullptr, false);
      if (j.is_object() && j.contains("text") && j["text"].is_string()) {
        *text = j["text"].get<std::string>();
        return Status::OK();
      }
      break;
    }
  return Status::InvalidArgument("document source " + source + " has no JSONL line with a \"text\"");
}

// BlendSettings::oracle: the stored tokens whose V, still the stored one in the layers after the
// check layer, is farthest from the full recompute's, summed over those layers.
std::vector<uint32_t> oracle_select(const KvCache& ref, const KvCache& cache, const int64_t* tokens, size_t n,
                                    uint32_t check_layer, double ratio) {
  std::vector<int64_t> t(tokens, tokens + n);
  auto idx = torch::tensor(t, torch::kLong).to(cache.v[0].device());
  auto dev = torch::zeros({int64_t(n)}, torch::TensorOptions().dtype(torch::kDouble).device(cache.v[0].device()));
  for (size_t l = size_t(check_layer) + 1; l < cache.v.size(); ++l) {
    auto r = ref.v[l].index_select(0, idx).to(torch::kDouble).reshape({int64_t(n), -1});
    auto c = cache.v[l].index_select(0, idx).to(torch::kDouble).reshape({int64_t(n), -1});
    dev += (r - c).pow(2).sum(1) / r.pow(2).sum(1).mean().clamp_min(1e-30);
  }
  const size_t k = std::min(n, size_t(std::ceil(ratio * double(n) - 1e-9)));
  auto d = dev.cpu().contiguous();
  const double* dp = d.data_ptr<double>();
  std::vector<uint32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = uint32_t(i);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) { return dp[x] > dp[y]; });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace

const char* selection_name(BlendSelection s) {
  switch (s) {
    case BlendSelection::kRelevance: return "relevance";
    case BlendSelection::kDeviation: return "deviation";
    case BlendSelection::kBoth: return "both";
  }
  return "?";
}

Status parse_selection(const std::string& name, const std::string& option, BlendSelection* out) {
  for (auto s : {BlendSelection::kRelevance, BlendSelection::kDeviation, BlendSelection::kBoth})
    if (name == selection_name(s)) {
      *out = s;
      return Status::OK();
    }
  return Status::InvalidArgument(option + ": '" + name + "' is not a selection (relevance, deviation or both)");
}

uint32_t default_check_layer(BlendSelection s) { return s == BlendSelection::kRelevance ? 0 : 1; }

Status check_blend_settings(const BlendSettings& s, int64_t n_layers) {
  if (!(s.ratio >= 0 && s.ratio <= 1)) return Status::InvalidArgument("the recompute ratio must be in [0, 1]");
  if (int64_t(s.check_layer) >= n_layers)
    return Status::InvalidArgument("--check-layer " + std::to_string(s.check_layer) + ": the model has " +
                                   std::to_string(n_layers) + " layers");
  if (s.check_layer == 0 && s.selection != BlendSelection::kRelevance)
    return Status::InvalidArgument(std::string("--check-layer 0 with the ") + selection_name(s.selection) +
                                   " selection: layer 0's stored and fresh V both come from the token's embedding, "
                                   "so they never deviate; use a check layer >= 1");
  if (!(s.relevance_exponent >= 0) || std::isinf(s.relevance_exponent))
    return Status::InvalidArgument("--relevance-exponent: " + std::to_string(s.relevance_exponent) +
                                   " is not a finite number >= 0 (0: relevance ignored)");
  return check_position_decay(s.position_decay, "--position-decay");
}

Status make_blend_prompt(const tok::Tokenizer& tk, const StoreClient& store, const std::vector<std::string>& names,
                         const std::string& question, BlendPrompt* out) {
  *out = BlendPrompt{};
  UCM_RETURN_IF_ERROR(store.chunk_prefix(&out->chunk_prefix));
  out->ids = out->chunk_prefix;
  const auto sep = tk.encode("\n\n");
  for (size_t d = 0; d < names.size(); ++d) {
    std::string text;
    const std::string& name = names[d];
    if (fs::is_regular_file(name)) {
      UCM_RETURN_IF_ERROR(read_text(name, &text));
    } else {
      std::string src;
      Status st = store.document_source("chunk:" + name, &src);
      if (st.code() == Code::kNotFound)
        return Status::InvalidArgument("unknown document '" + name + "': not a file, and not registered as chunk:" +
                                       name + " in the namespace (precompute it with `ucm precompute --chunks`)");
      UCM_RETURN_IF_ERROR(st);
      UCM_RETURN_IF_ERROR(text_of_source(src, &text));
    }
    BlendDoc doc;
    doc.name = name;
    try {
      doc.tokens = tk.encode(text);
    } catch (const std::exception& e) {
      return Status::InvalidArgument("document " + name + ": " + e.what());
    }
    if (d > 0) out->ids.insert(out->ids.end(), sep.begin(), sep.end());
    doc.offset = out->ids.size();
    out->ids.insert(out->ids.end(), doc.tokens.begin(), doc.tokens.end());
    out->docs.push_back(std::move(doc));
  }
  try {
    const auto q = tk.encode(question);
    out->ids.insert(out->ids.end(), q.begin(), q.end());
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("prompt: ") + e.what());
  }
  return Status::OK();
}

namespace {

// One document's stored chunk: loaded, its keys re-rotated from the chunk's positions to the
// document's (ucm_rope_shift), placed in the prompt's cache; stored[i] says which prompt tokens
// now hold stored K/V (a block that failed to load: recomputed).
Status load_document(const Engine& eng, const StoreClient& store, const ucm_rope_params& rope, const BlendPrompt& p,
                     const BlendDoc& doc, Prefill* out, std::vector<uint8_t>* stored, BlendPrefillStats* stats) {
  const auto& m = eng.model();
  const auto& c = m.config();
  const uint32_t T = eng.block_size();
  const int64_t L = c.num_hidden_layers, H = c.num_key_value_heads, D = c.head_dim;
  const size_t P = p.chunk_prefix.size();
  const int udtype = out->cache.dtype == torch::kBFloat16 ? UCM_DTYPE_BF16
                     : out->cache.dtype == torch::kHalf   ? UCM_DTYPE_F16
                                                          : UCM_DTYPE_F32;
  std::vector<int32_t> seq = p.chunk_prefix;
  seq.insert(seq.end(), doc.tokens.begin(), doc.tokens.end());
  std::vector<Hash16> hashes;
  UCM_RETURN_IF_ERROR(store.hash_blocks(seq, T, &hashes));
  size_t hit = 0;
  UCM_RETURN_IF_ERROR(store.prefix_blocks(hashes, &hit));
  if (hit * T <= P) {
    spdlog::info("document {}: no chunk stored: prefilled", doc.name);
    stats->docs_missing.push_back(doc.name);
    return Status::OK();
  }
  auto tl = Clock::now();
  KvCache stage = m.make_cache(int64_t(hit * T), out->cache.dtype);
  std::vector<int> st;
  UCM_RETURN_IF_ERROR(store.load_paged(hashes, hit, page_ptrs(stage, hit, T), &st));
  const int64_t delta = int64_t(doc.offset) - int64_t(P);
  const size_t rows = hit * T - P;  // document tokens with stored K/V
  for (int64_t l = 0; l < L; ++l) {
    auto k = stage.k[size_t(l)].narrow(0, int64_t(P), int64_t(rows));
    UCM_RETURN_IF_ERROR(from_code(ucm_rope_shift(&rope, k.data_ptr(), udtype, rows, uint32_t(H), size_t(H * D), delta),
                                  "ucm_rope_shift"));
    out->cache.k[size_t(l)].narrow(0, int64_t(doc.offset), int64_t(rows)).copy_(k);
    out->cache.v[size_t(l)].narrow(0, int64_t(doc.offset), int64_t(rows))
        .copy_(stage.v[size_t(l)].narrow(0, int64_t(P), int64_t(rows)));
    // The prompt starts with the chunk prefix: the first document's chunk holds its K/V too.
    if (doc.offset == P && P > 0) {
      out->cache.k[size_t(l)].narrow(0, 0, int64_t(P)).copy_(stage.k[size_t(l)].narrow(0, 0, int64_t(P)));
      out->cache.v[size_t(l)].narrow(0, 0, int64_t(P)).copy_(stage.v[size_t(l)].narrow(0, 0, int64_t(P)));
    }
  }
  for (size_t b = 0; b < hit; ++b) {
    const bool ok = st[b] == UCM_OK;
    stats->blocks_loaded += ok;
    stats->blocks_failed += !ok;
    if (!ok)
      spdlog::warn("document {}: chunk block {} failed to load ({}): its tokens are recomputed", doc.name, b,
                   ucm_code_name(st[b]));
    for (size_t r = b * T; r < (b + 1) * T; ++r) {
      if (r >= P) (*stored)[doc.offset + r - P] = ok;
      else if (doc.offset == P) (*stored)[r] = ok;
    }
  }
  stats->load_ms += ms_since(tl);
  return Status::OK();
}

// Query-driven selection: how much the question (everything after the last document) attends to
// each stored token when it runs over the loaded cache; empty when the settings do not rank by
// relevance. Its K/V rows are overwritten by the blend, which starts from len 0 again.
Status relevance_of(const model::LlamaModel& m, const BlendPrompt& p, const BlendSettings& s,
                    const std::vector<uint8_t>& stored, Prefill* out, BlendPrefillStats* stats,
                    std::vector<float>* relevance) {
  const size_t N = p.ids.size();
  const bool by_relevance =
      s.selection != BlendSelection::kDeviation && s.relevance_exponent > 0 && s.ratio > 0 && !s.oracle;
  if (!by_relevance || stats->stored_tokens == 0) return Status::OK();
  const size_t q0 = p.docs.empty() ? N : p.docs.back().offset + p.docs.back().tokens.size();
  if (q0 >= N) {
    spdlog::warn("no text after the last document: the relevance selection has no question to follow and "
                 "ranks by the position prior alone");
    return Status::OK();
  }
  auto tr = Clock::now();
  auto keep = torch::zeros({int64_t(N)}, torch::kBool);
  auto* kp = keep.data_ptr<bool>();
  for (size_t i = 0; i < N; ++i) kp[i] = stored[i] != 0;
  out->cache.len = int64_t(q0);
  try {
    auto a = m.key_attention(to_tensor(p.ids, q0, N), &out->cache, keep).contiguous();
    relevance->assign(a.data_ptr<float>(), a.data_ptr<float>() + N);
  } catch (const std::exception& e) {
    out->cache.len = 0;
    return Status::InvalidArgument(e.what());
  }
  out->cache.len = 0;
  stats->relevance_ms = ms_since(tr);
  return Status::OK();
}

}  // namespace

Status prefill_blend(const Engine& eng, const StoreClient& store, const ucm_rope_params& rope, const BlendPrompt& p,
                     const BlendSettings& s, int64_t capacity, Prefill* out, BlendPrefillStats* stats) {
  *out = Prefill{};
  *stats = BlendPrefillStats{};
  const auto& m = eng.model();
  const size_t N = p.ids.size();
  out->cache = m.make_cache(capacity, eng.dtype());
  std::vector<uint8_t> stored(N, 0);
  auto t0 = Clock::now();
  for (const auto& doc : p.docs) UCM_RETURN_IF_ERROR(load_document(eng, store, rope, p, doc, out, &stored, stats));
  for (uint8_t x : stored) stats->stored_tokens += x;
  // Each token's position in its own document, for the selection's prior (the chunk prefix and
  // free text: 0; they are either exact or not stored).
  std::vector<uint32_t> doc_pos(N, 0);
  for (const auto& doc : p.docs)
    for (size_t i = 0; i < doc.tokens.size() && doc.offset + i < N; ++i) doc_pos[doc.offset + i] = uint32_t(i);
  std::vector<float> relevance;
  UCM_RETURN_IF_ERROR(relevance_of(m, p, s, stored, out, stats, &relevance));
  const bool by_deviation = s.selection != BlendSelection::kRelevance;
  ucm_blend_select_params sp = ucm_blend_select_default_params();
  sp.ratio = s.ratio;
  sp.position_decay = s.position_decay;
  sp.relevance_exponent = s.relevance_exponent;
  model::LlamaModel::BlendSpec spec;
  spec.stored = stored;
  spec.check_layer = s.check_layer;
  spec.select = [&](const float* a, const float* b, const int64_t* tokens, size_t n, size_t row) {
    if (s.oracle) return oracle_select(*s.oracle, out->cache, tokens, n, s.check_layer, s.ratio);
    std::vector<uint32_t> pos(n), idx(n);
    std::vector<float> rel(relevance.empty() ? 0 : n);
    for (size_t i = 0; i < n; ++i) pos[i] = doc_pos[size_t(tokens[i])];
    for (size_t i = 0; i < rel.size(); ++i) rel[i] = relevance[size_t(tokens[i])];
    size_t k = 0;
    if (ucm_blend_select_relevant(&sp, by_deviation ? a : nullptr, by_deviation ? b : nullptr, pos.data(),
                                  rel.empty() ? nullptr : rel.data(), n, row, idx.data(), n, &k, nullptr) != UCM_OK)
      throw model::ModelError(std::string("ucm_blend_select_relevant: ") + ucm_last_error());
    idx.resize(k);
    return idx;
  };
  std::vector<int64_t> recomputed;
  try {
    out->logits = m.blend(to_tensor(p.ids, 0, N), &out->cache, spec, &recomputed)[0];
  } catch (const std::exception& e) {
    return Status::InvalidArgument(e.what());
  }
  (void)out->logits.argmax().item<int64_t>();
  out->ttft_ms = ms_since(t0);
  out->load_ms = stats->load_ms;
  stats->recomputed_tokens = recomputed.size();
  return Status::OK();
}

}  // namespace ucm::generate
