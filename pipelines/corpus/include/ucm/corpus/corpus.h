// Corpus reading for precompute: a deterministic, bounded-memory stream of documents from a
// JSONL file or a directory of text files, with sharding and an optional prompt template.
// Format and behaviour are documented in docs/corpus.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ucm::corpus {

/// Fatal corpus errors: unopenable corpus path, bad options, and (with Options::strict) any
/// malformed entry. The message names the file (and line for JSONL) and the reason.
class CorpusError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One document. `text` is valid UTF-8 and already wrapped by the template, if any.
/// A JSONL entry with "token_ids" carries the ids a server's tokenizer gave for template +
/// document: then has_token_ids is set, token_ids holds them and the template is not applied
/// (text is the entry's "text" as given, or "" without one). docs/corpus.md.
struct Document {
  std::string id;      ///< JSONL: the "id" value (string as is, number as written); directory: relative path
  std::string text;    ///< template prefix + document + template suffix
  std::string source;  ///< JSONL: "<file>:<line>"; directory: the file's path
  uint64_t index = 0;  ///< position of the entry in the deterministic order (before sharding/skipping)
  bool has_token_ids = false;
  std::vector<int32_t> token_ids;  ///< "token_ids": each in [0, 2^31); not empty when has_token_ids
  /// "prefix_tokens": how many leading token_ids are the template's prefix (the chunk prefix of
  /// `ucm precompute --chunks`, store_v1.md §4.4); 0 when absent. <= token_ids.size().
  uint32_t prefix_tokens = 0;
};

/// A problem with one entry. Malformed entries are skipped (or fatal with strict); empty
/// documents are always skipped.
struct Issue {
  enum class Kind { Malformed, Empty };
  Kind kind;
  std::string location;  ///< "<file>:<line>" or "<file>"
  std::string reason;
};

/// A prompt template: the text placed around each document. From a UTF-8 file whose content
/// contains "{document}" (first occurrence splits prefix and suffix) or, without it, is
/// entirely the prefix.
class Template {
 public:
  Template() = default;
  /// Throws CorpusError if the file cannot be read or is not valid UTF-8.
  static Template from_file(const std::filesystem::path& path);
  static Template from_string(std::string_view content, const std::string& origin = "<template>");
  std::string apply(std::string_view document) const;
  const std::string& prefix() const { return prefix_; }
  const std::string& suffix() const { return suffix_; }

 private:
  std::string prefix_, suffix_;
};

struct Options {
  bool strict = false;       ///< malformed entries throw CorpusError instead of being skipped
  std::string suffix;        ///< directory: only files whose name ends with this ("" = all); e.g. ".rst.txt"
  std::string glob;          ///< directory: fnmatch(3) pattern; on the relative path if it contains '/',
                             ///< else on the file name ("" = all)
  uint64_t shard_index = 0;  ///< keep entries with index % shard_count == shard_index
  uint64_t shard_count = 1;
  std::optional<Template> tmpl;                 ///< wrap each document's text
  std::function<void(const Issue&)> on_issue;   ///< called for each issue as it happens
};

struct Stats {
  uint64_t documents = 0;  ///< documents returned by next()
  uint64_t malformed = 0;  ///< entries skipped as malformed
  uint64_t empty = 0;      ///< entries skipped as empty
  std::vector<Issue> issues;  ///< the first kMaxStoredIssues issues
  static constexpr std::size_t kMaxStoredIssues = 1000;
};

/// Returns the byte offset of the first invalid UTF-8 sequence in `s`, or nullopt if valid.
std::optional<std::size_t> find_invalid_utf8(std::string_view s) noexcept;

/// Streaming reader. A path naming a directory is read as a directory of text files (ids are
/// relative paths, '/'-separated, in bytewise sorted order); any other path as JSONL.
/// Memory: one document (plus the sorted file list for a directory).
class Reader {
 public:
  /// Throws CorpusError if `path` does not exist, cannot be opened, or the options are invalid.
  static Reader open(const std::filesystem::path& path, Options options = {});

  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;
  ~Reader();

  /// Fills `doc` with the next document of this shard; false at the end.
  /// Throws CorpusError on a malformed entry when strict, or on an I/O error reading JSONL.
  bool next(Document& doc);

  const Stats& stats() const;

  struct Impl;

 private:
  explicit Reader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ucm::corpus
