// pipelines/model/llama_cache.cc: the forward pass over a per-sequence KV cache (prefill of a
// suffix after a cached prefix, and decode), used by `ucm generate` and `ucm eval retrieval`.
// The math is forward()'s (transformers' modeling_llama.py, eager attention, fp32); the K/V
// attention reads come from the cache, in the cache's dtype.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "llama_model.h"
#include "llama_ops.h"

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
  for (int64_t li = 0; li < c.num_hidden_layers; ++li) layer_forward(li, x, pos, rope, cache, S, mask);
  cache->len = S;
  auto hs = all_logits ? x : x.narrow(0, T - 1, 1);
  return ops::linear(ops::rms_norm(hs, norm_, c.rms_norm_eps), lm_head_);
}

LlamaModel::Rope LlamaModel::rope_at(const torch::Tensor& pos) const {
  auto freqs = torch::outer(pos.to(torch::kFloat), inv_freq_);  // [A, hd/2]
  return {freqs.cos(), freqs.sin()};
}

void LlamaModel::layer_forward(int64_t li, torch::Tensor& x, const torch::Tensor& pos_in, const Rope& rope,
                               KvCache* cache, int64_t S, const KeyMaskFn& mask,
                               const RowsFn& rows_after_kv, const ProbsFn& observe) const {
  const auto& c = cfg_;
  int64_t T = x.size(0);
  torch::Tensor pos = pos_in;
  const int64_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int64_t G = nh / nkv, I = c.intermediate_size;
  const double eps = c.rms_norm_eps;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const auto fopt = torch::TensorOptions().dtype(torch::kFloat).device(dev_);
  const auto lopt = torch::TensorOptions().dtype(torch::kLong).device(dev_);
  const int64_t mlp_rows = std::max<int64_t>(16, kMlpBudget / (2 * I));
  auto kpos = torch::arange(0, S, lopt);  // [S]
  auto posc = pos.cpu();
  const int64_t* pp = posc.data_ptr<int64_t>();
  const int64_t S0 = pp[0];
  const bool contiguous = pp[T - 1] - S0 == T - 1;
  const float ninf = -std::numeric_limits<float>::infinity();

  const auto& L = layers_[size_t(li)];
  auto h = ops::rms_norm(x, L.ln1, eps);
  auto [q4, k4, v4] = project_qkv(L, h, 1, T, rope.cos, rope.sin);
  auto q = q4.view({T, nh, hd});
  auto k = k4.view({T, nkv, hd});
  auto v = v4.view({T, nkv, hd});
  if (contiguous) {
    cache->k[size_t(li)].narrow(0, S0, T).copy_(k);
    cache->v[size_t(li)].narrow(0, S0, T).copy_(v);
  } else {
    cache->k[size_t(li)].index_copy_(0, pos, k.to(cache->dtype));
    cache->v[size_t(li)].index_copy_(0, pos, v.to(cache->dtype));
  }
  if (rows_after_kv) {
    // Every row's K/V is in the cache; attention and MLP only for the rows asked for (blend's
    // check layer: the rows left out are never used again).
    const torch::Tensor r = rows_after_kv(k, v);
    if (r.defined() && r.size(0) < T) {
      x = x.index_select(0, r);
      q = q.index_select(0, r);
      pos = pos.index_select(0, r);
      posc = pos.cpu();
      pp = posc.data_ptr<int64_t>();
      T = r.size(0);
    }
  }
  const int64_t chunk = std::min<int64_t>(T, std::max<int64_t>(16, score_budget_ / (nh * S)));
  torch::Tensor keep;  // bool [nkv, S] or undefined
  if (mask) {
    keep = mask(li, q, S);
    if (keep.defined() && (keep.dim() != 2 || keep.size(0) != nkv || keep.size(1) != S))
      throw ModelError("LlamaModel (" + dir_ + "): the key mask of layer " + std::to_string(li) +
                       " must be bool [num_kv_heads, " + std::to_string(S) + "]");
    if (keep.defined()) keep = keep.to(dev_, torch::kBool);
  }
  // Attention over the cache, read in its dtype: K^T [nkv, hd, S], V [nkv, S, hd] in the compute
  // dtype (fp32, or bf16: exact for a bf16 cache).
  auto kt = cache->k[size_t(li)].narrow(0, 0, S).to(compute_).permute({1, 2, 0}).contiguous();
  auto vh = cache->v[size_t(li)].narrow(0, 0, S).to(compute_).permute({1, 0, 2}).contiguous();
  auto qh = (q * scale).view({T, nkv, G, hd}).permute({1, 2, 0, 3});  // [nkv, G, T, hd]
  auto attn = torch::empty({T, nkv, G, hd}, fopt);
  for (int64_t s = 0; s < T; s += chunk) {
    const int64_t n = std::min(chunk, T - s), e = pp[s + n - 1] + 1;  // keys [0, e) are visible
    auto qc = qh.narrow(2, s, n).reshape({nkv, G * n, hd});
    auto sc = ops::attn_matmul(qc, kt.narrow(2, 0, e), compute_).view({nkv, G, n, e});
    auto qi = pos.narrow(0, s, n).unsqueeze(1);   // [n, 1]
    auto kj = kpos.narrow(0, 0, e).unsqueeze(0);  // [1, e]
    auto hide = kj > qi;                          // [n, e]
    if (c.sliding_window) hide = hide.logical_or(qi - kj >= *c.sliding_window);
    sc.masked_fill_(hide, ninf);
    if (keep.defined()) sc.masked_fill_(keep.narrow(1, 0, e).logical_not().view({nkv, 1, 1, e}), ninf);
    auto p = sc.view({nkv, G * n, e}).softmax(-1);
    if (observe) observe(p);
    auto o = ops::attn_matmul(p, vh.narrow(1, 0, e), compute_);  // [nkv, G*n, hd]
    attn.narrow(0, s, n).copy_(o.view({nkv, G, n, hd}).permute({2, 0, 1, 3}));
  }
  ops::add_linear_(x, attn.view({T, nh * hd}), L.wo);
  for (int64_t r = 0; r < T; r += mlp_rows) {
    auto xr = x.narrow(0, r, std::min(mlp_rows, T - r));
    auto gu = ops::linear(ops::rms_norm(xr, L.ln2, eps), L.wgate_up);
    auto act = torch::silu(gu.narrow(1, 0, I)).mul_(gu.narrow(1, I, I));
    ops::add_linear_(xr, act, L.wdown);
  }
}

}  // namespace ucm::model
