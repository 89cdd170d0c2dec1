// pipelines/model/llama_layer_f32.cc: LlamaModel's decoder layer on the fp32 path's fused CPU
// kernels (cpu_fp32.h): RMSNorm, RoPE with the K/V cache's rounding, attention and the SiLU gate
// in one pass each, the GEMMs (and the residual adds, addmm_ with beta 1) on OpenBLAS, their rows
// split over the prefill's crew where a worker is idle (crew.h). The
// arithmetic is llama_layer.cc's (transformers' LlamaDecoderLayer at fp32); the batched prefill
// and the cached forward both run it, so precompute's K/V and the engine's are the same bits.
#include <cmath>
#include <string>

#include "ucm/model/llama_model.h"
#include "ucm/model/llama_ops.h"

namespace ucm::model {

void LlamaModel::layer_forward_f32(int64_t li, torch::Tensor& x, int64_t B, const torch::Tensor& pos_in,
                                   const Rope& rope, const LayerIo& io) const {
  const auto& c = cfg_;
  torch::Tensor pos = pos_in;
  int64_t T = pos.size(0);
  const int64_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads, I = c.intermediate_size;
  const double eps = c.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(hd));
  KvCache* const cache = io.cache;
  const auto& L = layers_[size_t(li)];

  auto h = ops::rms_norm_f32(x, L.ln1, eps);
  // Without a cache the kernel writes a bf16 KV cache's K/V straight out (no fp32 copy).
  const auto kv_dtype = !cache && io.kv_dtype == torch::kBFloat16 ? torch::kBFloat16 : torch::kFloat;
  torch::Tensor q, k, v;  // [B, T, n, hd]
  if (L.q_norm.defined()) std::tie(q, k, v) = project_qkv(L, h, B, T, rope.cos, rope.sin);  // qwen3's per-head norms
  else std::tie(q, k, v) = ops::qkv_rope_f32(ops::linear_f32(h, L.wqkv, L.bqkv), rope.cos, rope.sin, B, T, nh, nkv, hd, kv_dtype);
  torch::Tensor ka, va, lengths;  // what attention reads: [B, S, nkv, hd], fp32 or bf16
  if (cache) {
    auto k3 = k.view({T, nkv, hd}), v3 = v.reshape({T, nkv, hd});
    write_cache(cache, li, pos, k3, v3);
    if (io.kv_only) return;
    if (io.rows_after_kv) {
      // Every row's K/V is in the cache; attention and MLP only for the rows asked for (blend's
      // check layer: the rows left out are never used again).
      const torch::Tensor r = io.rows_after_kv(k3, v3);
      if (r.defined() && r.size(0) < T) {
        x = x.index_select(0, r);
        q = q.index_select(1, r).contiguous();
        pos = pos.index_select(0, r);
        T = r.size(0);
      }
    }
    ka = cache->k[size_t(li)].narrow(0, 0, io.n_keys).unsqueeze(0);
    va = cache->v[size_t(li)].narrow(0, 0, io.n_keys).unsqueeze(0);
  } else {
    k = k.to(io.kv_dtype).contiguous();
    v = v.to(io.kv_dtype).contiguous();
    if (io.k_out) *io.k_out = k;
    if (io.v_out) *io.v_out = v;
    if (io.kv_only) return;
    // Attention reads K/V as a KV cache in kv_dtype holds them (fp16: widened to fp32, exact).
    const bool direct = k.scalar_type() == torch::kFloat || k.scalar_type() == torch::kBFloat16;
    ka = direct ? k : k.to(torch::kFloat);
    va = direct ? v : v.to(torch::kFloat);
    lengths = io.lengths;
  }
  torch::Tensor keep;  // bool [nkv, S] or undefined (block-sparse attention: io.mask)
  if (io.mask) {
    keep = io.mask(li, q.view({T, nh, hd}), io.n_keys);
    if (keep.defined() && (keep.dim() != 2 || keep.size(0) != nkv || keep.size(1) != io.n_keys))
      throw ModelError("LlamaModel (" + dir_ + "): the key mask of layer " + std::to_string(li) +
                       " must be bool [num_kv_heads, " + std::to_string(io.n_keys) + "]");
  }
  torch::Tensor probs;
  auto attn = ops::attention_f32(q, ka, va, pos, c.sliding_window.value_or(0), scale, lengths, keep,
                                 io.observe ? &probs : nullptr);  // fp32 [B, T, nh, hd]
  if (io.observe) io.observe(probs);  // [nkv, G * T, S]: one query chunk of every row
  const int64_t BT = B * T;
  ops::add_linear_f32_(x, attn.view({BT, nh * hd}), L.wo);
  // MLP in row blocks (bounded [rows, 2I] buffers, reused by the allocator).
  const int64_t mlp_rows = std::max<int64_t>(16, kMlpBudget / (2 * I));
  for (int64_t r = 0; r < BT; r += mlp_rows) {
    auto xr = x.narrow(0, r, std::min(mlp_rows, BT - r));
    auto gu = ops::linear_f32(ops::rms_norm_f32(xr, L.ln2, eps), L.wgate_up);  // [rows, 2I]
    ops::add_linear_f32_(xr, ops::silu_mul_f32(gu), L.wdown);
  }
}

}  // namespace ucm::model
