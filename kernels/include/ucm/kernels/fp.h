// ucm/kernels/fp.h: float arithmetic that rounds the same on host and device. nvcc contracts
// a * b + c into one FMA by default, the host build (-std=c++20, -ffp-contract=off) does not; the
// kernels use these so that a device result equals the host-run harness's bit for bit.
#pragma once
#include "ucm/kernels/hd.h"

namespace ucm::kernels {

UCM_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
UCM_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
UCM_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
UCM_HD double dadd_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

UCM_HD bool is_nan(float x) { return x != x; }

}  // namespace ucm::kernels
