// pipelines/model/include/ucm/model/compute.h: which dtype the runner's GEMMs use (LlamaModel::load's `compute`),
// chosen from what the CPU offers, and the intra-op threads of libtorch. Internal to ucm_model.
// What needs no libtorch (the CPU's ISA, OpenBLAS, the C++ runtime check) is in cpu_runtime.h.
#pragma once
#include <torch/torch.h>

#include <string>

#include "ucm/model/cpu_runtime.h"  // the CPU's ISA, OpenBLAS's core and threads, the C++ runtime check

namespace ucm::model {

/// What a run computes with, and why.
struct ComputeChoice {
  torch::ScalarType dtype = torch::kFloat;  ///< kFloat or kBFloat16
  std::string name;                         ///< "fp32" | "bf16"
  std::string path;  ///< what runs the GEMMs: "amx_bf16", "avx512_bf16", "cuda", or "fp32" (the fallback)
};

/// Resolves --compute-dtype: "auto" (bf16 where the device has bf16 matrix units that beat fp32:
/// a CUDA device, a CPU with AMX-BF16, or an AMD CPU with AVX512-BF16 (Zen 4 and later, whose
/// vdpbf16ps does twice an fp32 FMA's work per cycle: measured on Zen 5, bf16 2.5x fp32); fp32
/// otherwise, Intel's AVX512-BF16 without AMX included, where the bf16 prefill measured no faster
/// than fp32), "bf16" (on AMX-BF16 or AVX512-BF16; refused with a reason on a CPU without either:
/// it would be emulated, slower than fp32), or "fp32". Throws std::invalid_argument naming the
/// value and the choices.
ComputeChoice choose_compute(const std::string& want, torch::Device dev);

/// Sets libtorch's intra-op threads (its OpenMP threads: element-wise ops, oneDNN's bf16 GEMMs) to
/// `n`, or, for n = 0 and OMP_NUM_THREADS unset, to:
///  * 1 when blas_gemms (fp32 on the CPU): OpenBLAS runs those GEMMs on its own threads (every
///    core, OPENBLAS_NUM_THREADS), and OpenMP threads spinning between ops beside them halve the
///    prefill (measured, SmolLM2 fp32, 2 cores: 164-200 tokens/s with 2 OpenMP threads, 291 with 1);
///  * otherwise (bf16: oneDNN's GEMMs) every core this process may run on (sched_getaffinity;
///    libgomp counts 1 on some 2-vCPU machines) but one, which precompute's parallel stage (K/V
///    conversion, hashes, representations, dumps) keeps busy: measured on 2 cores, 2026-11-27,
///    `ucm bench precompute --docs 8 --compute-dtype bf16`, alternating, 1 thread against 2: bare
///    prefill 672 / 548 / 790 against 399 / 393 / 550 tokens/s, full precompute 657 / 577 / 713
///    against 326 / 332 / 363.
/// Returns the count in effect.
int set_compute_threads(int n, bool blas_gemms = false);

/// The OpenBLAS core that runs a model's GEMMs: blas_core_name() for fp32 on the CPU, else "".
std::string blas_core_of(torch::Device dev, torch::ScalarType compute);

}  // namespace ucm::model
