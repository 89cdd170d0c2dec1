/* ucm/blend.h: reusing stored documents anywhere in a prompt (CacheBlend), C ABI.
 *
 * A RAG prompt is free text and documents. A document precomputed as a *chunk* (store_v1.md §4.4:
 * the prefix chain of `chunk_prefix ++ document tokens`) can serve any position of a prompt: the
 * server loads the chunk's blocks with ucm_store_load as usual, moves each stored key from its
 * stored position to its prompt position with ucm_rope_shift, and then recomputes the few tokens
 * whose K/V deviate most from what full prefill would give (ucm_blend_select), so that the
 * documents attend to each other. Source: CacheBlend (Yao et al., EuroSys 2025), §4.2-§4.3.
 *
 * A request's steps:
 *   1. ucm_store_chunk_prefix: the chunk prefix C (P tokens) of the namespace.
 *   2. per document: tokens D (tokenized on their own), ucm_hash_blocks(seed, C ++ D) and
 *      ucm_store_lookup: n full blocks are stored; document tokens [0, n * block_size - P) have
 *      stored K/V, the rest is prefilled.
 *   3. ucm_store_load into a staging buffer; per layer, ucm_rope_shift(keys of document token i,
 *      delta = o - P) where o is the document's first position in the prompt.
 *   4. choose the tokens to recompute. Query-driven (what `ucm generate --blend` does): run the
 *      question over the loaded cache once, take its attention on each stored token, and
 *      ucm_blend_select_relevant(stored = fresh = NULL, relevance) picks them before layer 0.
 *      CacheBlend's: run the first layers of the prompt in full; at the check layer,
 *      ucm_blend_select (or ucm_blend_select_weighted, with a prior on the token's place in its
 *      document) on the stored and the recomputed V picks them.
 *   5. the later layers recompute the picked tokens and the free text over the mixed cache.
 *
 * Conventions are those of ucm/ucm.h (return codes, ucm_last_error, caller-owned buffers, structs
 * that grow). All
 * calls run on the caller's thread and are thread-safe (no shared state but the store's).
 */
#ifndef UCM_BLEND_H_
#define UCM_BLEND_H_

#include <stddef.h>
#include <stdint.h>

#include "ucm/ucm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* RoPE frequency scalings that keep a rotation a rotation (store_v1.md §4.4). */
#define UCM_ROPE_SCALING_NONE 0
#define UCM_ROPE_SCALING_LINEAR 1
#define UCM_ROPE_SCALING_LLAMA3 2

/* The rotary embedding of a namespace's keys, rotate_half convention (transformers' Llama).
 * Grows at its end (ucm/ucm.h, "Structs that grow"); minimum struct_size: all of it (0.6.0
 * changed struct_size from size_t to uint32_t, so 0.6.0 is its first layout). */
typedef struct ucm_rope_params {
  uint32_t struct_size;     /* sizeof(ucm_rope_params), set by the defaults call */
  uint32_t head_dim;        /* D, even */
  double theta;             /* base of the frequencies, e.g. 100000 for SmolLM2 */
  int32_t scaling;          /* UCM_ROPE_SCALING_* */
  double factor;            /* linear, llama3 */
  double low_freq_factor;   /* llama3 */
  double high_freq_factor;  /* llama3 */
  uint32_t original_max_position_embeddings; /* llama3 */
} ucm_rope_params;

/* theta 10000, no scaling, head_dim 0 (to be set). */
UCM_API ucm_rope_params ucm_rope_default_params(void);

/* Reads the namespace's `rope` attachment into *out, an out-struct: set out->struct_size, and
 * only that many bytes are written. Errors: UCM_E_INVALID (NULL, struct_size below the minimum, attachment not valid JSON or missing a
 * field: the message says which), UCM_E_NOT_FOUND (no namespace, or a namespace without a `rope`
 * attachment: it cannot serve chunks), UCM_E_NOT_SUPPORTED (a scaling other than none, linear or
 * llama3, e.g. "yarn" or "dynamic", or a style other than rotate_half: stored keys cannot be
 * moved exactly, so the namespace is refused rather than served approximately). */
UCM_API int ucm_store_rope_params(ucm_store_t* store, const uint8_t* ns, ucm_rope_params* out);

/* The namespace's chunk prefix (attachment `chunk_prefix`): *n tokens into tokens[cap].
 * UCM_E_NOT_FOUND when the namespace holds no chunks; UCM_E_INVALID when cap < *n (nothing
 * copied, *n set) or the attachment is not a whole number of u32. */
UCM_API int ucm_store_chunk_prefix(ucm_store_t* store, const uint8_t* ns, uint32_t* tokens, size_t cap, size_t* n);

/* Moves n_tokens post-RoPE keys by delta positions, in place: each key (n_heads rows of head_dim
 * elements, dtype UCM_DTYPE_BF16 / F16 / F32 of ucm/ucm.h) is rotated by R(delta)
 * (store_v1.md §4.4), computed in fp32 with angles in float64, rounded back to dtype.
 * keys: token t's head h starts at element t * token_stride + h * head_dim (token_stride in
 * elements, >= n_heads * head_dim). delta may be negative. Errors: UCM_E_INVALID (NULL,
 * unknown dtype, odd or zero head_dim, stride too small), UCM_E_NOT_SUPPORTED (scaling). */
UCM_API int ucm_rope_shift(const ucm_rope_params* rope, void* keys, int32_t dtype, size_t n_tokens, uint32_t n_heads,
                           size_t token_stride, int64_t delta);

