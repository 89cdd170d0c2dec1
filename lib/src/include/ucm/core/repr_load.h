// lib/src/repr_load.h: what ucm_store_repr_info and ucm_store_load_repr do below the C ABI:
// a namespace's representation shape from its descriptor (store_v1.md §4.3, §7), the checks of a
// destination, and the scatter of one verified BLOCK_REPR payload into the caller's
// per-(layer, head)-contiguous arrays (ucm/retrieval.h, ucm_repr_buffers). Internal to libucm.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ucm/format/repr_table.h"
#include "ucm/namespace.h"
#include "ucm/retrieval.h"
#include "ucm/status.h"

namespace ucm::detail {

/// The representation shape of a namespace.
struct ReprGeometry {
  fmt::ReprShape shape;        ///< L, H, D, T, B (B = 0 without R4)
  DType dtype = DType::kBF16;  ///< namespace dtype = R0/R1 element type as written by precompute
  uint32_t sections = 0;       ///< UCM_REPR_* bits
  uint64_t dense_layers = 0;   ///< bit l: extra.dense_layers holds l (layers >= 64 are dropped)
};

/// From the descriptor: sections = extra.repr (names "R0", "R1", "R4"; other names ignored), or,
/// when extra.repr is absent but extra.hash_bits is present, R0 | R1 | R4 (the set every
/// `ucm precompute` namespace carries). hash_bits = extra.hash_bits when R4 is present.
/// NotSupported: no representations (neither key, or an empty list); Corruption: extra is not
/// JSON, or R4 without a positive multiple of 8 as hash_bits.
Status repr_geometry(const NamespaceDesc& d, ReprGeometry* g);

/// Fills the C struct from g (struct_size is left as the caller set it).
void repr_info_from(const ReprGeometry& g, ucm_repr_info* out);

/// The destination of a load, resolved: heads [h0, h1) (0/0 in the C struct = all), element
/// type, capacity, arrays.
struct ReprDest {
  uint32_t h0 = 0, h1 = 0;
  int32_t dtype = UCM_DTYPE_F32;
  size_t capacity = 0;
  void* r0 = nullptr;
  void* r1 = nullptr;
  uint8_t* r4 = nullptr;
};

/// Checks `b` (struct_size, head range, dtype F32 or the namespace's, first + n <= capacity, at
/// least one array, every array's section carried by the namespace) and resolves it.
/// InvalidArgument with the reason.
Status resolve_repr_dest(const ReprGeometry& g, const ucm_repr_buffers* b, size_t first, size_t n, ReprDest* out);

/// Scatters payload[len] (one block's verified BLOCK_REPR) to slot `slot` of dst. Every check
/// (section table, section kinds, dtypes and lengths against g) happens before the first byte is
/// written: on error (Corruption) the slot is untouched. Thread-safe for distinct slots.
Status scatter_repr(const ReprGeometry& g, const ReprDest& dst, size_t slot, const uint8_t* payload, size_t len);

}  // namespace ucm::detail
