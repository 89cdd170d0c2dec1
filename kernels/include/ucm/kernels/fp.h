// ucm/kernels/fp.h: float arithmetic that rounds the same on host and device. nvcc contracts
// a * b + c into one FMA by default, the host build (-std=c++20, -ffp-contract=off) does not; the
// kernels use these so that a device result equals the host-run harness's bit for bit.
#pragma once
#include "ucm/kernels/hd.h"

namespace ucm::kernels {

// name(a, b): on the device the intrinsic (rounded to nearest, never contracted), on the host a op b.
#if defined(__CUDA_ARCH__)
#define UCM_RN_OP(name, T, intrinsic, op) \
  UCM_HD T name(T a, T b) { return intrinsic(a, b); }
#else
#define UCM_RN_OP(name, T, intrinsic, op) \
  UCM_HD T name(T a, T b) { return a op b; }
#endif
UCM_RN_OP(mul_rn, float, __fmul_rn, *)
UCM_RN_OP(add_rn, float, __fadd_rn, +)
UCM_RN_OP(sub_rn, float, __fsub_rn, -)
UCM_RN_OP(dadd_rn, double, __dadd_rn, +)
#undef UCM_RN_OP

UCM_HD bool is_nan(float x) { return x != x; }

}  // namespace ucm::kernels
