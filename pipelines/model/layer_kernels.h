// pipelines/model/layer_kernels.h: the kernels the one decoder layer (llama_layer.cc) runs, as one
// table: a row per compute dtype x ISA, each row the same seven operations. Internal to ucm_model
// (layer_kernels.cc).
//
//   row            dtype  ISA                          ops (llama_ops.h)        KV cache
//   libtorch       any    libtorch's (CPU or CUDA)     rms_norm, linear, ...    any dtype
//   avx512_bf16    bf16   AVX-512F + AVX512-BF16       *_bf16 (Bf16Path::kHardware)   none (batched prefill)
//   bf16_portable  bf16   x86-64 (same bits)           *_bf16 (Bf16Path::kPortable)   none
//   fp32_avx512    fp32   AVX-512F                     *_f32 (f32::Isa::kAvx512)      fp32 or bf16
//   fp32_avx2      fp32   AVX2 + FMA                   *_f32 (f32::Isa::kAvx2)        fp32 or bf16
//   fp32_generic   fp32   x86-64 baseline              *_f32 (f32::Isa::kGeneric)     fp32 or bf16
//
// A model picks its row once, when it loads (choose_layer_kernels); a layer with a KV cache the
// row does not take runs the libtorch row.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <tuple>

namespace ucm::model {

/// One attention call of a decoder layer.
struct AttnCall {
  torch::Tensor q;     ///< fp32 [B, T, nh, hd], post-RoPE
  torch::Tensor k, v;  ///< [B, S, nkv, hd] in the KV cache's dtype: the cache's rows [0, S), or the rows' own
  torch::Tensor pos;   ///< int64 [T]: the query rows' positions (the keys' are 0..S-1)
  int64_t window = 0;  ///< sliding window; 0: none
  double scale = 1;    ///< softmax scale (1 / sqrt(hd))
  torch::Tensor q_len;  ///< optional int64 [B]: rows t >= q_len[b] are right padding
  torch::Tensor keep;   ///< optional bool [nkv, S]: keys each KV head's queries may see (batch 1)
  /// Optional (batch 1): receives the attention probabilities, fp32 [nkv, G * n, e], once per query
  /// chunk of n rows over keys [0, e) (the fp32 CPU row: one chunk of every row and key).
  const std::function<void(const torch::Tensor&)>* observe = nullptr;
  // The libtorch row's own: its compute dtype, its score-block budget (floats), and whether it
  // reads k and v through strided views (a decode step over a cache) instead of contiguous copies.
  torch::ScalarType compute = torch::kFloat;
  int64_t score_budget = 0;
  bool strided = false;
};

using QKV = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>;

/// A row of the table. Shapes: x fp32 [R, H] (rows contiguous); the GEMM input a norm returns is
/// fp32 (libtorch, fp32 rows) or bf16 (bf16 rows); weights as LlamaModel::Layer holds them.
struct LayerKernels {
  const char* name;          ///< the row's name (the table above): LlamaModel::kernels()
  torch::ScalarType dtype;   ///< the compute dtype it serves (libtorch: kUndefined, any)
  int cache_dtypes;          ///< KV cache dtypes it takes: bit 0 fp32, bit 1 bf16, bit 2 any other
  /// RMSNorm of x by w (transformers LlamaRMSNorm), in the dtype of the GEMM it feeds.
  torch::Tensor (*norm)(const torch::Tensor& x, const torch::Tensor& w, double eps);
  /// The q/k/v projection of h (norm's output) by w (+ b), RoPE with cos/sin [T, hd / 2]:
  /// q fp32 [B, T, nh, hd], k and v [B, T, nkv, hd] fp32 or kv_dtype (bf16), contiguous or views.
  QKV (*project_rope)(const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& b,
                      const torch::Tensor& cos, const torch::Tensor& sin, int64_t B, int64_t T, int64_t nh,
                      int64_t nkv, int64_t hd, torch::ScalarType kv_dtype);
  /// h W^T: the gate/up GEMM [R, 2I], in the dtype silu_mul takes.
  torch::Tensor (*linear)(const torch::Tensor& h, const torch::Tensor& w);
  /// x += a W^T (o_proj, down_proj; the residual adds).
  void (*add_linear)(torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& w);
  /// silu(gate) * up of gu [R, 2I] (gate columns, then up): [R, I], down_proj's input.
  torch::Tensor (*silu_mul)(const torch::Tensor& gu);
  /// Causal (sliding-window, masked) attention with GQA: o_proj's input, [B * T, nh * hd] as a view.
  torch::Tensor (*attention)(const AttnCall& a);

  /// Whether this row runs a layer over a KV cache of `dtype`.
  bool takes_cache(torch::ScalarType dtype) const {
    const int bit = dtype == torch::kFloat ? 1 : dtype == torch::kBFloat16 ? 2 : 4;
    return (cache_dtypes & bit) != 0;
  }
};

/// The libtorch row (any device, dtype and cache).
const LayerKernels& libtorch_layer_kernels();

/// The row a model of this compute dtype, device and head_dim runs, the one place that reads the
/// switches (ucm/kernels/cpu/switches.h) for it: bf16 on the CPU with head_dim a multiple of 32 (at
/// most 256): avx512_bf16 where the CPU has it, bf16_portable with UCM_BF16_KERNELS=portable,
/// libtorch with UCM_BF16_KERNELS=0 or neither; fp32 on the CPU with such a head_dim: the fp32 row
/// of f32::best_isa() (libtorch with UCM_FP32_KERNELS=0); anything else: libtorch.
const LayerKernels& choose_layer_kernels(torch::ScalarType compute, torch::Device dev, int64_t head_dim);

}  // namespace ucm::model
