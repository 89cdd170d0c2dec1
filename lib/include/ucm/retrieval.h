/* ucm/retrieval.h: block representations and block-sparse retrieval (C ABI).
 *
 * A server that decodes with block-sparse attention keeps, per request, the representations of
 * the request's blocks (loaded from the store with ucm_store_load_repr, or computed by itself
 * for new blocks) and asks a ucm_retriever_t, once per decode step and layer, which blocks each
 * KV head should attend to. Everything runs on the CPU of the caller's thread; no libtorch.
 *
 * Conventions are those of ucm/ucm.h (return codes, ucm_last_error, caller-owned buffers, structs
 * that grow; the element types UCM_DTYPE_* are defined there).
 * Formats: the representations are those of store_v1.md §4.3 (R0 mean key, R1 key bounds,
 * R4 sign hash); the projection is the namespace attachment "r4_projection".
 */
#ifndef UCM_RETRIEVAL_H_
#define UCM_RETRIEVAL_H_

#include <stddef.h>
#include <stdint.h>

#include "ucm/ucm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Representation sections, as bits of a mask. */
#define UCM_REPR_R0 0x1u /* mean key per block: [D] per (layer, KV head) (UCM's ESA) */
#define UCM_REPR_R1 0x2u /* per-channel key min and max: [2][D] (Quest, Tang et al. 2024 §3) */
#define UCM_REPR_R4 0x4u /* per-token sign hash: [T][B/8] bytes (UCM's GSA on device) */

/* What a namespace's representations look like (from its descriptor; store_v1.md §4.3, §7).
 * Like every struct here it grows at its end (ucm/ucm.h, "Structs that grow"); minimum
 * struct_size for it and the other three of this header (ucm_repr_buffers, ucm_retriever_params,
 * ucm_retrieval_query): all of it (0.2.0's). */
typedef struct ucm_repr_info {
  uint32_t struct_size;   /* sizeof(ucm_repr_info); set by the caller before the call */
  uint32_t num_layers;    /* L */
  uint32_t num_kv_heads;  /* H */
  uint32_t head_dim;      /* D */
  uint32_t block_size;    /* T, tokens per block */
  uint32_t hash_bits;     /* B of R4 (a multiple of 8); 0 when the namespace has no R4 */
  int32_t dtype;          /* UCM_DTYPE_* of R0 and R1 as stored (the namespace dtype) */
  uint32_t sections;      /* UCM_REPR_* the namespace's blocks carry */
  uint64_t dense_layers;  /* bit l set: layer l is kept dense (extra.dense_layers; l < 64) */
} ucm_repr_info;

/* The representation shape of namespace ns into *out, an out-struct: set out->struct_size, and
 * only that many bytes are written. Errors: UCM_E_INVALID (NULL, struct_size below the
 * minimum), UCM_E_NOT_FOUND (namespace not registered), UCM_E_NOT_SUPPORTED (the namespace has
 * no representations). */
UCM_API int ucm_store_repr_info(ucm_store_t* store, const uint8_t* ns, ucm_repr_info* out);

/* Caller-owned representation arrays of one request, laid out for scoring: per (layer, KV head),
 * the blocks are contiguous. With Hs = head_end - head_begin KV heads and C = capacity blocks:
 *   r0: [L][Hs][C][D]          elements of dtype (NULL when R0 is not wanted)
 *   r1: [L][Hs][C][2][D]       elements of dtype, 0 = min, 1 = max (NULL when not wanted)
 *   r4: [L][Hs][C][T][B/8]     bytes (NULL when not wanted)
 * dtype is the element type of r0 and r1: UCM_DTYPE_F32 (converted on load) or the namespace's
 * own dtype (copied as stored). Block i of a request lives at index i of the C dimension. */
typedef struct ucm_repr_buffers {
  uint32_t struct_size;  /* sizeof(ucm_repr_buffers) */
  uint32_t head_begin;   /* KV-head range [head_begin, head_end) held; 0/0 = all heads */
  uint32_t head_end;
  int32_t dtype;         /* UCM_DTYPE_F32 or the namespace dtype */
  size_t capacity;       /* C: blocks the arrays have room for */
  void* r0;
  void* r1;
  uint8_t* r4;
} ucm_repr_buffers;

