// kernels/include/ucm/kernels/cpu/fp32.h: the CPU kernels of the fp32 prefill's non-GEMM work (RMSNorm,
// RoPE on the q/k/v projection with the K/V cache's rounding, causal attention, the SiLU gate), on
// raw pointers. The GEMMs stay OpenBLAS's (libtorch's fp32 mm / addmm, the residual adds
// included: addmm_ with beta 1).
//
// Why: with libtorch 1.13 each of these is several element-wise passes over memory, and attention
// is a score matrix, a mask, a softmax and two batched GEMMs per query chunk; on a CPU without
// bf16 units (the fp32 path's home) they cost the fp32 prefill its lead over vLLM's CPU build
// (issue 40, docs/benchmarks.md "fp32 kernels").
//
// One source (fp32_kernels.inc, GCC vector extensions of 16 floats), compiled three times:
// for AVX-512F (16 floats a register), for AVX2 + FMA (two registers a vector) and for the
// x86-64 baseline (SSE2, no FMA: the portable path, which runs on every CPU and is what the tests
// hold the others to). Isa picks one at run time (best_isa(): the CPU's flags, capped by
// UCM_FP32_KERNELS). The arithmetic is libtorch's (fp32, transformers' formulas); sums may differ
// from libtorch's by fp32 rounding (another order, FMAs), tested within fp32 tolerances in
// tests/model/test_fp32_kernels.cc.
//
// Thread rules: every function is reentrant; callers split rows or attention units across
// threads. Library ucm_kernels_cpu (no libtorch); its libtorch glue is the model runner's (ucm/model/llama_ops.h).
#pragma once
#include "ucm/kernels/cpu/attn_tiles.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace ucm::kernels::cpu::f32 {

/// The instruction sets the kernels are compiled for, slowest first.
enum class Isa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };

/// "generic" | "avx2" | "avx512".
const char* isa_name(Isa isa);

/// The best Isa this CPU runs (features.h's cpu_flags(): avx512f, avx512dq, avx512bw, avx512vl for kAvx512;
/// avx2 and fma for kAvx2).
Isa cpu_isa();

/// cpu_isa() capped by the environment variable UCM_FP32_KERNELS ("avx512", "avx2", "generic":
/// at most that one; "0": none, then has_kernels is false and the model runs libtorch's ops).
/// Read once per process.
Isa best_isa(bool* has_kernels = nullptr);

/// Causal (optionally sliding-window) attention of B sequences, GQA, fp32 scores, softmax and
/// accumulation (transformers' eager attention at fp32): query row (b, t, head) attends keys j of
/// sequence b with j <= qpos[t], j < S and, when window > 0, qpos[t] - j < window.
struct AttnArgs {
  const float* q = nullptr;  ///< fp32 [B, T, nh, hd] post-RoPE; strides q_sb, q_st (heads hd apart, dims 1)
  const float* k = nullptr;  ///< fp32 [B, S, nkv, hd] post-RoPE; strides k_sb, k_st (heads hd apart)
  const float* v = nullptr;  ///< fp32 [B, S, nkv, hd]; strides v_sb, v_st
  /// Instead of k and v (then null): bf16 bits, same shapes and strides (a bf16 KV cache's values,
  /// widened exactly).
  const uint16_t* k16 = nullptr;
  const uint16_t* v16 = nullptr;
  int64_t q_sb = 0, q_st = 0, k_sb = 0, k_st = 0, v_sb = 0, v_st = 0;
  float* out = nullptr;           ///< fp32 [B, T, nh, hd], contiguous
  const int64_t* qpos = nullptr;  ///< int64 [T]: the query rows' positions (the keys' are 0..S-1)
  int64_t B = 0, T = 0, S = 0, nh = 0, nkv = 0, hd = 0;  ///< hd: a multiple of 16, at most 256
  int64_t window = 0;  ///< sliding window (keys within window - 1 positions before); 0: none
  /// Optional int64 [B]: sequence b's rows t >= q_len[b] are right padding: their output is 0
  /// and costs nothing.
  const int64_t* q_len = nullptr;
  float scale = 1.0f;  ///< softmax scale, applied to the scores (1 / sqrt(hd))
  /// Optional (B = 1), bytes [nkv, S]: key j is visible to KV head h's queries only where
  /// keep[h * S + j] != 0 (block-sparse attention; each query must keep one key at least).
  const uint8_t* keep = nullptr;
  /// Optional (B = 1), fp32 [nkv, G * T, S] (G = nh / nkv): receives the softmax probabilities of
  /// query row (t, head h * G + g) at row g * T + t of KV head h, 0 for keys it does not see.
  float* probs = nullptr;
};

