// pipelines/model/llama_layer.cc: the one decoder layer of LlamaModel (transformers'
// modeling_llama.py LlamaDecoderLayer, eager attention, fp32 or bf16 GEMMs), used by the batched
// prefill (forward(), whose K/V precompute stores) and by the cached forward (extend(), blend(),
// key_attention(), which the reference engine runs): the K/V a server loads from the store and
// the K/V the engine recomputes come from the same code.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "ucm/model/llama_model.h"
#include "ucm/model/llama_ops.h"

namespace ucm::model {

LlamaModel::Rope LlamaModel::rope_at(const torch::Tensor& pos) const {
  auto freqs = torch::outer(pos.to(torch::kFloat), inv_freq_);  // [A, hd/2]
  return {freqs.cos(), freqs.sin()};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> LlamaModel::project_qkv(const Layer& L, const torch::Tensor& h,
                                                                              int64_t B, int64_t T,
                                                                              const torch::Tensor& cos,
                                                                              const torch::Tensor& sin) const {
  const auto& c = cfg_;
  const int64_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  auto qkv = ops::linear(h, L.wqkv, L.bqkv);
  auto q = qkv.narrow(1, 0, nh * hd).view({B, T, nh, hd});
  auto k = qkv.narrow(1, nh * hd, nkv * hd).view({B, T, nkv, hd});
  if (L.q_norm.defined()) {
    // qwen3 (transformers Qwen3Attention): RMSNorm over head_dim of every head, before RoPE.
    q = ops::rms_norm(q, L.q_norm, c.rms_norm_eps);
    k = ops::rms_norm(k, L.k_norm, c.rms_norm_eps);
  }
  return {ops::apply_rope(q, cos, sin), ops::apply_rope(k, cos, sin),
          qkv.narrow(1, (nh + nkv) * hd, nkv * hd).view({B, T, nkv, hd})};
}

void LlamaModel::write_cache(KvCache* cache, int64_t li, const torch::Tensor& pos, const torch::Tensor& k3,
                             const torch::Tensor& v3) const {
  auto posc = pos.cpu();
  const int64_t* pp = posc.data_ptr<int64_t>();
  const int64_t T = pos.size(0), S0 = pp[0];
  if (pp[T - 1] - S0 == T - 1) {  // consecutive positions: one slice each
    cache->k[size_t(li)].narrow(0, S0, T).copy_(k3);
    cache->v[size_t(li)].narrow(0, S0, T).copy_(v3);
  } else {
    cache->k[size_t(li)].index_copy_(0, pos, k3.to(cache->dtype));
    cache->v[size_t(li)].index_copy_(0, pos, v3.to(cache->dtype));
  }
}

void LlamaModel::fused_bf16_attention_mlp(const Layer& L, torch::Tensor& x, const torch::Tensor& q,
                                          const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& pos,
                                          int64_t B, const LayerIo& io) const {
  const auto& c = cfg_;
  const int64_t T = pos.size(0), hd = c.head_dim, nh = c.num_attention_heads, I = c.intermediate_size, BT = B * T;
  const double eps = c.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const bool direct = k.scalar_type() == torch::kFloat || k.scalar_type() == torch::kBFloat16;
  auto attn = ops::attention_bf16(q, direct ? k : k.to(torch::kFloat), direct ? v : v.to(torch::kFloat), pos,
                                  c.sliding_window.value_or(0), scale, io.lengths);  // bf16 [B, T, nh, hd]
  ops::add_bf16_(x, ops::mm_bf16(attn.view({BT, nh * hd}), L.wo));
  const int64_t mlp_rows = std::max<int64_t>(16, kMlpBudget / (2 * I));
  for (int64_t r = 0; r < BT; r += mlp_rows) {
    auto xr = x.narrow(0, r, std::min(mlp_rows, BT - r));
    auto gu = ops::mm_bf16(ops::rms_norm_bf16(xr, L.ln2, eps), L.wgate_up);  // bf16 [rows, 2I]
    ops::add_bf16_(xr, ops::mm_bf16(ops::silu_mul_bf16(gu), L.wdown));
  }
}

void LlamaModel::mlp_add(const Layer& L, torch::Tensor& x) const {
  // MLP in row blocks (bounded [rows, 2I] buffers, reused by the allocator).
  const int64_t I = cfg_.intermediate_size, BT = x.size(0);
  const int64_t mlp_rows = std::max<int64_t>(16, kMlpBudget / (2 * I));
  for (int64_t r = 0; r < BT; r += mlp_rows) {
    auto xr = x.narrow(0, r, std::min(mlp_rows, BT - r));
    auto gu = ops::linear(ops::rms_norm(xr, L.ln2, cfg_.rms_norm_eps), L.wgate_up);  // [rows, 2I]
    auto act = torch::silu(gu.narrow(1, 0, I)).mul_(gu.narrow(1, I, I));
    ops::add_linear_(xr, act, L.wdown);
  }
}

torch::Tensor LlamaModel::attend(int64_t li, const torch::Tensor& q, const torch::Tensor& kt, const torch::Tensor& vh,
                                 const torch::Tensor& pos, int64_t B, const LayerIo& io) const {
  const auto& c = cfg_;
  const int64_t T = pos.size(0), hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int64_t G = nh / nkv, S = io.n_keys;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const float ninf = -std::numeric_limits<float>::infinity();
  auto posc = pos.cpu();
  const int64_t* pp = posc.data_ptr<int64_t>();
  torch::Tensor keep;  // bool [nkv, S] or undefined
  if (io.mask) {
    keep = io.mask(li, q.view({T, nh, hd}), S);
    if (keep.defined() && (keep.dim() != 2 || keep.size(0) != nkv || keep.size(1) != S))
      throw ModelError("LlamaModel (" + dir_ + "): the key mask of layer " + std::to_string(li) +
                       " must be bool [num_kv_heads, " + std::to_string(S) + "]");
    if (keep.defined()) keep = keep.to(dev_, torch::kBool);
  }
  // Query chunks bound the score block [B, nkv, G*n, <= S]. With bf16 GEMMs, attention's fp32 work
  // (mask, softmax, conversions) dominates: chunks of at most kCausalChunk rows skip the keys after
  // each chunk (about half the score block of a long prompt). The fp32 path keeps one block per
  // budget (its GEMMs dominate).
  // The softmax scale is applied to q (T*nh*hd values) rather than to the score blocks: one pass
  // less over the scores; 1/sqrt(hd) is a power of two for hd = 64, 256 (bit-identical to scaling
  // the scores), otherwise it differs by fp32 rounding only.
  const int64_t budget_rows = std::max<int64_t>(16, score_budget_ / (B * nh * S));
  const int64_t chunk =
      std::min<int64_t>(T, compute_ == torch::kFloat ? budget_rows : std::min(budget_rows, kCausalChunk));
  auto kpos = torch::arange(0, S, torch::TensorOptions().dtype(torch::kLong).device(dev_));  // [S]
  auto qh = (q * scale).to(compute_).view({B, T, nkv, G, hd}).permute({0, 2, 3, 1, 4});   // [B, nkv, G, T, hd]
  auto attn = torch::empty({B, T, nkv, G, hd}, q.options().dtype(compute_));  // o_proj's input, in its dtype
  for (int64_t s = 0; s < T; s += chunk) {
    const int64_t n = std::min(chunk, T - s), e = pp[s + n - 1] + 1;  // keys [0, e) can be visible
    auto qc = qh.narrow(3, s, n).reshape({B, nkv, G * n, hd});
    auto sc = ops::attn_matmul(qc, kt.narrow(3, 0, e), compute_);  // [B, nkv, G*n, e] fp32
    auto sc5 = sc.view({B, nkv, G, n, e});
    auto qi = pos.narrow(0, s, n).unsqueeze(1);  // [n, 1]
    if (c.sliding_window) {
      auto kj = kpos.narrow(0, 0, e).unsqueeze(0);  // [1, e]
      sc5.masked_fill_((kj > qi).logical_or(qi - kj >= *c.sliding_window), ninf);
    } else {
      // Causal: keys before the chunk's first query are visible to every query of the chunk
      // (positions ascend); only keys [pp[s], e) need the mask.
      const int64_t f = pp[s];
      auto kj = kpos.narrow(0, f, e - f).unsqueeze(0);  // [1, e - f]
      sc5.narrow(4, f, e - f).masked_fill_(kj > qi, ninf);
    }
    if (keep.defined()) sc5.masked_fill_(keep.narrow(1, 0, e).logical_not().view({1, nkv, 1, 1, e}), ninf);
    auto p = sc.softmax(-1);
    if (io.observe) io.observe(p.view({nkv, G * n, e}));
    auto o = ops::attn_matmul(p, vh.narrow(2, 0, e), compute_);  // [B, nkv, G*n, hd]
    attn.narrow(1, s, n).copy_(o.view({B, nkv, G, n, hd}).permute({0, 3, 1, 2, 4}));
  }
  return attn;
}

void LlamaModel::layer_forward(int64_t li, torch::Tensor& x, int64_t B, const torch::Tensor& pos_in,
                               const Rope& rope, const LayerIo& io) const {
  const auto& c = cfg_;
  int64_t T = pos_in.size(0);
  torch::Tensor pos = pos_in;
  const int64_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads, S = io.n_keys;
  const double eps = c.rms_norm_eps;
  KvCache* const cache = io.cache;
  if (cache && B != 1) throw ModelError("LlamaModel (" + dir_ + "): a KV cache holds one sequence (batch 1)");

  const auto& L = layers_[size_t(li)];
  if (!fused_fp32_.empty() && (!cache || cache->dtype == torch::kFloat || cache->dtype == torch::kBFloat16))
    return layer_forward_f32(li, x, B, pos_in, rope, io);
  // The bf16 path's fused CPU kernels (cpu_bf16.h) for the batched prefill: RMSNorm straight into
  // the GEMMs' bf16 input, attention with fp32 scores, the SiLU gate, the residual adds.
  const bool fused = fused_bf16_ && !cache;
  auto h = fused ? ops::rms_norm_bf16(x, L.ln1, eps) : ops::rms_norm(x, L.ln1, eps);
  // Without a cache, the fused kernels write a bf16 KV cache's K/V straight out (no fp32 copy).
  const auto qkv_kv_dtype = !cache && io.kv_dtype == torch::kBFloat16 ? torch::kBFloat16 : torch::kFloat;
  auto [q, k, v] = fused && !L.q_norm.defined()
                      ? ops::qkv_rope(ops::mm_bf16(h, L.wqkv), L.bqkv, rope.cos, rope.sin, B, T, nh, nkv, hd, qkv_kv_dtype)
                      : project_qkv(L, h, B, T, rope.cos, rope.sin);  // [B, T, n, hd]
  torch::Tensor kt, vh;  // attention's keys K^T [B, nkv, hd, S] and values [B, nkv, S, hd], compute dtype
  if (cache) {
    auto k3 = k.view({T, nkv, hd}), v3 = v.view({T, nkv, hd});
    write_cache(cache, li, pos, k3, v3);
    if (io.kv_only) return;
    if (io.rows_after_kv) {
      // Every row's K/V is in the cache; attention and MLP only for the rows asked for (blend's
      // check layer: the rows left out are never used again).
      const torch::Tensor r = io.rows_after_kv(k3, v3);
      if (r.defined() && r.size(0) < T) {
        x = x.index_select(0, r);
        q = q.index_select(1, r);
        pos = pos.index_select(0, r);
        T = r.size(0);
      }
    }
    // Read in the cache's dtype, attended in the compute dtype (exact for a bf16 cache). A few
    // query rows (decode) read the cache through strided views (BLAS takes them as they are): a
    // contiguous copy would move the whole cache through memory once per layer and token.
    kt = cache->k[size_t(li)].narrow(0, 0, S).to(compute_).permute({1, 2, 0}).unsqueeze(0);  // [1, nkv, hd, S]
    vh = cache->v[size_t(li)].narrow(0, 0, S).to(compute_).permute({1, 0, 2}).unsqueeze(0);  // [1, nkv, S, hd]
    if (T > kDecodeRows) {
      kt = kt.contiguous();
      vh = vh.contiguous();
    }
  } else {
    // Attention reads K/V as a KV cache in kv_dtype holds them; they are returned in that dtype.
    k = k.to(io.kv_dtype).contiguous();
    v = v.to(io.kv_dtype).contiguous();
    if (io.k_out) *io.k_out = k;
    if (io.v_out) *io.v_out = v;
    if (io.kv_only) return;
    if (fused) return fused_bf16_attention_mlp(L, x, q, k, v, pos, B, io);
    // kv_dtype -> compute dtype (libtorch converts through fp32: exact, or one rounding to bf16).
    kt = k.permute({0, 2, 3, 1}).to(compute_).contiguous();  // [B, nkv, hd, T]
    vh = v.permute({0, 2, 1, 3}).to(compute_).contiguous();  // [B, nkv, T, hd]
  }
  auto attn = attend(li, q, kt, vh, pos, B, io);
  ops::add_linear_(x, attn.view({B * T, nh * hd}), L.wo);
  mlp_add(L, x);
}

}  // namespace ucm::model
