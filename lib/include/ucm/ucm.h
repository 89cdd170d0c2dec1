/* ucm/ucm.h: the stable C ABI of libucm, for inference servers (C, C++, Python ctypes).
 *
 * Conventions
 *  - Opaque handles: ucm_store_t, ucm_task_t. Each has a create/destroy pair; never free them
 *    yourself.
 *  - Every function returning int returns a UCM_* code below (0 = success). The one exception is
 *    ucm_task_check, a predicate (1 finished, 0 not). Return codes are int; enum-like values
 *    passed in (UCM_OPEN_*, UCM_DEST_*, UCM_DTYPE_*, UCM_LOG_*, UCM_POLICY_*, UCM_ROPE_SCALING_*)
 *    are int32_t, in struct fields and arguments alike.
 *  - The text of the last error on the calling thread: ucm_last_error() (valid until the next
 *    call into libucm on that thread).
 *  - Buffers are caller-owned. Hashes and namespace ids are 16 raw bytes; arrays of them are
 *    packed, [n][16]. Input buffers are read during the call only, except the sources of
 *    ucm_store_dump and the destinations of ucm_store_load, which must stay valid until the task
 *    is finished (ucm_task_check() == 1 or ucm_task_wait() returned something other than
 *    UCM_E_PENDING).
 *  - Threads: a ucm_store_t may be used from many threads at once. A ucm_task_t may be checked
 *    and waited on from several threads; ucm_task_free must be called once, when no other
 *    thread uses the task. Close a store only after every task it created has been freed
 *    (ucm_task_free waits for a task that is still running). The log callback (ucm_log_set_callback)
 *    is called from libucm's own threads as well as from the caller's.
 *  - Structs that grow (every params and info struct of ucm.h, ucm/retrieval.h, ucm/blend.h and
 *    ucm/corpus.h): the first field is `uint32_t struct_size`, which the caller sets to the
 *    sizeof of the struct it was compiled with (the defaults calls set it). A release may add
 *    fields at the end only.
 *    libucm accepts any struct_size from the struct's minimum (the size of its first release,
 *    given at each struct) upwards:
 *      - in-structs: the fields beyond the caller's struct_size are not read; they take their
 *        defaults (those of the struct's defaults call; 0 where it has none). A struct_size
 *        larger than this library's (a newer ucm.h) is accepted, the fields it does not know
 *        ignored;
 *      - out-structs (ucm_repr_info of ucm_store_repr_info, ucm_rope_params of
 *        ucm_store_rope_params): libucm writes only the caller's struct_size bytes, never past
 *        them, and leaves struct_size as the caller set it;
 *      - a struct_size below the minimum is UCM_E_INVALID (the message gives the minimum).
 *  - Sized outputs (ucm_store_namespace_find, ucm_store_namespace_list, ucm_store_attachment_get,
 *    ucm_store_document_get, ucm_store_metrics, ucm_corpus_template): the output goes into a
 *    caller buffer buf[cap].
 *    The length out-parameter (desc_len, len: may be NULL where documented) is always set to the
 *    length the output needs, in bytes, without the NUL of a text. Then:
 *      - buf NULL: a size query; nothing is written, and the call returns UCM_OK;
 *      - cap too small (a text needs length + 1 for its NUL): nothing is written to buf, the call
 *        returns UCM_E_INVALID and ucm_last_error gives the size needed;
 *      - otherwise the output is copied (texts NUL-terminated) and the call returns UCM_OK.
 *    ucm_store_document_get has no length parameter: a too-small buffer is reported the same way
 *    and its message gives the size. Arrays of counted items (ucm_hash_blocks,
 *    ucm_store_chunk_prefix, ucm_blend_select*, ucm_repr_encode) likewise set their count and
 *    write nothing when cap is too small, returning UCM_E_INVALID.
 *  - The format behind it: formats/store/store_v1.md. Guide: docs/library.md.
 */
#ifndef UCM_UCM_H_
#define UCM_UCM_H_

#include <stddef.h>
#include <stdint.h>

#include "ucm/version.h"

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

/* Open modes (ucm_store_open_params.mode). */
#define UCM_OPEN_READ_ONLY 0   /* any number of processes, alongside one writer; needs read access only */
#define UCM_OPEN_READ_WRITE 1  /* one writer at a time */
#define UCM_OPEN_CREATE 2      /* read-write, creating the store if missing or empty */

/* Log levels (ucm_log_set_callback). */
#define UCM_LOG_DEBUG 0
#define UCM_LOG_INFO 1
#define UCM_LOG_WARN 2
#define UCM_LOG_ERROR 3

