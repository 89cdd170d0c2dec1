// Byte-level BPE tokenizer: see include/ucm/tok/tokenizer.hpp for the algorithm and its source.
#include "ucm/tok/tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <unordered_map>

namespace ucm::tok {
namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// UTF-8 helpers

// Appends code point `c` (assumed valid) as UTF-8.
void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is invalid (RFC 3629:
// no overlongs, no surrogates, nothing above U+10FFFF). `maximal` receives the length of the
// maximal invalid subpart when the sequence is invalid (at least 1), for lossy decoding.
std::size_t utf8_seq_len(std::string_view s, std::size_t i, std::size_t* maximal = nullptr) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    if (maximal) *maximal = 1;
    return 0;
  }
  for (std::size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size() || b(i + k) < lo || b(i + k) > hi) {
      if (maximal) *maximal = k;
      return 0;
    }
    lo = 0x80;
    hi = 0xBF;
  }
  return need + 1;
}

// Decodes the valid code point at s[i] of length len.
char32_t decode_cp(std::string_view s, std::size_t i, std::size_t len) {
  const auto b = [&](std::size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

// Replaces each maximal invalid subpart by U+FFFD (same result as Rust's from_utf8_lossy).
std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t bad = 0;
    const std::size_t n = utf8_seq_len(s, i, &bad);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += bad;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// GPT-2 byte <-> unicode alphabet (openai/gpt-2 encoder.py bytes_to_unicode).

struct ByteAlphabet {
  std::array<std::string, 256> byte_to_str;  // UTF-8 of the printable char standing for a byte
  std::unordered_map<char32_t, uint8_t> char_to_byte;
  ByteAlphabet() {
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t c = direct[b] ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      append_utf8(byte_to_str[b], c);
      char_to_byte[c] = static_cast<uint8_t>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

// ---------------------------------------------------------------------------------------------
// Regex (PCRE2, UTF + UCP, JIT). Oniguruma (used by `tokenizers`) and PCRE2 are both
// backtracking, leftmost-first engines, so alternations pick the same branch.

// Unicode White_Space, which is what `\s` means in Oniguruma's Unicode mode (PCRE2's UCP `\s`
// additionally matches U+180E, so patterns are rewritten to this explicit class).
constexpr std::string_view kWhiteSpace =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

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

class Regex {
 public:
  Regex(const std::string& pattern, bool literal, const std::string& origin) {
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
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() { pcre2_code_free(code_); }

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
        pos = ov[0] + std::max<std::size_t>(1, utf8_seq_len(s, ov[0]));
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
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreStep {
  std::shared_ptr<const Regex> re;  // null: no split
  Behavior behavior = Behavior::Isolated;
  bool add_prefix_space = false;  // ByteLevel only
};

using Span = std::pair<std::size_t, std::size_t>;

// Splits `piece` by `re` with tokenizers' SplitDelimiterBehavior semantics; appends non-empty
// results to `out`.
void split_piece(const std::string& piece, const Regex& re, Behavior behavior, pcre2_match_data* md,
                 std::vector<std::string>& out) {
  std::vector<std::pair<Span, bool>> spans;
  std::size_t prev = 0;
  re.for_each_match(piece, md, [&](std::size_t a, std::size_t b) {
    if (prev != a) spans.push_back({{prev, a}, false});
    spans.push_back({{a, b}, true});
    prev = b;
  });
  if (prev != piece.size()) spans.push_back({{prev, piece.size()}, false});

  std::vector<Span> res;
  switch (behavior) {
    case Behavior::Removed:
      for (auto& [sp, m] : spans)
        if (!m) res.push_back(sp);
      break;
    case Behavior::Isolated:
      for (auto& [sp, m] : spans) res.push_back(sp);
      break;
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (auto& [sp, m] : spans) {
        if (m && !prev_match && !res.empty()) {
          res.back().second = sp.second;
        } else {
          res.push_back(sp);
        }
        prev_match = m;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->second && !prev_match && !res.empty()) {
          res.back().first = it->first.first;
        } else {
          res.push_back(it->first);
        }
        prev_match = it->second;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
    case Behavior::Contiguous: {
      bool prev_match = false;
      for (auto& [sp, m] : spans) {
        if (m == prev_match && !res.empty()) {
          res.back().second = sp.second;
        } else {
          res.push_back(sp);
        }
        prev_match = m;
      }
      break;
    }
  }
  for (auto& [a, b] : res)
    if (b > a) out.emplace_back(piece, a, b - a);
}

// ---------------------------------------------------------------------------------------------
// Merge table: open addressing, key = (left id << 32) | right id.

class MergeMap {
 public:
  struct Value {
    int32_t rank;
    int32_t new_id;
  };
  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, {});
    mask_ = cap - 1;
  }
  void insert(uint64_t key, Value v) {
    std::size_t i = hash(key) & mask_;
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
    if (keys_[i] == key) return;  // first (lowest rank) occurrence wins, as in tokenizers
    keys_[i] = key;
    vals_[i] = v;
    ++size_;
  }
  const Value* find(uint64_t key) const {
    if (keys_.empty()) return nullptr;
    std::size_t i = hash(key) & mask_;
    while (keys_[i] != kEmpty) {
      if (keys_[i] == key) return &vals_[i];
      i = (i + 1) & mask_;
    }
    return nullptr;
  }
  std::size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static std::size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<std::size_t>(k);
  }
  std::vector<uint64_t> keys_;
  std::vector<Value> vals_;
  std::size_t mask_ = 0, size_ = 0;
};

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;
};

// Leftmost-longest matcher over a small set of literal strings (tokenizers uses aho-corasick
// with MatchKind::LeftmostLongest).
class AddedMatcher {
 public:
  void add(const AddedToken* t) {
    if (t->content.empty()) return;
    first_[static_cast<unsigned char>(t->content[0])] = true;
    toks_.push_back(t);
    std::stable_sort(toks_.begin(), toks_.end(),
                     [](const AddedToken* a, const AddedToken* b) { return a->content.size() > b->content.size(); });
  }
  bool empty() const { return toks_.empty(); }
  // Splits s into (text, nullptr) and (match, token) segments.
  void split(std::string_view s, std::vector<std::pair<std::string_view, const AddedToken*>>& out) const {
    std::size_t start = 0, i = 0;
    while (i < s.size()) {
      if (first_[static_cast<unsigned char>(s[i])]) {
        const AddedToken* hit = nullptr;
        for (const AddedToken* t : toks_) {
          if (s.compare(i, t->content.size(), t->content) == 0 && s.size() - i >= t->content.size()) {
            hit = t;
            break;
          }
        }
        if (hit) {
          if (i > start) out.push_back({s.substr(start, i - start), nullptr});
          out.push_back({s.substr(i, hit->content.size()), hit});
          i += hit->content.size();
          start = i;
          continue;
        }
      }
      ++i;
    }
    if (start < s.size()) out.push_back({s.substr(start), nullptr});
  }

 private:
  std::array<bool, 256> first_{};
  std::vector<const AddedToken*> toks_;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw TokenizerError("cannot open tokenizer file '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw TokenizerError("cannot read tokenizer file '" + path + "'");
  return ss.str();
}

std::string type_of(const json& j) {
  if (!j.is_object()) return "<not an object>";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "<no type>";
}

}  // namespace

// =============================================================================================

struct Tokenizer::Impl {
  std::string origin;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab;
  std::vector<std::string> id_to_tok;
  std::vector<uint8_t> id_is_special;
  std::vector<const AddedToken*> id_added;  // non-null for added tokens
  std::vector<std::unique_ptr<AddedToken>> added;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> added_by_content;
  AddedMatcher raw_matcher, normalized_matcher;
  bool nfc = false;
  std::vector<PreStep> pre_steps;
  MergeMap merges;
  std::array<int32_t, 256> byte_id{};  // -1: byte has no vocab entry
  std::optional<int32_t> unk;
  bool ignore_merges = false;
  std::vector<int32_t> template_prefix, template_suffix;
  std::optional<int32_t> bos, eos;

  mutable std::shared_mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache;
  static constexpr std::size_t kCacheMax = 1 << 20;

  [[noreturn]] void fail(const std::string& msg) const { throw TokenizerError(origin + ": " + msg); }

  void load(const json& j);
  void load_pre_tokenizer(const json& p, bool& saw_byte_level);
  void load_normalizer(const json& n);
  void load_post_processor(const json& p);
  void bpe_word(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_text(std::string_view text, std::vector<int32_t>& out, pcre2_match_data* md) const;
};

void Tokenizer::Impl::load_normalizer(const json& n) {
  if (n.is_null()) return;
  const std::string t = type_of(n);
  if (t == "NFC") {
    nfc = true;
  } else if (t == "Sequence") {
    for (const auto& s : n.value("normalizers", json::array())) load_normalizer(s);
  } else {
    fail("unsupported normalizer type '" + t + "' (supported: NFC, Sequence, null)");
  }
}

void Tokenizer::Impl::load_pre_tokenizer(const json& p, bool& saw_byte_level) {
  if (p.is_null()) return;
  const std::string t = type_of(p);
  if (saw_byte_level) fail("pre-tokenizer '" + t + "' after ByteLevel is not supported (ByteLevel must be last)");
  if (t == "Sequence") {
    for (const auto& s : p.value("pretokenizers", json::array())) load_pre_tokenizer(s, saw_byte_level);
  } else if (t == "ByteLevel") {
    PreStep st;
    st.add_prefix_space = p.value("add_prefix_space", false);
    if (p.value("use_regex", true)) st.re = std::make_shared<Regex>(kGpt2Regex, false, origin);
    pre_steps.push_back(std::move(st));
    saw_byte_level = true;
  } else if (t == "Digits") {
    PreStep st;
    st.re = std::make_shared<Regex>(p.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+", false, origin);
    pre_steps.push_back(std::move(st));
  } else if (t == "Split") {
    if (p.value("invert", false)) fail("Split pre-tokenizer with invert=true is not supported");
    const json& pat = p.at("pattern");
    PreStep st;
    if (pat.contains("Regex")) {
      st.re = std::make_shared<Regex>(pat.at("Regex").get<std::string>(), false, origin);
    } else if (pat.contains("String")) {
      st.re = std::make_shared<Regex>(pat.at("String").get<std::string>(), true, origin);
    } else {
      fail("Split pre-tokenizer pattern must be {\"Regex\": ...} or {\"String\": ...}");
    }
    const std::string b = p.value("behavior", "Isolated");
    if (b == "Removed") st.behavior = Behavior::Removed;
    else if (b == "Isolated") st.behavior = Behavior::Isolated;
    else if (b == "MergedWithPrevious") st.behavior = Behavior::MergedWithPrevious;
    else if (b == "MergedWithNext") st.behavior = Behavior::MergedWithNext;
    else if (b == "Contiguous") st.behavior = Behavior::Contiguous;
    else fail("unknown Split behavior '" + b + "'");
    pre_steps.push_back(std::move(st));
  } else {
    fail("unsupported pre-tokenizer type '" + t + "' (supported: ByteLevel, Split, Digits, Sequence)");
  }
}

void Tokenizer::Impl::load_post_processor(const json& p) {
  if (p.is_null()) return;
  const std::string t = type_of(p);
  if (t == "ByteLevel") return;  // only adjusts offsets
  if (t == "Sequence") {
    for (const auto& s : p.value("processors", json::array())) load_post_processor(s);
    return;
  }
  if (t != "TemplateProcessing") fail("unsupported post_processor type '" + t + "'");
  const json& specials = p.value("special_tokens", json::object());
  bool seen_a = false;
  for (const auto& item : p.at("single")) {
    if (item.contains("Sequence")) {
      if (item["Sequence"].value("id", "A") != "A") fail("TemplateProcessing single template uses a sequence other than A");
      seen_a = true;
    } else if (item.contains("SpecialToken")) {
      const std::string id = item["SpecialToken"].at("id").get<std::string>();
      if (!specials.contains(id)) fail("TemplateProcessing names special token '" + id + "' not in special_tokens");
      auto& dst = seen_a ? template_suffix : template_prefix;
      for (const auto& v : specials[id].at("ids")) dst.push_back(v.get<int32_t>());
    } else {
      fail("TemplateProcessing item is neither Sequence nor SpecialToken");
    }
  }
}

void Tokenizer::Impl::load(const json& j) {
  if (!j.is_object()) fail("not a JSON object");
  const json& model = j.contains("model") ? j["model"] : json();
  std::string mtype = type_of(model);
  if (mtype == "<no type>" && model.is_object() && model.contains("merges")) mtype = "BPE";  // older files
  if (mtype != "BPE") {
    fail("unsupported tokenizer model type '" + mtype + "': only byte-level BPE is supported");
  }
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(k) && !model[k].is_null() && !model[k].get<std::string>().empty())
      fail(std::string("BPE option ") + k + " is not supported");
  }
  if (model.value("byte_fallback", false)) fail("BPE byte_fallback=true is not supported (not a byte-level BPE)");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() > 0.0)
    fail("BPE dropout is not supported");
  ignore_merges = model.value("ignore_merges", false);

  // Vocabulary.
  int32_t max_id = -1;
  for (const auto& [tok, idj] : model.at("vocab").items()) {
    const int32_t id = idj.get<int32_t>();
    if (id < 0) fail("negative id for token '" + tok + "'");
    vocab.emplace(tok, id);
    max_id = std::max(max_id, id);
  }
  // Added tokens.
  for (const auto& a : j.value("added_tokens", json::array())) {
    auto t = std::make_unique<AddedToken>();
    t->content = a.at("content").get<std::string>();
    t->id = a.at("id").get<int32_t>();
    t->special = a.value("special", false);
    for (const char* k : {"single_word", "lstrip", "rstrip"})
      if (a.value(k, false)) fail("added token '" + t->content + "' uses " + k + "=true, which is not supported");
    if (find_invalid_utf8(t->content)) fail("added token content is not valid UTF-8");
    max_id = std::max(max_id, t->id);
    added_by_content[t->content] = t->id;
    if (a.value("normalized", !t->special)) {
      normalized_matcher.add(t.get());
    } else {
      raw_matcher.add(t.get());
    }
    added.push_back(std::move(t));
  }
  id_to_tok.assign(static_cast<std::size_t>(max_id + 1), std::string());
  id_is_special.assign(id_to_tok.size(), 0);
  id_added.assign(id_to_tok.size(), nullptr);
  for (const auto& [tok, id] : vocab) id_to_tok[static_cast<std::size_t>(id)] = tok;
  for (const auto& t : added) {
    id_to_tok[static_cast<std::size_t>(t->id)] = t->content;
    id_is_special[static_cast<std::size_t>(t->id)] = t->special;
    id_added[static_cast<std::size_t>(t->id)] = t.get();
  }

  // Merges: "a b" strings or ["a", "b"] pairs; rank = position.
  const json& mj = model.value("merges", json::array());
  merges.reserve(mj.size());
  int32_t rank = 0;
  for (const auto& m : mj) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const auto sp = s.find(' ', 1);
      if (sp == std::string::npos) fail("merge " + std::to_string(rank) + " '" + s + "' has no space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      fail("merge " + std::to_string(rank) + " is neither \"a b\" nor [a, b]");
    }
    auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end() || iab == vocab.end())
      fail("merge " + std::to_string(rank) + " ('" + a + "', '" + b + "') names a token missing from the vocab");
    merges.insert((static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) | static_cast<uint32_t>(ib->second),
                  {rank, iab->second});
    ++rank;
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = vocab.find(model["unk_token"].get<std::string>());
    if (it != vocab.end()) unk = it->second;
  }
  const auto& abc = alphabet();
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(abc.byte_to_str[b]);
    byte_id[b] = it == vocab.end() ? -1 : it->second;
  }

  load_normalizer(j.contains("normalizer") ? j["normalizer"] : json());
  bool saw_byte_level = false;
  load_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), saw_byte_level);
  if (!saw_byte_level) fail("pre_tokenizer has no ByteLevel step: only byte-level BPE tokenizers are supported");
  const json& dec = j.contains("decoder") ? j["decoder"] : json();
  if (!dec.is_null() && type_of(dec) != "ByteLevel")
    fail("unsupported decoder type '" + type_of(dec) + "' (supported: ByteLevel)");
  load_post_processor(j.contains("post_processor") ? j["post_processor"] : json());
}

