// Fuzz target: Tokenizer::encode() of arbitrary bytes with the real SmolLM2-135M-Instruct
// tokenizer (pipelines/tokenizer/include/ucm/tok/tokenizer.h).
//
// The tokenizer is loaded once, from $UCM_FUZZ_TOKENIZER_JSON or else
// models/SmolLM2-135M-Instruct/tokenizer.json under the source tree (scripts/fetch_model.py).
// Without it every input is a no-op (scripts/fuzz.sh skips the target then).
//
// Input: any bytes.
// Contract checked: invalid UTF-8 throws ucm::tok::InvalidUtf8Error whose offset() is the first
// bad byte (as find_invalid_utf8 reports it), and nothing else is thrown; for valid UTF-8 every
// id lies in [0, vocab_size()), decode(encode(s)) == s less the bytes whose GPT-2 byte symbol is
// not in the vocabulary (byte-level BPE without a normalizer is lossless except that, like
// `tokenizers`, it drops a byte that has no token when there is no unk token: SmolLM2's vocabulary
// lacks 21 of the 256 byte symbols, among them 0x04, 0x06, 0x13, 0x14, 0x16, 0x1d, 0xf1 and 0xf2,
// which occur in valid UTF-8; what such a dropped lead byte leaves decodes to U+FFFD), and encode(s, true) == encode(s) (the post-processor adds nothing).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.h"
#include "ucm/tok/tokenizer.h"
#include "ucm/utf8/utf8.h"

using ucm::tok::InvalidUtf8Error;
using ucm::tok::Tokenizer;

namespace {

std::unique_ptr<Tokenizer> g_tok;
bool g_dropped[256];  // bytes whose GPT-2 byte symbol is not a token

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the others to U+0100 on.
std::string byte_symbol(int b) {
  int cp = b;
  if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(char(cp));
  } else {
    s.push_back(char(0xC0 | (cp >> 6)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("UCM_FUZZ_TOKENIZER_JSON");
  const std::string path =
      env && *env ? std::string(env) : std::string(UCM_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct/tokenizer.json";
  if (::access(path.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "fuzz_tokenizer_encode: %s is missing (run scripts/fetch_model.py); every input is a no-op\n",
                 path.c_str());
    return 0;
  }
  g_tok = std::make_unique<Tokenizer>(Tokenizer::from_file(path));
  int dropped = 0;
  for (int b = 0; b < 256; ++b) dropped += g_dropped[b] = g_tok->token_id(byte_symbol(b)) < 0;
  std::fprintf(stderr, "fuzz_tokenizer_encode: loaded %s (%zu ids, %zu merges, %d bytes without a token)\n",
               path.c_str(), g_tok->vocab_size(), g_tok->merges_size(), dropped);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_tok) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::optional<size_t> bad = ucm::tok::find_invalid_utf8(text);
  std::vector<int32_t> ids;
  try {
    ids = g_tok->encode(text, false);
  } catch (const InvalidUtf8Error& e) {
    FUZZ_CHECK_MSG(bad.has_value(), e.what());
    FUZZ_CHECK(e.offset() == *bad);
    return 0;
  }
  FUZZ_CHECK(!bad.has_value());
  const size_t vocab = g_tok->vocab_size();
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && size_t(id) < vocab);
  std::string expect;
  for (unsigned char c : text)
    if (!g_dropped[c]) expect.push_back(char(c));
  // A dropped lead byte leaves its continuation bytes, which decode() turns into U+FFFD.
  expect = ucm::utf8::decode_lossy(expect);
  const std::string back = g_tok->decode(ids, false);
  FUZZ_CHECK_MSG(back == expect, "decode(encode(s)) != s less the bytes without a token: got \"" + back + "\"");
  FUZZ_CHECK(g_tok->encode(text, true) == ids);
  return 0;
}
