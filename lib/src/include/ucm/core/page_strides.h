// ucm/core/page_strides.h: the one rule for strided pages (ucm_store_load_params /
// ucm_store_dump_params token_stride, head_stride): when do a page's elements not overlap.
// Internal to libucm.
#pragma once
#include <cstdint>

namespace ucm::detail {

/// True when a page of `tokens` x `heads` elements of `elem` bytes (one head's head_dim values),
/// element (t, h) at t * token_stride + h * head_stride, has no two elements overlapping: either
/// heads inside tokens (token_stride >= heads * head_stride) or tokens inside heads
/// (head_stride >= tokens * token_stride), each stride at least one element.
inline bool page_strides_ok(uint64_t token_stride, uint64_t head_stride, uint64_t elem, uint64_t heads,
                            uint64_t tokens) {
  if (head_stride < elem || token_stride < elem) return false;
  return heads == 1 || token_stride >= heads * head_stride || head_stride >= tokens * token_stride;
}

}  // namespace ucm::detail
