// kernels/include/ucm/kernels/cpu/features.h: what this CPU offers (CPUID, the OS's enabled
// register state) and what oneDNN is capped to: the facts the CPU kernels (bf16.h, fp32.h) and
// the model runner's compute choice (ucm/model/compute.h) choose by. No libtorch, no OpenBLAS.
#pragma once
#include <set>
#include <string>

namespace ucm::kernels::cpu {

/// The instruction-set features ucm's kernels and checks choose by, under Linux's /proc/cpuinfo
/// names: any of "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16",
/// "amx_bf16". Read from CPUID and the OS's enabled register state (XCR0) through GCC's
/// __builtin_cpu_supports, as OpenBLAS and oneDNN read them: what this process may execute, also
/// under an emulator or a hypervisor that masks CPUID bits (/proc/cpuinfo is the host kernel's
/// view, which `qemu-x86_64 -cpu Haswell` does not change: scripts/check_cpu_kinds.sh).
std::set<std::string> cpu_flags();

/// The CPU's bf16 matrix instructions, from cpu_flags(): "amx_bf16" (AMX tiles,
/// Sapphire Rapids and later), "avx512_bf16" (Cooper Lake, Zen 4), or "" (none: bf16 GEMMs would
/// be emulated, slower than fp32). Where oneDNN is capped below them (onednn_isa_cap()), the
/// instructions its bf16 GEMMs will use: avx512_bf16 at AVX512_CORE_BF16 or AVX512_CORE_FP16
/// (how an AMX machine stands in for one without), "" below those.
std::string cpu_bf16_isa();

/// CPUID's vendor string ("GenuineIntel", "AuthenticAMD"); "" when CPUID has no leaf 0.
std::string cpu_vendor();

/// cpu_vendor() is "AuthenticAMD".
bool cpu_is_amd();

/// ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA), upper-cased; "" when unset, ALL or DEFAULT.
std::string onednn_isa_cap();

/// The cores this process may run on (sched_getaffinity; 1 if unknown).
int usable_cores();

}  // namespace ucm::kernels::cpu
