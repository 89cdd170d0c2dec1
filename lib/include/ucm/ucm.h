/* ucm/ucm.h: the stable C ABI of libucm, for inference servers (C, C++, Python ctypes).
 *
 * Conventions
 *  - Opaque handles: ucm_store_t, ucm_task_t. Create/destroy pairs; never free them yourself.
 *  - Every function returning int returns a UCM_* code below (0 = success).
 *  - The text of the last error on the calling thread: ucm_last_error() (valid until the next
 *    call on that thread).
 *  - Buffers are caller-owned. Hashes and namespace ids are 16 raw bytes; arrays of them are
 *    packed, [n][16].
 *  - Thread safety: a ucm_store_t may be used from many threads at once.
 *  - The format behind it: formats/store/store_v1.md.
 */
#ifndef UCM_UCM_H_
#define UCM_UCM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(UCM_BUILDING_LIBRARY)
#define UCM_API __attribute__((visibility("default")))
#else
#define UCM_API
#endif

/* Return codes (stable; equal to ucm::Code). */
#define UCM_OK 0
#define UCM_E_NOT_FOUND 1      /* block / namespace absent */
#define UCM_E_CORRUPTION 2     /* checksum mismatch: nothing was copied */
#define UCM_E_INVALID 3        /* bad argument (message says which) */
#define UCM_E_IO 4             /* OS error */
#define UCM_E_BUSY 5           /* another writer holds the store */
#define UCM_E_VERSION 6        /* store format newer than this library */
#define UCM_E_NOT_SUPPORTED 7
#define UCM_E_NO_SPACE 8       /* disk full */
#define UCM_E_PENDING 9        /* task not finished (ucm_task_wait with a timeout) */
#define UCM_E_INTERNAL 10

/* Open modes. */
#define UCM_OPEN_READ_ONLY 0   /* any number of processes, alongside one writer */
#define UCM_OPEN_READ_WRITE 1  /* one writer at a time */
#define UCM_OPEN_CREATE 2      /* read-write, creating the store if missing */

/* Load destination kinds. */
#define UCM_DEST_CONTIGUOUS 0  /* ptrs[n]: block i -> [L][2][T][h1-h0][D] */
#define UCM_DEST_PAGED 1       /* ptrs[n*L*2]: (block i, layer l, kv) at (i*L + l)*2 + kv -> [T][h1-h0][D] */

typedef struct ucm_store ucm_store_t;
typedef struct ucm_task ucm_task_t;

/* Library version, "MAJOR.MINOR.PATCH", static storage. */
UCM_API const char* ucm_version(void);
/* Newest store format version this library reads and writes. */
UCM_API uint32_t ucm_format_version(void);
/* Text of the last error on this thread ("" if none). */
UCM_API const char* ucm_last_error(void);
/* Name of a return code, e.g. "UCM_E_CORRUPTION". */
UCM_API const char* ucm_strerror(int code);

/* Opens a store. mode: UCM_OPEN_*. On success *out is a handle to close with ucm_store_close. */
UCM_API int ucm_store_open(const char* path, int mode, ucm_store_t** out);
UCM_API void ucm_store_close(ucm_store_t* store);
/* Read-only handles: see the writer's commits now (they are also seen within 5 s without it). */
UCM_API int ucm_store_refresh(ucm_store_t* store);

/* Namespace by name or 32-hex id. ns_out: [16]. desc_json (optional, may be NULL): the
 * descriptor JSON, NUL-terminated, into desc_cap bytes; *desc_len (optional) gets the length
 * needed (without NUL). UCM_E_INVALID if desc_cap is too small. */
UCM_API int ucm_store_namespace_find(ucm_store_t* store, const char* name_or_id, uint8_t* ns_out,
                                     char* desc_json, size_t desc_cap, size_t* desc_len);
