// ucm/hash.h: chained block hashes (store_v1.md §4.1). Precompute and servers both call this.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ucm/types.h"

namespace ucm {

/// h_0 = MD5("ucm.hash.v1" || namespace_id): the parent of a chain's first block.
BlockHash root_hash(const NamespaceId& ns);

/// Hashes of the floor(n_tokens / block_size) full blocks of `tokens` (token ids, u32, [n_tokens]),
/// chained from `parent` (root_hash(ns) for a sequence start). Appends to `out`; returns the count.
/// Source: UCM's prefix hashing (Unified Cache Manager, github.com/ModelEngine-Group/
/// unified-cache-management: h0 = MD5(seed), h_i = MD5(h_{i-1} || tokens of block i)), with the
/// namespace id as seed (store_v1.md §7).
size_t hash_blocks(const BlockHash& parent, const uint32_t* tokens, size_t n_tokens,
                   uint32_t block_size, std::vector<BlockHash>* out);

}  // namespace ucm
