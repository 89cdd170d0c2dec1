// pipelines/model/llama_ops.h: the tensor operations the prefill (llama_model.cc) and the
// cached forward (llama_cache.cc) share. Internal to ucm_model.
#pragma once
#include <torch/torch.h>

namespace ucm::model::ops {

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

}  // namespace ucm::model::ops