/* Load destination kinds. Host memory: */
#define UCM_DEST_CONTIGUOUS 0  /* ptrs[n]: block i -> [L][2][T][h1-h0][D] */
#define UCM_DEST_PAGED 1       /* ptrs[n*L*2]: (block i, layer l, kv) at (i*L + l)*2 + kv -> [T][h1-h0][D] */
/* GPU memory (ucm_store_load_ex only): a paged KV cache given as per-(layer, K|V) base pointers
 * and a slot per block; slot s of (layer l, kv) at layer_caches[l*2 + kv] + s * slot_stride. */
#define UCM_DEST_DEVICE_PAGED 2      /* page = [T][h1-h0][D] (NHD: vLLM, FlashInfer "NHD") */
#define UCM_DEST_DEVICE_PAGED_HND 3  /* page = [h1-h0][T][D] (FlashInfer "HND") */

/* Element types (of a namespace, of representation buffers and queries in ucm/retrieval.h, of
 * keys in ucm/blend.h). */
#define UCM_DTYPE_BF16 1
#define UCM_DTYPE_F16 2
#define UCM_DTYPE_F32 3

typedef struct ucm_store ucm_store_t;
typedef struct ucm_task ucm_task_t;

/* Library version, "MAJOR.MINOR.PATCH" (static storage); equals UCM_VERSION_STRING of the
 * header the library was built with. */
UCM_API const char* ucm_version(void);
/* Newest store format version this library reads and writes: 5, a single store that holds SGLang
 * page namespaces (store_v1.md §10, §12.2; ucm >= 0.8.0). It reads every version from 1, writes
 * into stores of versions 2, 4 and 5, creates single stores (and shards) as 4 and steps a store to
 * 5 when the first page namespace is registered in it; 3 is a sharded root (§11). */
UCM_API uint32_t ucm_format_version(void);
/* Text of the last error on this thread ("" if none); valid until the next call on this thread. */
UCM_API const char* ucm_last_error(void);
/* What a return code means, e.g. "checksum mismatch: the block is treated as a miss, nothing was
 * copied" (static storage). "unknown return code" for values not listed above. */
UCM_API const char* ucm_strerror(int code);
/* The name of a return code, e.g. "UCM_E_CORRUPTION" (static storage; "UCM_E_UNKNOWN" for others). */
UCM_API const char* ucm_code_name(int code);

/* Receives libucm's messages: level UCM_LOG_*, a NUL-terminated line (valid during the call),
 * and the user_data given to ucm_log_set_callback. Called from any libucm thread, possibly from
 * several at once: it must be thread-safe, must return quickly, and must not call into libucm. */
typedef void (*ucm_log_callback)(int32_t level, const char* message, void* user_data);
/* Routes libucm's messages (the store's and RocksDB's) to cb from now on; messages below
 * min_level are dropped. cb == NULL restores the default: lines on stderr. libucm never writes
 * to stdout. Process-wide; safe to call at any time, from any thread. */
UCM_API void ucm_log_set_callback(ucm_log_callback cb, void* user_data, int32_t min_level);

/* How to open a store. Get the defaults from ucm_store_default_open_params() and change fields.
 * Grows at its end ("Structs that grow"); minimum struct_size: all of it (0.2.0's). */
typedef struct ucm_store_open_params {
  uint32_t struct_size;          /* sizeof(ucm_store_open_params), set by the defaults call */
  int32_t mode;                  /* UCM_OPEN_*; default UCM_OPEN_READ_ONLY */
  uint32_t io_threads;           /* threads doing block I/O for load and dump tasks; default 8 */
  int32_t direct_io;             /* 1: read and write payloads with O_DIRECT where the file system
                                    allows it (buffered otherwise); 0: buffered; default 1 */
  uint32_t refresh_interval_ms;  /* read-only: how often a background thread catches up with the
                                    writer (ms); 0 = only ucm_store_refresh; default 1000 */
  const char* reader_dir;        /* read-only: base of the handle's private scratch directory;
                                    NULL = $UCM_READER_DIR, else STORE/readers when writable, else a
                                    per-user local directory (docs/library.md, "Read-only opens").
                                    Read during ucm_store_open only. */
} ucm_store_open_params;

/* The defaults above. */
UCM_API ucm_store_open_params ucm_store_default_open_params(void);

