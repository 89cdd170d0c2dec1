// lib/src/include/ucm/core/blend/rope.h: RoPE re-rotation of stored keys (store_v1.md §4.4) and
// CacheBlend's token selection, behind ucm/blend.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ucm/blend.h"
#include "ucm/status.h"

namespace ucm::blend {

/// ucm_rope_default_params(): theta 10000, no scaling, head_dim 0.
ucm_rope_params default_rope();

/// Parses the `rope` attachment (UTF-8 JSON, store_v1.md §4.4) into *out (all of it,
/// struct_size = sizeof: the C ABI then writes the caller's part). InvalidArgument for bad
/// JSON or fields; NotSupported for a scaling or style that cannot be re-rotated exactly.
Status parse_rope(const std::string& json, ucm_rope_params* out);

/// Checks p (head_dim even and > 0, theta > 0, a supported scaling with positive factors).
Status check_rope(const ucm_rope_params& p);

/// The D/2 rotary frequencies w_d of p, as transformers computes them (fp32).
std::vector<float> inv_freq(const ucm_rope_params& p);

/// The rotation of a shift by delta: cos_out[d], sin_out[d] = cos, sin of delta * w[d] (angle in
/// float64, result rounded to float), d < w.size(). What shift_keys and the device kernel use.
void shift_table(const std::vector<float>& w, int64_t delta, float* cos_out, float* sin_out);

/// Rotates n_tokens keys by delta positions in place; see ucm_rope_shift. dtype: UCM_DTYPE_*.
void shift_keys(const std::vector<float>& w, void* keys, int dtype, size_t n_tokens, uint32_t n_heads,
                uint32_t head_dim, size_t token_stride, int64_t delta);

/// ceil(ratio * n) token indices of largest score (ties to the lower index), ascending. Score:
/// the squared L2 deviation between stored and fresh rows (1 when both are NULL), times
/// exp(-doc_pos[i] / position_decay) when doc_pos is given and position_decay > 0, times
/// relevance[i]^relevance_exponent when relevance is given and the exponent > 0 (see
/// ucm_blend_select_relevant). A NaN score ranks first. score: optional [n] output.
std::vector<uint32_t> select_tokens(const float* stored, const float* fresh, size_t n, size_t row, double ratio,
                                    const uint32_t* doc_pos, double position_decay, const float* relevance,
                                    double relevance_exponent, float* score);

}  // namespace ucm::blend
