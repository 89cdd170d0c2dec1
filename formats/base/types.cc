// formats/base/types.cc: hex forms of hashes and ids (ucm/types.h).
#include "ucm/types.h"
#include "ucm/hex.h"

namespace ucm {

std::string to_hex(const std::array<uint8_t, 16>& h) { return hex_encode(h.data(), h.size()); }

Status parse_hex16(std::string_view hex, std::array<uint8_t, 16>* out) {
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() != 32)
    return Status::InvalidArgument("\"" + std::string(hex) + "\" is not a 32-hex-digit hash or id (" +
                                   std::to_string(hex.size()) + " characters)");
  std::array<uint8_t, 16> v{};
  for (size_t i = 0; i < 16; ++i) {
    int a = nib(hex[2 * i]), b = nib(hex[2 * i + 1]);
    if (a < 0 || b < 0)
      return Status::InvalidArgument("\"" + std::string(hex) + "\" is not a 32-hex-digit hash or id (bad digit at " +
                                     std::to_string(a < 0 ? 2 * i : 2 * i + 1) + ")");
    v[i] = uint8_t(a << 4 | b);
  }
  *out = v;
  return Status::OK();
}

}  // namespace ucm
