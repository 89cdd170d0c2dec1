// pipelines/model/include/ucm/model/cpu_runtime.h: what the CPU offers (CPUID), the loaded OpenBLAS's core
// and threads, and the start-up checks of a main() that links libtorch (OpenBLAS's kernels, the
// C++ runtime). The CPU's own features are the CPU kernels' (ucm/kernels/cpu/features.h). Needs no libtorch header: a main() or a test that calls only these compiles in
// about a second, where <torch/torch.h> alone costs 14 s of CPU (compute.h includes this header).
// Internal to ucm_model.
#pragma once
#include <set>
#include <string>

#include "ucm/kernels/cpu/features.h"

namespace ucm::model {

// The CPU's features (cpu_flags(), cpu_bf16_isa(), cpu_vendor(), cpu_is_amd(), onednn_isa_cap(),
// usable_cores()) are the CPU kernels' (ucm/kernels/cpu/features.h), named here too.
using ::ucm::kernels::cpu::cpu_bf16_isa;
using ::ucm::kernels::cpu::cpu_flags;
using ::ucm::kernels::cpu::cpu_is_amd;
using ::ucm::kernels::cpu::cpu_vendor;
using ::ucm::kernels::cpu::onednn_isa_cap;
using ::ucm::kernels::cpu::usable_cores;

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
/// is not set: "SkylakeX" when cpu_flags() has avx512f, avx512bw, avx512vl and avx512dq and the
/// loaded OpenBLAS chose a core without AVX-512 kernels (pre-AVX2, Haswell or Zen); "Haswell" with
/// avx2 and fma when it chose a pre-AVX2 core; "" otherwise (nothing to mend).
std::string blas_core_override();

/// blas_core_override()'s rule on its inputs: `core` the loaded OpenBLAS's (blas_core_name()),
/// `cpu_flags` as cpu_flags() gives them.
std::string blas_core_for(const std::string& core, const std::set<std::string>& cpu_flags);

/// The core ucm-torch runs instead of an OPENBLAS_CORETYPE set in the environment: blas_core_for()
/// of that value (e.g. "SkylakeX" for Haswell or Zen on an AVX-512 CPU: some machines' environments
/// set OPENBLAS_CORETYPE=Haswell on AMD Zen 4/5, for older OpenBLAS builds), when the loaded OpenBLAS
/// is 0.3.21 or newer (older builds are what such a variable is set for: their choice is left
/// alone); "" when the variable is unset, names nothing this CPU outgrows, or UCM_BLAS_CORE=keep.
std::string blas_core_replacing_environment();

/// Whether openblas_get_config()'s text ("OpenBLAS 0.3.21 DYNAMIC_ARCH ...") names a version at
/// least major.minor.patch; false when it names none.
bool blas_version_at_least(const std::string& config, int major, int minor, int patch);

/// The environment's OPENBLAS_CORETYPE that restart_with_blas_core() replaced before this process
/// started (UCM_OPENBLAS_CORETYPE_WAS, which it sets); "" when none was replaced.
std::string blas_core_replaced();

/// When blas_core_replaced() names a value: one line saying which core the environment named, which
/// runs instead, what that is worth and how to keep the environment's; else "". The fp32 compute
/// path logs it at info.
std::string blas_core_replaced_note();

/// When OPENBLAS_CORETYPE is set to a core whose kernels this CPU outgrows (blas_core_for() would
/// replace it) and runs (UCM_BLAS_CORE=keep, an OpenBLAS older than 0.3.21, or a process that does
/// not replace it: the in-process tests), a message saying what the fp32 prefill loses (measured)
/// and what to do; "" otherwise. The fp32 compute path logs it at warn.
std::string blas_core_warning();

/// For a main() that links libtorch, before anything else: when blas_core_override() names a
/// core, or `replace_environment` and blas_core_replacing_environment() names one, sets
/// OPENBLAS_CORETYPE to it (and UCM_OPENBLAS_CORETYPE_WAS to the environment's value, if any) and
/// re-executes /proc/self/exe with the same argv (OpenBLAS reads the variable only when it loads).
/// Returns when there is nothing to mend or the exec fails (the run then goes on with the kernels
/// it has, logged at warn). ucm-torch and the benchmarks replace the environment's value; the
/// in-process tests do not (they run what the environment, or ctest, names).
void restart_with_blas_core(char** argv, bool replace_environment);

/// For a main() that runs the model, before the first tensor: glibc malloc keeps the pages it is
/// given back instead of returning them to the kernel (M_MMAP_THRESHOLD at its 32 MiB maximum,
/// M_TRIM_THRESHOLD 1 GiB), so a layer's activations, allocated and freed by every layer of every
/// sequence, reuse pages already faulted in. Before it each fresh buffer was mapped, faulted in and
/// unmapped again: page faults, and OpenBLAS zeroing fresh output pages, were 3.5% of an fp32
/// prefill's CPU (perf, SmolLM2, 2K-token pages, docs/benchmarks.md). Memory stays at the run's
/// peak. Returns false when glibc refuses a value (then nothing else changes).
bool keep_freed_pages();

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