/* Opens the store at path. params NULL = the defaults (read-only). On success *out is a handle
 * to close with ucm_store_close; on failure *out is NULL.
 * A sharded store (a directory of writer shards on a shared file system, store_v1.md §11) opens
 * the same way: reads see the union of its shards; a read-write handle writes its own shard,
 * named $UCM_SHARD, else the host name (ucm_store_open_shard names it). UCM_OPEN_CREATE of a
 * missing store with $UCM_SHARD set creates a sharded store.
 * Errors: UCM_E_INVALID (NULL path/out, unknown mode, struct_size too small, missing path or not
 * a store, bad shard name), UCM_E_BUSY (another writer: the message names its pid, host and start time),
 * UCM_E_VERSION (a newer store format), UCM_E_CORRUPTION (bad superblock; or no index: the
 * message names `ucm build STORE --rebuild-index`), UCM_E_IO, UCM_E_NO_SPACE. */
UCM_API int ucm_store_open(const char* path, const ucm_store_open_params* params, ucm_store_t** out);
/* ucm_store_open of a sharded store (store_v1.md §11) as the writer of shard `shard` (1-64
 * characters of A-Z a-z 0-9 . _ -, not starting with '.'), created on first use; NULL or "" =
 * $UCM_SHARD, else the host name. Two writers in one process (or on one host) pass two names.
 * UCM_OPEN_CREATE of a missing store creates a sharded store. Single-writer stores ignore the
 * name. Errors: as ucm_store_open; UCM_E_INVALID for a bad name; UCM_E_BUSY when another writer
 * holds that shard (the message names it). Added in ucm 0.4.0. */
UCM_API int ucm_store_open_shard(const char* path, const ucm_store_open_params* params, const char* shard,
                                 ucm_store_t** out);
/* Closes a handle (NULL is a no-op). Free every task of the handle first. A writer's close makes
 * its index durable; a reader's removes its scratch directory. */
UCM_API void ucm_store_close(ucm_store_t* store);
/* Read-only handles: see the writer's commits now (they are also seen within refresh_interval_ms
 * plus the catch-up time without it). Writer handles: no-op. */
UCM_API int ucm_store_refresh(ucm_store_t* store);

/* Namespace by name or 32-hex id. ns_out: [16]. desc_json: the descriptor JSON, NUL-terminated,
 * into desc_cap bytes, a sized output (see "Sized outputs": NULL = only the id and *desc_len);
 * desc_len may be NULL. Errors: UCM_E_NOT_FOUND, UCM_E_INVALID (NULL store or name_or_id,
 * desc_cap too small: ns_out and *desc_len are still set). */
UCM_API int ucm_store_namespace_find(ucm_store_t* store, const char* name_or_id, uint8_t* ns_out,
                                     char* desc_json, size_t desc_cap, size_t* desc_len);
/* Every namespace of the store, as a JSON array of descriptors (store_v1.md §7) each with its
 * "id" (32 hex) added, NUL-terminated, into json[cap], a sized output ("Sized outputs"); *len
 * gets the length needed (without NUL). A server uses it to find the namespace matching its
 * model, or to say what a store holds. Errors: UCM_E_INVALID (NULL store or len, cap < *len + 1).
 * Added in ucm 0.5.1. */
UCM_API int ucm_store_namespace_list(ucm_store_t* store, char* json, size_t cap, size_t* len);
/* The namespace id that seeds the block hash chains of namespace ns (store_v1.md §7.1) into
 * seed_out[16]: the namespace's own id, or, for a namespace converted by `ucm migrate --dtype`,
 * the id of the namespace whose block hashes its blocks keep (extra.hash_seed_namespace).
 * Servers hash a sequence start with ucm_hash_blocks(seed_out, NULL, ...), never with ns itself:
 * the two differ for converted namespaces, and hashes chained from ns would all miss.
 * UCM_E_NOT_FOUND when ns is not registered (read-only handles refresh once first). */
UCM_API int ucm_store_namespace_hash_seed(ucm_store_t* store, const uint8_t* ns, uint8_t* seed_out);
/* The id a namespace descriptor JSON (store_v1.md §7) has: MD5 of the canonical JSON of every
 * field but "name" (the id ucm_store_namespace_register would return). Pure: no store is looked
 * at. id_out: [16]. Errors: UCM_E_INVALID (NULL, not a valid descriptor: the message says which
 * field). */
UCM_API int ucm_namespace_id(const char* desc_json, uint8_t* id_out);
/* The namespace descriptor JSON (store_v1.md §7) of the model in model_dir (a Hugging Face
 * directory: config.json and safetensors weights), as `ucm precompute` registers it: model_id,
 * weights_digest (MD5 over every tensor's name, dtype and bytes, in name order: it reads the whole
 * weights once, about 0.4 s per 270 MB), dtype, block_size, geometry, hash scheme and the
 * representation settings. options_json: NULL, "" or "{}" for precompute's defaults, else an
 * object with any of "dtype" ("bf16" | "fp16" | "fp32"), "block_size", "hash_bits",
 * "dense_layers" (array), "projection_seed", "namespace_name". The one owner of a model's
 * identity: a server compares the result (ucm_namespace_id) with a store's namespaces instead of
 * computing a digest itself. desc_json: NUL-terminated into desc_cap bytes, a sized output
 * ("Sized outputs"); *desc_len gets the length needed. Errors: UCM_E_INVALID (NULL model_dir or
 * desc_len, an unreadable or unsupported config.json, missing or malformed weights, a bad
 * option: the message names the file or key; desc_cap too small). Added in ucm 0.9.0. */
