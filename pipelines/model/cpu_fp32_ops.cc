// pipelines/model/cpu_fp32_ops.cc: the libtorch glue of the fp32 CPU kernels (ucm/kernels/cpu/fp32.h): checks
// shapes, dtypes and strides, allocates the outputs, splits rows and attention units over the
// prefill's crew (crew.h) or else libtorch's intra-op threads; and the fp32 prefill's GEMMs, their
// rows split over the crew. Declared in llama_ops.h.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "ucm/model/attn_ops.h"
#include "ucm/kernels/cpu/fp32.h"
#include "ucm/model/crew.h"
#include "ucm/model/llama_model.h"
#include "ucm/model/llama_ops.h"

namespace ucm::model::ops {
namespace {


using detail::bits;
using detail::for_rows;
using detail::for_gemm_pieces;
using detail::need;

// Whether a GEMM with w runs as for_gemm_pieces' pieces (linear_f32, add_linear_f32_): fp32 weights
// on the CPU (other GEMMs are libtorch's, whole).
bool gemm_in_pieces(const torch::Tensor& w) { return w.scalar_type() == torch::kFloat && w.device().is_cpu(); }

}  // namespace

torch::Tensor linear_f32(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  if (x.dim() != 2 || !x.is_contiguous() || !gemm_in_pieces(w)) return linear(x, w, b);
  const int64_t R = x.size(0);
  auto y = torch::empty({R, w.size(0)}, x.options());
  for_gemm_pieces(R, [&](int64_t r0, int64_t r1) {
    auto yr = y.narrow(0, r0, r1 - r0);
    if (b.defined()) at::addmm_out(yr, b, x.narrow(0, r0, r1 - r0), w.t());
    else at::mm_out(yr, x.narrow(0, r0, r1 - r0), w.t());
  });
  return y;
}

void add_linear_f32_(torch::Tensor& x, const torch::Tensor& a, const torch::Tensor& w) {
  if (x.dim() != 2 || a.dim() != 2 || x.stride(1) != 1 || !gemm_in_pieces(w)) return add_linear_(x, a, w);
  for_gemm_pieces(x.size(0), [&](int64_t r0, int64_t r1) {
    x.narrow(0, r0, r1 - r0).addmm_(a.narrow(0, r0, r1 - r0), w.t());
  });
}

std::string fp32_kernels() {
  bool on = false;
  const f32::Isa isa = f32::best_isa(&on);
  return on ? std::string("fp32_") + f32::isa_name(isa) : std::string();
}

torch::Tensor rms_norm_f32(const torch::Tensor& x, const torch::Tensor& w, double eps, f32::Isa isa) {
  need(x.dim() == 2 && x.scalar_type() == torch::kFloat && x.stride(1) == 1 && x.device().is_cpu(), "rms_norm_f32",
       "x must be fp32 [rows, H] on the CPU with contiguous rows");
  need(w.dim() == 1 && w.size(0) == x.size(1) && w.scalar_type() == torch::kFloat && w.is_contiguous(), "rms_norm_f32",
       "w must be fp32 [H], contiguous");
  const int64_t R = x.size(0), H = x.size(1), ldx = x.stride(0);
  auto out = torch::empty({R, H}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const auto& k = f32::kernels(isa);
  for_rows(R, H, [&](int64_t r0, int64_t r1) { k.rms_norm(xp, ldx, wp, H, float(eps), op, H, r0, r1); });
  return out;
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> qkv_rope_f32(const torch::Tensor& qkv, const torch::Tensor& cos,
                                                                     const torch::Tensor& sin, int64_t B, int64_t T,
                                                                     int64_t nh, int64_t nkv, int64_t hd,
                                                                     torch::ScalarType kv_dtype, f32::Isa isa) {
  const int64_t W = (nh + 2 * nkv) * hd;
  need(qkv.dim() == 2 && qkv.size(0) == B * T && qkv.size(1) == W && qkv.scalar_type() == torch::kFloat &&
           qkv.is_contiguous() && qkv.device().is_cpu() && hd % 32 == 0,
       "qkv_rope_f32", "qkv must be fp32 [B * T, (nh + 2 nkv) hd] on the CPU, contiguous, hd a multiple of 32");
  auto table = [&](const torch::Tensor& t) {
    return t.dim() == 2 && t.size(0) == T && t.size(1) == hd / 2 && t.scalar_type() == torch::kFloat && t.is_contiguous();
  };
  need(table(cos) && table(sin), "qkv_rope_f32", "cos and sin must be fp32 [T, hd / 2], contiguous");
  need(kv_dtype == torch::kFloat || kv_dtype == torch::kBFloat16, "qkv_rope_f32", "kv_dtype must be fp32 or bf16");
  const bool kv16 = kv_dtype == torch::kBFloat16;
  const auto o = qkv.options();
  auto q = torch::empty({B, T, nh, hd}, o);
  auto k = torch::empty({B, T, nkv, hd}, o.dtype(kv_dtype)), v = torch::empty({B, T, nkv, hd}, o.dtype(kv_dtype));
  const float* src = qkv.data_ptr<float>();
  const float *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float* qp = q.data_ptr<float>();
  float* kp = kv16 ? nullptr : k.data_ptr<float>();
  float* vp = kv16 ? nullptr : v.data_ptr<float>();
  uint16_t* k16 = kv16 ? bits(k) : nullptr;
  uint16_t* v16 = kv16 ? bits(v) : nullptr;
  const auto& kk = f32::kernels(isa);
  for_rows(B * T, W, [&](int64_t r0, int64_t r1) {
    kk.qkv_rope(src, cp, sp, T, nh, nkv, hd, qp, kp, vp, k16, v16, r0, r1);
  });
  return {q, k, v};
}

torch::Tensor silu_mul_f32(const torch::Tensor& gu, f32::Isa isa) {
  need(gu.dim() == 2 && gu.scalar_type() == torch::kFloat && gu.is_contiguous() && gu.size(1) % 2 == 0 &&
           gu.device().is_cpu(),
       "silu_mul_f32", "gu must be fp32 [rows, 2 I] on the CPU, contiguous");
  const int64_t R = gu.size(0), I = gu.size(1) / 2;
  auto out = torch::empty({R, I}, gu.options());
  const float* gp = gu.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const auto& k = f32::kernels(isa);
  for_rows(R, 2 * I, [&](int64_t r0, int64_t r1) { k.silu_mul(gp, I, op, r0, r1); });
  return out;
}

torch::Tensor attention_f32(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& qpos, int64_t window, double scale, const torch::Tensor& q_len,
                            const torch::Tensor& keep, torch::Tensor* probs, f32::Isa isa) {
  f32::AttnArgs a;
  const detail::AttnHold hold = detail::fill_attn_args("attention_f32", q, k, v, qpos, window, scale, q_len, a);
  need(f32::attention_supported(a), "attention_f32",
       "unsupported shape (head_dim must be a multiple of 32, at most 256; heads a multiple of KV heads)");
  auto out = torch::empty({a.B, a.T, a.nh, a.hd}, q.options());
  a.out = out.data_ptr<float>();
  torch::Tensor keep8;
  if (keep.defined()) {
    need(a.B == 1 && keep.dim() == 2 && keep.size(0) == a.nkv && keep.size(1) == a.S, "attention_f32",
         "keep must be bool [num_kv_heads, S] with a batch of one");
    keep8 = keep.to(torch::kCPU, torch::kUInt8).contiguous();
    a.keep = keep8.data_ptr<uint8_t>();
  }
  if (probs) {
    need(a.B == 1, "attention_f32", "probabilities are written for a batch of one");
    *probs = torch::empty({a.nkv, a.nh / a.nkv * a.T, a.S}, q.options());
    a.probs = probs->data_ptr<float>();
  }
  const size_t bytes = f32::attention_scratch_bytes(a);
  const int64_t units = f32::attention_units(a);
  const auto& kk = f32::kernels(isa);
  detail::deal_units(units, [&](int64_t i, int64_t n) {
    kk.attention(a, i, units, n, detail::thread_scratch(bytes, "attention_f32"));
  });
  return out;
}

void* detail::thread_scratch(size_t bytes, const char* fn) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<void, Free> buf;
  thread_local size_t cap = 0;
  if (cap < bytes) {
    buf.reset(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    cap = buf ? bytes : 0;
    need(buf != nullptr, fn, "out of memory for " + std::to_string(bytes) + " bytes of scratch");
  }
  return buf.get();
}

}  // namespace ucm::model::ops
