// `ucm tokenize`: ucm's own token ids for a corpus, and a parity check against the ids a server's
// tokenizer gives (docs/python.md, "Token ids"). No libtorch, no store.
//
// Why: the store holds blocks of the token sequence precompute hashed. A server that tokenizes
// the same text differently (transformers >= 5 rebuilds some tokenizers' pre-tokenizers, e.g.
// SmolLM2's GPT2Tokenizer without its Digits step) hashes other blocks and finds none of them
// past the first difference. `--compare IDS.jsonl` says, per document, whether ucm's ids equal
// the server's and, if not, where they part.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ucm/status.h"

namespace ucm::tokenize {

struct TokenizeOptions {
  std::string model_dir;      ///< model directory: tokenizer.json (+ tokenizer_config.json) inside
  std::string tokenizer_file; ///< overrides MODEL/tokenizer.json
  std::string corpus;         ///< JSONL file or directory (docs/corpus.md)
  std::string corpus_suffix;  ///< directory corpora: file-name suffix filter
  std::string template_file;  ///< prompt template around each document ("" = none)
  std::string compare_file;   ///< JSONL of {"id", "token_ids"} to compare with ("" = no comparison)
  uint64_t limit = 0;         ///< stop after this many documents (0 = all)
};

/// Where ucm's ids and the given ids part, for one document.
struct Difference {
  uint64_t position = 0;        ///< first token index where they differ (= the shorter length if one is a prefix)
  int64_t ours_id = -1;         ///< ucm's id there (-1: ucm's sequence ended)
  int64_t given_id = -1;        ///< the given id there (-1: the given sequence ended)
  std::string ours_token;       ///< vocabulary spelling of ours_id (byte-level alphabet), "" if none
  std::string given_token;      ///< of given_id; "" if none or outside the vocabulary
  std::string text_before;      ///< decoded text of up to 12 tokens both agree on before `position`
  std::string ours_text;        ///< decoded text of up to 6 of ucm's tokens from `position`
  std::string given_text;       ///< decoded text of up to 6 given tokens from `position` (in-vocabulary ones)
};

/// One document of the corpus.
struct DocumentTokens {
  std::string id, source;
  std::vector<int32_t> ids;     ///< ucm's ids of template + document (an entry with token_ids: those)
  uint64_t tokens = 0;          ///< ids.size() (kept when the report drops the ids)
  bool given_ids = false;       ///< the corpus entry carried token_ids (not tokenized by ucm)
  // --compare only:
  bool compared = false;        ///< the compare file has an entry with this id
  bool match = false;           ///< ids equal the compare entry's exactly
  uint64_t compare_tokens = 0;  ///< length of the compare entry's ids
  uint64_t full_blocks_before_difference = 0;  ///< 16-token blocks a server would find (block hashes agree)
  Difference diff;              ///< when compared && !match
};

struct TokenizeReport {
  std::string tokenizer;        ///< path of the tokenizer.json used
  bool comparing = false;
  uint64_t documents = 0, tokens = 0;
  uint64_t compared = 0, matched = 0, differ = 0;
  uint64_t missing = 0;         ///< documents the compare file lacks
  uint64_t skipped = 0;         ///< corpus entries skipped (malformed, empty, invalid UTF-8)
  std::vector<std::string> skipped_reasons;  ///< "<location>: <reason>", the first 100
  std::vector<DocumentTokens> docs;  ///< every document (ids kept only when keep_ids)
  std::string to_json() const;
  std::string to_text() const;
};

/// Tokenizes every document of o.corpus with ucm's tokenizer and, with o.compare_file, compares.
/// on_doc (may be null) sees each document as it is done, before the next is read; keep_ids false
/// drops each document's ids from the report after on_doc (bounded memory for large corpora).
/// Errors: InvalidArgument (no tokenizer, bad template, corpus or compare file missing, a compare
/// entry without token_ids).
Status run_tokenize(const TokenizeOptions& o, bool keep_ids, const std::function<void(const DocumentTokens&)>& on_doc,
                    TokenizeReport* report);

/// The class a model's tokenizer_config.json names ("tokenizer_class"), when transformers >= 5
/// builds that class with its own pre-tokenizer instead of the one tokenizer.json declares, so
/// that a server using transformers can tokenize differently from ucm (measured: docs/python.md,
/// "Which tokenizers differ"). "" when the class is not one of those, or the file is absent.
std::string transformers_rebuilt_tokenizer_class(const std::string& tokenizer_config_path);

}  // namespace ucm::tokenize
