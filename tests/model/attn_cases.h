// tests/model/attn_cases.h: attention shapes and random inputs of a shape, for the tests of the
// attention kernels (test_fp32_kernels.cc, test_compute_dtype.cc).
#pragma once
#include <torch/torch.h>

#include <cmath>
#include <cstdint>

namespace ucm::testing {

/// One attention shape: B sequences of T query rows after S - T cached keys, nh query heads over
/// nkv KV heads of head_dim hd, a sliding window (0: none); `what` names it in failures.
struct AttnCase {
  int64_t B, T, S, nh, nkv, hd, window;
  const char* what;
};

/// Random inputs of a case: q [B, T, nh, hd] and k [B, S, nkv, hd] (normal, times 2), v
/// [B, S, nkv, hd] (normal), the query positions S - T .. S - 1 and the scale 1 / sqrt(hd).
struct AttnInputs {
  torch::Tensor q, k, v, qpos;
  double scale;
};

inline AttnInputs random_attn_inputs(const AttnCase& c) {
  AttnInputs in;
  in.q = torch::randn({c.B, c.T, c.nh, c.hd}) * 2;
  in.k = torch::randn({c.B, c.S, c.nkv, c.hd}) * 2;
  in.v = torch::randn({c.B, c.S, c.nkv, c.hd});
  in.qpos = torch::arange(c.S - c.T, c.S, torch::kLong);
  in.scale = 1.0 / std::sqrt(double(c.hd));
  return in;
}

}  // namespace ucm::testing
