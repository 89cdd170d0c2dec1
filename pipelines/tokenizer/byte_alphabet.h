// GPT-2's byte <-> printable-character alphabet (openai/gpt-2 encoder.py bytes_to_unicode). Internal.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace ucm::tok::detail {

// GPT-2 byte <-> unicode alphabet (openai/gpt-2 encoder.py bytes_to_unicode).
struct ByteAlphabet {
  std::array<std::string, 256> byte_to_str;  // UTF-8 of the printable char standing for a byte
  std::unordered_map<char32_t, uint8_t> char_to_byte;
  ByteAlphabet();
};

// The one alphabet, built on first use.
const ByteAlphabet& alphabet();

}  // namespace ucm::tok::detail
