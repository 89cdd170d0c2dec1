// ucm/hex.h: lower-case hex encoding of byte strings (hashes, ids, digests).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ucm {

/// `n` bytes at `data` as 2*n lower-case hex digits, first byte first ("" when n == 0).
std::string hex_encode(const void* data, size_t n);

}  // namespace ucm