UCM_API int ucm_model_fingerprint(const char* model_dir, const char* options_json, char* desc_json, size_t desc_cap,
                                  size_t* desc_len);
/* The namespace of the store that a model may read and write (store_v1.md §7.3, the one rule
 * that precompute, the reference engine and the servers apply): one whose model_id,
 * weights_digest, dtype, layers, KV heads, head dim, layout and hash scheme equal desc_json's
 * (a descriptor from ucm_model_fingerprint), that is no LoRA adapter's, and whose block_size
 * divides engine_block (the server's block or page size in tokens; 0 = equal to desc_json's
 * block_size). desc_json's own id first, else the largest block_size, ties by name. It looks at
 * the namespaces the handle lists now (a reader: ucm_store_refresh first to see new ones), or,
 * when name_or_id is not NULL, at that namespace only (a server told which one to use: refused
 * when it does not suit). ns_out: [16]; *exact_out (may be NULL): 1 when ns_out is desc_json's
 * own id. Errors: UCM_E_NOT_FOUND when none suits (ucm_last_error() names desc_json's
 * fingerprint and, for each namespace looked at, the fields that differ) or name_or_id is no
 * namespace, UCM_E_INVALID (NULL store, desc_json or ns_out; a descriptor that does not
 * validate). Thread-safe. Added in ucm 0.9.0. */
UCM_API int ucm_store_namespace_match(ucm_store_t* store, const char* desc_json, uint32_t engine_block,
                                      const char* name_or_id, uint8_t* ns_out, int* exact_out);
/* Writer: creates the namespace of desc_json (or finds it: same id) with what `ucm precompute`
 * gives a namespace (store_v1.md §7.3): its r4_projection attachment when extra.hash_bits > 0,
 * generated from extra.projection_seed (a stored one is checked, not replaced). A server that
 * saves into a store without a namespace for its model calls it with the descriptor of
 * ucm_model_fingerprint; no `ucm` binary is needed. ns_out: [16] (may be NULL). Errors:
 * UCM_E_INVALID (NULL store or desc_json, a descriptor that does not validate, a read-only
 * handle), UCM_E_CORRUPTION (a stored r4_projection that differs from the
 * seed's), UCM_E_BUSY / UCM_E_IO from the write. Added in ucm 0.9.0. */
UCM_API int ucm_store_namespace_create(ucm_store_t* store, const char* desc_json, uint8_t* ns_out);
/* Writer: registers a namespace from its descriptor JSON (store_v1.md §7). ns_out: [16]. */
UCM_API int ucm_store_namespace_register(ucm_store_t* store, const char* desc_json, uint8_t* ns_out);
/* A namespace attachment (e.g. "r4_projection") into buf[cap], a sized output ("Sized
 * outputs": bytes, no NUL); *len (may be NULL) gets its size. Errors: UCM_E_NOT_FOUND (no such
 * namespace or attachment), UCM_E_INVALID (NULL store, ns or name; cap < *len). */
UCM_API int ucm_store_attachment_get(ucm_store_t* store, const uint8_t* ns, const char* name,
                                     void* buf, size_t cap, size_t* len);
/* The document registry (store_v1.md §5.6): entry `id` of namespace ns (a corpus id, or
 * "chunk:<corpus id>" for a chunk, §4.4). source[cap] receives its source (the corpus file or
 * "<file>:<line>" precompute recorded), NUL-terminated, a sized output without a length
 * parameter ("Sized outputs": NULL = not wanted); *blocks and *tokens its size (either may be
 * NULL, both set even when cap is too small). Errors: UCM_E_NOT_FOUND (no such entry or
 * namespace), UCM_E_INVALID (NULL store, ns or id; cap too small for the source and its NUL:
 * nothing copied, the message gives the size). */
UCM_API int ucm_store_document_get(ucm_store_t* store, const uint8_t* ns, const char* id, char* source, size_t cap,
                                   uint64_t* blocks, uint64_t* tokens);
