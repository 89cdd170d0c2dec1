// kernels/cpu/fp32_avx2.cc: fp32_kernels.inc compiled for AVX2 and FMA: vectors of 8 floats.
// The standard headers come before the target pragma (no library code built for this ISA).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "ucm/kernels/cpu/fp32.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#if defined(__clang__)  // Clang ignores GCC's target pragma: the same ISA on every function below
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#endif
// GCC 12 warns inside its intrinsics headers about the undefined operands it passes itself (bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace ucm::kernels::cpu::f32::avx2 {

#define UCM_F32_FMA(a, b, c) (vf)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c))
#define UCM_F32_LANES 8
#define UCM_F32_KB 2
#define UCM_F32_ACC 12
#define UCM_F32_SROWS 6
#define UCM_F32_ROWS 12
#include "fp32_kernels.inc"
#undef UCM_F32_FMA
#undef UCM_F32_LANES
#undef UCM_F32_KB
#undef UCM_F32_ACC
#undef UCM_F32_SROWS
#undef UCM_F32_ROWS

}  // namespace ucm::kernels::cpu::f32::avx2

#pragma GCC diagnostic pop
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options
