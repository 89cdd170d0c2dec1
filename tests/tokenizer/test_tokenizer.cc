// Tests of ucm::tok::Tokenizer against golden ids produced by Hugging Face `tokenizers`
// (scripts/make_golden_tokens.py): every document of the Python 3.11 docs corpus (count + MD5 of
// the ids) and hand-picked strings (full id lists); plus error handling and round trips.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ucm/tok/tokenizer.h"

namespace fs = std::filesystem;
using ucm::tok::InvalidUtf8Error;
using ucm::tok::Tokenizer;
using ucm::tok::TokenizerError;

namespace {

std::string env_or(const char* name, const std::string& dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : dflt;
}

std::string tokenizer_path() {
  return env_or("UCM_MODEL_DIR", std::string(UCM_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct") + "/tokenizer.json";
}
std::string corpus_dir() { return env_or("UCM_CORPUS_DIR", "/usr/share/doc/python3.11/html/_sources"); }
std::string golden_dir() { return std::string(UCM_SOURCE_DIR) + "/tests/golden"; }

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string md5_hex_u32le(const std::vector<int32_t>& ids) {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (int32_t id : ids) {
    const auto u = static_cast<uint32_t>(id);
    for (int k = 0; k < 4; ++k) bytes.push_back(static_cast<char>((u >> (8 * k)) & 0xFF));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_md5(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out.push_back(hex[md[i] >> 4]);
    out.push_back(hex[md[i] & 15]);
  }
  return out;
}

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string p = tokenizer_path();
    if (!fs::exists(p)) return;
    tok_ = new Tokenizer(Tokenizer::from_file(p));
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(tok_, nullptr) << "tokenizer " << tokenizer_path()
                             << " not found: run scripts/fetch_model.py to build models/SmolLM2-135M-Instruct "
                                "(or set UCM_MODEL_DIR to a directory holding tokenizer.json)";
  }
  static Tokenizer* tok_;
};
Tokenizer* SmolLM2::tok_ = nullptr;

TEST_F(SmolLM2, VocabularyAndSpecialTokens) {
  EXPECT_EQ(tok_->vocab_size(), 49152u);
  EXPECT_EQ(tok_->merges_size(), 48900u);
  EXPECT_EQ(tok_->token_id("<|endoftext|>"), 0);
  EXPECT_EQ(tok_->token_id("<|im_start|>"), 1);
  EXPECT_EQ(tok_->token_id("<|im_end|>"), 2);
  EXPECT_EQ(tok_->token_id("no such token at all"), -1);
  EXPECT_EQ(tok_->id_to_token(1), "<|im_start|>");
  if (fs::exists(fs::path(tokenizer_path()).parent_path() / "tokenizer_config.json")) {
    EXPECT_EQ(tok_->bos_id(), std::optional<int32_t>(1));
    EXPECT_EQ(tok_->eos_id(), std::optional<int32_t>(2));
  }
  EXPECT_THROW((void)tok_->id_to_token(49152), TokenizerError);
  EXPECT_THROW((void)tok_->decode({49152}), TokenizerError);
}

TEST_F(SmolLM2, GoldenCases) {
  const auto cases = nlohmann::json::parse(slurp(golden_dir() + "/tokens_cases.json"));
  ASSERT_GT(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(tok_->encode(text), want) << "case " << c.at("name");
    EXPECT_EQ(tok_->decode(want), text) << "round trip of case " << c.at("name");
  }
}

TEST_F(SmolLM2, GoldenCorpusEveryDocument) {
  const fs::path corpus = corpus_dir();
  ASSERT_TRUE(fs::is_directory(corpus)) << "corpus " << corpus
                                        << " not found: apt-get install python3.11-doc (or set UCM_CORPUS_DIR)";
  std::ifstream tsv(golden_dir() + "/tokens_python311_doc.tsv");
  ASSERT_TRUE(tsv) << "missing tests/golden/tokens_python311_doc.tsv (scripts/make_golden_tokens.py writes it)";
  std::string line;
  std::size_t docs = 0, mismatches = 0, total_tokens = 0;
  while (std::getline(tsv, line)) {
    std::istringstream ls(line);
    std::string rel, md5;
    std::size_t count = 0;
    std::getline(ls, rel, '\t');
    ls >> count >> md5;
    const fs::path p = corpus / rel;
    ASSERT_TRUE(fs::exists(p)) << "golden document " << p << " missing from the corpus";
    const std::string text = slurp(p);
    const auto ids = tok_->encode(text);
    total_tokens += ids.size();
    ++docs;
    if (ids.size() != count || md5_hex_u32le(ids) != md5) {
      ++mismatches;
      ADD_FAILURE() << rel << ": " << ids.size() << " tokens (golden " << count << "), md5 " << md5_hex_u32le(ids)
                    << " (golden " << md5 << ")";
    } else if (docs % 25 == 0) {
      EXPECT_EQ(tok_->decode(ids), text) << "round trip of " << rel;
    }
  }
  EXPECT_EQ(docs, 497u);
  EXPECT_EQ(mismatches, 0u);
  EXPECT_GT(total_tokens, 1'000'000u);
}

TEST_F(SmolLM2, InvalidUtf8IsAnErrorWithOffset) {
  struct Bad {
    std::string text;
    std::size_t offset;
  };
  const std::vector<Bad> bad = {
      {"abc\xff", 3},               // never valid
      {"ok \xe2\x82", 3},           // truncated 3-byte sequence
      {"\xc0\xaf", 0},              // overlong '/'
      {"xy\xed\xa0\x80", 2},        // UTF-16 surrogate
      {"12345678\xf4\x90\x80\x80", 8},  // above U+10FFFF
      {"\x80 lone continuation", 0},
  };
  for (const auto& b : bad) {
    try {
      (void)tok_->encode(b.text);
      ADD_FAILURE() << "no error for invalid UTF-8 at " << b.offset;
    } catch (const InvalidUtf8Error& e) {
      EXPECT_EQ(e.offset(), b.offset);
      EXPECT_NE(std::string(e.what()).find("offset " + std::to_string(b.offset)), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(ucm::tok::find_invalid_utf8("h\xc3\xa9llo \xf0\x9f\x98\x80"), std::nullopt);
}

TEST_F(SmolLM2, RoundTripAndSpecials) {
  for (const std::string s : {"", " ", "\n\n", "a\tb", "x  1", "日本語 😀", "<|im_start|>user\nhi<|im_end|>"})
    EXPECT_EQ(tok_->decode(tok_->encode(s)), s);
  const auto ids = tok_->encode("<|im_start|>user<|im_end|>");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(tok_->decode(ids, /*skip_special_tokens=*/true), "user");
  // SmolLM2's post-processor (ByteLevel) adds nothing.
  EXPECT_EQ(tok_->encode("hello", true), tok_->encode("hello", false));
  // A token split mid-character decodes to U+FFFD, as tokenizers does.
  const auto emoji = tok_->encode("😀");
  if (emoji.size() > 1) {
    EXPECT_NE(tok_->decode({emoji[0]}).find("\xEF\xBF\xBD"), std::string::npos);
  }
}

TEST_F(SmolLM2, ConcurrentEncodeMatchesSerial) {
  const auto cases = nlohmann::json::parse(slurp(golden_dir() + "/tokens_cases.json"));
  std::vector<std::string> texts;
  for (const auto& c : cases) texts.push_back(c.at("text").get<std::string>());
  for (int i = 0; i < 200; ++i) texts.push_back("word" + std::to_string(i) + " thread_" + std::to_string(i * 7919));
  std::vector<std::vector<int32_t>> serial;
  for (const auto& t : texts) serial.push_back(tok_->encode(t));
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 20; ++rep)
        for (std::size_t i = 0; i < texts.size(); ++i) bad[static_cast<std::size_t>(k)] += tok_->encode(texts[i]) != serial[i];
    });
  }
  for (auto& t : threads) t.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(bad[static_cast<std::size_t>(k)], 0) << "thread " << k;
}

// ---- Synthetic tokenizers (independent of the model) ------------------------------------------

// GPT-2 byte alphabet, as in scripts/gguf_tokenizer.py.
std::vector<std::string> byte_chars() {
  std::vector<std::string> out(256);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool direct = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const unsigned c = direct ? static_cast<unsigned>(b) : 256u + static_cast<unsigned>(n++);
    std::string s;
    if (c < 0x80) {
      s.push_back(static_cast<char>(c));
    } else {
      s.push_back(static_cast<char>(0xC0 | (c >> 6)));
      s.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
    out[static_cast<std::size_t>(b)] = s;
  }
  return out;
}

nlohmann::json tiny_tokenizer(bool list_merges) {
  nlohmann::json vocab = nlohmann::json::object();
  const auto bc = byte_chars();
  for (int b = 0; b < 256; ++b) vocab[bc[static_cast<std::size_t>(b)]] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["Ġw"] = 259;
  nlohmann::json merges = nlohmann::json::array();
  for (auto [a, b] : {std::pair{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"Ġ", "w"}}) {
    if (list_merges) {
      merges.push_back({a, b});
    } else {
      merges.push_back(std::string(a) + " " + b);
    }
  }
  return {{"version", "1.0"},
          {"added_tokens", {{{"id", 260}, {"content", "<s>"}, {"special", true}, {"normalized", false}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {260}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

TEST(TinyTokenizer, MergesInBothFormsAndTemplate) {
  for (bool list_form : {false, true}) {
    const auto t = Tokenizer::from_json_string(tiny_tokenizer(list_form).dump(), "tiny");
    EXPECT_EQ(t.vocab_size(), 261u);
    EXPECT_EQ(t.merges_size(), 4u);
    EXPECT_EQ(t.encode("hello world"), (std::vector<int32_t>{258, 'o', 259, 'o', 'r', 'l', 'd'}));
    EXPECT_EQ(t.encode("hello", true), (std::vector<int32_t>{260, 258, 'o'}));
    EXPECT_EQ(t.encode("<s>he"), (std::vector<int32_t>{260, 256}));
    EXPECT_EQ(t.decode(t.encode("hello world")), "hello world");
  }
}

TEST(TinyTokenizer, NfcNormalizer) {
  auto j = tiny_tokenizer(false);
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  const auto t = Tokenizer::from_json_string(j.dump(), "tiny-nfc");
  EXPECT_EQ(t.encode("e\xcc\x81"), t.encode("\xc3\xa9"));  // e + combining acute == é
}

TEST(TinyTokenizer, SplitAndDigitsPreTokenizers) {
  auto j = tiny_tokenizer(false);
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Removed"}},
        {{"type", "Digits"}, {"individual_digits", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  const auto t = Tokenizer::from_json_string(j.dump(), "tiny-split");
  // "he-ll" -> "he", "ll" (dash removed); "h12" -> "h", "12".
  EXPECT_EQ(t.encode("he-ll"), (std::vector<int32_t>{256, 257}));
  EXPECT_EQ(t.encode("h12"), (std::vector<int32_t>{'h', '1', '2'}));
}

TEST(TinyTokenizer, UnsupportedTypesNameTypeAndFile) {
  const fs::path dir = fs::temp_directory_path() / ("ucm_tok_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto expect_error = [&](const nlohmann::json& j, const std::string& needle) {
    const fs::path p = dir / "tokenizer.json";
    std::ofstream(p) << j.dump();
    try {
      (void)Tokenizer::from_file(p.string());
      ADD_FAILURE() << "no error for " << needle;
    } catch (const TokenizerError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    }
  };
  auto wp = tiny_tokenizer(false);
  wp["model"] = {{"type", "WordPiece"}, {"vocab", {{"a", 0}}}, {"unk_token", "a"}};
  expect_error(wp, "WordPiece");
  auto uni = tiny_tokenizer(false);
  uni["model"] = {{"type", "Unigram"}, {"vocab", nlohmann::json::array()}};
  expect_error(uni, "Unigram");
  auto pre = tiny_tokenizer(false);
  pre["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(pre, "Whitespace");
  auto norm = tiny_tokenizer(false);
  norm["normalizer"] = {{"type", "Lowercase"}};
  expect_error(norm, "Lowercase");
  auto merge = tiny_tokenizer(false);
  merge["model"]["merges"].push_back("x yz");
  expect_error(merge, "missing from the vocab");
  std::ofstream(dir / "tokenizer.json") << "{not json";
  EXPECT_THROW((void)Tokenizer::from_file((dir / "tokenizer.json").string()), TokenizerError);
  EXPECT_THROW((void)Tokenizer::from_file((dir / "nonexistent.json").string()), TokenizerError);
  fs::remove_all(dir);
}

// Found by fuzzing and review of the loader (tests/fuzz/corpus/tokenizer_load/repro-*): ids are
// checked before they index the id tables, and a deeply nested file is refused at parse time
// instead of overflowing the stack.
TEST(TinyTokenizer, BadIdsAndDeepNestingAreTokenizerErrors) {
  const auto expect_error = [](const std::string& text, const std::string& needle) {
    try {
      (void)Tokenizer::from_json_string(text, "bad.json");
      ADD_FAILURE() << "no error for " << needle;
    } catch (const TokenizerError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_NE(msg.find("bad.json"), std::string::npos) << msg;
    }
  };
  auto neg = tiny_tokenizer(false);
  neg["added_tokens"][0]["id"] = -1;  // used to write before the id table (heap corruption)
  expect_error(neg.dump(), "added token '<s>' has id -1");
  auto big = tiny_tokenizer(false);
  big["model"]["vocab"]["he"] = 2147483647;  // max_id + 1 overflowed
  expect_error(big.dump(), "token 'he' has id 2147483647; ids must be integers in [0, 4194303]");
  auto flt = tiny_tokenizer(false);
  flt["model"]["vocab"]["he"] = 1e300;  // float-to-int conversion out of range
  expect_error(flt.dump(), "token 'he' has id 1e+300");
  auto str = tiny_tokenizer(false);
  str["added_tokens"][0]["id"] = "260";
  expect_error(str.dump(), "has id of type string");
  auto tmpl = tiny_tokenizer(false);
  tmpl["post_processor"]["special_tokens"]["<s>"]["ids"] = {99999};  // encode(add_special) returned it
  expect_error(tmpl.dump(), "special token '<s>' has id 99999, outside the vocabulary of 261 ids");
  const int depth = 100000;
  const std::string deep = R"({"model":{"type":"BPE","vocab":{}},"normalizer":{"type":"Sequence","normalizers":)" +
                           std::string(depth, '[') + std::string(depth, ']') + "}}";
  expect_error(deep, "nested deeper than 64 levels");
  // The largest id accepted still loads.
  auto edge = tiny_tokenizer(false);
  edge["added_tokens"].push_back({{"id", 4194303}, {"content", "<big>"}, {"special", true}});
  EXPECT_EQ(Tokenizer::from_json_string(edge.dump(), "edge").vocab_size(), 4194304u);
}

TEST(TinyTokenizer, ConfigSpecialTokenContentMustBeAString) {
  const fs::path dir = fs::temp_directory_path() / ("ucm_tok_cfg_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tiny_tokenizer(false).dump();
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": {"content": 5}})";
  try {
    (void)Tokenizer::from_file((dir / "tokenizer.json").string());
    ADD_FAILURE() << "no error for a non-string bos_token content";
  } catch (const TokenizerError& e) {  // was nlohmann::json::type_error, escaping from_file
    EXPECT_NE(std::string(e.what()).find("bos_token.content is not a string"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": {"content": "<s>"}})";
  EXPECT_EQ(Tokenizer::from_file((dir / "tokenizer.json").string()).bos_id(), 260);
  fs::remove_all(dir);
}

}  // namespace
