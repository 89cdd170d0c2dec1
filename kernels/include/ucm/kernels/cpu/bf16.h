// kernels/include/ucm/kernels/cpu/bf16.h: the CPU kernels of the bf16 compute path's non-GEMM work (RMSNorm
// into a GEMM's bf16 input, causal attention, SiLU gate, residual add), on raw pointers, in two
// implementations that give the same bits on the same inputs: AVX-512F + AVX512-BF16 intrinsics
// (cpu::hw, bf16.cc, the one unit compiled for them) and plain C++ for any x86-64 CPU
// (cpu::portable, bf16_portable.cc: each instruction of the first emulated, vdpbf16ps as the
// Intel SDM defines it). Nothing here includes libtorch. The GEMMs stay libtorch's (oneDNN:
// AMX-BF16 or AVX512-BF16, emulated on CPUs without them).
//
// Why: with libtorch 1.13 each of these is several element-wise passes with a bf16 <-> fp32
// conversion on each side (its bf16 GEMMs return bf16); on SmolLM2-135M they took more of a bf16
// prefill than the GEMMs (docs/benchmarks.md, "prefill"). Each kernel does the arithmetic of the
// libtorch ops it replaces, in fp32, rounding to bf16 where they round (round to nearest even),
// except the attention scores: kept in fp32 (libtorch's bf16 matmul rounds them to bf16 before
// the softmax), so the result is closer to the fp32 path's, not further.
//
// Each function below runs the implementation its Bf16Path picks (kAuto: kernel_path(), the
// hardware one where the CPU has AVX512-BF16; every CPU with AMX-BF16 has it). Thread rules: every
// function is reentrant; callers split rows or attention units across threads. Library
// ucm_kernels_cpu (no libtorch); its libtorch glue is the model runner's (ucm/model/llama_ops.h). Both are tested against libtorch, and against each other bit for bit,
// in tests/model/test_compute_dtype.cc.
#pragma once
#include "ucm/kernels/cpu/attn_tiles.h"

#include <cstddef>
#include <cstdint>

