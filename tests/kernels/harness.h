// tests/kernels/harness.h: the host-run harness of kernels/: runs a kernel's per-thread UCM_HD
// function over its whole grid on the CPU, with the block-level steps (sums over the threads of a
// CUDA block, the compaction's scan) done the way the launcher's kernel does them. Only the launch
// itself is left for the GPU tests.
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "ucm/kernels/scatter.h"
#include "ucm/kernels/scores.h"
#include "ucm/kernels/sign_hash.h"
#include "ucm/kernels/topk.h"
#include "ucm/kernels/rope.h"

namespace ucm::kernels::host {

/// The threads per set of the selection kernels: one warp (32). The tests also run 7, an odd
/// count, to exercise striding and uneven compaction chunks.
constexpr uint32_t kThreads = 32;

/// The gather kernel's grid. Throws if a thread's access is not aligned to its unit (the GPU
/// would fault on it).
inline void scatter(const ScatterArgs& a) {
  for (uint64_t i = 0; i < scatter_threads(a); ++i) {
    uint64_t so;
    uint8_t* d;
    if (scatter_offsets(a, i, &so, &d) && ((uintptr_t(a.src) + so) % a.unit || uintptr_t(d) % a.unit))
      throw std::logic_error("scatter: unaligned access");
    scatter_unit(a, i);
  }
}

/// The copy path of scatter_layer: one memcpy per run of the plan.
inline void scatter_copies(const ScatterArgs& a) {
  const uint64_t runs = a.n * 2 * scatter_runs_per_page(a), bytes = scatter_run_bytes(a);
  for (uint64_t j = 0; j < runs; ++j) {
    uint64_t so;
    uint8_t* d;
    if (scatter_run(a, j, &so, &d)) std::memcpy(d, a.src + so, bytes);
  }
}

inline void scores(const ScoreArgs& a) {
  for (uint32_t s = 0; s < a.S; ++s)
    for (uint32_t c = 0; c < a.n; ++c) score_block(a, s, c);
}

inline void sign_hash(const SignHashArgs& a) {
  for (uint32_t s = 0; s < a.S; ++s)
    for (uint32_t i = 0; i < a.B / 8; ++i) sign_hash_byte(a, s, i);
}

inline void compact(const SelectArgs& a, uint32_t s, uint32_t nt) {
  std::vector<uint32_t> off(nt);
  uint32_t run = 0;
  for (uint32_t t = 0; t < nt; ++t) {
    off[t] = run;
    run += chunk_selected(a, s, t, nt);
  }
  if (a.count) a.count[s] = run;
  if (a.idx)
    for (uint32_t t = 0; t < nt; ++t) chunk_write(a, s, t, nt, off[t]);
}

inline void select_topk(const SelectArgs& a, uint32_t nt = kThreads) {
  for (uint32_t s = 0; s < a.S; ++s) {
    uint32_t forced = 0;
    for (uint32_t t = 0; t < nt; ++t) forced += topk_count_forced(a, t, nt);
    const uint32_t m = a.k > forced ? a.k - forced : 0;
    uint64_t thr = 0;
    if (m > 0)
      thr = radix8_select(m, [&](uint64_t prefix, uint64_t mask, int shift, uint32_t* h) {
        for (uint32_t t = 0; t < nt; ++t) topk_hist(a, s, t, nt, prefix, mask, shift, [h](uint32_t d) { ++h[d]; });
      });
    for (uint32_t c = 0; c < a.n; ++c) topk_mark(a, s, c, m, thr);
    compact(a, s, nt);
  }
}

inline void select_psa(const SelectArgs& a, uint32_t nt = kThreads) {
  for (uint32_t s = 0; s < a.S; ++s) {
    for (uint32_t c = 0; c < a.n; ++c) psa_mark(a, s, c);
    compact(a, s, nt);
  }
}

inline void rope_shift(const RopeShiftArgs& a) {
  for (uint64_t t = 0; t < a.n_tokens; ++t)
    for (uint32_t h = 0; h < a.n_heads; ++h)
      for (uint32_t d = 0; d < a.D / 2; ++d) rope_shift_pair(a, t, h, d);
}

}  // namespace ucm::kernels::host
