// lib/src/retrieval/retriever.h: the block-sparse retriever behind ucm_retriever_* (ucm/retrieval.h).
//
// Per call (one decode step of one layer), for each KV head h of the buffers' head range, the
// query heads of h's GQA group score every block from its representations, the scores become one
// set per KV head (or one shared set), and each set is filled by the policy's rule (select.h).
//
// How a KV head scores a block from its group's G query heads (GQA), and why:
//  - ESA, QUEST: the maximum over the group of the per-query-head score (q_g . R0, or the Quest
//    bound of q_g). Each query head has its own softmax, so a block is worth loading when any head
//    of the group attends to it; the maximum keeps the Quest bound an upper bound of every head's
//    logits (a sum or a mean would let one head's strong block drown in the others' weak ones).
//  - GSA: the group's queries are averaged and the mean is sign-hashed, as UCM's GSA on device
//    does for GQA (its compute_hash, GQA mode: query.view(..., G, D).mean(2)); one
//    code per KV head keeps the popcount work independent of G.
//  - PSA: the estimated attention masses of the G heads are averaged: each head's mass
//    distribution sums to 1, so the mean is the group's expected covered fraction, and tau is a
//    mass threshold for the group as a whole.
//  With shared_heads, the same rules run over all query heads of all KV heads in the range (max of
//  the per-KV-head scores; mean of all heads' masses).
//
// PSA mass estimate (PSA, arXiv:2503.00392, §3.2): for query head g the logit of block c is bounded by the Quest
// bound u_g(c); the block's attention mass is estimated as exp(u_g(c) / sqrt(D)) normalised over
// the valid blocks (every token taking the bound; T cancels). Blocks are then taken in
// descending estimated mass (= descending bound for G = 1) until the covered mass reaches psa_tau
// (Algorithm 1, lines 13-17: stop once P_acc reaches the threshold). PSA's running estimate
// of the total (AS_acc + AS_min * N_left) is needed only while the remaining blocks' scores are
// unknown; here every block's estimate is known after the scan, so the total is their sum.
//
// Not thread-safe: one request, one thread at a time (the reuse state is per retriever).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ucm/core/retrieval/select.h"
#include "ucm/retrieval.h"
#include "ucm/status.h"

namespace ucm::retrieval {

class Retriever {
 public:
  /// Checks params (validate_params) and info, copies projection ([L][H][D][B] fp32; required for
  /// GSA, which also needs R4 in info.sections and hash_bits > 0). InvalidArgument otherwise.
  static Status Create(const ucm_retriever_params& params, const ucm_repr_info& info, const float* projection,
                       std::unique_ptr<Retriever>* out);

  /// ucm_retriever_select (see ucm/retrieval.h): InvalidArgument for a bad query or a set larger
  /// than cap (then nothing is written and the reuse state is unchanged).
  Status select(const ucm_retrieval_query& q, uint32_t* indices, size_t cap, uint32_t* counts, uint32_t* n_sets);

  /// Forgets the reuse state of every layer.
  void reset();

  const ucm_retriever_params& params() const { return p_; }
  const ucm_repr_info& info() const { return info_; }

 private:
  struct Resolved {
    uint32_t layer = 0, h0 = 0, Hs = 0, G = 0;
    size_t n = 0, C = 0;
    size_t top_k = 0;  ///< the query's per-call budget (0 = the params')
    const uint8_t* valid = nullptr;
    const ucm_repr_buffers* b = nullptr;
  };
  struct LayerState {
    bool valid = false;
    uint32_t since = 0;  ///< select calls since the selection was computed (1 = the computing one)
    size_t n = 0;
    uint32_t h0 = 0, Hs = 0;
    size_t top_k = 0;
    std::vector<std::vector<uint32_t>> sets;
  };

  Retriever(const ucm_retriever_params& p, const ucm_repr_info& info) : p_(p), info_(info) {}
  Status resolve(const ucm_retrieval_query& q, Resolved* r) const;
  void load_queries(const ucm_retrieval_query& q, const Resolved& r);
  /// Score of each block for KV head hh (max over its group, or the GSA code); invalid -> -inf.
  void head_scores(const Resolved& r, uint32_t hh, float* out);
  /// Adds, for each query head of KV head hh, its estimated mass distribution to acc[n].
  void add_head_masses(const Resolved& r, uint32_t hh, float* acc);
  void compute(const Resolved& r, std::vector<std::vector<uint32_t>>* sets);

  ucm_retriever_params p_;
  ucm_repr_info info_;
  std::vector<float> proj_;           ///< [L][H][D][B]
  std::vector<LayerState> state_;     ///< [L]
  // scratch
  std::vector<float> qf_, tmp_, s_, acc_;
  std::vector<uint8_t> code_, ok_;
  SelectScratch sel_;
};

}  // namespace ucm::retrieval
