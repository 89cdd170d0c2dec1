// The PCRE2 regex wrapper and the \s -> Unicode White_Space rewrite; see regex.h.
#include "regex.h"

namespace ucm::tok::detail {

namespace {

// Unicode White_Space, which is what `\s` means in Oniguruma's Unicode mode (PCRE2's UCP `\s`
// additionally matches U+180E, so patterns are rewritten to this explicit class).
constexpr std::string_view kWhiteSpace =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

}  // namespace

// Rewrites `\s` / `\S` in a pattern to explicit White_Space classes.
std::string rewrite_whitespace(std::string_view p, const std::string& origin) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[i + 1];
      if (d == 's') {
        if (in_class) {
          out.append(kWhiteSpace);
        } else {
          out.append("[").append(kWhiteSpace).append("]");
        }
      } else if (d == 'S') {
        if (in_class) {
          throw TokenizerError(origin + ": regex uses \\S inside a character class, which is not supported: " +
                               std::string(p));
        }
        out.append("[^").append(kWhiteSpace).append("]");
      } else {
        out.push_back(c);
        out.push_back(d);
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

Regex::Regex(const std::string& pattern, bool literal, const std::string& origin) {
  int err = 0;
  PCRE2_SIZE off = 0;
  const std::string pat = literal ? pattern : rewrite_whitespace(pattern, origin);
  const uint32_t opts = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(), opts, &err, &off, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw TokenizerError(origin + ": cannot compile pre-tokenizer regex '" + pattern + "' at offset " +
                         std::to_string(off) + ": " + reinterpret_cast<const char*>(msg));
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(code_); }

}  // namespace ucm::tok::detail