/* Async load of the representations of n blocks into dst, block i going to index first + i of
 * the C dimension (first + n <= capacity). Each block's representation record is checksum
 * verified before anything of it is copied; a block that fails (UCM_E_NOT_FOUND: absent or
 * stored without representations, UCM_E_CORRUPTION: bad checksum or section table) is reported by
 * ucm_task_block_status and its slots are left untouched: it must not be scored (pass it as
 * invalid to ucm_retriever_select). Lifetimes and threads as ucm_store_load: dst's arrays must
 * stay valid until the task is finished; free the task with ucm_task_free.
 * The section table is checked too (magic, bounds, and each wanted section's kind, dtype and
 * length against the namespace's shape) before anything is written.
 * Errors at once, creating no task: UCM_E_INVALID (NULL arguments, struct_size too small, bad head
 * range, first + n > capacity, a dtype other than F32 or the namespace's, r0, r1 and r4 all NULL,
 * or an array whose section the namespace does not carry), UCM_E_NOT_FOUND (namespace),
 * UCM_E_NOT_SUPPORTED (the namespace has no representations). */
UCM_API int ucm_store_load_repr(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes,
                                size_t n, const ucm_repr_buffers* dst, size_t first,
                                ucm_task_t** task);

/* The BLOCK_REPR payload (store_v1.md §4.3) of one block from its post-RoPE keys, computed by the
 * same code as `ucm precompute` (so a server's blocks carry the same bytes): R0 = mean key over
 * the block's tokens (summed in double, rounded to nearest even in info->dtype), R1 = per-channel
 * min / max rounded outward, R4 = bit j of token t set iff k_t . P[l][h][:, j] >= 0 (double).
 * info: the namespace's shape (ucm_store_repr_info); hash_bits must be > 0.
 * keys: fp32 [L][T][H][D], token t of layer l and head h at ((l * T + t) * H + h) * D.
 * projection: fp32 [L][H][D][B], the namespace's r4_projection attachment.
 * out[cap]: receives the payload; *len is always set to its size (57,728 bytes for SmolLM2 at B =
 * 128, bf16). Store it with ucm_store_dump_repr. Pure: no store is looked at.
 * Errors: UCM_E_INVALID (NULL info / len, struct_size too small, a zero dimension, hash_bits not a
 * positive multiple of 8, unknown dtype, out NULL or cap < *len: nothing written, NULL keys or
 * projection). Added in ucm 0.5.1. */
UCM_API int ucm_repr_encode(const ucm_repr_info* info, const float* keys, const float* projection, void* out,
                            size_t cap, size_t* len);

/* Retrieval policies. */
#define UCM_POLICY_ESA 0   /* top-k by q . R0 (mean key); UCM's ESA */
#define UCM_POLICY_QUEST 1 /* top-k by the R1 upper bound sum_i max(q_i min_i, q_i max_i); Quest §3 */
#define UCM_POLICY_GSA 2   /* top-k by the best Hamming similarity between the sign-hashed query
                              (r4_projection) and the block's tokens (R4); UCM's GSA on device */
#define UCM_POLICY_PSA 3   /* blocks in descending R1 bound order until the estimated attention
                              mass covered reaches psa_tau (PSA, arXiv:2503.00392), at most psa_max_blocks;
                              a block's mass is estimated as exp(bound / sqrt(D)) normalised over
                              the valid blocks */

/* Retriever settings. Start from ucm_retriever_default_params() (or a YAML file through
 * ucm_retriever_params_load) and change fields. The budget of a step is, in blocks,
 *   k = top_k                                          when top_k > 0,
 *   k = max(min_blocks, ceil(sparse_ratio * n_blocks)) otherwise,
 * windows included, capped at n_blocks (PSA: k is only the cap when psa_max_blocks is 0). The ceil
 * forgives the float ratio's rounding (0.3f x 10 = 3.0000001 counts as 3).
 * Sink-window, local-window and invalid blocks are always selected, even beyond k; the other
 * blocks fill k by score, higher first, equal scores lower index first.
 * GQA: a KV head scores a block by the maximum over its group's query heads (ESA, QUEST), from the
 * group's mean query (GSA, as UCM's GSA on device), or by the mean of the heads' estimated attention
 * masses (PSA); shared_heads applies the same over all query heads. docs/retrieval-api.md. */