/* The namespace id that seeds the block hash chains of namespace ns (store_v1.md §7.1) into
 * seed_out[16]: the namespace's own id, or, for a namespace converted by `ucm migrate --dtype`,
 * the id of the namespace whose block hashes its blocks keep (extra.hash_seed_namespace).
 * Servers hash a sequence start with ucm_hash_blocks(seed_out, NULL, ...), never with ns itself:
 * the two differ for converted namespaces, and hashes chained from ns would all miss.
 * UCM_E_NOT_FOUND when ns is not registered (read-only handles refresh once first). */
UCM_API int ucm_store_namespace_hash_seed(ucm_store_t* store, const uint8_t* ns, uint8_t* seed_out);
/* Writer: registers a namespace from its descriptor JSON (store_v1.md §7). ns_out: [16]. */
UCM_API int ucm_store_namespace_register(ucm_store_t* store, const char* desc_json, uint8_t* ns_out);
/* A namespace attachment (e.g. "r4_projection") into buf[cap]; *len gets its size. */
UCM_API int ucm_store_attachment_get(ucm_store_t* store, const uint8_t* ns, const char* name,
                                     void* buf, size_t cap, size_t* len);

/* Chained block hashes (store_v1.md §4.1) of the full blocks of tokens[n_tokens]. Pure: it does
 * not look at any store.
 * ns: [16] the chain's hash seed (ucm_store_namespace_hash_seed: for most namespaces their own
 * id, for converted ones the source's), used only when parent is NULL.
 * parent: [16] hash to chain from, or NULL for a sequence start (root_hash(ns) = MD5("ucm.hash.v1" || ns)).
 * out_hashes: [max_blocks][16]. *n_blocks = floor(n_tokens / block_size) (UCM_E_INVALID when
 * that exceeds max_blocks, with *n_blocks set to the number needed). */
UCM_API int ucm_hash_blocks(const uint8_t* ns, const uint8_t* parent, const uint32_t* tokens,
                            size_t n_tokens, uint32_t block_size, uint8_t* out_hashes,
                            size_t max_blocks, size_t* n_blocks);

/* present: [n] bytes (0/1), may be NULL. *prefix_blocks: leading present blocks. */
UCM_API int ucm_store_lookup(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes, size_t n,
                             uint8_t* present, size_t* prefix_blocks);

/* Async load of n blocks into caller memory (see UCM_DEST_*). head_begin/head_end: KV-head range
 * [h0, h1); 0/0 = all heads. On UCM_OK, *task must be freed with ucm_task_free (after it is done).
 * Bad arguments (head range, NULL pointers, unknown namespace) return UCM_E_INVALID / NOT_FOUND at
 * once and create no task. */
UCM_API int ucm_store_load(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes, size_t n,
                           int dest_kind, void* const* ptrs, uint32_t head_begin, uint32_t head_end,
                           ucm_task_t** task);

/* Async dump of n blocks. hashes, parents: [n][16]. kv: [n] pointers to [L][2][T][H][D] payloads
 * (all heads). token_counts may be NULL (= block size). Existing blocks are cheap no-ops. */
UCM_API int ucm_store_dump(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes,
                           const uint8_t* parents, size_t n, const void* const* kv,
                           ucm_task_t** task);

/* 1 if finished, 0 if not (never blocks). */
UCM_API int ucm_task_check(ucm_task_t* task);
/* Waits up to timeout_ms (< 0 = forever). UCM_E_PENDING on timeout; else UCM_OK or the first
 * block's error code. */
UCM_API int ucm_task_wait(ucm_task_t* task, int timeout_ms);
/* Per-block result code of a finished task (UCM_E_NOT_FOUND = miss, UCM_E_CORRUPTION = bad
 * checksum, destination untouched). */
UCM_API int ucm_task_block_status(ucm_task_t* task, size_t i);
/* Waits for the task if needed, then frees it. */
UCM_API void ucm_task_free(ucm_task_t* task);

/* Prometheus text exposition into buf[cap] (NUL-terminated); *len gets the length needed.
 * UCM_E_INVALID if cap is too small (nothing written but *len). */
UCM_API int ucm_store_metrics(ucm_store_t* store, char* buf, size_t cap, size_t* len);

#ifdef __cplusplus
}
#endif
#endif /* UCM_UCM_H_ */
