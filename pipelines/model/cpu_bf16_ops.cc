// pipelines/model/cpu_bf16_ops.cc: the libtorch glue of the bf16 path's CPU kernels (ucm/kernels/cpu/bf16.h):
// checks shapes, dtypes and strides, allocates the outputs, splits rows and attention units over
// the prefill's crew (crew.h) or else libtorch's intra-op threads; and the bf16 prefill's GEMMs,
// their rows split over the crew. Each op runs the implementation its `path` names (kAuto: the one
// kernels::cpu::kernel_path() picks at the call: the hardware kernels, or the portable ones where
// UCM_BF16_KERNELS=portable or the CPU has no AVX512-BF16).
// Declared in llama_ops.h.
#include <ATen/Parallel.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "ucm/model/attn_ops.h"
#include "ucm/kernels/cpu/bf16.h"
#include "ucm/model/crew.h"
#include "ucm/model/llama_model.h"
#include "ucm/model/llama_ops.h"

namespace ucm::model::ops {
namespace {

using detail::bits;
using detail::for_rows;
using detail::for_gemm_pieces;
using detail::need;

}  // namespace

bool fast_bf16() { return kernels::cpu::hardware_kernels(); }

torch::Tensor mm_bf16(const torch::Tensor& x, const torch::Tensor& w) {
  const bool split = x.dim() == 2 && x.is_contiguous() && x.scalar_type() == torch::kBFloat16 &&
                     w.scalar_type() == torch::kBFloat16;
  if (!split) return torch::mm(x, w.t());
  auto y = torch::empty({x.size(0), w.size(0)}, x.options());
  for_gemm_pieces(x.size(0), [&](int64_t r0, int64_t r1) {
    auto yr = y.narrow(0, r0, r1 - r0);
    at::mm_out(yr, x.narrow(0, r0, r1 - r0), w.t());
  });
  return y;
}

torch::Tensor rms_norm_bf16(const torch::Tensor& x, const torch::Tensor& w, double eps, Bf16Path path) {
  need(x.dim() == 2 && x.scalar_type() == torch::kFloat && x.stride(1) == 1 && x.device().is_cpu(), "rms_norm_bf16",
       "x must be fp32 [rows, H] on the CPU with contiguous rows");
  need(w.dim() == 1 && w.size(0) == x.size(1) && w.scalar_type() == torch::kFloat && w.is_contiguous(), "rms_norm_bf16",
       "w must be fp32 [H], contiguous");
  const int64_t R = x.size(0), H = x.size(1), ldx = x.stride(0);
  auto out = torch::empty({R, H}, x.options().dtype(torch::kBFloat16));
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  uint16_t* op = bits(out);
  for_rows(R, H, [&](int64_t r0, int64_t r1) { kernels::cpu::rms_norm_bf16(xp, ldx, wp, H, float(eps), op, H, r0, r1, path); });
  return out;
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> qkv_rope(const torch::Tensor& qkv, const torch::Tensor& bias,
                                                                 const torch::Tensor& cos, const torch::Tensor& sin,
                                                                 int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                                                                 torch::ScalarType kv_dtype, Bf16Path path) {
  const int64_t W = (nh + 2 * nkv) * hd;
  need(qkv.dim() == 2 && qkv.size(0) == B * T && qkv.size(1) == W && qkv.scalar_type() == torch::kBFloat16 &&
           qkv.is_contiguous() && qkv.device().is_cpu() && hd % 32 == 0,
       "qkv_rope", "qkv must be bf16 [B * T, (nh + 2 nkv) hd] on the CPU, contiguous, hd a multiple of 32");
  need(!bias.defined() || (bias.dim() == 1 && bias.size(0) == W && bias.scalar_type() == torch::kFloat &&
                           bias.is_contiguous()),
       "qkv_rope", "bias must be fp32 [(nh + 2 nkv) hd], contiguous");
  auto table = [&](const torch::Tensor& t) {
    return t.dim() == 2 && t.size(0) == T && t.size(1) == hd / 2 && t.scalar_type() == torch::kFloat && t.is_contiguous();
  };
  need(table(cos) && table(sin), "qkv_rope", "cos and sin must be fp32 [T, hd / 2], contiguous");
  need(kv_dtype == torch::kFloat || kv_dtype == torch::kBFloat16, "qkv_rope", "kv_dtype must be fp32 or bf16");
  const bool kv16 = kv_dtype == torch::kBFloat16;
  const auto o = qkv.options().dtype(torch::kFloat);
  auto q = torch::empty({B, T, nh, hd}, o);
  auto k = torch::empty({B, T, nkv, hd}, o.dtype(kv_dtype)), v = torch::empty({B, T, nkv, hd}, o.dtype(kv_dtype));
  const uint16_t* src = bits(qkv);
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  const float *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float* qp = q.data_ptr<float>();
  float* kp = kv16 ? nullptr : k.data_ptr<float>();
  float* vp = kv16 ? nullptr : v.data_ptr<float>();
  uint16_t* k16 = kv16 ? bits(k) : nullptr;
  uint16_t* v16 = kv16 ? bits(v) : nullptr;
  for_rows(B * T, W, [&](int64_t r0, int64_t r1) {
    kernels::cpu::qkv_rope(src, bp, cp, sp, T, nh, nkv, hd, qp, kp, vp, r0, r1, k16, v16, path);
  });
  return {q, k, v};
}

torch::Tensor silu_mul_bf16(const torch::Tensor& gu, Bf16Path path) {
  need(gu.dim() == 2 && gu.scalar_type() == torch::kBFloat16 && gu.is_contiguous() && gu.size(1) % 2 == 0 &&
           gu.device().is_cpu(),
       "silu_mul_bf16", "gu must be bf16 [rows, 2 I] on the CPU, contiguous");
  const int64_t R = gu.size(0), I = gu.size(1) / 2;
  auto out = torch::empty({R, I}, gu.options());
  const uint16_t* gp = bits(gu);
  uint16_t* op = bits(out);
  for_rows(R, 2 * I, [&](int64_t r0, int64_t r1) { kernels::cpu::silu_mul_bf16(gp, I, op, r0, r1, path); });
  return out;
}

void add_bf16_(torch::Tensor& x, const torch::Tensor& y, Bf16Path path) {
  need(x.scalar_type() == torch::kFloat && x.is_contiguous() && y.scalar_type() == torch::kBFloat16 &&
           y.is_contiguous() && x.sizes() == y.sizes() && x.device().is_cpu(),
       "add_bf16_", "x must be fp32 and y bf16, of one shape, contiguous, on the CPU");
  float* xp = x.data_ptr<float>();
  const uint16_t* yp = bits(y);
  // Rows of x's last dimension (the whole tensor as one row where it has none).
  const int64_t n = x.dim() > 0 ? x.size(-1) : 1, R = n > 0 ? x.numel() / n : 0;
  for_rows(R, n, [&](int64_t r0, int64_t r1) { kernels::cpu::add_bf16(xp + r0 * n, yp + r0 * n, (r1 - r0) * n, path); });
}

torch::Tensor attention_bf16(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& qpos, int64_t window, double scale, const torch::Tensor& q_len,
                             Bf16Path path) {
  kernels::cpu::AttnArgs a;
  const detail::AttnHold hold = detail::fill_attn_args("attention_bf16", q, k, v, qpos, window, scale, q_len, a);
  need(kernels::cpu::attention_supported(a), "attention_bf16",
       "unsupported shape (head_dim must be a multiple of 32, at most 256; heads a multiple of KV heads)");
  auto out = torch::empty({a.B, a.T, a.nh, a.hd}, q.options().dtype(torch::kBFloat16));
  a.out = bits(out);
  const size_t bytes = kernels::cpu::attention_scratch_bytes(a);
  const int64_t units = kernels::cpu::attention_units(a);
  detail::deal_units(units, [&](int64_t i, int64_t n) {
    kernels::cpu::attention_bf16(a, i, units, n, detail::thread_scratch(bytes, "attention_bf16"), path);
  });
  return out;
}

}  // namespace ucm::model::ops