typedef struct ucm_retriever_params {
  uint32_t struct_size;   /* sizeof(ucm_retriever_params), set by the defaults call */
  int32_t policy;         /* UCM_POLICY_*; default UCM_POLICY_QUEST */
  uint32_t sink_blocks;   /* first blocks always selected (sink window) */
  uint32_t local_blocks;  /* last blocks always selected (local window) */
  float sparse_ratio;     /* fraction of the blocks selected, windows included */
  uint32_t min_blocks;    /* lower bound of the budget */
  uint32_t top_k;         /* explicit budget in blocks (0 = from sparse_ratio / min_blocks) */
  float psa_tau;          /* PSA: attention-mass threshold in (0, 1] */
  uint32_t psa_max_blocks;/* PSA: cap on the blocks selected, windows included (0 = budget k) */
  uint32_t reuse_steps;   /* KVStar-style reuse: a layer's selection is recomputed every
                             reuse_steps decode steps and reused in between (1 = every step);
                             a reused set also holds the blocks appended since it was computed;
                             fewer blocks or another head range force a recomputation */
  int32_t shared_heads;   /* 1: one set shared by all KV heads; 0: one set per KV head */
  int32_t honor_dense_layers; /* 1: layers of ucm_repr_info.dense_layers select every block */
} ucm_retriever_params;

/* The defaults (configs/retrieval.yaml documents them and where they come from). */
UCM_API ucm_retriever_params ucm_retriever_default_params(void);

/* Reads a YAML file like configs/retrieval.yaml into *params, starting from the defaults (not
 * from *params). *params is an out-struct: set params->struct_size (start from
 * ucm_retriever_default_params()); only that many bytes are written. Unknown keys and bad values
 * are UCM_E_INVALID (the message names the key); a missing file UCM_E_IO. */
UCM_API int ucm_retriever_params_load(const char* yaml_path, ucm_retriever_params* params);

typedef struct ucm_retriever ucm_retriever_t;

/* A retriever for one request (it keeps the per-layer state of reuse_steps).
 * info: the namespace's shape (ucm_store_repr_info). projection: fp32 [L][H][D][B], the
 * namespace's r4_projection, copied during the call; required for UCM_POLICY_GSA, else may be
 * NULL. Errors: UCM_E_INVALID (bad params or info, GSA without projection or R4). */
UCM_API int ucm_retriever_create(const ucm_retriever_params* params, const ucm_repr_info* info,
                                 const float* projection, ucm_retriever_t** out);
/* NULL is a no-op. */
UCM_API void ucm_retriever_free(ucm_retriever_t* r);

/* Input of one decode step of one layer. */
typedef struct ucm_retrieval_query {
  uint32_t struct_size;          /* sizeof(ucm_retrieval_query) */
  uint32_t layer;                /* l < L */
  const void* q;                 /* [n_q_heads][D], post-RoPE, of q_dtype */
  int32_t q_dtype;               /* UCM_DTYPE_F32 or UCM_DTYPE_BF16 */
  uint32_t n_q_heads;            /* query heads of this step: group_size * (head_end - head_begin) */
  uint32_t group_size;           /* GQA group: query head j uses KV head head_begin + j / group_size */
  const ucm_repr_buffers* reprs; /* the request's representations (head range = the query's) */
  size_t n_blocks;               /* the request's blocks, indices [0, n_blocks) (<= capacity) */
  const uint8_t* valid;          /* [n_blocks] 1 = representations loaded, 0 = not scorable (such a
                                    block is always selected); NULL = all valid */
  uint32_t top_k;                /* > 0: the budget of this call in blocks (windows included),
                                    instead of the params' (PSA: its cap); 0 = the params' */
} ucm_retrieval_query;

/* Selects the blocks for one step of one layer. Output: n_sets = 1 (shared_heads, or a dense
 * layer) or Hs sets; set s holds counts[s] block indices, ascending, at indices[s * cap ...];
 * counts has room for Hs entries; cap >= n_blocks always suffices. *n_sets may be NULL.
 * Not thread-safe: one thread at a time per retriever.
 * Errors: UCM_E_INVALID (bad query, NULL indices or counts, a set larger than cap: then nothing is
 * written and the reuse state is unchanged; n_q_heads other than group_size times the buffers'
 * KV heads; the policy's array NULL in reprs). */
UCM_API int ucm_retriever_select(ucm_retriever_t* r, const ucm_retrieval_query* query,
                                 uint32_t* indices, size_t cap, uint32_t* counts,
                                 uint32_t* n_sets);

/* Forgets the reuse state (a new request, or the blocks changed). */
UCM_API void ucm_retriever_reset(ucm_retriever_t* r);

#ifdef __cplusplus
}
#endif
#endif /* UCM_RETRIEVAL_H_ */
