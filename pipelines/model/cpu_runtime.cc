// pipelines/model/cpu_runtime.cc: see cpu_runtime.h.
#include "ucm/model/cpu_runtime.h"

#include "ucm/model/cpu_bf16.h"

#include <cpuid.h>
#include <dlfcn.h>
#include <malloc.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>
#include <tuple>

namespace ucm::model {

// What an AVX2 core's kernels cost on an AVX-512 CPU, measured (docs/benchmarks.md, "OpenBLAS's
// core under the environment's OPENBLAS_CORETYPE").
constexpr const char* kBlasCoreLoss =
    "on AMD Zen 5 the fp32 prefill ran 989 tokens/s with Haswell's kernels against 1,596 with AVX-512 ones, 0.62x; "
    "on Zen 4, whose AVX-512 runs at AVX2's width, the same speed";

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
  for (const char* var : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    const char* v = std::getenv(var);
    if (!v || !*v) continue;
    std::string cap(v);
    std::transform(cap.begin(), cap.end(), cap.begin(), [](unsigned char c) { return char(std::toupper(c)); });
    return cap == "ALL" || cap == "DEFAULT" ? "" : cap;
  }
  return "";
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

bool cpu::have_avx512_bf16() {  // declared in cpu_bf16.h, whose unit reads no files
  static const bool have = [] {
    const auto f = cpu_flags();
    return f.count("avx512f") && f.count("avx512_bf16");
  }();
  return have;
}

namespace {

// The text an OpenBLAS function `char* fn(void)` returns (openblas_get_corename,
// openblas_get_config); "" when the process has no OpenBLAS.
std::string blas_text(const char* symbol) {
  using TextFn = char* (*)();
  auto fn = reinterpret_cast<TextFn>(::dlsym(RTLD_DEFAULT, symbol));
  const char* text = fn ? fn() : nullptr;
  return text ? text : "";
}

}  // namespace

std::string blas_core_name() { return blas_text("openblas_get_corename"); }

int blas_threads() {
  using GetFn = int (*)();
  auto fn = reinterpret_cast<GetFn>(::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return fn ? fn() : 0;
}

bool set_blas_threads(int n) {
  using SetFn = void (*)(int);
  auto fn = reinterpret_cast<SetFn>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (!fn) return false;
  fn(std::max(1, n));
  return true;
}

std::string blas_core_for(const std::string& core, const std::set<std::string>& f) {
  if (core.empty()) return "";
  // OpenBLAS's x86-64 cores whose kernels predate AVX2 (and its name for an unknown CPU).
  static const std::set<std::string> kOld = {"Prescott", "Core2",     "Penryn", "Dunnington", "Nehalem",
                                             "Atom",     "Sandybridge", "Barcelona", "Unknown", "unknown"};
  // Its cores with AVX2 kernels but none of AVX-512's (0.3.21 picks Cooperlake itself on Zen 5;
  // Haswell there is what an environment's OPENBLAS_CORETYPE gives: blas_core_warning()).
  static const std::set<std::string> kAvx2 = {"Haswell", "Zen"};
  const bool avx512 = f.count("avx512f") && f.count("avx512bw") && f.count("avx512vl") && f.count("avx512dq");
  if (kOld.count(core)) {
    if (avx512) return "SkylakeX";
    if (f.count("avx2") && f.count("fma")) return "Haswell";
    return "";
  }
  return avx512 && kAvx2.count(core) ? "SkylakeX" : "";
}

std::string blas_core_override() {
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  if (set && *set) return "";
  return blas_core_for(blas_core_name(), cpu_flags());
}

bool blas_version_at_least(const std::string& config, int major, int minor, int patch) {
  int a = 0, b = 0, c = 0;
  if (std::sscanf(config.c_str(), "OpenBLAS %d.%d.%d", &a, &b, &c) != 3) return false;
  return std::tie(a, b, c) >= std::tie(major, minor, patch);
}

namespace {

bool keep_environment_core() {
  const char* p = std::getenv("UCM_BLAS_CORE");
  return p && std::strcmp(p, "keep") == 0;
}

}  // namespace

std::string blas_core_replacing_environment() {
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  if (!set || !*set || keep_environment_core()) return "";
  // 0.3.21 (Debian 12's) and later know AVX-512 on AMD Zen 4/5 and Intel; older builds are what
  // such a variable is usually set for, so their choice is left alone.
  if (!blas_version_at_least(blas_text("openblas_get_config"), 0, 3, 21)) return "";
  return blas_core_for(set, cpu_flags());
}

std::string blas_core_replaced() {
  const char* was = std::getenv("UCM_OPENBLAS_CORETYPE_WAS");
  return was ? was : "";
}

std::string blas_core_warning() {
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  if (!set || !*set) return "";
  const std::string better = blas_core_for(set, cpu_flags());
  if (better.empty()) return "";
  return std::string("OPENBLAS_CORETYPE=") + set + " is set in the environment and UCM_BLAS_CORE=keep keeps it: " +
         "OpenBLAS runs that core's kernels on this CPU, which has " + (better == "SkylakeX" ? "AVX-512" : "AVX2") +
         ", and the fp32 prefill runs slower than with " + better + "'s (" + kBlasCoreLoss + "). Unset UCM_BLAS_CORE " +
         "(ucm then runs " + better + "'s kernels in its own process only) unless you need that core";
}

std::string blas_core_replaced_note() {
  const std::string was = blas_core_replaced();
  if (was.empty()) return "";
  const char* now = std::getenv("OPENBLAS_CORETYPE");
  return "OPENBLAS_CORETYPE=" + was + " in the environment names kernels this CPU outgrows: ucm runs OpenBLAS's " +
         (now ? now : "") + " kernels in its own process instead (" + kBlasCoreLoss +
         "); UCM_BLAS_CORE=keep runs the environment's";
}

void restart_with_blas_core(char** argv, bool replace_environment) {
  std::string core = blas_core_override();
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  const std::string was = set ? set : "";
  if (core.empty() && replace_environment) core = blas_core_replacing_environment();
  if (core.empty()) return;
  const std::string runs = blas_core_name();
  if (!was.empty()) ::setenv("UCM_OPENBLAS_CORETYPE_WAS", was.c_str(), 1);
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  spdlog::warn("OpenBLAS runs its {} kernels on this CPU; restarting with OPENBLAS_CORETYPE={} failed ({}): "
               "fp32 GEMMs will be slow (set OPENBLAS_CORETYPE={} yourself)",
               runs, core, std::strerror(errno), core);
  if (was.empty()) ::unsetenv("OPENBLAS_CORETYPE");
  else ::setenv("OPENBLAS_CORETYPE", was.c_str(), 1);
  ::unsetenv("UCM_OPENBLAS_CORETYPE_WAS");
}

bool keep_freed_pages() {
  // 32 MiB: glibc's largest mmap threshold on 64-bit (HEAP_MAX_SIZE / 2); bigger blocks are
  // mapped whatever it says.
  return ::mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && ::mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
}

std::string cxx_runtime_conflict() {
  // The std::filesystem functions ucm calls whose copies differ between toolchains (the ones a
  // directory walk goes through), by their mangled names.
  static const char* const kSymbols[] = {
      "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathERSt10error_code",  // remove_all(path, ec)
      "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathE",                 // remove_all(path)
      "_ZNSt10filesystem18create_directoriesERKNS_7__cxx114pathERSt10error_code",
      "_ZNSt10filesystem7__cxx1128recursive_directory_iteratorC1ERKNS0_4pathENS_17directory_optionsEPSt10error_code",
      "_ZNSt10filesystem7__cxx1118directory_iteratorC1ERKNS0_4pathENS_17directory_optionsEPSt10error_code",
  };
  void* own = ::dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
  if (!own) return "";  // not libstdc++ (libc++): nothing to compare
  std::string problem;
  for (const char* sym : kSymbols) {
    void* mine = ::dlsym(own, sym);
    void* found = ::dlsym(RTLD_DEFAULT, sym);
    if (!mine || !found || mine == found) continue;
    Dl_info info{};
    const char* where = ::dladdr(found, &info) && info.dli_fname ? info.dli_fname : "another library";
    problem = std::string("std::filesystem (") + sym + ") resolves to " + where +
              "'s copy, not libstdc++.so.6's (a copy built for another libstdc++ can crash: a pip "
              "PyTorch's does, in remove_all). The link named that library before libstdc++: rebuild ucm "
              "with its CMakeLists.txt (it links libstdc++ first), or start this binary with "
              "LD_PRELOAD=libstdc++.so.6";
    break;
  }
  ::dlclose(own);
  return problem;
}

bool cpu_is_amd() { return cpu_vendor() == "AuthenticAMD"; }

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? std::max(1, CPU_COUNT(&set)) : 1;
}

}  // namespace ucm::model
