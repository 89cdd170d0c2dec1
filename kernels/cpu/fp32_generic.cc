// kernels/cpu/fp32_generic.cc: fp32_kernels.inc compiled for the x86-64 baseline (SSE2; no FMA, so a * b + c rounds twice): the portable path.
// The standard headers come before the target pragma (no library code built for this ISA).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "ucm/kernels/cpu/fp32.h"

namespace ucm::kernels::cpu::f32::generic {

#define UCM_F32_FMA(a, b, c) ((a) * (b) + (c))
#define UCM_F32_LANES 16
#define UCM_F32_KB 1
#define UCM_F32_ACC 3
#define UCM_F32_SROWS 4
#define UCM_F32_ROWS 4
#include "fp32_kernels.inc"
#undef UCM_F32_FMA
#undef UCM_F32_LANES
#undef UCM_F32_KB
#undef UCM_F32_ACC
#undef UCM_F32_SROWS
#undef UCM_F32_ROWS

}  // namespace ucm::kernels::cpu::f32::generic
