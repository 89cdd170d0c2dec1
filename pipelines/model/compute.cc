#include "compute.h"

#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ucm::model {

std::string cpu_bf16_isa() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    bool amx = false, avx = false;
    for (std::string w; words >> w;) {
      amx = amx || w == "amx_bf16";
      avx = avx || w == "avx512_bf16";
    }
    return amx ? "amx_bf16" : avx ? "avx512_bf16" : "";
  }
  return "";
}

ComputeChoice choose_compute(const std::string& want, torch::Device dev) {
  if (want != "auto" && want != "bf16" && want != "fp32")
    throw std::invalid_argument("compute dtype \"" + want + "\": use auto, bf16 or fp32");
  const std::string isa = dev.is_cuda() ? "cuda" : cpu_bf16_isa();
  if (want == "fp32" || (want == "auto" && isa.empty())) return {torch::kFloat, "fp32", "fp32"};
  if (isa.empty())
    throw std::invalid_argument(
        "compute dtype bf16: this CPU has neither AMX-BF16 nor AVX512-BF16 (no amx_bf16 or avx512_bf16 in "
        "/proc/cpuinfo), so bf16 GEMMs would be emulated and slower than fp32; use --compute-dtype fp32 or auto");
  return {torch::kBFloat16, "bf16", isa};
}

int set_compute_threads(int n) {
  if (n <= 0) {
    const char* env = std::getenv("OMP_NUM_THREADS");
    if (env && *env) return at::get_num_threads();
    cpu_set_t set;
    CPU_ZERO(&set);
    n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  }
  at::set_num_threads(n);
  return at::get_num_threads();
}

}  // namespace ucm::model