/* Registers document `id` of namespace ns (store_v1.md §5.6) as `ucm precompute` does, once its
 * blocks are stored (a server that saved a corpus's prompts, `python -m ucm.vllm.precompute`):
 * tokens[n_tokens] are the ids of its prompt (template and document, or the corpus entry's ids),
 * source the corpus file or "<file>:<line>", input "" (text, tokenized) or "token_ids" (NULL:
 * ""). libucm chains the full blocks' hashes from the namespace's root and records the first and
 * the last, the block count and n_tokens; an entry with the same id is replaced. Writers only.
 * Errors: UCM_E_INVALID (NULL store, ns, id or source; tokens NULL with n_tokens > 0; fewer ids
 * than one block; a read-only handle), UCM_E_NOT_FOUND (the namespace; the document's last full
 * block is not stored: register it after its blocks are durable), UCM_E_IO. Thread-safe. Added in
 * ucm 0.10.0. */
UCM_API int ucm_store_document_put(ucm_store_t* store, const uint8_t* ns, const char* id, const char* source,
                                   const uint32_t* tokens, size_t n_tokens, const char* input);

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

/* The parent of a sequence's first block: root_hash(seed) = MD5("ucm.hash.v1" || seed)
 * (store_v1.md §4.1), where seed is the namespace's hash seed (ucm_store_namespace_hash_seed).
 * ucm_store_dump takes it as parents[i] of a first block. seed, out: [16]. Pure. */
UCM_API int ucm_hash_root(const uint8_t* seed, uint8_t* out);

/* present: [n] bytes (0/1), may be NULL. *prefix_blocks: leading present blocks. */
UCM_API int ucm_store_lookup(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes, size_t n,
                             uint8_t* present, size_t* prefix_blocks);

/* Async load of n blocks into caller memory (see UCM_DEST_*). head_begin/head_end: KV-head range
 * [h0, h1); 0/0 = all heads. The destinations must stay valid until the task is finished; a
 * block that fails (miss, corruption) leaves its destination untouched. Every block's checksum is
 * verified before anything is copied. On UCM_OK, *task must be freed with ucm_task_free.
 * Bad arguments (head range, NULL pointers, unknown namespace) return UCM_E_INVALID / NOT_FOUND at
 * once and create no task. */
UCM_API int ucm_store_load(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes, size_t n,
                           int32_t dest_kind, void* const* ptrs, uint32_t head_begin, uint32_t head_end,
                           ucm_task_t** task);

/* Called once per layer of a device load when that layer's copies are done on the stream
 * (cudaLaunchHostFunc: on a CUDA runtime thread; it must not call CUDA or block), with status
 * UCM_OK; or, when enqueueing failed, from a libucm thread with the error code for that layer
 * and each later one. layer < L. */
typedef void (*ucm_layer_callback)(uint32_t layer, int status, void* user_data);

/* How ucm_store_load_ex loads. Get the defaults from ucm_store_default_load_params() and change
 * fields. Grows at its end ("Structs that grow"); minimum struct_size: up to head_end (the host
 * fields, what ucm_store_load takes), the rest taking their defaults. Every
 * pointer array is read during the call only (copied), except the memory it points at.
 * Added in ucm 0.5.2. */
typedef struct ucm_store_load_params {
  uint32_t struct_size;        /* sizeof(ucm_store_load_params), set by the defaults call */
  int32_t dest_kind;           /* UCM_DEST_*; default UCM_DEST_CONTIGUOUS */
  void* const* ptrs;           /* host kinds: as ucm_store_load; must stay valid until the task is finished */
  uint32_t head_begin;         /* KV-head range [head_begin, head_end); 0/0 = all heads. A device */
  uint32_t head_end;           /*   cache holds exactly h1-h0 heads (a TP shard's) */
  /* Device kinds: */
  void* const* layer_caches;   /* [L*2]: device base of (layer l, K|V) at l*2 + kv */
  const int64_t* slots;        /* [n]: slot of block i in those caches; < 0 = do not load block i */
  uint64_t slot_stride;        /* bytes between slots; 0 = one page, T*(h1-h0)*D*elem (vLLM's
                                  [2][num_blocks][T][H][D] per layer); FlashInfer's
                                  [num_blocks][2][T][H][D] is 2 pages with V = K + 1 page */
  int32_t device;              /* CUDA device ordinal; default 0 */
  void* stream;                /* cudaStream_t the copies are enqueued on (NULL = the legacy stream) */
  void* const* layer_events;   /* NULL or [L] cudaEvent_t: recorded after layer l's copies */
  ucm_layer_callback on_layer; /* NULL or called per layer (see ucm_layer_callback) */
  void* on_layer_data;         /* passed to on_layer */
  /* UCM_DEST_PAGED only (added in ucm 0.8.0): bytes between consecutive tokens and between
   * consecutive heads of a page: element (t, h, d) of page (i, l, kv) at
   * ptrs[(i*L + l)*2 + kv] + t*token_stride + (h-h0)*head_stride + d*S. 0 = packed [T][h1-h0][D].
   * So a page can sit inside a larger host layout (SGLang's page_first: token_stride = L*H*D*S).
   * UCM_E_INVALID when the strides make elements overlap or are given for another kind. */
  uint64_t token_stride;
  uint64_t head_stride;
} ucm_store_load_params;

