// pipelines/model/llama_blend.cc: LlamaModel::blend, CacheBlend's selective recompute (Yao et al.,
// EuroSys 2025, §4.3) over the layers of llama_cache.cc.
#include <string>

#include "ucm/model/llama_model.h"
#include "ucm/model/llama_ops.h"

namespace ucm::model {

torch::Tensor LlamaModel::blend(const torch::Tensor& tokens, KvCache* cache, const BlendSpec& spec,
                                std::vector<int64_t>* recomputed) const {
  const auto& c = cfg_;
  auto bad = [&](const std::string& what) { throw ModelError("LlamaModel::blend (" + dir_ + "): " + what); };
  if (!cache) bad("no cache");
  if (tokens.dim() != 1 || tokens.scalar_type() != torch::kLong || tokens.size(0) < 1)
    bad("tokens must be int64 [T] with T >= 1");
  const int64_t T = tokens.size(0), nkv = c.num_key_value_heads, hd = c.head_dim;
  if (cache->len != 0) bad("the cache must be empty (len 0): blend is the prefill of the whole prompt");
  if (int64_t(cache->k.size()) != c.num_hidden_layers || cache->k[0].size(1) != nkv || cache->k[0].size(2) != hd)
    bad("the cache was not made for this model");
  if (T > cache->capacity()) bad("the cache holds " + std::to_string(cache->capacity()) + " tokens; " + std::to_string(T) + " needed");
  if (T > c.max_position_embeddings) bad("the prompt exceeds max_position_embeddings");
  if (int64_t(spec.stored.size()) != T) bad("spec.stored must have one entry per token");
  if (spec.check_layer < 0 || spec.check_layer >= c.num_hidden_layers) bad("check_layer out of range");
  c10::InferenceMode guard;
  {
    auto tc = tokens.cpu();
    if (tc.min().item<int64_t>() < 0 || tc.max().item<int64_t>() >= c.vocab_size)
      bad("token ids must be in [0, vocab_size=" + std::to_string(c.vocab_size) + ")");
  }
  const auto lopt = torch::TensorOptions().dtype(torch::kLong).device(dev_);
  auto pos = torch::arange(0, T, lopt);
  auto x = embed_.index_select(0, tokens.to(dev_));  // [T, H]
  Rope rope = rope_at(pos);
  std::vector<int64_t> stored_idx;
  for (int64_t i = 0; i < T; ++i)
    if (spec.stored[size_t(i)]) stored_idx.push_back(i);
  if (recomputed) recomputed->clear();
  LayerIo io;
  io.cache = cache;
  io.n_keys = T;
  for (int64_t li = 0; li < c.num_hidden_layers; ++li) {
    if (li != spec.check_layer || stored_idx.empty()) {
      layer_forward(li, x, 1, pos, rope, io);
      continue;
    }
    // The check layer: compare the stored V of the stored tokens with their fresh ones before
    // the fresh ones overwrite them; attention and MLP of this layer and the later layers run
    // for the computed tokens only (the others' outputs would never be used).
    // The deviation is that of the values (V) alone, as in CacheBlend's reference implementation
    // (LMCache's CacheBlendImpl: "we only use V to compare the difference"). Measured on the
    // 4-document prompts of docs/blend.md at 15%: top-1 0.906 / KL 0.031 with V, 0.859 / 0.044
    // with K|V.
    auto sidx = torch::tensor(stored_idx, lopt);
    auto old = cache->v[size_t(li)].index_select(0, sidx).to(torch::kFloat).reshape({-1, nkv * hd}).contiguous().cpu();
    torch::Tensor rows;  // int64 [kept], defined when fewer than T are kept
    auto choose = [&](const torch::Tensor&, const torch::Tensor& v) {
      auto fresh =
          v.index_select(0, sidx).to(cache->dtype).to(torch::kFloat).reshape({-1, nkv * hd}).contiguous().cpu();
      std::vector<uint32_t> sel;
      if (spec.select)
        sel = spec.select(old.data_ptr<float>(), fresh.data_ptr<float>(), stored_idx.data(), stored_idx.size(),
                          size_t(nkv * hd));
      std::vector<uint8_t> keep(size_t(T), 0);
      for (int64_t i = 0; i < T; ++i) keep[size_t(i)] = !spec.stored[size_t(i)];
      for (uint32_t j : sel) {
        if (j >= stored_idx.size()) bad("select returned an index out of range");
        keep[size_t(stored_idx[j])] = 1;
        if (recomputed) recomputed->push_back(stored_idx[j]);
      }
      keep[size_t(T - 1)] = 1;  // its logits are the answer
      std::vector<int64_t> kept;
      for (int64_t i = 0; i < T; ++i)
        if (keep[size_t(i)]) kept.push_back(i);
      if (int64_t(kept.size()) < T) rows = torch::tensor(kept, lopt);
      return rows;
    };
    // Layers [0, check_layer] wrote fresh K/V for every token. Later layers: stored K/V for the
    // tokens left out, fresh for the rows kept.
    LayerIo check = io;
    check.rows_after_kv = choose;
    layer_forward(li, x, 1, pos, rope, check);
    if (rows.defined()) {
      pos = pos.index_select(0, rows);
      rope = rope_at(pos);
    }
  }
  cache->len = T;
  return ops::linear(ops::rms_norm(x.narrow(0, x.size(0) - 1, 1), norm_, c.rms_norm_eps), lm_head_);
}

torch::Tensor LlamaModel::key_attention(const torch::Tensor& tokens, KvCache* cache, const torch::Tensor& keep) const {
  const auto& c = cfg_;
  check_append("key_attention", tokens, cache);
  if (keep.defined() && (keep.dim() != 1 || keep.size(0) != cache->len + tokens.size(0) ||
                         keep.scalar_type() != torch::kBool))
    throw ModelError("LlamaModel::key_attention (" + dir_ + "): keep must be bool [" +
                     std::to_string(cache->len + tokens.size(0)) + "]");
  const int64_t Q = tokens.size(0), S0 = cache->len, S = S0 + Q, nkv = c.num_key_value_heads;
  c10::InferenceMode guard;
  const auto lopt = torch::TensorOptions().dtype(torch::kLong).device(dev_);
  auto pos = torch::arange(S0, S, lopt);
  auto x = embed_.index_select(0, tokens.to(dev_));  // [Q, H]
  const Rope rope = rope_at(pos);
  KeyMaskFn mask;
  torch::Tensor kk;  // bool [nkv, S]: keep, and the tokens' own rows
  if (keep.defined()) {
    auto k1 = keep.to(dev_).clone();
    k1.narrow(0, S0, Q).fill_(true);
    kk = k1.view({1, S}).expand({nkv, S}).contiguous();
    mask = [&](int64_t, const torch::Tensor&, int64_t) { return kk; };
  }
  auto acc = torch::zeros({S}, torch::TensorOptions().dtype(torch::kFloat).device(dev_));
  const ProbsFn observe = [&](const torch::Tensor& p) {  // [nkv, G * n, e]
    acc.narrow(0, 0, p.size(2)).add_(p.sum(torch::IntArrayRef{0, 1}));
  };
  LayerIo io;
  io.cache = cache;
  io.n_keys = S;
  io.mask = mask;
  io.observe = observe;
  for (int64_t li = 0; li < c.num_hidden_layers; ++li) layer_forward(li, x, 1, pos, rope, io);
  return (acc / double(c.num_attention_heads * Q * c.num_hidden_layers)).cpu();
}

}  // namespace ucm::model
