// pipelines/model/compute.h: which dtype the runner's GEMMs use (LlamaModel::load's `compute`),
// chosen from what the CPU offers, and the intra-op threads of libtorch. Internal to ucm_model.
#pragma once
#include <torch/torch.h>

#include <set>
#include <string>

namespace ucm::model {

/// The CPU's bf16 matrix instructions, from /proc/cpuinfo's flags: "amx_bf16" (AMX tiles,
/// Sapphire Rapids and later), "avx512_bf16" (Cooper Lake, Zen 4), or "" (none: bf16 GEMMs would
/// be emulated, slower than fp32). Where oneDNN is capped below them (onednn_isa_cap()), the
/// instructions its bf16 GEMMs will use: avx512_bf16 at AVX512_CORE_BF16 or AVX512_CORE_FP16
/// (how an AMX machine stands in for one without), "" below those.
std::string cpu_bf16_isa();

/// /proc/cpuinfo's vendor_id ("GenuineIntel", "AuthenticAMD"); "" when unreadable.
std::string cpu_vendor();

/// cpu_vendor() is "AuthenticAMD".
bool cpu_is_amd();

/// ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA), upper-cased; "" when unset, ALL or DEFAULT.
std::string onednn_isa_cap();

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

/// The cores this process may run on (sched_getaffinity; 1 if unknown).
int usable_cores();

/// The core whose kernels the loaded OpenBLAS (libtorch's fp32 BLAS on Debian) runs, e.g.
/// "SkylakeX", "Haswell", "Prescott"; "" when the process has no OpenBLAS.
std::string blas_core_name();

/// Sets the threads of the loaded OpenBLAS's GEMMs (openblas_set_num_threads: process-wide) to
/// n >= 1. n = 1: each GEMM runs in its caller's thread, so prefill workers on their own threads
/// each run their own GEMMs side by side (LlamaModel::set_prefill_workers), and no OpenBLAS thread
/// spins in sched_yield while a worker does element-wise work (fp32 prefill, 2 cores, 2026-11-29:
/// 24% of the CPU time in the kernel, mostly sched_yield, with OpenBLAS's two threads). Returns
/// false when the process has no OpenBLAS.
bool set_blas_threads(int n);

/// The loaded OpenBLAS's GEMM threads (openblas_get_num_threads); 0 when the process has none.
int blas_threads();

/// OpenBLAS picks its GEMM kernels once, when it loads, from the CPU model, and falls back to
/// its SSE3 "Prescott" kernels for a model it does not know: OpenBLAS 0.3.21 (Debian 12) does so
/// on this project's "Intel(R) Xeon(R) Processor" VMs, which have AVX-512; its fp32 GEMMs then run
/// about 6x slower than with its SkylakeX kernels (measured: 9 vs 54 GFLOP/s, 1024x576x1536). On
/// AMD Zen 5 it picks Cooperlake (AVX-512) itself; were it to pick its AVX2 cores there (Haswell,
/// Zen: what OPENBLAS_CORETYPE=Haswell gives), the fp32 prefill would run 1.3-1.4x slower
/// (measured 2026-11-27: 666-747 against 949-988 tokens/s).
/// Returns the OPENBLAS_CORETYPE this process should have been started with when OPENBLAS_CORETYPE
/// is not set: "SkylakeX" when /proc/cpuinfo has avx512f, avx512bw, avx512vl and avx512dq and the
/// loaded OpenBLAS chose a core without AVX-512 kernels (pre-AVX2, Haswell or Zen); "Haswell" with
/// avx2 and fma when it chose a pre-AVX2 core; "" otherwise (nothing to mend).
std::string blas_core_override();

/// blas_core_override()'s rule on its inputs: `core` the loaded OpenBLAS's (blas_core_name()),
/// `cpu_flags` /proc/cpuinfo's flags.
std::string blas_core_for(const std::string& core, const std::set<std::string>& cpu_flags);

/// The OpenBLAS core that runs a model's GEMMs: blas_core_name() for fp32 on the CPU, else "".
std::string blas_core_of(torch::Device dev, torch::ScalarType compute);

/// When OPENBLAS_CORETYPE is set to a core whose kernels this CPU outgrows (blas_core_for() would
/// replace it: e.g. Haswell on an AVX-512 CPU, as some machines' environments set it), a message
/// saying so and what to do; "" otherwise. The fp32 compute path logs it at warn: the value is
/// left alone, as any value set by hand.
std::string blas_core_warning();

/// For a main() that links libtorch, before anything else: when blas_core_override() names a
/// core, sets OPENBLAS_CORETYPE to it and re-executes /proc/self/exe with the same argv (OpenBLAS
/// reads the variable only when it loads). Returns when there is nothing to mend or the exec
/// fails (the run then goes on with the kernels it has, logged at warn).
void restart_with_blas_core(char** argv);

/// For a main() that links libtorch, before any command: "" when the process's std::filesystem
/// functions are libstdc++.so.6's own, else a message naming the library whose copy the global
/// lookup found first and what to do. A pip PyTorch's libtorch.so exports 64 std::filesystem
/// functions of the manylinux toolchain's static libstdc++ parts; an executable that names it
/// before libstdc++.so.6 binds every std::filesystem call (libucm's too) to that copy, and its
/// remove_all jumps through a null pointer (ucm bench precompute with torch 2.11: docs/device.md).
/// The build puts libstdc++ first in every link (CMakeLists.txt), so this finds nothing unless a
/// link bypassed that; the binary then refuses to run instead of crashing in the middle.
std::string cxx_runtime_conflict();

}  // namespace ucm::model