namespace ucm::kernels::cpu {

/// True when this CPU has AVX-512F and AVX512-BF16 (cpu_flags(): avx512f, avx512_bf16).
bool have_avx512_bf16();

/// Which implementation a kernel call runs; both give the same bits.
enum class Bf16Path {
  kAuto,      ///< kernel_path()
  kHardware,  ///< cpu::hw, AVX-512F + AVX512-BF16: only where have_avx512_bf16()
  kPortable,  ///< cpu::portable, plain C++: any x86-64 CPU (attention about 15x slower, the rest 20-30x)
};

/// True when the hardware kernels run here: have_avx512_bf16(), unless the environment sets
/// UCM_CPU_NO_BF16=1 (read once; a test switch: the kernels, ops::fast_bf16() and so the model act
/// as on a CPU without AVX512-BF16).
bool hardware_kernels();

/// kAuto's pick, at each call: kHardware when hardware_kernels() and the environment's
/// UCM_BF16_KERNELS is not "portable", else kPortable.
Bf16Path kernel_path();

/// RMSNorm into bf16 (transformers LlamaRMSNorm, then the GEMM input's rounding): for rows
/// [r0, r1): out[r, j] = bf16(w[j] * (x[r, j] * (1 / sqrt(mean_j x[r, j]^2 + eps)))).
/// x: fp32 [rows, H], row stride ldx (elements); w: fp32 [H]; out: bf16 bits [rows, H], row stride ldo.
void rms_norm_bf16(const float* x, int64_t ldx, const float* w, int64_t H, float eps, uint16_t* out, int64_t ldo,
                   int64_t r0, int64_t r1, Bf16Path path = Bf16Path::kAuto);

/// The SwiGLU gate of the MLP into down_proj's bf16 input: for rows [r0, r1) and i < I,
/// out[r, i] = bf16(silu(g) * u), g = gu[r, i], u = gu[r, I + i], silu(g) = g / (1 + exp(-g)).
/// gu: bf16 bits [rows, 2 I] (gate_up's output, contiguous); out: bf16 bits [rows, I], contiguous.
void silu_mul_bf16(const uint16_t* gu, int64_t I, uint16_t* out, int64_t r0, int64_t r1,
                   Bf16Path path = Bf16Path::kAuto);

/// q, k, v of a decoder layer from its one q/k/v projection, RoPE applied (transformers
/// rotate_half: lo = x1 c - x2 s, hi = x2 c + x1 s, each product rounded, as libtorch's ops do, so
/// the K equal the libtorch path's bit for bit): for rows [r0, r1) of qkv (bf16 bits
/// [rows, (nh + 2 nkv) hd], contiguous; row r at position index r % T of cos/sin), y = float(row)
/// (+ bias, fp32 [(nh + 2 nkv) hd], when not null); q = rope(y's first nh heads) fp32 [rows, nh, hd],
/// k = rope(the next nkv heads) [rows, nkv, hd], v = the last nkv heads [rows, nkv, hd], all
/// contiguous. K and V go to k, v as fp32 or, when k16 and v16 are given (k, v then unused, may be
/// null), to k16, v16 as bf16 bits rounded exactly as libtorch's vectorised float -> bfloat16
/// (round to nearest even, subnormals kept, NaN 0xFFFF): a bf16 KV cache's bytes. cos, sin: fp32 [T, hd / 2].
/// hd: a multiple of 32.
void qkv_rope(const uint16_t* qkv, const float* bias, const float* cos, const float* sin, int64_t T, int64_t nh,
              int64_t nkv, int64_t hd, float* q, float* k, float* v, int64_t r0, int64_t r1,
              uint16_t* k16 = nullptr, uint16_t* v16 = nullptr, Bf16Path path = Bf16Path::kAuto);

/// The residual add of o_proj and down_proj: x[i] += float(y[i]) for i < n. x fp32, y bf16 bits.
void add_bf16(float* x, const uint16_t* y, int64_t n, Bf16Path path = Bf16Path::kAuto);

/// Causal (optionally sliding-window) attention of B sequences, GQA, bf16 operands, fp32 scores,
/// softmax and accumulation: query row (b, t, head) attends keys j of sequence b with
/// j <= qpos[t], j < S and, when window > 0, qpos[t] - j < window. The operands are rounded to
/// bf16 as the libtorch path rounds them: q * scale, k and v; the softmax probabilities are
/// rounded to bf16 before they weigh the values; out is rounded once.
struct AttnArgs {
  const float* q = nullptr;  ///< fp32 [B, T, nh, hd] post-RoPE; strides q_sb, q_st (heads hd apart, dims 1)
  const float* k = nullptr;  ///< fp32 [B, S, nkv, hd] post-RoPE; strides k_sb, k_st (heads hd apart)
  const float* v = nullptr;  ///< fp32 [B, S, nkv, hd]; strides v_sb, v_st (heads hd apart)
  /// Instead of k and v (then null): bf16 bits, same shapes and strides (a bf16 KV cache: read as
  /// they are, where fp32 k, v are rounded to nearest even).
  const uint16_t* k16 = nullptr;
  const uint16_t* v16 = nullptr;
  int64_t q_sb = 0, q_st = 0, k_sb = 0, k_st = 0, v_sb = 0, v_st = 0;
  uint16_t* out = nullptr;       ///< bf16 bits [B, T, nh, hd], contiguous
  const int64_t* qpos = nullptr; ///< int64 [T]: the query rows' positions (the keys' are 0..S-1)
  int64_t B = 0, T = 0, S = 0, nh = 0, nkv = 0, hd = 0;  ///< hd: a multiple of 32, at most 256
  int64_t window = 0;  ///< sliding window (keys within window - 1 positions before); 0: none
  /// Optional int64 [B]: sequence b's rows t >= q_len[b] are right padding: their output is 0
  /// and costs nothing (no real row attends to them: they come after it).
  const int64_t* q_len = nullptr;
  float scale = 1.0f;  ///< softmax scale, applied to q before its rounding (1 / sqrt(hd))
};

/// True when attention_bf16 takes these shapes (hd a multiple of 32 and at most 256, nh a
/// multiple of nkv, every count positive).
bool attention_supported(const AttnArgs& a);

/// Whether the hardware attention's dot products run vdpbf16ps (on AMD, whose Zen 4 and 5 issue
/// it as often as an FMA) or its arithmetic in two fp32 FMAs per pair with the MXCSR's FTZ and DAZ
/// set (on Intel, whose AVX-512 cores issue it once in two cycles, an FMA twice a cycle): the same
/// bits either way. UCM_BF16_DOT=dp or fma overrides it (read at each call: tests, before/after runs).
bool attention_uses_vdpbf16ps();

/// Query rows (tokens) of one attention unit.
constexpr int64_t kAttnUnitRows = 64;

/// At most this many query rows (heads of consecutive tokens that share a KV head) per pass of
/// the hardware kernel: each K vector loaded feeds that many dot products.
constexpr int64_t kAttnPassRows = 12;

/// Passes of a pass group and keys per chunk of its sweep (attn_tiles.h): scores and
/// probabilities in fp32 (8 bytes a column), keys in blocks of 32, K and V in bf16.
inline int64_t attention_group_passes(int64_t S) { return group_passes(S, kAttnPassRows, 32, 8); }
inline int64_t attention_chunk_keys(int64_t hd) { return chunk_keys(hd, 32, 2); }

/// The attention units: B * nkv * ceil(T / kAttnUnitRows) (sequence b, KV head h, block tb of
/// query rows: u = (b * nkv + h) * ceil(T / kAttnUnitRows) + tb).
int64_t attention_units(const AttnArgs& a);

/// Scratch bytes one thread needs for attention_bf16 of these shapes (packed K and V of one
/// sequence and KV head, the score, probability, query and accumulator rows of a pass group;
/// either implementation).
size_t attention_scratch_bytes(const AttnArgs& a);

/// Runs the attention units u0, u0 + step, ... below u1 (attention_units(); step >= 1: a
/// thread's share when units are dealt round-robin): every query row of that block of the
/// sequence's tokens and of the heads that share the KV head. Units of one call that share a
/// sequence and KV head pack its keys once (a later row block packs only the keys after the
/// earlier ones'). scratch: at least attention_scratch_bytes(a) bytes, 64-byte aligned, owned by
/// the calling thread. The output of a row does not depend on the units' dealing.
void attention_bf16(const AttnArgs& a, int64_t u0, int64_t u1, int64_t step, void* scratch,
                    Bf16Path path = Bf16Path::kAuto);

// The two implementations the functions above dispatch to, with their arguments.
namespace hw {  // bf16.cc; call only where have_avx512_bf16()
void rms_norm_bf16(const float* x, int64_t ldx, const float* w, int64_t H, float eps, uint16_t* out, int64_t ldo,
                   int64_t r0, int64_t r1);
void silu_mul_bf16(const uint16_t* gu, int64_t I, uint16_t* out, int64_t r0, int64_t r1);
void qkv_rope(const uint16_t* qkv, const float* bias, const float* cos, const float* sin, int64_t T, int64_t nh,
              int64_t nkv, int64_t hd, float* q, float* k, float* v, int64_t r0, int64_t r1, uint16_t* k16,
              uint16_t* v16);
void add_bf16(float* x, const uint16_t* y, int64_t n);
void attention_bf16(const AttnArgs& a, int64_t u0, int64_t u1, int64_t step, void* scratch);
}  // namespace hw
namespace portable {  // bf16_portable.cc
void rms_norm_bf16(const float* x, int64_t ldx, const float* w, int64_t H, float eps, uint16_t* out, int64_t ldo,
                   int64_t r0, int64_t r1);
void silu_mul_bf16(const uint16_t* gu, int64_t I, uint16_t* out, int64_t r0, int64_t r1);
void qkv_rope(const uint16_t* qkv, const float* bias, const float* cos, const float* sin, int64_t T, int64_t nh,
              int64_t nkv, int64_t hd, float* q, float* k, float* v, int64_t r0, int64_t r1, uint16_t* k16,
              uint16_t* v16);
void add_bf16(float* x, const uint16_t* y, int64_t n);
void attention_bf16(const AttnArgs& a, int64_t u0, int64_t u1, int64_t step, void* scratch);
}  // namespace portable

}  // namespace ucm::kernels::cpu
