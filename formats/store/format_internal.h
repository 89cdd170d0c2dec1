// formats/store/format_internal.h: magic numbers and message helpers shared by the format's .cc files.
// Private to ucm_format_store.
#pragma once
#include <cstdint>
#include <string>

namespace ucm::fmt::detail {

inline constexpr char kSuperMagic[8] = {'U', 'C', 'M', 'S', 'T', 'O', 'R', 'E'};
inline constexpr char kDataMagic[8] = {'U', 'C', 'M', 'D', 'A', 'T', 'A', '1'};
inline constexpr char kRecMagic[4] = {'U', 'C', 'M', 'R'};

inline std::string at(const std::string& where, uint64_t off) {
  return where + " at offset " + std::to_string(off);
}

}  // namespace ucm::fmt::detail
