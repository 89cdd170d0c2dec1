// Fuzz target: the tokenizer.json loader (ucm::tok::Tokenizer::from_json_string,
// pipelines/tokenizer/include/ucm/tok/tokenizer.h).
//
// Input: the text of a tokenizer.json.
// Contract checked: loading throws ucm::tok::TokenizerError only (any other exception escapes
// and aborts). A tokenizer that loads is usable: encoding a few fixed texts throws nothing but
// TokenizerError, the ids of encode() without special tokens lie in [0, vocab_size()), and
// decode(), id_to_token() and token_id() of them agree with the tables.
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.h"
#include "ucm/tok/tokenizer.h"

using ucm::tok::Tokenizer;
using ucm::tok::TokenizerError;

namespace {

const char* const kTexts[] = {
    "Hello world! 123 4567",
    "  def f(x):\n\treturn x  # ok\n",
    "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87",
    "<|im_start|>user\nhi<|im_end|>",
    "",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  std::vector<Tokenizer> loaded;
  try {
    loaded.push_back(Tokenizer::from_json_string(json, "fuzz.json"));
  } catch (const TokenizerError& e) {
    FUZZ_CHECK(std::string_view(e.what()).find("fuzz.json") != std::string_view::npos);
    return 0;
  }
  const Tokenizer& t = loaded.front();
  const size_t vocab = t.vocab_size();
  for (const char* text : kTexts) {
    std::vector<int32_t> ids;
    try {
      ids = t.encode(text, false);
    } catch (const TokenizerError&) {
      continue;  // e.g. a pattern that exceeds PCRE2's match limit
    }
    for (int32_t id : ids) {
      FUZZ_CHECK_MSG(id >= 0 && size_t(id) < vocab, "id " + std::to_string(id) + " of vocab " + std::to_string(vocab));
      const std::string& tok = t.id_to_token(id);
      const int32_t back = t.token_id(tok);
      FUZZ_CHECK(back >= 0 && size_t(back) < vocab);
    }
    (void)t.decode(ids, false);
    (void)t.decode(ids, true);
    try {
      (void)t.encode(text, true);  // template ids are the file's; decode may reject them
    } catch (const TokenizerError&) {
    }
  }
  return 0;
}
