// Byte-level BPE tokenizer reading Hugging Face `tokenizer.json` files.
//
// Reproduces the `tokenizers` library (github.com/huggingface/tokenizers) for byte-level BPE
// models (GPT-2, SmolLM2, StarCoder, Llama-3 style):
//   1. added tokens are matched first in the raw text, leftmost-longest (special and
//      non-normalized ones on the raw text, normalized ones after normalization);
//   2. the remaining pieces are normalized (None, NFC, or a Sequence of those);
//   3. pre-tokenized: Split(regex|string), Digits, ByteLevel (GPT-2 regex), or a Sequence;
//   4. each pre-token is mapped to the GPT-2 byte alphabet and merged with BPE
//      (lowest merge rank first, leftmost on ties; the linked-list + priority-queue algorithm of
//      tokenizers' `Word::merge_all`), with a per-word cache.
// Anything else in the file (WordPiece/Unigram/WordLevel models, other pre-tokenizers or
// normalizers) is rejected when loading with a TokenizerError naming the type and the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ucm::tok {

/// Any error loading a tokenizer file or encoding/decoding with it.
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Input text that is not valid UTF-8. `offset()` is the byte offset of the first bad byte.
class InvalidUtf8Error : public TokenizerError {
 public:
  InvalidUtf8Error(std::size_t offset, const std::string& what) : TokenizerError(what), offset_(offset) {}
  std::size_t offset() const noexcept { return offset_; }

 private:
  std::size_t offset_;
};

/// Returns the byte offset of the first invalid UTF-8 sequence in `s` (overlong forms,
/// surrogates and code points above U+10FFFF are invalid), or std::nullopt when `s` is valid.
/// The same validator as ucm::utf8::find_invalid_utf8 (target ucm_utf8), which encode() uses.
std::optional<std::size_t> find_invalid_utf8(std::string_view s) noexcept;

class Tokenizer {
 public:
  /// Loads a `tokenizer.json`. If a `tokenizer_config.json` lies beside it, its `bos_token`
  /// and `eos_token` give bos_id()/eos_id().
  /// Throws TokenizerError (unreadable file, bad JSON, unsupported model/pre-tokenizer/
  /// normalizer/post-processor type, merges naming unknown tokens, missing byte symbols).
  static Tokenizer from_file(const std::string& path);

  /// Same as from_file for an in-memory JSON document; `origin` names it in error messages.
  static Tokenizer from_json_string(std::string_view json, const std::string& origin = "<memory>");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Token ids of `utf8`. add_special_tokens applies the file's post_processor
  /// (TemplateProcessing `single`; ByteLevel/null add nothing).
  /// Throws InvalidUtf8Error for invalid UTF-8 input. Thread-safe.
  std::vector<int32_t> encode(std::string_view utf8, bool add_special_tokens = false) const;

  /// Text of `ids` (byte-level decoding; an incomplete UTF-8 sequence becomes U+FFFD, as in
  /// `tokenizers`). skip_special_tokens drops added tokens marked special.
  /// Throws TokenizerError for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  /// Id of a token spelled as in the vocabulary (byte-level alphabet) or of an added token;
  /// -1 when there is no such token.
  int32_t token_id(std::string_view token) const;

  /// Token string of `id` (as spelled in the vocabulary). Throws TokenizerError if out of range.
  const std::string& id_to_token(int32_t id) const;

  /// Number of ids: 1 + the largest id in the vocabulary or the added tokens.
  std::size_t vocab_size() const;

  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

  /// Number of BPE merges loaded.
  std::size_t merges_size() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ucm::tok
