// pipelines/model/include/ucm/model/llama_ops.h: the tensor operations the prefill (llama_model.cc) and the
// cached forward (llama_cache.cc) share. Internal to ucm_model.
#pragma once
#include <torch/torch.h>

#include "ucm/kernels/cpu/bf16.h"
#include "ucm/kernels/cpu/fp32.h"

namespace ucm::model::ops {

using kernels::cpu::Bf16Path;
namespace f32 = kernels::cpu::f32;

inline torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  // transformers LlamaRMSNorm: w * (x * rsqrt(mean(x^2) + eps)), in fp32.
  auto var = x.pow(2).mean(-1, /*keepdim=*/true);
  return w * (x * (var + eps).rsqrt());
}

// x: [B, T, n, hd] (any strides); cos/sin: [T, hd/2]. Returns contiguous rotated copy.
// transformers: x * cos + rotate_half(x) * sin with cos = cat(c, c), rotate_half = cat(-x2, x1).
inline torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(3) / 2;
  auto c = cos.view({1, cos.size(0), 1, half});
  auto s = sin.view({1, sin.size(0), 1, half});
  auto x1 = x.narrow(3, 0, half);
  auto x2 = x.narrow(3, half, half);
  auto out = torch::empty(x.sizes(), x.options());
  auto lo = out.narrow(3, 0, half);
  auto hi = out.narrow(3, half, half);
  torch::mul_out(lo, x1, c);
  lo.sub_(x2 * s);
  torch::mul_out(hi, x2, c);
  hi.add_(x1 * s);
  return out;
}

// y = x W^T (+ b), fp32 [rows, out] from x fp32 [rows, in] and W [out, in] (+ b fp32 [out]).
// W fp32: one fp32 GEMM. W bf16 (the bf16 compute path): x is rounded to bf16 and the GEMM runs
// on the CPU's bf16 matrix units (oneDNN: AMX-BF16, else AVX512-BF16) with fp32 accumulation; its
// output is rounded to bf16 (libtorch 1.13 writes bf16 GEMMs' results in bf16), then widened.
// One fp32 row (a decode step) multiplies by W as a matrix-vector product: OpenBLAS's sgemm
// packs all of W on every call, which for a single row cost more than reading W (decode of
// SmolLM2-135M on one thread: 43% of the time in sgemm_incopy, 2026-11-27).
inline torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {}) {
  if (w.scalar_type() == torch::kFloat && x.size(0) == 1) {
    auto y = torch::mv(w, x[0]).unsqueeze(0);
    return b.defined() ? y.add_(b) : y;
  }
  if (w.scalar_type() == torch::kFloat) return b.defined() ? torch::addmm(b, x, w.t()) : torch::mm(x, w.t());
  auto y = torch::mm(x.to(w.scalar_type()), w.t()).to(torch::kFloat);
  return b.defined() ? y.add_(b) : y;
}

// x += a W^T (the residual adds of o_proj and down_proj), W fp32 or bf16 as in linear().
inline void add_linear_(torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& w) {
  if (w.scalar_type() == torch::kFloat && a.size(0) == 1) x.add_(torch::mv(w, a[0]).unsqueeze(0));  // see linear()
  else if (w.scalar_type() == torch::kFloat) x.addmm_(a, w.t());
  else x.add_(torch::mm(a.to(w.scalar_type()), w.t()));
}

// Batched a @ b of attention (scores q k^T, then p v) in the compute dtype `ct`: fp32, or bf16
// inputs with fp32 accumulation and a bf16-rounded result (see linear()). Returns fp32.
inline torch::Tensor attn_matmul(const torch::Tensor& a, const torch::Tensor& b, torch::ScalarType ct) {
  if (ct == torch::kFloat) return torch::matmul(a, b);
  return torch::matmul(a.to(ct), b.to(ct)).to(torch::kFloat);
}

// The bf16 compute path's fused CPU ops (ucm/kernels/cpu/bf16.h kernels; cpu_bf16_ops.cc), each on
// the implementation `path` names (kAuto: kernels::cpu::kernel_path() at the call). Each throws
// ModelError on a tensor it does not take. fast_bf16(): whether this CPU runs them (AVX512-BF16).
bool fast_bf16();
/// x W^T of the bf16 path's prefill: x bf16 [R, K], W bf16 [N, K] -> bf16 [R, N] (libtorch's mm,
/// oneDNN), one GEMM per row piece of detail::for_gemm_pieces (attn_ops.h: pieces fixed by R, dealt
/// to the crew's idle helpers where there is a crew), so the bits do not depend on the workers;
/// x not contiguous: exactly torch::mm(x, W.t()).
torch::Tensor mm_bf16(const torch::Tensor& x, const torch::Tensor& w);
/// bf16(w * rms-normalised x): x fp32 [R, H] (rows contiguous), w fp32 [H] -> bf16 [R, H].
torch::Tensor rms_norm_bf16(const torch::Tensor& x, const torch::Tensor& w, double eps,
                            Bf16Path path = Bf16Path::kAuto);
