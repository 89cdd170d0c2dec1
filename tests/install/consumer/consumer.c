/* A tiny program built against an installed ucm (tests/install/check_install.sh): opens a new
 * store through the C ABI, hashes a block, takes the retrieval, blend and corpus defaults (so
 * that every installed header compiles as C), and prints the library version. */
#include <stdio.h>
#include <string.h>

#include <ucm/blend.h>
#include <ucm/corpus.h>
#include <ucm/retrieval.h>
#include <ucm/ucm.h>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  if (strcmp(ucm_version(), UCM_VERSION_STRING) != 0) {
    fprintf(stderr, "header %s, library %s\n", UCM_VERSION_STRING, ucm_version());
    return 1;
  }
  ucm_store_open_params p = ucm_store_default_open_params();
  p.mode = UCM_OPEN_CREATE;
  ucm_store_t* s = NULL;
  if (ucm_store_open(argv[1], &p, &s) != UCM_OK) {
    fprintf(stderr, "open: %s\n", ucm_last_error());
    return 1;
  }
  uint8_t ns[16] = {1}, h[16];
  uint32_t toks[16] = {0};
  size_t nb = 0;
  int rc = ucm_hash_blocks(ns, NULL, toks, 16, 16, h, 1, &nb);
  ucm_store_close(s);
  if (rc != UCM_OK || nb != 1) return 1;
  ucm_retriever_params rp = ucm_retriever_default_params();
  ucm_rope_params rope = ucm_rope_default_params();
  ucm_corpus_open_params cp = ucm_corpus_default_open_params();
  if (rp.struct_size != sizeof rp || rope.struct_size != sizeof rope || cp.struct_size != sizeof cp) return 1;
  printf("consumer: libucm %s ok\n", ucm_version());
  return 0;
}
