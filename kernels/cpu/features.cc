// kernels/cpu/features.cc: see ucm/kernels/cpu/features.h (and bf16.h's have_avx512_bf16()).
#include "ucm/kernels/cpu/features.h"

#include <cpuid.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "ucm/kernels/cpu/bf16.h"
#include "ucm/kernels/cpu/switches.h"

namespace ucm::kernels::cpu {

std::set<std::string> cpu_flags() {
  // __builtin_cpu_supports wants a string literal: one line per feature.
  std::set<std::string> out;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) out.insert("avx2");
  if (__builtin_cpu_supports("fma")) out.insert("fma");
  if (__builtin_cpu_supports("avx512f")) out.insert("avx512f");
  if (__builtin_cpu_supports("avx512bw")) out.insert("avx512bw");
  if (__builtin_cpu_supports("avx512vl")) out.insert("avx512vl");
  if (__builtin_cpu_supports("avx512dq")) out.insert("avx512dq");
  if (__builtin_cpu_supports("avx512bf16")) out.insert("avx512_bf16");
#if defined(__clang__)
  // Clang (14) has no "amx-bf16" for __builtin_cpu_supports: CPUID leaf 7 EDX bit 22, and the
  // OS's XCR0 with the tile state (bits 17 and 18), as GCC's builtin checks.
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool osxsave = __get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1);  // xgetbv is allowed
  if (osxsave && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1)) {
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x60000u) == 0x60000u) out.insert("amx_bf16");
  }
#else
  if (__builtin_cpu_supports("amx-bf16")) out.insert("amx_bf16");
#endif
  return out;
}

std::string cpu_vendor() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return "";
  char v[12];
  std::memcpy(v, &b, 4);  // the vendor string is EBX, EDX, ECX
  std::memcpy(v + 4, &d, 4);
  std::memcpy(v + 8, &c, 4);
  return std::string(v, sizeof v);
}

std::string onednn_isa_cap() {
  std::string cap = read_switches().onednn_max_isa;
  std::transform(cap.begin(), cap.end(), cap.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  return cap == "ALL" || cap == "DEFAULT" ? "" : cap;
}

std::string cpu_bf16_isa() {
  const auto f = cpu_flags();
  std::string isa = f.count("amx_bf16") ? "amx_bf16" : f.count("avx512_bf16") ? "avx512_bf16" : "";
  // oneDNN (libtorch's bf16 GEMMs) capped below the CPU's own ISA runs that ISA's kernels: without
  // AMX at AVX512_CORE_BF16 / AVX512_CORE_FP16, with no bf16 instructions below (emulated).
  const std::string cap = onednn_isa_cap();
  if (!isa.empty() && !cap.empty() && cap.find("AMX") == std::string::npos && cap.rfind("AVX10", 0) != 0)
    isa = cap == "AVX512_CORE_BF16" || cap == "AVX512_CORE_FP16" ? "avx512_bf16" : "";
  return isa;
}

bool have_avx512_bf16() {  // declared in bf16.h
  static const bool have = [] {
    const auto f = cpu_flags();
    return f.count("avx512f") && f.count("avx512_bf16");
  }();
  return have;
}

bool cpu_is_amd() { return cpu_vendor() == "AuthenticAMD"; }

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? std::max(1, CPU_COUNT(&set)) : 1;
}

}  // namespace ucm::kernels::cpu
