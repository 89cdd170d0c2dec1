// formats/store/repr_table.cc: BLOCK_REPR section table (see repr_table.h, store_v1.md §4.3).
#include "ucm/format/repr_table.h"

#include <cstring>
#include <string>

#include "ucm/format/format.h"

namespace ucm::fmt {

size_t repr_dtype_size(uint32_t dtype) {
  switch (dtype) {
    case kReprBF16:
    case kReprFP16: return 2;
    case kReprFP32: return 4;
    case kReprBits: return 1;
    default: return 0;
  }
}

uint64_t repr_section_elems(uint32_t kind, const ReprShape& s) {
  const uint64_t lhd = uint64_t{s.num_layers} * s.num_kv_heads * s.head_dim;
  switch (kind) {
    case kReprR0MeanKey: return lhd;
    case kReprR1KeyBounds: return 2 * lhd;
    case kReprR4SignHash: return uint64_t{s.num_layers} * s.num_kv_heads * s.block_size * (s.hash_bits / 8);
    default: return 0;
  }
}

Status parse_repr_table(const uint8_t* p, size_t len, std::vector<ReprSectionRef>* out) {
  out->clear();
  if (len < kReprTableHeader)
    return Status::Corruption("representation payload of " + std::to_string(len) + " bytes has no section table");
  if (std::memcmp(p, "UCMP", 4) != 0) return Status::Corruption("representation payload: bad magic (not \"UCMP\")");
  const uint32_t count = get_le32(p + 4);
  if (count == 0 || count > kReprMaxSections)
    return Status::Corruption("representation payload: section_count " + std::to_string(count) + " not in [1, " +
                              std::to_string(kReprMaxSections) + "]");
  const uint64_t table_end = kReprTableHeader + uint64_t{count} * kReprTableEntry;
  if (table_end > len)
    return Status::Corruption("representation payload: table of " + std::to_string(count) + " sections runs past " +
                              std::to_string(len) + " bytes");
  out->reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t* e = p + kReprTableHeader + size_t{i} * kReprTableEntry;
    ReprSectionRef r{get_le32(e), get_le32(e + 4), get_le64(e + 8), get_le64(e + 16)};
    if (r.offset < table_end || r.offset > len || r.length > len - r.offset)
      return Status::Corruption("representation payload: section " + std::to_string(i) + " (kind " +
                                std::to_string(r.kind) + ") at [" + std::to_string(r.offset) + ", +" +
                                std::to_string(r.length) + ") is outside the " + std::to_string(len) +
                                "-byte payload or overlaps the table");
    for (const auto& o : *out)
      if (o.kind == r.kind)
        return Status::Corruption("representation payload: section kind " + std::to_string(r.kind) + " appears twice");
    out->push_back(r);
  }
  return Status::OK();
}

Status find_repr_section(const std::vector<ReprSectionRef>& table, uint32_t kind, const ReprShape& shape,
                         const ReprSectionRef** out) {
  *out = nullptr;
  for (const auto& r : table) {
    if (r.kind != kind) continue;
    const bool bits = kind == kReprR4SignHash;
    const bool dtype_ok = bits ? r.dtype == kReprBits : (r.dtype == kReprBF16 || r.dtype == kReprFP16 || r.dtype == kReprFP32);
    if (!dtype_ok)
      return Status::Corruption("representation section kind " + std::to_string(kind) + " has dtype " +
                                std::to_string(r.dtype) + (bits ? " (expected 4, packed bits)" : " (expected 1, 2 or 3)"));
    const uint64_t want = repr_section_elems(kind, shape) * repr_dtype_size(r.dtype);
    if (r.length != want)
      return Status::Corruption("representation section kind " + std::to_string(kind) + " is " +
                                std::to_string(r.length) + " bytes, the namespace's shape needs " + std::to_string(want));
    *out = &r;
    return Status::OK();
  }
  return Status::NotFound("representation payload has no section of kind " + std::to_string(kind));
}

}  // namespace ucm::fmt