/* The defaults above. */
UCM_API ucm_store_load_params ucm_store_default_load_params(void);

/* Async load of n blocks as params says (NULL = the defaults: contiguous, which needs ptrs, so
 * NULL is UCM_E_INVALID). Host kinds behave as ucm_store_load, which is this call.
 * Device kinds: blocks are read and checksum-verified into pinned host staging, then each layer
 * is enqueued on params->stream (async copies for runs of >= 28 KiB, a gather kernel for smaller
 * ones such as a TP shard's head range); layer l's event is recorded and on_layer(l) follows as
 * its copies finish, so a server may start layer 0 while later layers arrive. The task finishes
 * when every copy has run. A block that failed (miss, corruption) is not copied: its slot stays
 * untouched, as does every slot < 0. The CUDA runtime is loaded (libucm_cuda.so) on the first
 * device load; a process that never asks for one never loads it.
 * Errors at once, creating no task: UCM_E_INVALID (NULL arguments, unknown kind, head range,
 * struct_size, slot_stride below a page), UCM_E_NOT_FOUND (namespace), UCM_E_NOT_SUPPORTED
 * (device kind without libucm_cuda.so or without that CUDA device: the message says which),
 * UCM_E_IO (a CUDA call failed). Added in ucm 0.5.2. */
UCM_API int ucm_store_load_ex(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes, size_t n,
                              const ucm_store_load_params* params, ucm_task_t** task);

/* The number of CUDA devices into *n (0 when there are none). UCM_E_NOT_SUPPORTED (and *n = 0)
 * when libucm_cuda.so or the CUDA driver cannot be loaded: ucm_last_error() says why. Loads the
 * CUDA runtime. Added in ucm 0.5.2. */
UCM_API int ucm_cuda_device_count(int* n);

/* Async dump of n blocks (writer handles). hashes, parents: [n][16] (parents[i] = the hash of
 * the block before block i, or root_hash for a sequence start). kv: [n] pointers to
 * [L][2][T][H][D] payloads (all KV heads, the namespace dtype, T = block_size tokens); the
 * payloads must stay valid until the task is finished. Blocks already stored are cheap no-ops
 * (status UCM_OK). Durable (data fsync'd, index synced) when the task finishes with UCM_OK.
 * Errors at once, creating no task: UCM_E_INVALID (NULL arguments), UCM_E_NOT_FOUND (namespace
 * not registered: the same code as ucm_store_load). */
UCM_API int ucm_store_dump(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes,
                           const uint8_t* parents, size_t n, const void* const* kv,
                           ucm_task_t** task);

/* ucm_store_dump with block representations (store_v1.md §4.3), so that blocks a server writes
 * serve sparse retrieval like precomputed ones: reprs[i] points at repr_lens[i] bytes, the
 * BLOCK_REPR payload of block i from ucm_repr_encode (ucm/retrieval.h), or is NULL for a block
 * without; reprs NULL = none (ucm_store_dump). reprs must stay valid until the task is finished.
 * Errors: those of ucm_store_dump; UCM_E_INVALID for reprs without repr_lens or a 0-byte repr.
 * Added in ucm 0.5.1. */
UCM_API int ucm_store_dump_repr(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes,
                                const uint8_t* parents, size_t n, const void* const* kv,
                                const void* const* reprs, const size_t* repr_lens, ucm_task_t** task);

/* What ucm_store_dump_ex writes besides the KV payloads. Get the defaults from
 * ucm_store_default_dump_params() and change fields. Grows at its end ("Structs that grow");
 * minimum struct_size: up to tokens (0.7.0's). Added in ucm 0.7.0. */
