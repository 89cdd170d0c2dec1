// ucm/core/repr_encode.h: block representations (store_v1.md §4.3) from a block's keys: the
// BLOCK_REPR payload (R0 mean key, R1 key bounds, R4 sign hash). One encoder for `ucm precompute`
// (pipelines/precompute/repr.h forwards here) and for servers (ucm_repr_encode, ucm/retrieval.h).
// No libtorch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/namespace.h"

namespace ucm::repr {

/// Section kinds and dtypes of a BLOCK_REPR payload (store_v1.md §4.3).
enum ReprKind : uint32_t { kReprMeanKey = 0, kReprKeyBounds = 1, kReprSignHash = 4 };
enum ReprDType : uint32_t { kReprBF16 = 1, kReprFP16 = 2, kReprFP32 = 3, kReprBits = 4 };

/// Shape of a block's representations.
struct ReprSpec {
  uint32_t num_layers = 0;   ///< L
  uint32_t num_kv_heads = 0; ///< H
  uint32_t head_dim = 0;     ///< D
  uint32_t block_size = 0;   ///< T
  uint32_t hash_bits = 128;  ///< B, a positive multiple of 8
  DType dtype = DType::kBF16;///< element type of R0 and R1
};

/// One section of the table.
struct ReprSection {
  uint32_t kind = 0, dtype = 0;
  uint64_t offset = 0, length = 0;
};

/// Byte layout of the payload for `spec`: sections R0 [L][H][D], R1 [L][2][H][D], R4 [L][H][T][B/8],
/// in this order, each at a 64-byte aligned offset after the table (u32 magic "UCMP" as the 4 bytes
/// 'U','C','M','P', u32 count, count x {u32 kind, u32 dtype, u64 offset, u64 length}, little-endian).
/// For SmolLM2-135M (L=30, H=3, D=64, T=16, B=128, bf16) the total is 57,728 bytes.
std::vector<ReprSection> repr_layout(const ReprSpec& spec, uint64_t* total_bytes);

/// Encodes one block.
///   keys[l]:  fp32 post-RoPE keys of layer l for the block's T tokens, element (t, h, d) at
///             keys[l][t * key_stride_t + h * D + d] (key_stride_t >= H * D, in floats).
///   dots[l]:  optional (may be null): fp32 projections, element (t, h, j) at
///             dots[l][t * dot_stride_t + h * B + j] = k_t,h . P[l][h][:, j]. When null, the dot
///             products are computed here in double precision from `projection`.
///   projection: fp32 [L][H][D][B] (the r4_projection attachment); used only when dots is null.
/// R0 = mean over t (accumulated in double, rounded to nearest-even in spec.dtype).
/// R1 = per-channel min / max over t, rounded toward -inf / +inf in spec.dtype (exact for fp32).
/// R4 = bit j of token t set iff dot >= 0, LSB-first within each byte.
/// `out` is resized to the payload size and fully written (padding zeroed).
void encode_block_repr(const ReprSpec& spec, const float* const* keys, size_t key_stride_t,
                       const float* const* dots, size_t dot_stride_t, const float* projection,
                       std::string* out);

/// Encodes one block from its keys as a KV payload holds them: key_dtype bf16, fp16 or fp32
/// elements, element (t, h, d) of layer l at keys[l] + (t * key_stride_t + h * D + d) elements.
/// The keys are widened to fp32 (exact) and R4's dot products computed here in fp32 from
/// `projection` (fp32 [L][H][D][B], required), vectorised: R0 and R1 are encode_block_repr's for
/// the widened keys bit for bit; an R4 bit differs from the double-precision path only where the
/// dot product is within fp32 rounding of 0. Used by `ucm precompute` (no dots tensor, no fp32 copy
/// of the payload). Thread-safe (per-thread scratch).
void encode_block_repr_payload(const ReprSpec& spec, const void* const* keys, DType key_dtype, size_t key_stride_t,
                               const float* projection, std::string* out);

/// R4's dot products of one block in fp32: dots[((l * T + t) * H + h) * B + j] =
/// sum over d of keys[l][t * key_stride_t + h * D + d] * projection[((l * H + h) * D + d) * B + j],
/// accumulated over d in order (fused multiply-adds where the CPU has them).
void repr_dots_fp32(const ReprSpec& spec, const float* const* keys, size_t key_stride_t, const float* projection,
                    float* dots);

/// Rounding helpers used by the encoder (bit patterns of the target dtype).
uint16_t bf16_round_nearest(float x);  ///< same as torch's float -> bfloat16 (RNE, NaN kept)
uint16_t bf16_round_down(float x);     ///< largest bf16 <= x
uint16_t bf16_round_up(float x);       ///< smallest bf16 >= x
uint16_t fp16_round_nearest(float x);
uint16_t fp16_round_down(float x);
uint16_t fp16_round_up(float x);
float bf16_to_float(uint16_t b);
float fp16_to_float(uint16_t h);

}  // namespace ucm::repr
