// Throughput of ucm::model::LlamaModel::forward (K/V only, no logits) on CPU.
// Usage: bench_model [MODEL_DIR]   (default: $UCM_MODEL_DIR or <repo>/models/SmolLM2-135M-Instruct)
// Prints tokens/s for a 4 x 512 batch and a single 4096-token sequence (best of 2 runs
// after one warm-up of the smaller shape), random token ids.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ucm/model/compute.h"
#include "ucm/model/llama_model.h"
#include "real_data.h"  // model_dir(): $UCM_MODEL_DIR or the source tree's models/

int main(int argc, char** argv) {
  ucm::model::restart_with_blas_core(argv, true);  // OpenBLAS's kernels for this CPU, as ucm-torch
  const std::string dir = argc > 1 && *argv[1] ? argv[1] : ucm::test::model_dir();
  try {
    auto m = ucm::model::LlamaModel::load(dir);
    std::printf("model %s, digest %s, torch threads %d\n", dir.c_str(), m->weights_digest().c_str(),
                at::get_num_threads());
    torch::manual_seed(0);
    auto run = [&](int64_t B, int64_t T, int reps) {
      auto ids = torch::randint(0, m->config().vocab_size, {B, T}, torch::kLong);
      auto len = torch::full({B}, T, torch::kLong);
      double best = 1e30;
      for (int r = 0; r < reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        auto out = m->forward(ids, len, false);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::min(best, s);
      }
      std::printf("B=%lld T=%lld: %.3f s, %.1f tokens/s\n", static_cast<long long>(B), static_cast<long long>(T), best,
                  static_cast<double>(B * T) / best);
    };
    run(1, 64, 1);  // warm-up
    run(4, 512, 2);
    run(1, 4096, 2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
