/* tests/python/abi_layout.c: prints, as JSON, the size and every field's offset of each struct of
 * libucm's C ABI as the C compiler lays it out from the public headers; test_abi_layout.py
 * compares them with the ctypes mirror in lib/python/ucm/_lib.py. A field renamed or removed in a
 * header breaks this file's build; a field added changes the size. */
#include <stddef.h>
#include <stdio.h>

#include "ucm/blend.h"
#include "ucm/corpus.h"
#include "ucm/retrieval.h"
#include "ucm/ucm.h"

static int first_struct = 1, first_field = 1;

static void open_struct(const char* name, size_t size) {
  printf("%s\n \"%s\": {\"size\": %zu, \"fields\": {", first_struct ? "{" : ",", name, size);
  first_struct = 0;
  first_field = 1;
}
static void field(const char* name, size_t off) {
  printf("%s\"%s\": %zu", first_field ? "" : ", ", name, off);
  first_field = 0;
}
static void close_struct(void) { printf("}}"); }

#define S(T) open_struct(#T, sizeof(T))
#define F(T, f) field(#f, offsetof(T, f))

int main(void) {
  S(ucm_store_open_params);
  F(ucm_store_open_params, struct_size); F(ucm_store_open_params, mode); F(ucm_store_open_params, io_threads);
  F(ucm_store_open_params, direct_io); F(ucm_store_open_params, refresh_interval_ms);
  F(ucm_store_open_params, reader_dir);
  close_struct();
  S(ucm_repr_info);
  F(ucm_repr_info, struct_size); F(ucm_repr_info, num_layers); F(ucm_repr_info, num_kv_heads);
  F(ucm_repr_info, head_dim); F(ucm_repr_info, block_size); F(ucm_repr_info, hash_bits); F(ucm_repr_info, dtype);
  F(ucm_repr_info, sections); F(ucm_repr_info, dense_layers);
  close_struct();
  S(ucm_repr_buffers);
  F(ucm_repr_buffers, struct_size); F(ucm_repr_buffers, head_begin); F(ucm_repr_buffers, head_end);
  F(ucm_repr_buffers, dtype); F(ucm_repr_buffers, capacity); F(ucm_repr_buffers, r0); F(ucm_repr_buffers, r1);
  F(ucm_repr_buffers, r4);
  close_struct();
  S(ucm_retriever_params);
  F(ucm_retriever_params, struct_size); F(ucm_retriever_params, policy); F(ucm_retriever_params, sink_blocks);
  F(ucm_retriever_params, local_blocks); F(ucm_retriever_params, sparse_ratio); F(ucm_retriever_params, min_blocks);
  F(ucm_retriever_params, top_k); F(ucm_retriever_params, psa_tau); F(ucm_retriever_params, psa_max_blocks);
  F(ucm_retriever_params, reuse_steps); F(ucm_retriever_params, shared_heads);
  F(ucm_retriever_params, honor_dense_layers);
  close_struct();
  S(ucm_retrieval_query);
  F(ucm_retrieval_query, struct_size); F(ucm_retrieval_query, layer); F(ucm_retrieval_query, q);
  F(ucm_retrieval_query, q_dtype); F(ucm_retrieval_query, n_q_heads); F(ucm_retrieval_query, group_size);
  F(ucm_retrieval_query, reprs); F(ucm_retrieval_query, n_blocks); F(ucm_retrieval_query, valid);
  F(ucm_retrieval_query, top_k);
  close_struct();
  S(ucm_rope_params);
  F(ucm_rope_params, struct_size); F(ucm_rope_params, head_dim); F(ucm_rope_params, theta);
  F(ucm_rope_params, scaling); F(ucm_rope_params, factor); F(ucm_rope_params, low_freq_factor);
  F(ucm_rope_params, high_freq_factor); F(ucm_rope_params, original_max_position_embeddings);
  close_struct();
  S(ucm_blend_select_params);
  F(ucm_blend_select_params, struct_size); F(ucm_blend_select_params, ratio);
  F(ucm_blend_select_params, position_decay); F(ucm_blend_select_params, relevance_exponent);
  close_struct();
  S(ucm_store_load_params);
  F(ucm_store_load_params, struct_size); F(ucm_store_load_params, dest_kind); F(ucm_store_load_params, ptrs);
  F(ucm_store_load_params, head_begin); F(ucm_store_load_params, head_end);
  F(ucm_store_load_params, layer_caches); F(ucm_store_load_params, slots); F(ucm_store_load_params, slot_stride);
  F(ucm_store_load_params, device); F(ucm_store_load_params, stream); F(ucm_store_load_params, layer_events);
  F(ucm_store_load_params, on_layer); F(ucm_store_load_params, on_layer_data);
  F(ucm_store_load_params, token_stride); F(ucm_store_load_params, head_stride);
  close_struct();
  S(ucm_store_dump_params);
  F(ucm_store_dump_params, struct_size); F(ucm_store_dump_params, reprs); F(ucm_store_dump_params, repr_lens);
  F(ucm_store_dump_params, tokens); F(ucm_store_dump_params, kv_pages); F(ucm_store_dump_params, token_stride);
  F(ucm_store_dump_params, head_stride);
  close_struct();
  S(ucm_corpus_open_params);
  F(ucm_corpus_open_params, struct_size); F(ucm_corpus_open_params, strict); F(ucm_corpus_open_params, suffix);
  F(ucm_corpus_open_params, glob); F(ucm_corpus_open_params, limit); F(ucm_corpus_open_params, shard_index);
  F(ucm_corpus_open_params, shard_count); F(ucm_corpus_open_params, on_issue);
  F(ucm_corpus_open_params, on_issue_data);
  close_struct();
  printf("\n}\n");
  return 0;
}
