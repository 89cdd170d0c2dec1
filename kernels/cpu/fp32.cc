// kernels/cpu/fp32.cc: see fp32.h. The run-time choice of the fp32 kernels' ISA, and
// what every ISA shares (shapes, scratch sizes).
#include "ucm/kernels/cpu/fp32.h"
#include "ucm/kernels/cpu/features.h"
#include "ucm/kernels/cpu/switches.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <set>
#include <string>

namespace ucm::kernels::cpu::f32 {

// The kernels of each unit (fp32_{avx512,avx2,generic}.cc; the signatures are those of
// Kernels' members).
#define UCM_F32_DECLARE(ns)                                                                                          \
  namespace ns {                                                                                                     \
  void rms_norm(const float*, int64_t, const float*, int64_t, float, float*, int64_t, int64_t, int64_t);             \
  void silu_mul(const float*, int64_t, float*, int64_t, int64_t);                                                    \
  void qkv_rope(const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, float*, float*, float*, \
                uint16_t*, uint16_t*, int64_t, int64_t);                                                             \
  void attention(const AttnArgs&, int64_t, int64_t, int64_t, void*);                                                       \
  }
UCM_F32_DECLARE(avx512)
UCM_F32_DECLARE(avx2)
UCM_F32_DECLARE(generic)
#undef UCM_F32_DECLARE

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "generic";
  }
}

Isa cpu_isa() {
  static const Isa isa = [] {
    const auto f = cpu_flags();
    if (f.count("avx512f") && f.count("avx512dq") && f.count("avx512bw") && f.count("avx512vl") && f.count("fma"))
      return Isa::kAvx512;
    if (f.count("avx2") && f.count("fma")) return Isa::kAvx2;
    return Isa::kGeneric;
  }();
  return isa;
}

Isa best_isa(bool* has_kernels) {
  struct Choice {
    Isa isa;
    bool on;
  };
  static const Choice c = [] {
    Choice c{cpu_isa(), true};
    const std::string want = read_switches().fp32_kernels;
    if (want.empty()) return c;
    if (want == "0") c.on = false;
    else if (want == "generic") c.isa = Isa::kGeneric;
    else if (want == "avx2") c.isa = c.isa == Isa::kGeneric ? Isa::kGeneric : Isa::kAvx2;
    else if (want != "avx512")
      spdlog::warn("UCM_FP32_KERNELS={}: not one of avx512, avx2, generic, 0; ignored", want);
    return c;
  }();
  if (has_kernels) *has_kernels = c.on;
  return c.isa;
}

bool attention_supported(const AttnArgs& a) {
  return a.B > 0 && a.T > 0 && a.S > 0 && a.nkv > 0 && a.nh > 0 && a.nh % a.nkv == 0 && a.hd > 0 && a.hd % 32 == 0 &&
         a.hd <= 256;
}

int64_t attention_units(const AttnArgs& a) { return a.B * a.nkv * ((a.T + kUnitRows - 1) / kUnitRows); }

size_t attention_scratch_bytes(const AttnArgs& a) {
  auto align64 = [](size_t n) { return (n + 63) / 64 * 64; };
  const size_t sp = size_t((a.S + 15) / 16 * 16), hd = size_t(a.hd);
  const size_t rows = size_t(attention_group_passes(a.S) * kMaxPassRows);
  return 2 * align64(sp * hd * 4)  // packed K and V
         + align64(rows * sp * 4)  // score rows of a pass group
         + align64(rows * hd * 4); // its scaled query rows
}

const Kernels& kernels(Isa isa) {
  static const Kernels k512{avx512::rms_norm, avx512::silu_mul, avx512::qkv_rope, avx512::attention};
  static const Kernels k2{avx2::rms_norm, avx2::silu_mul, avx2::qkv_rope, avx2::attention};
  static const Kernels kg{generic::rms_norm, generic::silu_mul, generic::qkv_rope, generic::attention};
  switch (isa) {
    case Isa::kAvx512: return k512;
    case Isa::kAvx2: return k2;
    default: return kg;
  }
}

}  // namespace ucm::kernels::cpu::f32
