// kernels/cpu/switches.cc: see ucm/kernels/cpu/switches.h.
#include "ucm/kernels/cpu/switches.h"

#include <cstdlib>

namespace ucm::kernels::cpu {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

Switches read_switches() {
  Switches s;
  s.fp32_kernels = env("UCM_FP32_KERNELS");
  s.no_bf16 = env("UCM_CPU_NO_BF16");
  s.bf16_kernels = env("UCM_BF16_KERNELS");
  s.bf16_dot = env("UCM_BF16_DOT");
  s.onednn_max_isa = env("ONEDNN_MAX_CPU_ISA");
  if (s.onednn_max_isa.empty()) s.onednn_max_isa = env("DNNL_MAX_CPU_ISA");
  s.openblas_coretype = env("OPENBLAS_CORETYPE");
  s.blas_core = env("UCM_BLAS_CORE");
  s.openblas_coretype_was = env("UCM_OPENBLAS_CORETYPE_WAS");
  s.omp_num_threads = env("OMP_NUM_THREADS");
  return s;
}

}  // namespace ucm::kernels::cpu