typedef struct ucm_store_dump_params {
  uint32_t struct_size;          /* sizeof(ucm_store_dump_params), set by the defaults call */
  const void* const* reprs;      /* [n] BLOCK_REPR payloads (as ucm_store_dump_repr), entries may be
                                    NULL; NULL = none. Must stay valid until the task is finished */
  const size_t* repr_lens;       /* [n] bytes of reprs[i]; required with reprs */
  const uint32_t* tokens;        /* [n][T] token ids of the blocks (T = the namespace's block_size),
                                    the ids each hash was made from (block i: tokens[i*T .. i*T+T));
                                    NULL = none: the blocks are stored "tokens unknown". Read during
                                    the call only (copied). store_v1.md §3.2 */
  /* Added in ucm 0.8.0: the payloads as pages, for blocks taken from inside a host layout (SGLang's
   * host pool). kv_pages: NULL, or [n*L*2] pointers, (block i, layer l, K|V kv) at (i*L + l)*2 + kv,
   * each a [T][H][D] page whose element (t, h, d) is at + t*token_stride + h*head_stride + d*S
   * (0 = packed); with kv_pages the dump's kv argument may be NULL (a non-NULL kv wins). Read
   * during the call only; the pages themselves must stay valid until the task is finished.
   * UCM_E_INVALID when the strides make elements overlap, or are given without kv_pages. */
  const void* const* kv_pages;
  uint64_t token_stride;
  uint64_t head_stride;
} ucm_store_dump_params;

/* The defaults above (no reprs, no token ids). */
UCM_API ucm_store_dump_params ucm_store_default_dump_params(void);

/* ucm_store_dump with what params says (NULL = the defaults, which is ucm_store_dump).
 * With tokens, libucm checks hashes[i] == MD5(parents[i] || tokens of block i) (store_v1.md
 * §4.1) for every block before writing anything, and in a store of format version 4 writes the
 * ids into each block's record header (at most 992 ids a block; a version-2 store, or larger
 * blocks, store them as "tokens unknown"); ucm_store_chain_tokens gives them back.
 * Errors at once, creating no task: those of ucm_store_dump_repr; UCM_E_INVALID when a block's
 * ids do not hash to its hash (the message names the block), or struct_size is too small.
 * Added in ucm 0.7.0. */
UCM_API int ucm_store_dump_ex(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes,
                              const uint8_t* parents, size_t n, const void* const* kv,
                              const ucm_store_dump_params* params, ucm_task_t** task);

/* The token ids of block `hash`'s whole chain (its blocks from the first of the sequence to this
 * one, walking parent hashes to the namespace's chain root; store_v1.md §3.2, §4.1) into
 * tokens[cap], a counted array ("Sized outputs": *n_tokens always gets the number of ids,
 * blocks x block_size; tokens NULL is a size query). *n_blocks (may be NULL) gets the number of
 * blocks. Synchronous: one 4 KiB read per block of the chain.
 * Errors: UCM_E_INVALID (NULL store/ns/hash/n_tokens, cap too small), UCM_E_NOT_FOUND (the
 * namespace, or a block of the chain is not stored: the message names it),
 * UCM_E_NOT_SUPPORTED (a block of the chain was stored without ids, "tokens unknown": a
 * version-2 store or a writer that gave none; named), UCM_E_CORRUPTION (a bad record header or
 * ids checksum; a chain that never reaches the root), UCM_E_IO. Added in ucm 0.7.0. */
UCM_API int ucm_store_chain_tokens(ucm_store_t* store, const uint8_t* ns, const uint8_t* hash, uint32_t* tokens,
                                   size_t cap, size_t* n_tokens, size_t* n_blocks);

/* 1 if finished, 0 if not (never blocks); a NULL task counts as finished. The exception to the
 * return-code rule: a predicate, not a UCM_* code (ucm_task_wait(task, 0) gives the code). */
UCM_API int ucm_task_check(ucm_task_t* task);
/* Waits up to timeout_ms (< 0 = forever). UCM_E_PENDING on timeout; else UCM_OK or the first
 * block's error code. */
UCM_API int ucm_task_wait(ucm_task_t* task, int timeout_ms);
/* Per-block result code of a finished task (UCM_E_NOT_FOUND = miss, UCM_E_CORRUPTION = bad
 * checksum, destination untouched). */
UCM_API int ucm_task_block_status(ucm_task_t* task, size_t i);
/* Frees a task (NULL is a no-op), first waiting for it if it is still running, so its buffers
 * are no longer used when this returns. Call it exactly once per task, from one thread. */
UCM_API void ucm_task_free(ucm_task_t* task);

/* The `medium` ucm's KV events give blocks of the store at store_path (vLLM's BlockStored and
 * BlockRemoved, vllm/distributed/kv_events.py): "ucm:" + the store directory's name, e.g.
 * "/srv/kv/corpus/" -> "ucm:corpus" (no symlink is resolved; nothing is read). NUL-terminated into
 * buf[cap], a sized output ("Sized outputs"); *len (may be NULL) gets the length needed. `ucm
 * events` and the vLLM connector's take_events() both name the store this way, so a router sees
 * one medium. Errors: UCM_E_INVALID (NULL store_path, cap too small). Added in ucm 0.7.0. */
