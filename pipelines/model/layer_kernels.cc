// pipelines/model/layer_kernels.cc: see layer_kernels.h. The libtorch row's attention is the
// eager attention of transformers' LlamaAttention in query chunks; the CPU rows call the kernels
// of kernels/cpu through their libtorch glue (cpu_bf16_ops.cc, cpu_fp32_ops.cc).
#include "layer_kernels.h"

#include <algorithm>
#include <limits>

#include "ucm/kernels/cpu/switches.h"
#include "ucm/model/llama_model.h"
#include "ucm/model/llama_ops.h"

namespace ucm::model {
namespace {

using kernels::cpu::Bf16Path;
namespace f32 = kernels::cpu::f32;
using torch::Tensor;

// ---- libtorch: any device and dtype (ops::linear rounds to the weights' dtype) ----

QKV torch_project_rope(const Tensor& h, const Tensor& w, const Tensor& b, const Tensor& cos, const Tensor& sin,
                       int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, torch::ScalarType) {
  auto qkv = ops::linear(h, w, b);
  auto q = qkv.narrow(1, 0, nh * hd).view({B, T, nh, hd});
  auto k = qkv.narrow(1, nh * hd, nkv * hd).view({B, T, nkv, hd});
  return {ops::apply_rope(q, cos, sin), ops::apply_rope(k, cos, sin),
          qkv.narrow(1, (nh + nkv) * hd, nkv * hd).view({B, T, nkv, hd})};
}

Tensor torch_silu_mul(const Tensor& gu) {
  const int64_t I = gu.size(1) / 2;
  return torch::silu(gu.narrow(1, 0, I)).mul_(gu.narrow(1, I, I));
}

// Query chunks bound the score block [B, nkv, G*n, <= S]. With bf16 GEMMs, attention's fp32 work
// (mask, softmax, conversions) dominates: chunks of at most kCausalChunk rows skip the keys after
// each chunk (about half the score block of a long prompt). The fp32 path keeps one block per
// budget (its GEMMs dominate). The softmax scale is applied to q (T*nh*hd values) rather than to
// the score blocks: one pass less over the scores; 1/sqrt(hd) is a power of two for hd = 64, 256
// (bit-identical to scaling the scores), otherwise it differs by fp32 rounding only.
Tensor torch_attention(const AttnCall& a) {
  const int64_t B = a.q.size(0), T = a.q.size(1), nh = a.q.size(2), hd = a.q.size(3);
  const int64_t S = a.k.size(1), nkv = a.k.size(2), G = nh / nkv;
  const auto ct = a.compute;
  const auto dev = a.q.device();
  const float ninf = -std::numeric_limits<float>::infinity();
  // Keys K^T [B, nkv, hd, S] and values [B, nkv, S, hd] in the compute dtype (exact for a bf16
  // cache). A few query rows (decode) read a cache through strided views (BLAS takes them as they
  // are): a contiguous copy would move the whole cache through memory once per layer and token.
  auto kt = a.k.to(ct).permute({0, 2, 3, 1});
  auto vh = a.v.to(ct).permute({0, 2, 1, 3});
  if (!a.strided) {
    kt = kt.contiguous();
    vh = vh.contiguous();
  }
  const Tensor keep = a.keep.defined() ? a.keep.to(dev, torch::kBool) : a.keep;
  auto posc = a.pos.cpu();
  const int64_t* pp = posc.data_ptr<int64_t>();
  const int64_t budget_rows = std::max<int64_t>(16, a.score_budget / (B * nh * S));
  const int64_t chunk =
      std::min<int64_t>(T, ct == torch::kFloat ? budget_rows : std::min(budget_rows, LlamaModel::kCausalChunk));
  auto kpos = torch::arange(0, S, torch::TensorOptions().dtype(torch::kLong).device(dev));  // [S]
  auto qh = (a.q * a.scale).to(ct).view({B, T, nkv, G, hd}).permute({0, 2, 3, 1, 4});  // [B, nkv, G, T, hd]
  auto attn = torch::empty({B, T, nkv, G, hd}, a.q.options().dtype(ct));  // o_proj's input, in its dtype
  for (int64_t s = 0; s < T; s += chunk) {
    const int64_t n = std::min(chunk, T - s), e = pp[s + n - 1] + 1;  // keys [0, e) can be visible
    auto qc = qh.narrow(3, s, n).reshape({B, nkv, G * n, hd});
    auto sc = ops::attn_matmul(qc, kt.narrow(3, 0, e), ct);  // [B, nkv, G*n, e] fp32
    auto sc5 = sc.view({B, nkv, G, n, e});
    auto qi = a.pos.narrow(0, s, n).unsqueeze(1);  // [n, 1]
    if (a.window > 0) {
      auto kj = kpos.narrow(0, 0, e).unsqueeze(0);  // [1, e]
      sc5.masked_fill_((kj > qi).logical_or(qi - kj >= a.window), ninf);
    } else {
      // Causal: keys before the chunk's first query are visible to every query of the chunk
      // (positions ascend); only keys [pp[s], e) need the mask.
      const int64_t f = pp[s];
      auto kj = kpos.narrow(0, f, e - f).unsqueeze(0);  // [1, e - f]
      sc5.narrow(4, f, e - f).masked_fill_(kj > qi, ninf);
    }
    if (keep.defined()) sc5.masked_fill_(keep.narrow(1, 0, e).logical_not().view({1, nkv, 1, 1, e}), ninf);
    auto p = sc.softmax(-1);
    if (a.observe) (*a.observe)(p.view({nkv, G * n, e}));
    auto o = ops::attn_matmul(p, vh.narrow(2, 0, e), ct);  // [B, nkv, G*n, hd]
    attn.narrow(1, s, n).copy_(o.view({B, nkv, G, n, hd}).permute({0, 3, 1, 2, 4}));
  }
  return attn.view({B * T, nh * hd});
}

// K/V as the CPU kernels read them: fp32 or bf16 as they are, fp16 widened (exact).
Tensor kernel_kv(const Tensor& t) {
  return t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kBFloat16 ? t : t.to(torch::kFloat);
}

// ---- bf16 on the CPU: one row per implementation (Bf16Path) ----

template <Bf16Path P>
struct Bf16 {
  static Tensor norm(const Tensor& x, const Tensor& w, double eps) { return ops::rms_norm_bf16(x, w, eps, P); }
  static QKV project_rope(const Tensor& h, const Tensor& w, const Tensor& b, const Tensor& cos, const Tensor& sin,
                          int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, torch::ScalarType kv_dtype) {
    return ops::qkv_rope(ops::mm_bf16(h, w), b, cos, sin, B, T, nh, nkv, hd, kv_dtype, P);
  }
  static Tensor linear(const Tensor& h, const Tensor& w) { return ops::mm_bf16(h, w); }
  static void add_linear(Tensor& x, const Tensor& a, const Tensor& w) { ops::add_bf16_(x, ops::mm_bf16(a, w), P); }
  static Tensor silu_mul(const Tensor& gu) { return ops::silu_mul_bf16(gu, P); }
  static Tensor attention(const AttnCall& a) {
    if (a.keep.defined() || a.observe) throw ModelError("the bf16 CPU kernels take no key mask and no observer");
    auto o = ops::attention_bf16(a.q, kernel_kv(a.k), kernel_kv(a.v), a.pos, a.window, a.scale, a.q_len, P);
    return o.view({o.size(0) * o.size(1), o.size(2) * o.size(3)});
  }
  static constexpr LayerKernels row(const char* name) {
    return {name, torch::kBFloat16, 0, norm, project_rope, linear, add_linear, silu_mul, attention};
  }
};

// ---- fp32 on the CPU: one row per ISA ----

template <f32::Isa I>
struct Fp32 {
  static Tensor norm(const Tensor& x, const Tensor& w, double eps) { return ops::rms_norm_f32(x, w, eps, I); }
  static QKV project_rope(const Tensor& h, const Tensor& w, const Tensor& b, const Tensor& cos, const Tensor& sin,
                          int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, torch::ScalarType kv_dtype) {
    return ops::qkv_rope_f32(ops::linear_f32(h, w, b), cos, sin, B, T, nh, nkv, hd, kv_dtype, I);
  }
  static Tensor linear(const Tensor& h, const Tensor& w) { return ops::linear_f32(h, w); }
  static void add_linear(Tensor& x, const Tensor& a, const Tensor& w) { ops::add_linear_f32_(x, a, w); }
  static Tensor silu_mul(const Tensor& gu) { return ops::silu_mul_f32(gu, I); }
  static Tensor attention(const AttnCall& a) {
    Tensor probs;
    auto o = ops::attention_f32(a.q, kernel_kv(a.k), kernel_kv(a.v), a.pos, a.window, a.scale, a.q_len, a.keep,
                                a.observe ? &probs : nullptr, I);  // fp32 [B, T, nh, hd]
    if (a.observe) (*a.observe)(probs);  // [nkv, G * T, S]: one query chunk of every row
    return o.view({o.size(0) * o.size(1), o.size(2) * o.size(3)});
  }
  static constexpr LayerKernels row(const char* name) {
    return {name, torch::kFloat, 1 | 2, norm, project_rope, linear, add_linear, silu_mul, attention};
  }
};

// The table (layer_kernels.h).
const LayerKernels kLibtorch{"libtorch",
                             torch::ScalarType::Undefined,
                             1 | 2 | 4,
                             [](const Tensor& x, const Tensor& w, double eps) { return ops::rms_norm(x, w, eps); },
                             torch_project_rope,
                             [](const Tensor& h, const Tensor& w) { return ops::linear(h, w); },
                             ops::add_linear_,
                             torch_silu_mul,
                             torch_attention};
const LayerKernels kBf16Avx512 = Bf16<Bf16Path::kHardware>::row("avx512_bf16");
const LayerKernels kBf16Portable = Bf16<Bf16Path::kPortable>::row("bf16_portable");
const LayerKernels kFp32Avx512 = Fp32<f32::Isa::kAvx512>::row("fp32_avx512");
const LayerKernels kFp32Avx2 = Fp32<f32::Isa::kAvx2>::row("fp32_avx2");
const LayerKernels kFp32Generic = Fp32<f32::Isa::kGeneric>::row("fp32_generic");

}  // namespace

const LayerKernels& libtorch_layer_kernels() { return kLibtorch; }

const LayerKernels& choose_layer_kernels(torch::ScalarType compute, torch::Device dev, int64_t head_dim) {
  if (!dev.is_cpu() || head_dim % 32 != 0 || head_dim > 256) return kLibtorch;
  if (compute == torch::kBFloat16) {
    const std::string want = kernels::cpu::read_switches().bf16_kernels;  // "0", "portable" or unset
    if (want == "0") return kLibtorch;
    if (want == "portable") return kBf16Portable;
    return kernels::cpu::hardware_kernels() ? kBf16Avx512 : kLibtorch;
  }
  if (compute != torch::kFloat) return kLibtorch;
  bool on = false;
  const f32::Isa isa = f32::best_isa(&on);  // UCM_FP32_KERNELS, read once per process
  if (!on) return kLibtorch;
  return isa == f32::Isa::kAvx512 ? kFp32Avx512 : isa == f32::Isa::kAvx2 ? kFp32Avx2 : kFp32Generic;
}

}  // namespace ucm::model