/// q, k, v of a layer from its projection's bf16 output qkv [B * T, (nh + 2 nkv) hd] (+ bias fp32,
/// optional), RoPE applied with cos/sin [T, hd/2]: q fp32 [B, T, nh, hd], k and v [B, T, nkv, hd]
/// in kv_dtype (fp32, or bf16: a bf16 KV cache's values), contiguous; bit-equal to linear()'s
/// widening, the bias add and apply_rope() (then .to(kv_dtype)).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> qkv_rope(const torch::Tensor& qkv, const torch::Tensor& bias,
                                                                 const torch::Tensor& cos, const torch::Tensor& sin,
                                                                 int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                                                                 torch::ScalarType kv_dtype = torch::kFloat,
                                                                 Bf16Path path = Bf16Path::kAuto);
/// bf16(silu(gate) * up): gu bf16 [R, 2I] (gate columns, then up), contiguous -> bf16 [R, I].
torch::Tensor silu_mul_bf16(const torch::Tensor& gu, Bf16Path path = Bf16Path::kAuto);
/// x += y: x fp32, y bf16, one shape, both contiguous.
void add_bf16_(torch::Tensor& x, const torch::Tensor& y, Bf16Path path = Bf16Path::kAuto);
/// Causal attention with GQA, bf16 operands and fp32 softmax (kernels::cpu::AttnArgs): q fp32 [B, T, nh, hd],
/// k, v both fp32 or both bf16 [B, S, nkv, hd] (heads hd apart, dims contiguous), qpos int64 [T] (keys are at
/// 0..S-1), window 0 or the sliding window, q_len (optional) int64 [B]: rows t >= q_len[b] are
/// right padding, given 0 -> bf16 [B, T, nh, hd] (o_proj's input).
torch::Tensor attention_bf16(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& qpos, int64_t window, double scale,
                             const torch::Tensor& q_len = {}, Bf16Path path = Bf16Path::kAuto);

// The fp32 path's fused CPU ops (ucm/kernels/cpu/fp32.h kernels of `isa`, by default the one
// f32::best_isa() picks;
// cpu_fp32_ops.cc). Each throws ModelError on a tensor it does not take.
/// "fp32_avx512" | "fp32_avx2" | "fp32_generic": the kernels these ops run; "" when
/// UCM_FP32_KERNELS=0 turns them off (the model then runs libtorch's ops).
std::string fp32_kernels();
/// w * rms-normalised x: x fp32 [R, H] (rows contiguous), w fp32 [H] -> fp32 [R, H].
torch::Tensor rms_norm_f32(const torch::Tensor& x, const torch::Tensor& w, double eps,
                           f32::Isa isa = f32::best_isa());
/// q, k, v of a layer from its projection qkv fp32 [B * T, (nh + 2 nkv) hd] (bias added),
/// RoPE applied with cos/sin [T, hd/2]: q fp32 [B, T, nh, hd], k and v [B, T, nkv, hd] in kv_dtype
/// (fp32, or bf16: a bf16 KV cache's values, rounded as .to(kBFloat16)), contiguous; equal to
/// apply_rope() on qkv's views bit for bit.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> qkv_rope_f32(const torch::Tensor& qkv, const torch::Tensor& cos,
                                                                     const torch::Tensor& sin, int64_t B, int64_t T,
                                                                     int64_t nh, int64_t nkv, int64_t hd,
                                                                     torch::ScalarType kv_dtype = torch::kFloat,
                                                                     f32::Isa isa = f32::best_isa());
/// silu(gate) * up: gu fp32 [R, 2I] (gate columns, then up), contiguous -> fp32 [R, I].
torch::Tensor silu_mul_f32(const torch::Tensor& gu, f32::Isa isa = f32::best_isa());
/// Causal attention with GQA in fp32 (kernels::cpu::f32::AttnArgs): q fp32 [B, T, nh, hd], k, v both fp32
/// or both bf16 [B, S, nkv, hd] (heads hd apart, dims contiguous), qpos int64 [T] (keys at
/// 0..S-1), window 0 or the sliding window, q_len (optional) int64 [B]: rows t >= q_len[b] are
/// right padding, given 0 -> fp32 [B, T, nh, hd] (o_proj's input). With a batch of one: keep
/// (optional) bool [nkv, S], the keys each KV head's queries may see (block-sparse attention);
/// probs (optional) receives fp32 [nkv, G * T, S], row g * T + t: query (t, head h * G + g)'s
/// probabilities (kernels::cpu::f32::AttnArgs).
torch::Tensor attention_f32(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& qpos, int64_t window, double scale,
                            const torch::Tensor& q_len = {}, const torch::Tensor& keep = {},
                            torch::Tensor* probs = nullptr, f32::Isa isa = f32::best_isa());
/// linear() and add_linear_() of the fp32 path's prefill: one OpenBLAS GEMM per row piece of x (or
/// a) of detail::for_gemm_pieces (attn_ops.h: pieces fixed by the row count, dealt to the crew's
/// idle helpers where there is a crew), so the bits do not depend on the number of workers, whatever
/// kernels OpenBLAS runs; W not fp32 or x not 2-D rows: exactly linear() and add_linear_().
torch::Tensor linear_f32(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {});
void add_linear_f32_(torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& w);

}  // namespace ucm::model::ops