UCM_API int ucm_event_medium(const char* store_path, char* buf, size_t cap, size_t* len);

/* SGLang's HiCache storage page keys (sglang 0.5.23, mem_cache/utils.py get_hash_str;
 * docs/sglang_0.5.23_hicache_facts.md §3): key_i = SHA-256(key_{i-1} || page i's token ids as u32
 * little-endian), for the floor(n_tokens / page_size) full pages of tokens[n_tokens]; key_{-1} =
 * prior ([32] raw bytes; NULL: the first page hashes its ids alone, as SGLang without a namespace
 * seed). out_hashes: [max_pages][32] raw digests (SGLang passes them to a backend as 64 lower-case
 * hex characters). *n_pages (may be NULL) = the number of full pages (UCM_E_INVALID when it exceeds
 * max_pages). Pure. Errors: UCM_E_INVALID (page_size 0, NULL tokens with n_tokens > 0, NULL
 * out_hashes with pages to write). Added in ucm 0.7.0. */
UCM_API int ucm_sglang_page_hashes(const uint8_t* prior, const uint32_t* tokens, size_t n_tokens,
                                   uint32_t page_size, uint8_t* out_hashes, size_t max_pages, size_t* n_pages);

/* The prior of a chain that starts at the root, for a request's extra_key and cache_salt (SGLang's
 * storage_namespace_seed): SHA-256("sglang-cache-namespace-v1" || for each of the two: 0x00 when
 * absent, else 0x01 || u64 LE byte length || its UTF-8 bytes). extra_key[extra_key_len],
 * cache_salt[cache_salt_len]: NULL for absent (None); a non-NULL pointer with length 0 is the empty
 * string. seed_out: [32]; *has_seed = 0 (seed_out untouched) when both are absent: then the chain
 * has no prior. Pure. Errors: UCM_E_INVALID (NULL seed_out or has_seed). Added in ucm 0.7.0. */
UCM_API int ucm_sglang_namespace_seed(const char* extra_key, size_t extra_key_len, const char* cache_salt,
                                      size_t cache_salt_len, uint8_t* seed_out, int* has_seed);

/* SGLang page aliases (store_v1.md §12.1): a namespace's table from SGLang page keys (of page
 * size P, a multiple of the namespace's block size T; k = P / T blocks a page) to its blocks,
 * built by `ucm sglang-pages` or `ucm precompute --sglang-page-size`. The handle holds the table in
 * memory (96 bytes a page at P = 64, T = 16) and reads it again, at most every 5 s, when a lookup
 * finds it rebuilt. Lifetime: close it before its store. Thread rules: any thread, concurrently.
 * Added in ucm 0.8.0. */
typedef struct ucm_sglang_pages ucm_sglang_pages_t;

/* Opens the table of namespace ns for page_size. UCM_E_NOT_FOUND (the namespace, or no table for
 * that page size: the message says how to build it), UCM_E_CORRUPTION / UCM_E_NOT_SUPPORTED (the
 * table), UCM_E_INVALID (NULL arguments, page_size 0). */
UCM_API int ucm_sglang_pages_open(ucm_store_t* store, const uint8_t* ns, uint32_t page_size,
                                  ucm_sglang_pages_t** out);
UCM_API void ucm_sglang_pages_close(ucm_sglang_pages_t* pages);
/* *blocks_per_page = k, *n_pages = pages listed (either may be NULL). */
UCM_API int ucm_sglang_pages_info(ucm_sglang_pages_t* pages, uint32_t* blocks_per_page, uint64_t* n_pages);
/* For keys[n][32] (raw page keys): present[i] = 1 when page i is listed and all its k blocks are
 * stored (ucm_store_lookup); blocks_out (may be NULL): [n][k][16], page i's block hashes in
 * sequence order for a listed page (untouched otherwise); *prefix_pages (may be NULL): the leading
 * present pages. Never reads a payload. Errors: UCM_E_INVALID (NULL pages / keys with n > 0). */
UCM_API int ucm_sglang_pages_lookup(ucm_sglang_pages_t* pages, const uint8_t* keys, size_t n, uint8_t* blocks_out,
                                    uint8_t* present, size_t* prefix_pages);

/* Prometheus text exposition into buf[cap] (NUL-terminated), a sized output ("Sized outputs");
 * *len (may be NULL) gets the length needed. Errors: UCM_E_INVALID (NULL store, cap too small). */
UCM_API int ucm_store_metrics(ucm_store_t* store, char* buf, size_t cap, size_t* len);

#ifdef __cplusplus
}
#endif
#endif /* UCM_UCM_H_ */
