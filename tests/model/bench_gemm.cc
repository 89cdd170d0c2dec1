// The fp32 GEMMs of a model's prefill, through both of libtorch's CPU routes: torch::linear
// (OpenBLAS on Debian: what ucm's fp32 path runs) and torch::mkldnn_linear with the weight
// reordered once into oneDNN's layout (to_mkldnn, as torch.utils.mkldnn does; the activation
// converted in and the output back out on every call, timed with it). Issue 40: "fp32 GEMMs through
// the faster of OpenBLAS and oneDNN (through libtorch) at the model's shapes, measured".
//
// Usage: bench_gemm [MODEL_DIR] [THREADS]   (default: $UCM_MODEL_DIR or <repo>/models/SmolLM2-
// 135M-Instruct; 1 thread, as each prefill worker runs its GEMMs in its own thread). Not built
// by default: cmake --build build --target bench_gemm.
//
// Shapes: M = 128, 512 and 2048 rows (tokens of a batch); per layer the fused q/k/v projection
// [(nh + 2 nkv) hd, H], o [H, nh hd], the fused gate/up [2 I, H] and down [H, I]; the output
// head [vocab, H] at M = 128 only (ucm computes logits for few rows). Best of 5 runs after one
// warm-up, random fp32 values; prints GFLOP/s of each route, their ratio (> 1: oneDNN faster)
// and the largest |difference| of the outputs.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ucm/model/compute.h"
#include "ucm/model/llama_model.h"
#include "real_data.h"  // model_dir(): $UCM_MODEL_DIR or the source tree's models/

namespace {

template <typename F>
double best_seconds(F&& f) {
  f();
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  ucm::model::restart_with_blas_core(argv, true);  // OpenBLAS's kernels for this CPU, as ucm-torch
  const std::string dir = argc > 1 && *argv[1] ? argv[1] : ucm::test::model_dir();
  const int threads = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1;
  try {
    if (!at::hasMKLDNN()) {
      std::fprintf(stderr, "bench_gemm: this libtorch is built without oneDNN (MKLDNN)\n");
      return 1;
    }
    const auto c = ucm::model::LlamaModel::load(dir)->config();
    at::set_num_threads(threads);
    ucm::model::set_blas_threads(threads);
    torch::NoGradGuard no_grad;
    torch::manual_seed(0);
    const int64_t H = c.hidden_size, hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads,
                  I = c.intermediate_size;
    struct Shape {
      const char* name;
      int64_t n, k;  // weight [n, k]
    };
    const Shape shapes[] = {{"qkv", (nh + 2 * nkv) * hd, H}, {"o", H, nh * hd}, {"gate_up", 2 * I, H},
                            {"down", H, I}, {"lm_head", c.vocab_size, H}};
    std::printf("model %s, %d thread(s), OpenBLAS core %s\n", dir.c_str(), threads,
                ucm::model::blas_core_name().c_str());
    std::printf("%6s %-8s %6s %6s  %12s %12s %7s %9s\n", "M", "gemm", "N", "K", "OpenBLAS", "oneDNN", "ratio",
                "max|diff|");
    double sum_blas = 0, sum_dnn = 0;  // seconds of the per-layer GEMMs at M = 2048
    for (const int64_t M : {int64_t{128}, int64_t{512}, int64_t{2048}}) {
      for (const auto& s : shapes) {
        if (std::string(s.name) == "lm_head" && M != 128) continue;
        const auto x = torch::randn({M, s.k});
        const auto w = torch::randn({s.n, s.k}) * (1.0 / std::sqrt(double(s.k)));
        const auto w_dnn = w.to_mkldnn();
        const auto ref = torch::linear(x, w);
        const auto got = torch::mkldnn_linear(x.to_mkldnn(), w_dnn, {}).to_dense();
        const double diff = (ref - got).abs().max().item<double>();
        const double tb = best_seconds([&] { (void)torch::linear(x, w); });
        const double td = best_seconds([&] { (void)torch::mkldnn_linear(x.to_mkldnn(), w_dnn, {}).to_dense(); });
        const double gflop = 2.0 * double(M) * double(s.k) * double(s.n) / 1e9;
        std::printf("%6lld %-8s %6lld %6lld  %7.1f GF/s %7.1f GF/s %7.2f %9.2g\n", (long long)M, s.name,
                    (long long)s.n, (long long)s.k, gflop / tb, gflop / td, tb / td, diff);
        if (M == 2048 && std::string(s.name) != "lm_head") {
          sum_blas += tb;
          sum_dnn += td;
        }
      }
    }
    std::printf("a layer's four GEMMs at M = 2048: OpenBLAS %.2f ms, oneDNN %.2f ms (oneDNN / OpenBLAS speed %.2f)\n",
                1e3 * sum_blas, 1e3 * sum_dnn, sum_blas / sum_dnn);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
