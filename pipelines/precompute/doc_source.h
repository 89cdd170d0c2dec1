// Internal: the documents precompute reads, adapted from the corpus reader (pipelines/corpus).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ucm/status.h"

namespace ucm::precompute {

struct SourceDoc {
  std::string id, text, source;
  bool has_token_ids = false;      ///< the entry gave "token_ids" (docs/corpus.md): no template, no tokenizer
  std::vector<int32_t> token_ids;  ///< template + document as the server tokenizes them
  uint32_t prefix_tokens = 0;      ///< leading token_ids that are the template's prefix (chunk mode)
};

/// A corpus entry that was skipped, and why.
struct SkippedEntry {
  std::string kind;      ///< "malformed" (bad JSON, invalid UTF-8, unreadable file) or "empty"
  std::string location;  ///< "<file>:<line>" (JSONL) or "<file>" (directory)
  std::string reason;    ///< e.g. "bad JSON: ...", "invalid UTF-8 (byte 0xff at byte offset 3)"
};

struct DocSourceOptions {
  std::string path;          ///< JSONL file or directory
  std::string suffix;        ///< directory corpora: file-name suffix filter ("" = all files)
  std::string template_file; ///< "" = no template
  uint32_t shard_index = 0, shard_count = 1;
  bool strict = false;       ///< malformed lines are errors instead of skipped
};

class DocSource {
 public:
  virtual ~DocSource() = default;
  enum class Result { kDoc, kSkipped, kEnd };
  /// kDoc: *doc filled (text is the raw document text; the template is applied by the caller).
  /// kSkipped: an entry was skipped (non-strict); *skipped says which and why. Entries come out
  /// in corpus order: a skipped entry is reported before the documents that follow it.
  /// kEnd: no more documents. Errors (strict mode, I/O) are returned in *st with kEnd.
  virtual Result next(SourceDoc* doc, SkippedEntry* skipped, Status* st) = 0;
  /// The template's text before / after the document ("" when there is no template).
  virtual const std::string& prefix() const = 0;
  virtual const std::string& suffix() const = 0;
};

/// Opens the corpus. InvalidArgument for a missing path or bad template file.
Status open_doc_source(const DocSourceOptions& o, std::unique_ptr<DocSource>* out);

/// Number of documents in the corpus for this shard (for progress/ETA): JSONL non-empty lines or
/// matching files. Cheap pre-scan; 0 when unknown.
uint64_t count_documents(const DocSourceOptions& o);

}  // namespace ucm::precompute
