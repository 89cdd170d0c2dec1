// pipelines/generate/sparse.h: block-sparse decode through libucm's retriever (ucm/retrieval.h),
// compared with dense decode on the same prompt.
#pragma once
#include <cstdint>
#include <vector>

#include "engine.h"
#include "ucm/generate/generate.h"
#include "ucm/retrieval.h"

namespace ucm::generate {

/// A request's block representations as the retriever reads them: F32 buffers for the prompt's
/// full blocks, filled from the store (ucm_store_load_repr) where it holds them and computed
/// from the engine's own KV cache otherwise (new blocks, or blocks whose load failed).
class RequestReprs {
 public:
  /// info: ucm_store_repr_info of the namespace; projection: fp32 [L][H][D][B] (may be empty
  /// when the namespace has no R4).
  RequestReprs(const ucm_repr_info& info, std::vector<float> projection, size_t n_blocks);
  /// Loads blocks [0, n_stored) from the store; computes the others (and failed ones) from cache.
  Status fill(const StoreClient& store, const std::vector<Hash16>& hashes, size_t n_stored, const KvCache& cache);
  const ucm_repr_buffers& buffers() const { return buf_; }
  const ucm_repr_info& info() const { return info_; }
  const std::vector<float>& projection() const { return proj_; }
  size_t n_blocks() const { return n_; }
  uint64_t loaded = 0, computed = 0, failed = 0;

 private:
  void compute_block(size_t i, const KvCache& cache);
  ucm_repr_info info_;
  std::vector<float> proj_;
  size_t n_;
  std::vector<float> r0_, r1_;
  std::vector<uint8_t> r4_;
  ucm_repr_buffers buf_{};
};

/// The key-mask hook of LlamaModel::extend that asks `retriever` for each sparse layer's blocks
/// (dense layers and the tokens after the last full prompt block are always attended).
/// selected_fraction accumulates blocks attended / context blocks per (step, sparse layer).
model::LlamaModel::KeyMaskFn sparse_mask(ucm_retriever_t* retriever, const RequestReprs& reprs,
                                         uint32_t block_size, uint32_t num_q_heads, double* selected_sum,
                                         uint64_t* selected_count);

/// Runs the sparse comparison of `o.policy` over n_new decode steps against a dense decode from
/// the same full prefill of ids: teacher-forced top-1 agreement and KL, then a free-running
/// greedy decode (exact-match prefix length).
Status run_sparse(const Engine& eng, const StoreClient& store, const SparseOptions& o,
                  const std::vector<int32_t>& ids, int64_t capacity, uint32_t n_new, SparseReport* out);

/// "esa" | "quest" | "gsa" | "psa" -> UCM_POLICY_*; -1 for anything else.
int policy_of(const std::string& name);

}  // namespace ucm::generate
