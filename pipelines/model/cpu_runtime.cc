// pipelines/model/cpu_runtime.cc: see cpu_runtime.h.
#include "ucm/model/cpu_runtime.h"

#include "ucm/kernels/cpu/switches.h"

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
  if (!kernels::cpu::read_switches().openblas_coretype.empty()) return "";
  return blas_core_for(blas_core_name(), cpu_flags());
}

bool blas_version_at_least(const std::string& config, int major, int minor, int patch) {
  int a = 0, b = 0, c = 0;
  if (std::sscanf(config.c_str(), "OpenBLAS %d.%d.%d", &a, &b, &c) != 3) return false;
  return std::tie(a, b, c) >= std::tie(major, minor, patch);
}

namespace {

bool keep_environment_core() { return kernels::cpu::read_switches().blas_core == "keep"; }

}  // namespace

std::string blas_core_replacing_environment() {
  const std::string set = kernels::cpu::read_switches().openblas_coretype;
  if (set.empty() || keep_environment_core()) return "";
  // 0.3.21 (Debian 12's) and later know AVX-512 on AMD Zen 4/5 and Intel; older builds are what
  // such a variable is usually set for, so their choice is left alone.
  if (!blas_version_at_least(blas_text("openblas_get_config"), 0, 3, 21)) return "";
  return blas_core_for(set, cpu_flags());
}

std::string blas_core_replaced() {
  return kernels::cpu::read_switches().openblas_coretype_was;
}

std::string blas_core_warning() {
  const std::string set = kernels::cpu::read_switches().openblas_coretype;
  if (set.empty()) return "";
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
  return "OPENBLAS_CORETYPE=" + was + " in the environment names kernels this CPU outgrows: ucm runs OpenBLAS's " +
         kernels::cpu::read_switches().openblas_coretype + " kernels in its own process instead (" + kBlasCoreLoss +
         "); UCM_BLAS_CORE=keep runs the environment's";
}

void restart_with_blas_core(char** argv, bool replace_environment) {
  std::string core = blas_core_override();
  const std::string was = kernels::cpu::read_switches().openblas_coretype;
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

}  // namespace ucm::model
