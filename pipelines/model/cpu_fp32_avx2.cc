// pipelines/model/cpu_fp32_avx2.cc: cpu_fp32_kernels.inc compiled for AVX2 and FMA: two registers a vector.
// The standard headers come before the target pragma (no library code built for this ISA).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "cpu_fp32.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
// GCC 12 warns inside its intrinsics headers about the undefined operands it passes itself (bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ucm::model::cpu::f32::avx2 {

typedef float vf __attribute__((vector_size(64)));
// a * b + c of two 8-float halves, each one vfmadd.
inline vf fma_avx2(vf a, vf b, vf c) {
  __m256 x[2], y[2], z[2];
  __builtin_memcpy(x, &a, sizeof x);
  __builtin_memcpy(y, &b, sizeof y);
  __builtin_memcpy(z, &c, sizeof z);
  z[0] = _mm256_fmadd_ps(x[0], y[0], z[0]);
  z[1] = _mm256_fmadd_ps(x[1], y[1], z[1]);
  vf r;
  __builtin_memcpy(&r, z, sizeof r);
  return r;
}

#define UCM_F32_FMA(a, b, c) fma_avx2(a, b, c)
#define UCM_F32_KB 1
#define UCM_F32_ACC 6
#include "cpu_fp32_kernels.inc"
#undef UCM_F32_FMA
#undef UCM_F32_KB
#undef UCM_F32_ACC

}  // namespace ucm::model::cpu::f32::avx2


#pragma GCC diagnostic pop
#pragma GCC pop_options
