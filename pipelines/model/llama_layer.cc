// pipelines/model/llama_layer.cc: the one decoder layer of LlamaModel (transformers'
// modeling_llama.py LlamaDecoderLayer, eager attention, fp32 or bf16 GEMMs), used by the batched
// prefill (forward(), whose K/V precompute stores) and by the cached forward (extend(), blend(),
// key_attention(), which the reference engine runs): the K/V a server loads from the store and
// the K/V the engine recomputes come from the same code. It runs over one row of the kernel table
// (layer_kernels.h: libtorch's ops, or the CPU kernels of kernels/cpu for a dtype and ISA).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "layer_kernels.h"
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

const char* LlamaModel::kernels() const { return kernels_->name; }

bool LlamaModel::fused_bf16() const { return kernels_->dtype == torch::kBFloat16; }

std::string LlamaModel::fused_fp32() const { return kernels_->dtype == torch::kFloat ? kernels_->name : ""; }

void LlamaModel::layer_forward(int64_t li, torch::Tensor& x, int64_t B, const torch::Tensor& pos_in,
                               const Rope& rope, const LayerIo& io) const {
  const auto& c = cfg_;
  int64_t T = pos_in.size(0);
  torch::Tensor pos = pos_in;
  const int64_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads, S = io.n_keys;
  const double eps = c.rms_norm_eps;
  KvCache* const cache = io.cache;
  if (cache && B != 1) throw ModelError("LlamaModel (" + dir_ + "): a KV cache holds one sequence (batch 1)");
  // The model's row of the kernel table (layer_kernels.h), or libtorch's for a cache it does not take.
  const LayerKernels& K = cache && !kernels_->takes_cache(cache->dtype) ? libtorch_layer_kernels() : *kernels_;
  const auto& L = layers_[size_t(li)];

  auto h = K.norm(x, L.ln1, eps);
  // Without a cache the CPU kernels write a bf16 KV cache's K/V straight out (no fp32 copy).
  const auto fresh_kv = !cache && io.kv_dtype == torch::kBFloat16 ? torch::kBFloat16 : torch::kFloat;
  auto [q, k, v] = L.q_norm.defined() ? project_qkv(L, h, B, T, rope.cos, rope.sin)  // qwen3's per-head norms
                                      : K.project_rope(h, L.wqkv, L.bqkv, rope.cos, rope.sin, B, T, nh, nkv, hd, fresh_kv);
  AttnCall a;  // k, v: [B, S, nkv, hd] as a KV cache holds them
  if (cache) {
    auto k3 = k.reshape({T, nkv, hd}), v3 = v.reshape({T, nkv, hd});
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
    a.k = cache->k[size_t(li)].narrow(0, 0, S).unsqueeze(0);
    a.v = cache->v[size_t(li)].narrow(0, 0, S).unsqueeze(0);
    a.strided = T <= kDecodeRows;
  } else {
    // Attention reads K/V as a KV cache in kv_dtype holds them; they are returned in that dtype.
    a.k = k.to(io.kv_dtype).contiguous();
    a.v = v.to(io.kv_dtype).contiguous();
    if (io.k_out) *io.k_out = a.k;
    if (io.v_out) *io.v_out = a.v;
    if (io.kv_only) return;
    a.q_len = io.lengths;
  }
  if (io.mask) {
    a.keep = io.mask(li, q.view({T, nh, hd}), S);
    if (a.keep.defined() && (a.keep.dim() != 2 || a.keep.size(0) != nkv || a.keep.size(1) != S))
      throw ModelError("LlamaModel (" + dir_ + "): the key mask of layer " + std::to_string(li) +
                       " must be bool [num_kv_heads, " + std::to_string(S) + "]");
  }
  a.q = q.contiguous();
  a.pos = pos;
  a.window = c.sliding_window.value_or(0);
  a.scale = 1.0 / std::sqrt(static_cast<double>(hd));
  a.observe = io.observe ? &io.observe : nullptr;
  a.compute = compute_;
  a.score_budget = score_budget_;
  K.add_linear(x, K.attention(a), L.wo);
  // MLP in row blocks (bounded [rows, 2I] buffers, reused by the allocator).
  const int64_t I = c.intermediate_size, BT = x.size(0);
  const int64_t mlp_rows = std::max<int64_t>(16, kMlpBudget / (2 * I));
  for (int64_t r = 0; r < BT; r += mlp_rows) {
    auto xr = x.narrow(0, r, std::min(mlp_rows, BT - r));
    K.add_linear(xr, K.silu_mul(K.linear(K.norm(xr, L.ln2, eps), L.wgate_up)), L.wdown);
  }
}

}  // namespace ucm::model
