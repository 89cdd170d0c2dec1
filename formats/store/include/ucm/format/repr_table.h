// formats/store/repr_table.h: the section table of a BLOCK_REPR payload (store_v1.md §4.3).
//
// A payload is `u8[4] "UCMP" || u32 section_count || section_count x {u32 kind; u32 dtype;
// u64 offset; u64 length} || sections`, little-endian, offsets from the payload start. This file
// parses and checks the table and locates sections of an expected shape; it never copies section
// data. Pure format code (no store, no threads); thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ucm/status.h"

namespace ucm::fmt {

/// Section kinds (§4.3 table).
enum ReprSectionKind : uint32_t {
  kReprR0MeanKey = 0,   ///< [L][H][D] mean key
  kReprR1KeyBounds = 1, ///< [L][2][H][D] per-channel min (0) and max (1)
  kReprR4SignHash = 4,  ///< [L][H][T][B/8] packed sign bits, LSB first
};
/// Section element types (§4.3): 1 bf16, 2 fp16, 3 fp32, 4 packed bits (u8).
enum ReprSectionDType : uint32_t { kReprBF16 = 1, kReprFP16 = 2, kReprFP32 = 3, kReprBits = 4 };

inline constexpr uint32_t kReprMaxSections = 64;  ///< more is a corrupt table
inline constexpr size_t kReprTableHeader = 8;     ///< magic + count
inline constexpr size_t kReprTableEntry = 24;

/// One entry of the table.
struct ReprSectionRef {
  uint32_t kind = 0, dtype = 0;
  uint64_t offset = 0, length = 0;
};

/// Shape of a namespace's representations (from its descriptor, §7).
struct ReprShape {
  uint32_t num_layers = 0;   ///< L
  uint32_t num_kv_heads = 0; ///< H
  uint32_t head_dim = 0;     ///< D
  uint32_t block_size = 0;   ///< T
  uint32_t hash_bits = 0;    ///< B (multiple of 8), 0 = no R4
};

/// Bytes per element of a section dtype (bf16/fp16 2, fp32 4, bits 1); 0 for unknown values.
size_t repr_dtype_size(uint32_t dtype);

/// Elements (bytes for R4) of section `kind` for `shape`: R0 L*H*D, R1 2*L*H*D, R4 L*H*T*B/8;
/// 0 for other kinds.
uint64_t repr_section_elems(uint32_t kind, const ReprShape& shape);

/// Parses the table of `payload[len]`. Corruption (naming what is wrong) when: len < 8, the magic
/// is not "UCMP", section_count is 0 or above kReprMaxSections, the table runs past the payload,
/// a section lies (partly) outside the payload or inside the table, or a kind appears twice.
/// Unknown kinds and dtypes are kept (a reader skips what it does not know).
Status parse_repr_table(const uint8_t* payload, size_t len, std::vector<ReprSectionRef>* out);

/// Finds section `kind` in `table` and checks it against `shape`: the dtype must be bf16, fp16 or
/// fp32 for R0/R1 and packed bits for R4, and the length must be repr_section_elems(kind) x the
/// element size. *out = nullptr and NotFound when the kind is absent; Corruption on a mismatch.
Status find_repr_section(const std::vector<ReprSectionRef>& table, uint32_t kind, const ReprShape& shape,
                         const ReprSectionRef** out);

}  // namespace ucm::fmt
