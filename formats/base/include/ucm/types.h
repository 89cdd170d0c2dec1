// ucm/types.h: block hashes and namespace ids.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "ucm/status.h"

namespace ucm {

/// A 16-byte content address (MD5 chain, formats/store/store_v1.md §4.1).
using BlockHash = std::array<uint8_t, 16>;
/// A 16-byte namespace id: MD5 of the namespace fingerprint (store_v1.md §7).
using NamespaceId = std::array<uint8_t, 16>;

/// 32 lower-case hex digits.
std::string to_hex(const std::array<uint8_t, 16>& h);
/// Parses exactly 32 hex digits (either case). InvalidArgument names the offending string otherwise.
Status parse_hex16(std::string_view hex, std::array<uint8_t, 16>* out);

}  // namespace ucm
