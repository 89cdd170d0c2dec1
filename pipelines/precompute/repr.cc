// R4 projection generator (see repr.h). The encoder is libucm's (lib/src/repr_encode.cc).
#include "ucm/precompute/repr.h"

#include <torch/torch.h>

#include <cmath>
#include <random>

namespace ucm::precompute {

std::vector<float> make_projection(uint32_t L, uint32_t H, uint32_t D, uint32_t B, uint64_t seed) {
  std::vector<float> P(size_t{L} * H * D * B);
  std::mt19937_64 rng(seed);
  const double two_pi = 6.283185307179586476925286766559;
  const double inv53 = 1.0 / 9007199254740992.0;  // 2^-53
  bool have_spare = false;
  double spare = 0;
  auto gauss = [&]() {
    if (have_spare) {
      have_spare = false;
      return spare;
    }
    const double u1 = double((rng() >> 11) + 1) * inv53;  // (0, 1]
    const double u2 = double(rng() >> 11) * inv53;        // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare = r * std::sin(two_pi * u2);
    have_spare = true;
    return r * std::cos(two_pi * u2);
  };
  const uint32_t nblk = (B + D - 1) / D;
  torch::NoGradGuard ng;
  for (uint32_t l = 0; l < L; ++l)
    for (uint32_t h = 0; h < H; ++h)
      for (uint32_t c = 0; c < nblk; ++c) {
        auto G = torch::empty({D, D}, torch::kFloat64);
        double* g = G.data_ptr<double>();
        for (size_t i = 0; i < size_t{D} * D; ++i) g[i] = gauss();
        auto [Q, R] = torch::linalg_qr(G, "reduced");
        auto sgn = torch::sign(torch::diagonal(R));
        sgn = torch::where(sgn == 0, torch::ones_like(sgn), sgn);
        Q = (Q * sgn.unsqueeze(0)).contiguous();
        const double* q = Q.data_ptr<double>();
        float* p = P.data() + (size_t{l} * H + h) * D * B;
        for (uint32_t j = c * D; j < std::min(B, (c + 1) * D); ++j)
          for (uint32_t d = 0; d < D; ++d) p[size_t{d} * B + j] = static_cast<float>(q[size_t{d} * D + (j - c * D)]);
      }
  return P;
}

}  // namespace ucm::precompute
