#include "ucm/model/compute.h"

#include "ucm/kernels/cpu/switches.h"

#include <cstdlib>
#include <stdexcept>

namespace ucm::model {

ComputeChoice choose_compute(const std::string& want, torch::Device dev) {
  if (want != "auto" && want != "bf16" && want != "fp32")
    throw std::invalid_argument("compute dtype \"" + want + "\": use auto, bf16 or fp32");
  const std::string isa = dev.is_cuda() ? "cuda" : cpu_bf16_isa();
  // auto: bf16 where the bf16 units beat fp32 (compute.h): AMX, CUDA, and AVX512-BF16 on AMD
  // (Zen 4 and later: vdpbf16ps does twice fp32 FMA's work per cycle; measured on Zen 5,
  // 2026-11-27, docs/benchmarks.md). Not AVX512-BF16 alone on Intel: with oneDNN capped at
  // AVX512_CORE_BF16 on the AMX machine (2026-11-27) the bf16 prefill ran 503 tokens/s against
  // fp32's 552.
  const bool bf16_wins = isa == "amx_bf16" || isa == "cuda" || (isa == "avx512_bf16" && cpu_is_amd());
  if (want == "fp32" || (want == "auto" && !bf16_wins)) return {torch::kFloat, "fp32", "fp32"};
  const std::string cap = onednn_isa_cap();
  if (isa.empty())
    throw std::invalid_argument(
        "compute dtype bf16: this CPU has neither AMX-BF16 nor AVX512-BF16 (CPUID" +
        (cap.empty() ? std::string() : ", or oneDNN is capped below them: ONEDNN_MAX_CPU_ISA=" + cap) +
        "), so bf16 GEMMs would be emulated and slower than fp32; use --compute-dtype fp32 or auto");
  return {torch::kBFloat16, "bf16", isa};
}

int set_compute_threads(int n, bool blas_gemms) {
  if (n <= 0) {
    if (!kernels::cpu::read_switches().omp_num_threads.empty()) return at::get_num_threads();
  }
  if (n <= 0 && blas_gemms) n = 1;
  if (n <= 0) {
    const int cores = usable_cores();
    n = cores > 1 ? cores - 1 : 1;
  }
  at::set_num_threads(n);
  return at::get_num_threads();
}

std::string blas_core_of(torch::Device dev, torch::ScalarType compute) {
  return dev.is_cpu() && compute == torch::kFloat ? blas_core_name() : "";
}

}  // namespace ucm::model
