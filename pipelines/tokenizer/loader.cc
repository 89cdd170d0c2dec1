// Loading: tokenizer.json (model, added tokens, normalizer, pre-tokenizers, post-processor), tokenizer_config.json.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "byte_alphabet.h"
#include "impl.h"
#include "ucm/utf8/utf8.h"

namespace ucm::tok {

using json = nlohmann::json;
using detail::alphabet;
using detail::AddedToken;
using detail::Behavior;
using detail::kGpt2Regex;
using detail::PreStep;
using detail::Regex;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw TokenizerError("cannot open tokenizer file '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw TokenizerError("cannot read tokenizer file '" + path + "'");
  return ss.str();
}

// Token ids index the id tables, so they must be integers in [0, kMaxTokenId]. The largest
// byte-level BPE vocabularies have about 260,000 entries; the cap keeps a stray id from sizing
// those tables by itself.
constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;
// tokenizer.json nests about 5 levels. Walking and copying the document recurses once per
// level, so a deeper one is refused when it is parsed, before it can overflow the stack.
constexpr int kMaxJsonDepth = 64;

std::string type_of(const json& j) {
  if (!j.is_object()) return "<not an object>";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "<no type>";
}

}  // namespace

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

int32_t Tokenizer::Impl::read_id(const json& v, const std::string& what) const {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxTokenId)
    fail(what + " has id " + (v.is_number() ? v.dump() : std::string("of type ") + v.type_name()) +
         "; ids must be integers in [0, " + std::to_string(kMaxTokenId) + "]");
  return static_cast<int32_t>(v.get<int64_t>());
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
      for (const auto& v : specials[id].at("ids")) {
        const int32_t tid = read_id(v, "TemplateProcessing special token '" + id + "'");
        if (static_cast<std::size_t>(tid) >= id_to_tok.size())
          fail("TemplateProcessing special token '" + id + "' has id " + std::to_string(tid) +
               ", outside the vocabulary of " + std::to_string(id_to_tok.size()) + " ids");
        dst.push_back(tid);
      }
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
    const int32_t id = read_id(idj, "token '" + tok + "'");
    vocab.emplace(tok, id);
    max_id = std::max(max_id, id);
  }
  // Added tokens.
  for (const auto& a : j.value("added_tokens", json::array())) {
    auto t = std::make_unique<AddedToken>();
    t->content = a.at("content").get<std::string>();
    t->id = read_id(a.at("id"), "added token '" + t->content + "'");
    t->special = a.value("special", false);
    for (const char* k : {"single_word", "lstrip", "rstrip"})
      if (a.value(k, false)) fail("added token '" + t->content + "' uses " + k + "=true, which is not supported");
    if (ucm::utf8::find_invalid_utf8(t->content)) fail("added token content is not valid UTF-8");
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

Tokenizer Tokenizer::from_json_string(std::string_view text, const std::string& origin) {
  auto impl = std::make_unique<Impl>();
  impl->origin = origin;
  json j;
  try {
    j = json::parse(text, [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth)
        throw TokenizerError(origin + ": invalid tokenizer.json: nested deeper than " + std::to_string(kMaxJsonDepth) +
                             " levels");
      return true;
    });
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
      else if (v.is_object() && v.contains("content") && v["content"].is_string()) s = v["content"].get<std::string>();
      else if (v.is_object() && v.contains("content"))
        throw TokenizerError(cfg_path + ": " + key + ".content is not a string");
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

}  // namespace ucm::tok
