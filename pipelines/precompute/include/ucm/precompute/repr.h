// Block representations (store_v1.md §4.3) and the R4 projection, as produced by `ucm precompute`.
//
// Everything here is deterministic and independent of the store: the encoder turns the fp32
// post-RoPE keys of one block into the BLOCK_REPR payload; the projection generator turns a seed
// into the namespace attachment `r4_projection`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/core/repr_encode.h"
#include "ucm/namespace.h"

namespace ucm::precompute {

// The encoder and layout live in libucm's core (ucm/core/repr_encode.h), shared with the C ABI
// (ucm_repr_encode): the same bytes whether precompute or a server computes them.
using repr::kReprBF16;
using repr::kReprBits;
using repr::kReprFP16;
using repr::kReprFP32;
using repr::kReprKeyBounds;
using repr::kReprMeanKey;
using repr::kReprSignHash;
using repr::ReprDType;
using repr::ReprKind;
using repr::ReprSection;
using repr::ReprSpec;
using repr::repr_layout;
using repr::encode_block_repr;
using repr::bf16_round_nearest;
using repr::bf16_round_down;
using repr::bf16_round_up;
using repr::fp16_round_nearest;
using repr::fp16_round_down;
using repr::fp16_round_up;
using repr::bf16_to_float;
using repr::fp16_to_float;

/// The r4_projection attachment, fp32 [L][H][D][B] (row-major), for `seed`.
/// Algorithm (stable, part of the namespace fingerprint through `projection_seed`):
///   rng = std::mt19937_64(seed); for l in [0,L), h in [0,H), c in [0, ceil(B/D)):
///     G = D x D doubles, filled row-major with standard normals from Box-Muller:
///       u1 = ((rng() >> 11) + 1) * 2^-53, u2 = (rng() >> 11) * 2^-53,
///       r = sqrt(-2 ln u1), pair = (r cos(2 pi u2), r sin(2 pi u2)), used in that order;
///     Q, R = QR(G) (torch::linalg_qr, reduced, double); Q[:, j] *= sign(R[j][j]) (Haar, Mezzadri
///     2007 "How to generate random matrices from the classical compact groups", §5);
///     columns c*D .. min(B, (c+1)*D)-1 of P[l][h] are the first columns of Q.
/// Source: UCM's GSA on device (Unified Cache Manager: random orthogonal projection to sign bits).
std::vector<float> make_projection(uint32_t num_layers, uint32_t num_kv_heads, uint32_t head_dim,
                                   uint32_t hash_bits, uint64_t seed);

}  // namespace ucm::precompute