/// Query rows (tokens) of one attention unit.
constexpr int64_t kUnitRows = 64;

/// At most this many query rows (heads of consecutive tokens) per pass of an attention unit, on
/// any ISA (UCM_F32_ROWS of the units: 12 on AVX-512, 6 on AVX2, 4 on the baseline).
constexpr int64_t kMaxPassRows = 16;

/// Passes of a pass group and keys per chunk of its sweep (attn_tiles.h): fp32 scores (4 bytes
/// a column), keys in blocks of 16, K and V in fp32.
inline int64_t attention_group_passes(int64_t S) { return group_passes(S, kMaxPassRows, 16, 4); }
inline int64_t attention_chunk_keys(int64_t hd) { return chunk_keys(hd, 16, 4); }

/// True when attention takes these shapes (hd a multiple of 16 and at most 256, nh a multiple of
/// nkv, every count positive).
bool attention_supported(const AttnArgs& a);

/// The attention units: B * nkv * ceil(T / kUnitRows) (sequence, KV head, block of query rows).
int64_t attention_units(const AttnArgs& a);

/// Scratch bytes one thread needs for attention (packed K and V of one unit, score rows).
size_t attention_scratch_bytes(const AttnArgs& a);

/// The kernels of one Isa (fp32_kernels.inc says what each computes).
struct Kernels {
  /// out[r, j] = w[j] * (x[r, j] * (1 / sqrt(mean_j x[r, j]^2 + eps))) for rows [r0, r1)
  /// (transformers LlamaRMSNorm). x fp32 [rows, H] (row stride ldx), w fp32 [H], out fp32 (ldo).
  void (*rms_norm)(const float* x, int64_t ldx, const float* w, int64_t H, float eps, float* out, int64_t ldo,
                   int64_t r0, int64_t r1);
  /// out[r, i] = silu(gu[r, i]) * gu[r, I + i], silu(g) = g / (1 + exp(-g)), rows [r0, r1).
  /// gu fp32 [rows, 2 I] contiguous; out fp32 [rows, I] contiguous.
  void (*silu_mul)(const float* gu, int64_t I, float* out, int64_t r0, int64_t r1);
  /// RoPE (transformers rotate_half: lo = x1 c - x2 s, hi = x2 c + x1 s) on rows [r0, r1) of the
  /// q/k/v projection qkv (fp32 [rows, (nh + 2 nkv) hd], bias already added, contiguous; row r at
  /// position index r % T of cos/sin fp32 [T, hd / 2]): q fp32 [rows, nh, hd]; k and v
  /// [rows, nkv, hd] as fp32 (k, v) or, when k16 and v16 are given, bf16 bits rounded as libtorch's
  /// float -> bfloat16 (round to nearest even, NaN 0xFFFF). hd: a multiple of 32.
  void (*qkv_rope)(const float* qkv, const float* cos, const float* sin, int64_t T, int64_t nh, int64_t nkv,
                   int64_t hd, float* q, float* k, float* v, uint16_t* k16, uint16_t* v16, int64_t r0, int64_t r1);
  /// Attention units u0, u0 + step, ... below u1 (attention_units(); step >= 1: a thread's share
  /// when units are dealt round-robin); scratch: attention_scratch_bytes(a) bytes, 64-byte
  /// aligned, owned by the calling thread. Units of one call that share a sequence and KV head
  /// pack its keys once (each later row block packs only the keys after the earlier ones').
  void (*attention)(const AttnArgs& a, int64_t u0, int64_t u1, int64_t step, void* scratch);
};

/// The kernels compiled for isa (any Isa: callers check that the CPU runs it, cpu_isa()).
const Kernels& kernels(Isa isa);

}  // namespace ucm::kernels::cpu::f32
