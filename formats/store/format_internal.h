// formats/store/format_internal.h: magic numbers and message helpers shared by the format's .cc files.
// Private to ucm_format_store.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "ucm/format/common.h"

namespace ucm::fmt::detail {

inline constexpr char kSuperMagic[8] = {'U', 'C', 'M', 'S', 'T', 'O', 'R', 'E'};
inline constexpr char kDataMagic[8] = {'U', 'C', 'M', 'D', 'A', 'T', 'A', '1'};
inline constexpr char kRecMagic[4] = {'U', 'C', 'M', 'R'};

inline std::string at(const std::string& where, uint64_t off) {
  return where + " at offset " + std::to_string(off);
}

/// The head the superblock (§2) and a data file's header (§3.1) share: the 8-byte magic, two u32
/// (format_version, then min_reader_version or file_id) and created_ms, little-endian.
struct Head {
  uint32_t format_version = 0, second = 0;
  uint64_t created_ms = 0;
};

/// Zeroes out[0, size) and writes `magic` and h at its start.
inline void encode_head(const char (&magic)[8], const Head& h, uint8_t* out, size_t size) {
  std::memset(out, 0, size);
  std::memcpy(out, magic, 8);
  put_le32(out + 8, h.format_version);
  put_le32(out + 12, h.second);
  put_le64(out + 16, h.created_ms);
}

/// False when p does not start with `magic`; else reads the head into *h.
inline bool decode_head(const char (&magic)[8], const uint8_t* p, Head* h) {
  if (std::memcmp(p, magic, 8) != 0) return false;
  h->format_version = get_le32(p + 8);
  h->second = get_le32(p + 12);
  h->created_ms = get_le64(p + 16);
  return true;
}

}  // namespace ucm::fmt::detail
