// Adapter from the corpus reader (pipelines/corpus, ucm::corpus::Reader) to precompute's DocSource.
#include "doc_source.h"

#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>

#include "ucm/corpus/corpus.h"

namespace ucm::precompute {
namespace {

namespace fs = std::filesystem;

class CorpusDocSource : public DocSource {
 public:
  CorpusDocSource(corpus::Reader r, corpus::Template t, std::shared_ptr<std::deque<corpus::Issue>> issues)
      : reader_(std::move(r)), tmpl_(std::move(t)), issues_(std::move(issues)) {}

  // Order of what comes out: the issues found while looking for a document, then that document.
  // The reader reports issues through on_issue while next() runs, so a document read together
  // with issues is held in pending_ until those issues have been returned, one per call.
  Result next(SourceDoc* doc, SkippedEntry* skipped, Status* st) override {
    *st = Status::OK();
    if (drain(skipped)) return Result::kSkipped;
    if (pending_) {
      emit(std::move(*pending_), doc);
      pending_.reset();
      return Result::kDoc;
    }
    corpus::Document d;
    bool got = false;
    try {
      got = reader_.next(d);
    } catch (const corpus::CorpusError& e) {
      *st = Status::InvalidArgument(std::string("corpus: ") + e.what() +
                                    " (without --strict malformed entries are skipped)");
      return Result::kEnd;
    }
    if (drain(skipped)) {
      if (got) pending_ = std::move(d);
      return Result::kSkipped;
    }
    if (!got) return Result::kEnd;
    emit(std::move(d), doc);
    return Result::kDoc;
  }
  const std::string& prefix() const override { return tmpl_.prefix(); }
  const std::string& suffix() const override { return tmpl_.suffix(); }

 private:
  static void emit(corpus::Document d, SourceDoc* doc) {
    doc->id = std::move(d.id);
    doc->text = std::move(d.text);
    doc->source = std::move(d.source);
    doc->has_token_ids = d.has_token_ids;
    doc->token_ids = std::move(d.token_ids);
    doc->prefix_tokens = d.prefix_tokens;
  }

  bool drain(SkippedEntry* skipped) {
    if (issues_->empty()) return false;
    corpus::Issue is = std::move(issues_->front());
    issues_->pop_front();
    skipped->kind = is.kind == corpus::Issue::Kind::Empty ? "empty" : "malformed";
    skipped->location = std::move(is.location);
    skipped->reason = std::move(is.reason);
    return true;
  }

  corpus::Reader reader_;
  corpus::Template tmpl_;
  std::shared_ptr<std::deque<corpus::Issue>> issues_;
  std::optional<corpus::Document> pending_;
};

}  // namespace

Status open_doc_source(const DocSourceOptions& o, std::unique_ptr<DocSource>* out) {
  if (o.path.empty() || !fs::exists(o.path))
    return Status::InvalidArgument("corpus " + o.path + " does not exist (expected a JSONL file or a directory)");
  corpus::Template t;
  if (!o.template_file.empty()) {
    try {
      t = corpus::Template::from_file(o.template_file);
    } catch (const std::exception& e) {
      return Status::InvalidArgument(std::string("template: ") + e.what());
    }
  }
  auto issues = std::make_shared<std::deque<corpus::Issue>>();
  corpus::Options co;
  co.strict = o.strict;
  co.suffix = o.suffix;
  co.shard_index = o.shard_index;
  co.shard_count = o.shard_count;
  co.on_issue = [issues](const corpus::Issue& is) { issues->push_back(is); };
  try {
    auto r = corpus::Reader::open(o.path, co);
    *out = std::make_unique<CorpusDocSource>(std::move(r), std::move(t), issues);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("corpus: ") + e.what());
  }
  return Status::OK();
}

uint64_t count_documents(const DocSourceOptions& o) {
  std::error_code ec;
  uint64_t n = 0;
  if (fs::is_directory(o.path, ec)) {
    for (auto it = fs::recursive_directory_iterator(o.path, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      const std::string name = it->path().filename().string();
      if (o.suffix.empty() ||
          (name.size() >= o.suffix.size() && name.compare(name.size() - o.suffix.size(), o.suffix.size(), o.suffix) == 0))
        ++n;
    }
  } else {
    std::ifstream f(o.path);
    std::string line;
    while (std::getline(f, line))
      if (line.find_first_not_of(" \t\r") != std::string::npos) ++n;
  }
  if (o.shard_count > 1) n = (n + o.shard_count - 1 - o.shard_index) / o.shard_count;
  return n;
}

}  // namespace ucm::precompute
