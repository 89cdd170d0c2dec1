/* ucm/corpus.h: the corpus reader of `ucm precompute` in the C ABI (docs/corpus.md).
 *
 * The documents of a corpus, a JSONL file or a directory of text files, exactly as `ucm
 * precompute` reads them: the same ids, order, directory filter, sharding and skip rules, from the
 * one reader that precompute uses (pipelines/corpus). A tool that prepares a corpus for precompute
 * in another language (python -m ucm.tokenize, python -m ucm.vllm.precompute) reads it here
 * instead of re-implementing those rules.
 *
 *   ucm_corpus_open_params p = ucm_corpus_default_open_params();
 *   p.suffix = ".rst.txt";
 *   ucm_corpus_t* c;
 *   if (ucm_corpus_open("/usr/share/doc/python3.11/html/_sources", &p, &c) != UCM_OK) ...;
 *   const char* entry; size_t len;
 *   while (ucm_corpus_next(c, &entry, &len) == UCM_OK && entry) { ... one JSON object ... }
 *   ucm_corpus_close(c);
 *
 * Conventions are those of ucm/ucm.h (return codes, ucm_last_error, structs that grow). Threads:
 * a handle is used by one thread at a time (calls on one handle must not overlap); handles are
 * independent of each other and of any store. Memory: one entry at a time (a directory also keeps
 * its sorted list of file names). Added in ucm 0.10.0.
 */
#ifndef UCM_CORPUS_H_
#define UCM_CORPUS_H_

#include <stddef.h>
#include <stdint.h>

#include "ucm/ucm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds of skipped entries (docs/corpus.md, "Problems with entries"). */
#define UCM_CORPUS_MALFORMED 1  /* bad JSON, bad "text" / "id" / "token_ids", invalid UTF-8, unreadable file */
#define UCM_CORPUS_EMPTY 2      /* an empty document ("" or a 0-byte file) or empty "token_ids" */

typedef struct ucm_corpus ucm_corpus_t;

/* Called once for each entry the reader skips, on the thread of the ucm_corpus_next call that
 * meets it, before that call returns: kind UCM_CORPUS_*, location "<file>:<line>" (JSONL) or the
 * file (directory), reason (e.g. "bad JSON: ..." or "invalid UTF-8 (byte 0xff at byte offset 3)"),
 * both NUL-terminated and valid during the call only. It must not call into this handle. */
typedef void (*ucm_corpus_issue_callback)(int32_t kind, const char* location, const char* reason,
                                          void* user_data);

/* How to read a corpus. Get the defaults from ucm_corpus_default_open_params() and change fields.
 * Grows at its end (ucm/ucm.h, "Structs that grow"); minimum struct_size: all of it (0.10.0's). */
typedef struct ucm_corpus_open_params {
  uint32_t struct_size;      /* sizeof(ucm_corpus_open_params), set by the defaults call */
  int32_t strict;            /* 1: a malformed entry fails ucm_corpus_next (UCM_E_INVALID) rather
                                than being skipped; empty documents are skipped either way; default 0 */
  const char* suffix;        /* directory: only files whose name ends with it; NULL or "" (default): all */
  const char* glob;          /* directory: an fnmatch(3) pattern, on the relative path if it holds a
                                '/', else on the file name; NULL or "" (default): all */
  uint64_t limit;            /* stop after this many documents (0, the default: all of them) */
  uint64_t shard_index;      /* keep the entries whose index % shard_count == shard_index (the index */
  uint64_t shard_count;      /* counted before any skipping); defaults 0 and 1: every entry */
  ucm_corpus_issue_callback on_issue;  /* NULL (default): skipped entries are only counted */
  void* on_issue_data;       /* passed to on_issue */
} ucm_corpus_open_params;

/* strict 0, no suffix or glob, no limit, shard 0 of 1, no callback. */
UCM_API ucm_corpus_open_params ucm_corpus_default_open_params(void);

/* Opens the corpus at path: a directory is read as a directory of text files, anything else as
 * JSONL (docs/corpus.md). params NULL: the defaults. A directory is listed (and its names sorted)
 * here. Errors: UCM_E_INVALID (NULL path or out, a struct_size below the minimum, shard_count 0 or
 * shard_index >= shard_count), UCM_E_NOT_FOUND (path does not exist), UCM_E_IO (the file cannot
 * be opened, or the directory listed). */
UCM_API int ucm_corpus_open(const char* path, const ucm_corpus_open_params* params, ucm_corpus_t** out);

/* The next document, as one UTF-8 JSON object, NUL-terminated, in *entry (*len, which may be NULL,
 * gets its length without the NUL):
 *   {"id": ..., "source": ..., "text": ...}                                 a text entry or file;
 *   {"id": ..., "source": ..., "token_ids": [...](, "prefix_tokens": P)}    a JSONL entry that gives
 *                                                                           token ids ("prefix_tokens"
 *                                                                           only when P > 0).
 * id: JSONL: the entry's "id", a string as is or a number as written (nlohmann::json's shortest
 * form: 42, 1.5), absent: the line number; directory: the path relative to the directory, with '/'
 * separators. source: "<file>:<line>" or the file's path. text: the document exactly (no
 * template). Ids and sources that are not valid UTF-8 (file names) have each bad byte replaced by
 * U+FFFD. The string belongs to the handle: valid until the next ucm_corpus_next or
 * ucm_corpus_close on it.
 * At the end (or after params->limit documents): UCM_OK with *entry NULL and *len 0.
 * Errors: UCM_E_INVALID (NULL corpus or entry; with strict, a malformed entry: the message gives
 * its location and reason), UCM_E_IO (a read error in a JSONL file). A later call goes on after
 * the entry that failed. */
UCM_API int ucm_corpus_next(ucm_corpus_t* corpus, const char** entry, size_t* len);

/* Counts so far: documents returned, entries skipped as malformed, entries skipped as empty (each
 * may be NULL). Errors: UCM_E_INVALID (NULL corpus). */
UCM_API int ucm_corpus_stats(ucm_corpus_t* corpus, uint64_t* documents, uint64_t* malformed, uint64_t* empty);

/* Frees the handle (NULL: nothing). */
UCM_API void ucm_corpus_close(ucm_corpus_t* corpus);

/* A prompt template file (docs/corpus.md, "Prompt template"), split as precompute splits it: the
 * text before the first "{document}" and the text after it, or, without "{document}", all of it
 * as the prefix. Writes {"prefix": ..., "suffix": ...} (UTF-8 JSON) into buf[cap], a sized output
 * (ucm/ucm.h, "Sized outputs"). Errors: UCM_E_INVALID (NULL path, the file not valid UTF-8, cap
 * too small), UCM_E_NOT_FOUND (no such file), UCM_E_IO (unreadable). */
UCM_API int ucm_corpus_template(const char* path, char* buf, size_t cap, size_t* len);

#ifdef __cplusplus
}
#endif
#endif /* UCM_CORPUS_H_ */
