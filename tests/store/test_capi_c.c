/* tests/store/test_capi_c.c: ucm/ucm.h compiled as C (C11) and used from C, linking libucm.so
 * only: the header is valid C, and the calls a C server makes work (default params, create,
 * register, hash, dump, lookup, load, per-block status, strerror, close), ucm/retrieval.h
 * likewise (a namespace without representations, a retriever over a two-block request), and
 * ucm/blend.h (RoPE shift and its inverse, the weighted selection, a namespace without chunks).
 * Usage: test_capi_c DIR (a scratch directory; the store is DIR/store). Exit 0 = pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ucm/blend.h"
#include "ucm/retrieval.h"
#include "ucm/ucm.h"

#define CHECK(cond)                                                                       \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              ucm_last_error());                                                          \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

enum { L = 2, T = 4, H = 2, D = 4, S = 2, PAYLOAD = L * 2 * T * H * D * S };

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/store", argv[1]);
  CHECK(strcmp(ucm_version(), UCM_VERSION_STRING) == 0);
  CHECK(strcmp(ucm_code_name(UCM_E_BUSY), "UCM_E_BUSY") == 0);
  CHECK(ucm_format_version() == 5);

  ucm_store_open_params p = ucm_store_default_open_params();
  CHECK(p.struct_size == sizeof(ucm_store_open_params));
  p.mode = UCM_OPEN_CREATE;
  p.io_threads = 2;
  ucm_store_t* w = NULL;
  CHECK(ucm_store_open(path, &p, &w) == UCM_OK);

  const char* desc =
      "{\"model_id\":\"c-model\",\"weights_digest\":\"ab\",\"dtype\":\"fp16\",\"block_size\":4,"
      "\"num_layers\":2,\"num_kv_heads\":2,\"head_dim\":4,\"name\":\"c\"}";
  uint8_t ns[16];
  CHECK(ucm_store_namespace_register(w, desc, ns) == UCM_OK);

  uint32_t toks[8];
  for (int i = 0; i < 8; ++i) toks[i] = (uint32_t)(100 + i);
  uint8_t hashes[2][16];
  size_t nb = 0;
  CHECK(ucm_hash_blocks(ns, NULL, toks, 8, 4, &hashes[0][0], 2, &nb) == UCM_OK && nb == 2);

  static uint8_t pay[2][PAYLOAD];
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < PAYLOAD; ++j) pay[b][j] = (uint8_t)(b * 31 + j);
  uint8_t parents[2][16];
  memset(parents[0], 0, 16);
  memcpy(parents[1], hashes[0], 16);
  const void* kv[2] = {pay[0], pay[1]};
  ucm_task_t* task = NULL;
  CHECK(ucm_store_dump(w, ns, &hashes[0][0], &parents[0][0], 2, kv, &task) == UCM_OK);
  CHECK(ucm_task_wait(task, -1) == UCM_OK);
  ucm_task_free(task);

  uint8_t present[2];
  size_t prefix = 0;
  CHECK(ucm_store_lookup(w, ns, &hashes[0][0], 2, present, &prefix) == UCM_OK && prefix == 2);

  static uint8_t dst[2][PAYLOAD];
  void* ptrs[2] = {dst[0], dst[1]};
  CHECK(ucm_store_load(w, ns, &hashes[0][0], 2, UCM_DEST_CONTIGUOUS, ptrs, 0, 0, &task) == UCM_OK);
  CHECK(ucm_task_wait(task, -1) == UCM_OK);
  CHECK(ucm_task_block_status(task, 1) == UCM_OK);
  ucm_task_free(task);
  CHECK(memcmp(dst, pay, sizeof pay) == 0);

  ucm_store_t* w2 = NULL;
  p.mode = UCM_OPEN_READ_WRITE;
  CHECK(ucm_store_open(path, &p, &w2) == UCM_E_BUSY && w2 == NULL);
  CHECK(strstr(ucm_strerror(UCM_E_BUSY), "writer lock") != NULL);

  /* ucm/retrieval.h from C: this namespace has no representations; a QUEST retriever over a
   * two-block, one-head request made here picks both blocks (they are the windows). */
  ucm_repr_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(ucm_store_repr_info(w, ns, &info) == UCM_E_NOT_SUPPORTED);
  info.num_layers = 1;
  info.num_kv_heads = 1;
  info.head_dim = D;
  info.block_size = T;
  info.dtype = UCM_DTYPE_F32;
  info.sections = UCM_REPR_R1;
  ucm_retriever_params rp = ucm_retriever_default_params();
  CHECK(rp.struct_size == sizeof rp && rp.policy == UCM_POLICY_QUEST);
  ucm_retriever_t* ret = NULL;
  CHECK(ucm_retriever_create(&rp, &info, NULL, &ret) == UCM_OK);
  float r1[2 * 2 * D] = {0}, q[D] = {1, 2, 3, 4};
  ucm_repr_buffers rb;
  memset(&rb, 0, sizeof rb);
  rb.struct_size = sizeof rb;
  rb.dtype = UCM_DTYPE_F32;
  rb.capacity = 2;
  rb.r1 = r1;
  ucm_retrieval_query rq;
  memset(&rq, 0, sizeof rq);
  rq.struct_size = sizeof rq;
  rq.q = q;
  rq.q_dtype = UCM_DTYPE_F32;
  rq.n_q_heads = 1;
  rq.group_size = 1;
  rq.reprs = &rb;
  rq.n_blocks = 2;
  uint32_t idx[2], counts[1], n_sets = 0;
  CHECK(ucm_retriever_select(ret, &rq, idx, 2, counts, &n_sets) == UCM_OK);
  CHECK(n_sets == 1 && counts[0] == 2 && idx[0] == 0 && idx[1] == 1);
  ucm_retriever_free(ret);

  /* ucm/blend.h from C. */
  ucm_rope_params rope = ucm_rope_default_params();
  CHECK(rope.struct_size == sizeof rope && rope.scaling == UCM_ROPE_SCALING_NONE);
  rope.head_dim = D;
  float keys[2 * D] = {1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(ucm_rope_shift(&rope, keys, UCM_DTYPE_F32, 2, 1, D, 5) == UCM_OK);
  CHECK(keys[0] != 1.0f);
  CHECK(ucm_rope_shift(&rope, keys, UCM_DTYPE_F32, 2, 1, D, -5) == UCM_OK);
  for (int i = 0; i < 2 * D; ++i) CHECK(keys[i] > (float)(i + 1) - 1e-4f && keys[i] < (float)(i + 1) + 1e-4f);
  ucm_rope_params stored_rope;
  memset(&stored_rope, 0, sizeof stored_rope);
  stored_rope.struct_size = sizeof stored_rope;
  CHECK(ucm_store_rope_params(w, ns, &stored_rope) == UCM_E_NOT_FOUND);
  size_t n_prefix = 0;
  CHECK(ucm_store_chunk_prefix(w, ns, NULL, 0, &n_prefix) == UCM_E_NOT_FOUND);
  ucm_blend_select_params bp = ucm_blend_select_default_params();
  CHECK(bp.struct_size == sizeof bp);
  bp.ratio = 0.5;
  bp.position_decay = 0;
  const float stored[4] = {0, 0, 0, 0}, fresh[4] = {1, 3, 0, 2};
  uint32_t sel[4];
  size_t n_sel = 0;
  CHECK(ucm_blend_select_weighted(&bp, stored, fresh, NULL, 4, 1, sel, 4, &n_sel, NULL) == UCM_OK);
  CHECK(n_sel == 2 && sel[0] == 1 && sel[1] == 3);

  /* A sized output: NULL asks the size. */
  size_t list_len = 0;
  CHECK(ucm_store_namespace_list(w, NULL, 0, &list_len) == UCM_OK && list_len > 2);

  ucm_store_close(w);
  printf("test_capi_c: OK\n");
  return 0;
}
