// lib/src/retrieval/select.h: from per-block scores to a block set (windows, budget, top-k, PSA
// threshold). Pure functions over arrays; the retriever (retriever.h) calls them per set.
//
// Rules shared by every policy (ucm/retrieval.h):
//  - forced blocks: the sink window [0, sink), the local window [n - local, n), and every invalid
//    block (valid[c] == 0). They are always selected, even when they exceed the budget.
//  - the rest is ranked by score, higher first; equal scores rank the lower block index first,
//    so a selection is a function of the scores (no dependence on sort stability).
//  - output: block indices, ascending.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ucm/retrieval.h"

namespace ucm::retrieval {

/// The budget k of a step, in blocks (ucm_retriever_params): top_k when > 0, else
/// max(min_blocks, ceil(sparse_ratio * n)); capped at n. The ceil forgives the float ratio's
/// rounding (a product within 1e-6 relative above an integer counts as that integer: 0.3f x 10 = 3).
size_t budget(const ucm_retriever_params& p, size_t n);

/// Reused buffers of the selection functions (one per retriever; not thread-safe).
struct SelectScratch {
  std::vector<uint8_t> mark;     ///< [n] 1 = selected
  std::vector<uint32_t> cand;    ///< candidate indices
};

/// Marks forced blocks in s.mark (resized to n, cleared); returns how many there are.
size_t mark_forced(size_t n, const uint8_t* valid, uint32_t sink, uint32_t local, SelectScratch& s);

/// Top-k: forced blocks plus the best (k - forced) others by score (none when forced >= k).
/// score: [n]. out: the ascending set.
void select_topk(const float* score, size_t n, const uint8_t* valid, uint32_t sink, uint32_t local, size_t k,
                 SelectScratch& s, std::vector<uint32_t>* out);

/// PSA (arXiv:2503.00392 §3.2, Algorithm 1): forced blocks first, then the others in descending order of
/// estimated mass until the covered mass reaches tau or the set holds cap blocks. mass: [n]
/// estimated attention mass of each block (invalid blocks carry 0 and count as unknown), summing to
/// 1 over the valid blocks. out: the ascending set.
void select_psa(const float* mass, size_t n, const uint8_t* valid, uint32_t sink, uint32_t local, double tau,
                size_t cap, SelectScratch& s, std::vector<uint32_t>* out);

}  // namespace ucm::retrieval
