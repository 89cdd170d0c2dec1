// tests/retrieval/retriever_util.h: making retrievers and running one selection through the C ABI
// (ucm/retrieval.h), for the retrieval tests.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "reference.h"
#include "ucm/retrieval.h"

namespace reftest {

/// The default params with `policy`.
inline ucm_retriever_params policy_params(int32_t policy) {
  ucm_retriever_params p = ucm_retriever_default_params();
  p.policy = policy;
  return p;
}

/// A retriever with params p over R's representations, given R's projection when `with_proj`;
/// EXPECTs success (null on failure).
inline ucm_retriever_t* make_retriever(const ucm_retriever_params& p, const Request& R, bool with_proj = true) {
  const ucm_repr_info info = R.info();
  ucm_retriever_t* r = nullptr;
  EXPECT_EQ(ucm_retriever_create(&p, &info, with_proj ? R.proj.data() : nullptr, &r), UCM_OK) << ucm_last_error();
  return r;
}

/// One selection over R's C blocks at `layer` with the F32 queries q (n_q_heads in groups of
/// `group`): the first set's block indices; EXPECTs success.
inline std::vector<uint32_t> select_first_set(ucm_retriever_t* r, const Request& R, uint32_t layer,
                                              const std::vector<float>& q, uint32_t n_q_heads, uint32_t group) {
  const ucm_repr_buffers bufs = R.buffers();
  const ucm_retrieval_query qq{sizeof(qq), layer, q.data(), UCM_DTYPE_F32, n_q_heads, group, &bufs, R.C, nullptr, 0};
  std::vector<uint32_t> idx(R.Hs() * R.C), counts(R.Hs());
  EXPECT_EQ(ucm_retriever_select(r, &qq, idx.data(), R.C, counts.data(), nullptr), UCM_OK) << ucm_last_error();
  idx.resize(counts[0]);
  return idx;
}

}  // namespace reftest
