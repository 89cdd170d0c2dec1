// kernels/include/ucm/kernels/cpu/switches.h: every environment variable that changes which CPU
// code ucm runs, read in this one place (kernels/cpu/switches.cc). Each field is the variable's
// value as set ("" when unset). Most are test and measurement switches; none is needed in
// production. Whoever caches a choice says so where it is used (e.g. f32::best_isa(): once per
// process); the others read the environment at each call, so a test may flip them.
#pragma once
#include <string>

namespace ucm::kernels::cpu {

struct Switches {
  /// UCM_FP32_KERNELS: "avx512" | "avx2" | "generic" caps the fp32 kernels' ISA, "0" turns them
  /// off (the model then runs libtorch's ops). Read once per process (f32::best_isa()).
  std::string fp32_kernels;
  /// UCM_CPU_NO_BF16: "1" makes the bf16 kernels act as on a CPU without AVX512-BF16 (the
  /// portable twin runs; ops::fast_bf16() is false). Read once per process (hardware_kernels()).
  std::string no_bf16;
  /// UCM_BF16_KERNELS: "portable" runs the bf16 kernels' portable twin where the hardware ones
  /// could run (same bits, slower; read at each call: kernel_path()), also on a CPU without
  /// AVX512-BF16; "0" runs libtorch's ops instead of them (read when a model loads).
  std::string bf16_kernels;
  /// UCM_BF16_DOT: "dp" (vdpbf16ps) or "fma" (two FMAs) for the hardware bf16 attention's dot
  /// products; unset: dp on AMD, fma on Intel. Read at each call.
  std::string bf16_dot;
  /// ONEDNN_MAX_CPU_ISA, else DNNL_MAX_CPU_ISA: oneDNN's own cap (libtorch's bf16 GEMMs).
  std::string onednn_max_isa;
  /// OPENBLAS_CORETYPE: the OpenBLAS core the environment names (ucm/model/cpu_runtime.h says
  /// what ucm does about it).
  std::string openblas_coretype;
  /// UCM_BLAS_CORE: "keep" keeps the environment's OPENBLAS_CORETYPE.
  std::string blas_core;
  /// UCM_OPENBLAS_CORETYPE_WAS: set by ucm itself when it restarted with another core.
  std::string openblas_coretype_was;
  /// OMP_NUM_THREADS: libtorch's OpenMP threads, when set (ucm/model/compute.h).
  std::string omp_num_threads;
};

/// The switches as the environment holds them now.
Switches read_switches();

}  // namespace ucm::kernels::cpu
