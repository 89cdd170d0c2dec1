// Block representations (store_v1.md §4.3), as produced by `ucm precompute`: the encoder turns
// the fp32 post-RoPE keys of one block into the BLOCK_REPR payload (deterministic, independent of
// the store). The R4 projection a namespace holds is libucm's (ucm::r4_projection in
// ucm/namespace_match.h).
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

}  // namespace ucm::precompute