/* ucm_rope_shift on keys in GPU memory: the same rotation (bit for bit: the kernel rounds as the
 * CPU path does), enqueued on stream (a cudaStream_t; NULL = the legacy stream) of CUDA device
 * `device`; it has run when the stream reaches this point. head_dim <= 512. Errors: those of
 * ucm_rope_shift; UCM_E_NOT_SUPPORTED without libucm_cuda.so or that device (the message says
 * which); UCM_E_IO when the launch fails. Added in ucm 0.5.2. */
UCM_API int ucm_rope_shift_device(const ucm_rope_params* rope, void* keys, int32_t dtype, size_t n_tokens,
                                  uint32_t n_heads, size_t token_stride, int64_t delta, int device, void* stream);

/* CacheBlend's token selection (§4.3, "HKVD tokens"): of n_tokens tokens, the
 * ceil(ratio * n_tokens) whose K/V deviate most between stored and recomputed, at one layer.
 * stored, fresh: fp32 [n_tokens][row], e.g. a token's V of all KV heads at the check layer (H * D;
 * V alone is what CacheBlend's reference implementation and ucm generate compare, docs/blend.md).
 * Deviation = squared L2 distance of the rows; ties go to the lower index. out_idx[cap] receives
 * the selected token indices in ascending order, *n_out their count. ratio in [0, 1].
 * deviation (may be NULL): fp32 [n_tokens], the deviations. Errors: UCM_E_INVALID (NULL, ratio
 * out of range or NaN, cap too small: *n_out is set to the count needed). */
UCM_API int ucm_blend_select(const float* stored, const float* fresh, size_t n_tokens, size_t row, double ratio,
                             uint32_t* out_idx, size_t cap, size_t* n_out, float* deviation);

/* Parameters of ucm_blend_select_weighted. Grows at its end (ucm/ucm.h, "Structs that grow");
 * minimum struct_size: up to position_decay (0.4.0's). 0.6.0 made struct_size a uint32_t (the
 * offsets of the other fields did not move). */
typedef struct ucm_blend_select_params {
  uint32_t struct_size;  /* sizeof(ucm_blend_select_params), set by the defaults call */
  double ratio;          /* fraction of the tokens to select, [0, 1]; default 0.15 */
  double position_decay; /* tau, in tokens, > 0; 0 = no prior (ucm_blend_select); default 128 */
  /* Added in 0.5.0 (a caller built against 0.4 passes a smaller struct_size: then 2 is used).
   * beta of ucm_blend_select_relevant, >= 0; 0 = relevance ignored; default 2. */
  double relevance_exponent;
} ucm_blend_select_params;

/* ratio 0.15, position_decay 128, relevance_exponent 2 (what `ucm generate --blend` uses,
 * docs/blend.md). */
UCM_API ucm_blend_select_params ucm_blend_select_default_params(void);

/* ucm_blend_select with a prior on where a token sits in its document: a token's score is its
 * deviation times exp(-doc_pos[i] / position_decay), and the ceil(ratio * n_tokens) highest
 * scores are selected. doc_pos: uint32 [n_tokens], each token's position in its own document
 * (0 = the document's first token), or NULL for no prior. Why: a stored document's first tokens
 * attended to the chunk prefix only, where the prompt puts other documents; their K/V deviate
 * more in the deep layers than the check layer shows (the first tokens of each chunk are what EPIC,
 * Hu et al. 2024, recomputes). Measured against the plain deviation in docs/blend.md ("Position
 * prior"); position_decay 0 gives exactly ucm_blend_select. score (may be NULL): fp32
 * [n_tokens], the scores. Errors: UCM_E_INVALID (NULL params / rows / n_out, struct_size too
 * small, ratio out of [0, 1] or NaN, position_decay negative or NaN, cap too small: *n_out is set
 * to the count needed). */
UCM_API int ucm_blend_select_weighted(const ucm_blend_select_params* params, const float* stored, const float* fresh,
                                      const uint32_t* doc_pos, size_t n_tokens, size_t row, uint32_t* out_idx,
                                      size_t cap, size_t* n_out, float* score);

/* Query-driven selection (the default of `ucm generate --blend`): ucm_blend_select_weighted's
 * score times relevance[i]^relevance_exponent, where relevance (fp32 [n_tokens], >= 0) is how
 * much the prompt's question attends to each token: the server runs the question's tokens over
 * the loaded (not yet blended) cache through every layer and averages their attention
 * probabilities on each key over heads, question tokens and layers (the reference engine:
 * LlamaModel::key_attention). Why: deviation ranks tokens by how wrong their K/V are, not by
 * whether the answer reads them; a stale token the question ignores costs nothing (ProphetKV,
 * Wang et al. 2026, arXiv:2602.02579, the "crowding-out effect"). Measured in docs/blend.md.
 * stored and fresh may both be NULL: no deviation factor (then no layer needs to run over every
 * token before the selection: check layer 0). relevance NULL or exponent 0: exactly
 * ucm_blend_select_weighted. Errors: those of ucm_blend_select_weighted, and UCM_E_INVALID for
 * only one of stored / fresh NULL, a relevance_exponent negative or not finite, a relevance
 * negative or NaN. */
UCM_API int ucm_blend_select_relevant(const ucm_blend_select_params* params, const float* stored, const float* fresh,
                                      const uint32_t* doc_pos, const float* relevance, size_t n_tokens, size_t row,
                                      uint32_t* out_idx, size_t cap, size_t* n_out, float* score);

#ifdef __cplusplus
}
#endif

#endif /* UCM_BLEND_H_ */
