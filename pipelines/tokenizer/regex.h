// Pre-tokenizer regexes: the PCRE2 wrapper, the \s rewrite to Unicode White_Space, GPT-2's pattern. Internal.
#pragma once

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <string_view>

#include "ucm/tok/tokenizer.h"
#include "ucm/utf8/utf8.h"

namespace ucm::tok::detail {

// ---------------------------------------------------------------------------------------------
// Regex (PCRE2, UTF + UCP, JIT). Oniguruma (used by `tokenizers`) and PCRE2 are both
// backtracking, leftmost-first engines, so alternations pick the same branch.

// Rewrites `\s` / `\S` in a pattern to explicit White_Space classes (Unicode White_Space, which is
// what `\s` means in Oniguruma's Unicode mode; PCRE2's UCP `\s` additionally matches U+180E).
// Throws TokenizerError, naming `origin`, for `\S` inside a character class.
std::string rewrite_whitespace(std::string_view p, const std::string& origin);

class Regex {
 public:
  // `literal`: match `pattern` as a plain string (PCRE2_LITERAL); otherwise it is a regex, with
  // `\s` / `\S` rewritten. Throws TokenizerError, naming `origin`, if it does not compile.
  Regex(const std::string& pattern, bool literal, const std::string& origin);
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex();

  // Calls f(start, end) for each non-overlapping match in s (valid UTF-8), left to right.
  // Empty matches are skipped.
  template <class F>
  void for_each_match(std::string_view s, pcre2_match_data* md, F&& f) const {
    PCRE2_SIZE pos = 0;
    while (pos <= s.size()) {
      const int rc = jit_ ? pcre2_jit_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, 0, md, nullptr)
                          : pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos,
                                        PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        throw TokenizerError(std::string("regex match failed: ") + reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[1] == ov[0]) {  // empty match: step one code point
        if (ov[0] >= s.size()) return;
        pos = ov[0] + std::max<std::size_t>(1, utf8::sequence_length(s, ov[0]));
        continue;
      }
      f(static_cast<std::size_t>(ov[0]), static_cast<std::size_t>(ov[1]));
      pos = ov[1];
    }
  }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

// Match data for one match at a time (one per encode call, so encoding is thread-safe).
struct MatchData {
  pcre2_match_data* md;
  MatchData() : md(pcre2_match_data_create(1, nullptr)) {
    if (!md) throw std::bad_alloc();
  }
  ~MatchData() { pcre2_match_data_free(md); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
};

// GPT-2's pre-tokenization regex (tokenizers' ByteLevel with use_regex=true).
inline constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace ucm::tok::detail
