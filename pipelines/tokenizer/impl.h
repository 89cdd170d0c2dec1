// struct Tokenizer::Impl: the loaded tokenizer's state, shared by loader.cc, bpe.cc and tokenizer.cc. Internal.
// The algorithm and its source: include/ucm/tok/tokenizer.h. Definitions by file:
//   loader.cc     tokenizer.json / tokenizer_config.json loading (Impl::load*, from_file, from_json_string)
//   bpe.cc        Impl::bpe_word (BPE of one pre-token, word cache) and Impl::encode_text
//   tokenizer.cc  the remaining public methods (encode, decode, lookups)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pretokenize.h"
#include "regex.h"
#include "tables.h"
#include "ucm/tok/tokenizer.h"

namespace ucm::tok {

struct Tokenizer::Impl {
  using json = nlohmann::json;
  using AddedToken = detail::AddedToken;
  using StringHash = detail::StringHash;

  std::string origin;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab;
  std::vector<std::string> id_to_tok;
  std::vector<uint8_t> id_is_special;
  std::vector<const AddedToken*> id_added;  // non-null for added tokens
  std::vector<std::unique_ptr<AddedToken>> added;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> added_by_content;
  detail::AddedMatcher raw_matcher, normalized_matcher;
  bool nfc = false;
  std::vector<detail::PreStep> pre_steps;
  detail::MergeMap merges;
  std::array<int32_t, 256> byte_id{};  // -1: byte has no vocab entry
  std::optional<int32_t> unk;
  bool ignore_merges = false;
  std::vector<int32_t> template_prefix, template_suffix;
  std::optional<int32_t> bos, eos;

  mutable std::shared_mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache;
  static constexpr std::size_t kCacheMax = 1 << 20;

  [[noreturn]] void fail(const std::string& msg) const { throw TokenizerError(origin + ": " + msg); }

  // loader.cc
  void load(const json& j);
  void load_pre_tokenizer(const json& p, bool& saw_byte_level);
  void load_normalizer(const json& n);
  void load_post_processor(const json& p);
  // An id from the file (vocab, added_tokens, post_processor): fails unless an integer in range.
  int32_t read_id(const json& v, const std::string& what) const;
  // bpe.cc
  void bpe_word(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_text(std::string_view text, std::vector<int32_t>& out, pcre2_match_data* md) const;
};

}  // namespace ucm::tok
