// tests/isa/isa_leak_probe.cc: a binary with one function of each kind check_isa_confinement.sh
// must tell apart, so that its test can fail: AVX2 code outside any ISA unit (leaky_avx2_sum),
// AVX-512 code in the AVX2 unit's namespace (too_wide), and AVX2 code where it belongs
// (in_place). main() runs none of them: the probe runs on any x86-64 CPU.
#include <immintrin.h>

#include <cstdio>

__attribute__((target("avx2,fma"), noinline)) float leaky_avx2_sum(const float* x) {
  __m256 s = _mm256_loadu_ps(x);
  s = _mm256_add_ps(s, _mm256_permute2f128_ps(s, s, 1));
  return _mm256_cvtss_f32(s);
}

namespace ucm::kernels::cpu::f32::avx2 {

__attribute__((target("avx512f"), noinline)) float too_wide(const float* x) {
  return _mm512_reduce_add_ps(_mm512_loadu_ps(x));
}

__attribute__((target("avx2,fma"), noinline)) float in_place(const float* x) {
  return _mm256_cvtss_f32(_mm256_fmadd_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x), _mm256_setzero_ps()));
}

}  // namespace ucm::kernels::cpu::f32::avx2

// Referenced through volatile pointers, so the linker keeps all three.
float (*volatile g_fns[])(const float*) = {leaky_avx2_sum, ucm::kernels::cpu::f32::avx2::too_wide,
                                           ucm::kernels::cpu::f32::avx2::in_place};

int main(int argc, char**) {
  std::printf("%d\n", argc > 100 ? int(g_fns[0](nullptr)) : 0);
  return 0;
}