// BPE of one pre-token (raw UTF-8 bytes; mapped to the byte alphabet here). Mirrors tokenizers'
// Word::merge_all: a min-heap of candidate pairs ordered by (rank, position); stale entries are
// skipped when popped.
void Tokenizer::Impl::bpe_word(std::string_view piece, std::vector<int32_t>& out) const {
  {
    std::shared_lock lk(cache_mu);
    auto it = cache.find(piece);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  if (ignore_merges) {
    std::string mapped;
    for (unsigned char c : piece) mapped += alphabet().byte_to_str[c];
    auto it = vocab.find(mapped);
    if (it != vocab.end()) ids.push_back(it->second);
  }
  if (ids.empty()) {
    struct Sym {
      int32_t id;
      int32_t prev, next;
      bool alive;
    };
    std::vector<Sym> syms;
    syms.reserve(piece.size());
    for (unsigned char c : piece) {
      int32_t id = byte_id[c];
      if (id < 0) {
        if (!unk) continue;  // tokenizers drops a symbol that has no id and no unk token
        id = *unk;
      }
      const int32_t n = static_cast<int32_t>(syms.size());
      syms.push_back({id, n - 1, n + 1, true});
    }
    if (!syms.empty()) syms.back().next = -1;
    struct Cand {
      int32_t rank, pos, new_id;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    const auto key = [](int32_t a, int32_t b) {
      return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    for (std::size_t i = 0; i + 1 < syms.size(); ++i) {
      if (const auto* v = merges.find(key(syms[i].id, syms[i + 1].id)))
        heap.push({v->rank, static_cast<int32_t>(i), v->new_id});
    }
    while (!heap.empty()) {
      const Cand top = heap.top();
      heap.pop();
      Sym& left = syms[static_cast<std::size_t>(top.pos)];
      if (!left.alive || left.next < 0) continue;
      Sym& right = syms[static_cast<std::size_t>(left.next)];
      const auto* v = merges.find(key(left.id, right.id));
      if (!v || v->new_id != top.new_id) continue;
      left.id = top.new_id;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) syms[static_cast<std::size_t>(right.next)].prev = top.pos;
      if (left.prev >= 0) {
        const Sym& p = syms[static_cast<std::size_t>(left.prev)];
        if (const auto* w = merges.find(key(p.id, left.id))) heap.push({w->rank, left.prev, w->new_id});
      }
      if (left.next >= 0) {
        const Sym& n = syms[static_cast<std::size_t>(left.next)];
        if (const auto* w = merges.find(key(left.id, n.id))) heap.push({w->rank, top.pos, w->new_id});
      }
    }
    for (const Sym& s : syms)
      if (s.alive) ids.push_back(s.id);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  std::unique_lock lk(cache_mu);
  if (cache.size() >= kCacheMax) cache.clear();
  cache.emplace(std::string(piece), std::move(ids));
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& out, pcre2_match_data* md) const {
  std::string normalized;
  if (nfc) {
    UErrorCode st = U_ZERO_ERROR;
    const icu::Normalizer2* n2 = icu::Normalizer2::getNFCInstance(st);
    if (U_FAILURE(st)) throw TokenizerError(std::string("ICU NFC normalizer unavailable: ") + u_errorName(st));
    const icu::UnicodeString us = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
    icu::UnicodeString res = n2->normalize(us, st);
    if (U_FAILURE(st)) throw TokenizerError(std::string("ICU NFC normalization failed: ") + u_errorName(st));
    res.toUTF8String(normalized);
    text = normalized;
  }
  std::vector<std::pair<std::string_view, const AddedToken*>> segs;
  if (!normalized_matcher.empty()) {
    normalized_matcher.split(text, segs);
  } else {
    segs.push_back({text, nullptr});
  }
  std::vector<std::string> pieces, next;
  for (const auto& [seg, tok] : segs) {
    if (tok) {
      out.push_back(tok->id);
      continue;
    }
    pieces.clear();
    pieces.emplace_back(seg);
    for (const PreStep& st : pre_steps) {
      next.clear();
      for (std::string& p : pieces) {
        if (st.add_prefix_space && (p.empty() || p[0] != ' ')) p.insert(p.begin(), ' ');
        if (st.re) {
          split_piece(p, *st.re, st.behavior, md, next);
        } else if (!p.empty()) {
          next.push_back(std::move(p));
        }
      }
      pieces.swap(next);
    }
    for (const std::string& p : pieces) bpe_word(p, out);
  }
}

// =============================================================================================

std::optional<std::size_t> find_invalid_utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    // Fast path over ASCII, 8 bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const std::size_t n = utf8_seq_len(s, i);
    if (!n) return i;
    i += n;
  }
  return std::nullopt;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json_string(std::string_view text, const std::string& origin) {
  auto impl = std::make_unique<Impl>();
  impl->origin = origin;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw TokenizerError(origin + ": invalid JSON: " + e.what());
  }
  try {
    impl->load(j);
  } catch (const json::exception& e) {
    throw TokenizerError(origin + ": malformed tokenizer.json: " + e.what());
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  Tokenizer t = from_json_string(read_file(path), path);
  // Special tokens from tokenizer_config.json beside it, when present.
  const auto slash = path.find_last_of('/');
  const std::string cfg_path = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "tokenizer_config.json";
  std::ifstream f(cfg_path, std::ios::binary);
  if (f) {
    json cfg;
    try {
      cfg = json::parse(f);
    } catch (const json::exception& e) {
      throw TokenizerError(cfg_path + ": invalid JSON: " + e.what());
    }
    const auto special = [&](const char* key) -> std::optional<int32_t> {
      if (!cfg.contains(key)) return std::nullopt;
      const json& v = cfg[key];
      std::string s;
      if (v.is_string()) s = v.get<std::string>();
      else if (v.is_object() && v.contains("content")) s = v["content"].get<std::string>();
      else return std::nullopt;
      const int32_t id = t.token_id(s);
      if (id < 0) throw TokenizerError(cfg_path + ": " + key + " '" + s + "' is not in the vocabulary of " + path);
      return id;
    };
    t.impl_->bos = special("bos_token");
    t.impl_->eos = special("eos_token");
  }
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view utf8, bool add_special_tokens) const {
  if (auto bad = find_invalid_utf8(utf8)) {
    std::ostringstream ss;
    ss << "input is not valid UTF-8: bad byte 0x" << std::hex << static_cast<int>(static_cast<unsigned char>(utf8[*bad]))
       << std::dec << " at byte offset " << *bad << " (decode or clean the text before tokenizing)";
    throw InvalidUtf8Error(*bad, ss.str());
  }
  std::vector<int32_t> out;
  out.reserve(utf8.size() / 3 + 8);
  if (add_special_tokens) out.insert(out.end(), impl_->template_prefix.begin(), impl_->template_prefix.end());
  MatchData md;
  std::vector<std::pair<std::string_view, const AddedToken*>> segs;
  impl_->raw_matcher.split(utf8, segs);
  for (const auto& [seg, tok] : segs) {
    if (tok) {
      out.push_back(tok->id);
    } else {
      impl_->encode_text(seg, out, md.md);
    }
  }
  if (add_special_tokens) out.insert(out.end(), impl_->template_suffix.begin(), impl_->template_suffix.end());
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const auto& abc = alphabet();
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_to_tok.size())
      throw TokenizerError("decode: token id " + std::to_string(id) + " is outside [0, " +
                           std::to_string(impl_->id_to_tok.size()) + ")");
    if (skip_special_tokens && impl_->id_is_special[static_cast<std::size_t>(id)]) continue;
    const std::string& t = impl_->id_to_tok[static_cast<std::size_t>(id)];
    // ByteLevel decoder: every char maps back to a byte, else the token's own UTF-8 is used.
    std::string tb;
    bool ok = true;
    for (std::size_t i = 0; i < t.size();) {
      const std::size_t n = utf8_seq_len(t, i);
      if (!n) {
        ok = false;
        break;
      }
      auto it = abc.char_to_byte.find(decode_cp(t, i, n));
      if (it == abc.char_to_byte.end()) {
        ok = false;
        break;
      }
      tb.push_back(static_cast<char>(it->second));
      i += n;
    }
    bytes += ok ? tb : t;
  }
  return utf8_lossy(bytes);
}

int32_t Tokenizer::token_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
  if (auto it = impl_->vocab.find(token); it != impl_->vocab.end()) return it->second;
  return -1;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_to_tok.size())
    throw TokenizerError("token id " + std::to_string(id) + " is outside [0, " + std::to_string(impl_->id_to_tok.size()) + ")");
  return impl_->id_to_tok[static_cast<std::size_t>(id)];
}

std::size_t Tokenizer::vocab_size() const { return impl_->id_to_tok.size(); }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
std::size_t Tokenizer::merges_size() const { return impl_->merges.size(); }

}  // namespace ucm::tok
