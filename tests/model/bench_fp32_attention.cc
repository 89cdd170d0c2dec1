// Time of the fp32 attention kernel (ucm/kernels/cpu/fp32.h) against libtorch doing the same arithmetic with
// BLAS GEMMs (q k^T, mask, softmax, p v per KV head), one thread each, SmolLM2-135M's heads (9
// query heads, 3 KV heads, head_dim 64), causal, T = S in {512, 2048, 8192} (or the one T given).
// The kernel's time is the best of 5 runs (the first pays the output's page faults), libtorch's
// the best of 2. Where the CPU runs the bf16 path's hardware kernels (ucm/kernels/cpu/bf16.h), their
// attention on the same operands too (best of 5). Not a test.
// Usage: bench_fp32_attention [ISA: avx512 | avx2 | generic] [T]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "ucm/model/compute.h"
#include "ucm/kernels/cpu/bf16.h"
#include "ucm/kernels/cpu/fp32.h"

namespace f32 = ucm::kernels::cpu::f32;

int main(int argc, char** argv) {
  ucm::model::restart_with_blas_core(argv, true);
  at::set_num_threads(1);
  ucm::model::set_blas_threads(1);
  f32::Isa isa = f32::cpu_isa();
  if (argc > 1) isa = std::string(argv[1]) == "generic" ? f32::Isa::kGeneric : std::string(argv[1]) == "avx2" ? f32::Isa::kAvx2 : isa;
  const int64_t nh = 9, nkv = 3, hd = 64, G = nh / nkv;
  std::vector<int64_t> sizes{512, 2048, 8192};
  if (argc > 2) sizes = {std::stoll(argv[2])};
  auto best_of = [](int n, auto&& fn) {  // seconds
    double best = 1e30;
    for (int i = 0; i < n; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  for (int64_t T : sizes) {
    auto q = torch::randn({1, T, nh, hd}), k = torch::randn({1, T, nkv, hd}), v = torch::randn({1, T, nkv, hd});
    auto pos = torch::arange(T, torch::kLong);
    auto out = torch::empty({1, T, nh, hd});
    f32::AttnArgs a;
    a.B = 1; a.T = T; a.S = T; a.nh = nh; a.nkv = nkv; a.hd = hd;
    a.q = q.data_ptr<float>(); a.k = k.data_ptr<float>(); a.v = v.data_ptr<float>();
    a.q_sb = q.stride(0); a.q_st = q.stride(1); a.k_sb = k.stride(0); a.k_st = k.stride(1);
    a.v_sb = v.stride(0); a.v_st = v.stride(1);
    a.out = out.data_ptr<float>(); a.qpos = pos.data_ptr<int64_t>(); a.scale = 0.125f;
    std::vector<float> scratch(f32::attention_scratch_bytes(a) / 4 + 64);
    void* p = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64);
    const double kern = best_of(5, [&] { f32::kernels(isa).attention(a, 0, f32::attention_units(a), 1, p); });
    // libtorch: per KV head, scores [G T, S] = q k^T * scale, causal mask, softmax, p v.
    c10::InferenceMode guard;
    auto mask = torch::ones({T, T}, torch::kBool).triu(1);
    const double lib = best_of(2, [&] {
      for (int64_t h = 0; h < nkv; ++h) {
        auto qh = q[0].narrow(1, h * G, G).permute({1, 0, 2}).reshape({G, T, hd}) * 0.125;  // [G, T, hd]
        auto kh = k[0].select(1, h), vh = v[0].select(1, h);                                   // [S, hd]
        auto sc = torch::matmul(qh, kh.t()).masked_fill_(mask, -std::numeric_limits<float>::infinity());
        auto o = torch::matmul(sc.softmax(-1), vh);  // [G, T, hd]
        (void)o;
      }
    });
    const double flop = 4.0 * nh * hd * double(T) * double(T + 1) / 2;  // q k^T and p v over the causal half
    // The bf16 path's kernel (ucm/kernels/cpu/bf16.h) on the same operands, where the CPU runs its hardware path.
    double k16 = 0;
    if (ucm::kernels::cpu::hardware_kernels()) {
      namespace cpu = ucm::kernels::cpu;
      cpu::AttnArgs b;
      b.B = 1; b.T = T; b.S = T; b.nh = nh; b.nkv = nkv; b.hd = hd;
      b.q = a.q; b.k = a.k; b.v = a.v;
      b.q_sb = a.q_sb; b.q_st = a.q_st; b.k_sb = a.k_sb; b.k_st = a.k_st; b.v_sb = a.v_sb; b.v_st = a.v_st;
      std::vector<uint16_t> out16(size_t(T * nh * hd));
      b.out = out16.data(); b.qpos = a.qpos; b.scale = 0.125f;
      std::vector<float> s16(cpu::attention_scratch_bytes(b) / 4 + 64);
      void* p16 = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(s16.data()) + 63) / 64 * 64);
      k16 = best_of(5, [&] { cpu::attention_bf16(b, 0, cpu::attention_units(b), 1, p16); });
    }
    const double flop0 = 4.0 * nh * hd * double(T) * double(T + 1) / 2;
    if (k16 > 0) std::printf("T %5lld: bf16 kernel %8.1f ms (%5.1f GFLOP/s)\n", (long long)T, k16 * 1e3, flop0 / k16 / 1e9);
    std::printf("T %5lld: kernel (%s) %8.1f ms (%5.1f GFLOP/s), libtorch %8.1f ms (%5.1f GFLOP/s), kernel/libtorch %.2f\n",
                (long long)T, f32::isa_name(isa), kern * 1e3, flop / kern / 1e9, lib * 1e3, 2 * flop / lib / 1e9, kern / lib);
  }
  return 0;
}
