// GPT-2's byte alphabet (openai/gpt-2 encoder.py bytes_to_unicode); see byte_alphabet.h.
#include "byte_alphabet.h"

#include "ucm/utf8/utf8.h"

namespace ucm::tok::detail {

ByteAlphabet::ByteAlphabet() {
  std::array<bool, 256> direct{};
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = direct[b] ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    utf8::append_code_point(byte_to_str[b], c);
    char_to_byte[c] = static_cast<uint8_t>(b);
  }
}

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace ucm::tok::detail
