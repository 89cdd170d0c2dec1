// pipelines/model/llama_cache.cc: the forward pass over a per-sequence KV cache (prefill of a
// suffix after a cached prefix, and decode), used by `ucm generate` and `ucm eval retrieval`.
// The layers are forward()'s (llama_layer.cc); the K/V attention reads come from the cache, in the
// cache's dtype.
#include <string>

#include "ucm/model/llama_model.h"
#include "ucm/model/llama_ops.h"

namespace ucm::model {

LlamaModel::KvCache LlamaModel::make_cache(int64_t capacity, torch::ScalarType dtype) const {
  if (capacity < 1) throw ModelError("KV cache capacity must be >= 1, got " + std::to_string(capacity));
  if (dtype != torch::kBFloat16 && dtype != torch::kHalf && dtype != torch::kFloat)
    throw ModelError("KV cache dtype must be bf16, fp16 or fp32");
  KvCache c;
  c.dtype = dtype;
  const auto opt = torch::TensorOptions().dtype(dtype).device(dev_);
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    c.k.push_back(torch::zeros({capacity, cfg_.num_key_value_heads, cfg_.head_dim}, opt));
    c.v.push_back(torch::zeros({capacity, cfg_.num_key_value_heads, cfg_.head_dim}, opt));
  }
  return c;
}

void LlamaModel::check_append(const char* fn, const torch::Tensor& tokens, const KvCache* cache) const {
  const auto& c = cfg_;
  auto bad = [&](const std::string& what) {
    throw ModelError("LlamaModel::" + std::string(fn) + " (" + dir_ + "): " + what);
  };
  if (!cache) bad("no cache");
  if (tokens.dim() != 1 || tokens.scalar_type() != torch::kLong || tokens.size(0) < 1)
    bad("tokens must be int64 [T] with T >= 1");
  const int64_t S = cache->len + tokens.size(0);
  if (int64_t(cache->k.size()) != c.num_hidden_layers || int64_t(cache->v.size()) != c.num_hidden_layers ||
      cache->k[0].size(1) != c.num_key_value_heads || cache->k[0].size(2) != c.head_dim)
    bad("the cache was not made for this model");
  if (S > cache->capacity())
    bad("the cache holds " + std::to_string(cache->capacity()) + " tokens; " + std::to_string(S) + " needed");
  if (S > c.max_position_embeddings)
    bad("position " + std::to_string(S - 1) + " exceeds max_position_embeddings " +
        std::to_string(c.max_position_embeddings));
  c10::InferenceMode guard;
  auto tc = tokens.cpu();
  if (tc.min().item<int64_t>() < 0 || tc.max().item<int64_t>() >= c.vocab_size)
    bad("token ids must be in [0, vocab_size=" + std::to_string(c.vocab_size) + ")");
}

torch::Tensor LlamaModel::extend(const torch::Tensor& tokens, KvCache* cache, bool all_logits,
                                 const KeyMaskFn& mask) const {
  const auto& c = cfg_;
  check_append("extend", tokens, cache);
  const int64_t T = tokens.size(0), S0 = cache->len, S = S0 + T;
  c10::InferenceMode guard;
  auto pos = torch::arange(S0, S, torch::TensorOptions().dtype(torch::kLong).device(dev_));  // [T]
  auto x = embed_.index_select(0, tokens.to(dev_));  // [T, H]
  const Rope rope = rope_at(pos);
  LayerIo io;
  io.cache = cache;
  io.n_keys = S;
  io.mask = mask;
  for (int64_t li = 0; li < c.num_hidden_layers; ++li) layer_forward(li, x, 1, pos, rope, io);
  cache->len = S;
  auto hs = all_logits ? x : x.narrow(0, T - 1, 1);
  return ops::linear(ops::rms_norm(hs, norm_, c.rms_norm_eps), lm_head_);
}

}  // namespace ucm::model
