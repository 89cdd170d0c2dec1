// ucm/kernels/launch.h: the CUDA launchers of kernels/ (FlashInfer style: raw pointers and a
// stream, no framework; each returns the cudaError_t of its launch). The per-thread work of each
// is the UCM_HD function named beside it; the argument structs document every pointer's shape.
// Pointers are device memory unless said otherwise; "device-readable" also admits pinned host
// memory (cudaHostAlloc), which the device reads over PCIe.
#pragma once
#include <cuda_runtime_api.h>

#include "ucm/kernels/rope.h"
#include "ucm/kernels/scatter.h"
#include "ucm/kernels/scores.h"
#include "ucm/kernels/sign_hash.h"
#include "ucm/kernels/topk.h"

namespace ucm::kernels {

/// How scatter_layer copied: by async copies (runs >= kMinCopyRunBytes) or by the gather kernel.
enum class ScatterPath { kCopies, kKernel };

/// The path scatter_layer takes for a: copies when a run holds >= kMinCopyRunBytes (unless
/// a.force_path names one).
inline ScatterPath scatter_path(const ScatterArgs& a) {
  if (a.force_path == 0) return ScatterPath::kCopies;
  if (a.force_path == 1) return ScatterPath::kKernel;
  return scatter_run_bytes(a) >= kMinCopyRunBytes ? ScatterPath::kCopies : ScatterPath::kKernel;
}

/// One layer of a load into a paged device KV cache (scatter.h). a.src: device-readable staging
/// [n][L][2][T][H][D]; a.slots: [n] in host memory that the device can read (pinned; the copy
/// path reads it on the host); a.dst_k, a.dst_v: device. Returns cudaErrorInvalidValue for
/// inconsistent sizes. path (may be null) receives the path taken.
///
/// The path (unless a.force_path names one): the faster of the two on this shape, measured by
/// scatter_calibrate the first time the process scatters it (the caller's thread then waits for
/// that layer's stream once), and remembered per (device, run bytes, runs per layer rounded up to
/// a power of two, copy unit, layout, staging in device memory or not, legacy NULL stream or
/// not). Why measure: the copy
/// path's per-copy cost and the kernel's PCIe reads cross over at a size that depends on the
/// machine (H100, 2026-11-27: batched copies 0.60x of one H2D copy on 32 KiB runs, the kernel
/// 0.84x on 6 KiB pages; vLLM auto-calibrates its threshold for the same reason, vllm-project/vllm
/// #57569). A stream being captured into a CUDA graph, or a failed measurement, uses the rule by
/// run size (scatter_path). UCM_SCATTER_PATH=copies|kernel|threshold|auto (auto: default) in the
/// environment fixes the choice for the process.
cudaError_t scatter_layer(const ScatterArgs& a, cudaStream_t stream, ScatterPath* path = nullptr);

/// What scatter_calibrate measured: the best of two timed runs of each path (after one untimed
/// run of each), milliseconds, and the faster path (the rule by run size when not measured).
struct ScatterCalibration {
  float copies_ms = 0, kernel_ms = 0;
  bool measured = false;
  ScatterPath path = ScatterPath::kKernel;
};

/// Times both paths on a (each writes the layer's pages, as scatter_layer would: the load's
/// destinations must be writable now), records the faster for a's shape as scatter_layer does,
/// and synchronizes with the stream. out may be null.
cudaError_t scatter_calibrate(const ScatterArgs& a, cudaStream_t stream, ScatterCalibration* out);

/// Block scores (scores.h) of every set: a.r, a.q / a.code, a.valid, a.out device.
cudaError_t block_scores(const ScoreArgs& a, cudaStream_t stream);

/// R4 query codes (sign_hash.h): a.q, a.P, a.code device.
cudaError_t sign_hash(const SignHashArgs& a, cudaStream_t stream);

/// Top-k with the windows (topk.h), one CUDA block of 256 threads per set: a.score, a.valid,
/// a.mark, a.idx, a.count device.
cudaError_t select_topk(const SelectArgs& a, cudaStream_t stream);

/// PSA threshold selection (topk.h): as select_topk, a.score holding the masses.
cudaError_t select_psa(const SelectArgs& a, cudaStream_t stream);

/// Scores fused with top-k: one CUDA block per set scores its blocks into sc.out (= sel.score,
/// [S][n]) and selects from them without leaving the kernel (R4 Hamming scores of GSA, or R0/R1).
cudaError_t score_select_topk(const ScoreArgs& sc, const SelectArgs& sel, cudaStream_t stream);

/// RoPE shift of keys in device memory (rope.h).
cudaError_t rope_shift(const RopeShiftArgs& a, cudaStream_t stream);

}  // namespace ucm::kernels
