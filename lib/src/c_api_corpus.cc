// lib/src/c_api_corpus.cc: the corpus reader in the C ABI (ucm/corpus.h), over ucm::corpus
// (pipelines/corpus), the reader `ucm precompute` uses: one owner of the corpus rules.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "ucm/core/c_api_internal.h"
#include "ucm/core/c_struct.h"
#include "ucm/corpus.h"
#include "ucm/corpus/corpus.h"

using namespace ucm::capi;
namespace corpus = ucm::corpus;
namespace fs = std::filesystem;

struct ucm_corpus {
  std::optional<corpus::Reader> reader;
  uint64_t limit = 0;
  std::string entry;  // the last entry of ucm_corpus_next, owned here
};

namespace {

// The documented key order: id, source, then text or token_ids (and prefix_tokens).
std::string entry_json(const corpus::Document& d) {
  nlohmann::ordered_json j;
  j["id"] = d.id;
  j["source"] = d.source;
  if (d.has_token_ids) {
    j["token_ids"] = d.token_ids;
    if (d.prefix_tokens) j["prefix_tokens"] = d.prefix_tokens;
  } else {
    j["text"] = d.text;  // valid UTF-8: the reader checked it
  }
  // Ids and sources come from file names, which need not be UTF-8: U+FFFD for each bad byte.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

corpus::Options reader_options(const ucm_corpus_open_params& p) {
  corpus::Options o;
  o.strict = p.strict != 0;
  if (p.suffix) o.suffix = p.suffix;
  if (p.glob) o.glob = p.glob;
  o.shard_index = p.shard_index;
  o.shard_count = p.shard_count;
  if (p.on_issue) {
    const ucm_corpus_issue_callback cb = p.on_issue;
    void* data = p.on_issue_data;
    o.on_issue = [cb, data](const corpus::Issue& is) {
      cb(is.kind == corpus::Issue::Kind::Empty ? UCM_CORPUS_EMPTY : UCM_CORPUS_MALFORMED, is.location.c_str(),
         is.reason.c_str(), data);
    };
  }
  return o;
}

}  // namespace

UCM_API ucm_corpus_open_params ucm_corpus_default_open_params(void) {
  ucm_corpus_open_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.shard_count = 1;
  return p;
}

UCM_API int ucm_corpus_open(const char* path, const ucm_corpus_open_params* params, ucm_corpus_t** out) {
  return guarded("ucm_corpus_open", [&] {
    if (!path || !out) return fail(UCM_E_INVALID, "ucm_corpus_open: path and out must not be NULL");
    *out = nullptr;
    const ucm_corpus_open_params defaults = ucm_corpus_default_open_params();
    ucm_corpus_open_params p = defaults;
    if (params) {
      ucm::Status s = read_struct("ucm_corpus_open: params", params, defaults, &p);
      if (!s.ok()) return fail(s);
    }
    if (p.shard_count == 0 || p.shard_index >= p.shard_count)
      return fail(UCM_E_INVALID, "ucm_corpus_open: shard " + std::to_string(p.shard_index) + " of " +
                                     std::to_string(p.shard_count) +
                                     ": need shard_count >= 1 and shard_index < shard_count");
    std::error_code ec;
    if (!fs::exists(path, ec))
      return fail(UCM_E_NOT_FOUND, std::string("ucm_corpus_open: corpus ") + path + " does not exist");
    auto c = std::make_unique<ucm_corpus>();
    c->limit = p.limit;
    try {
      c->reader.emplace(corpus::Reader::open(path, reader_options(p)));
    } catch (const corpus::CorpusError& e) {  // the file cannot be opened or the directory listed
      return fail(UCM_E_IO, std::string("ucm_corpus_open: ") + e.what());
    }
    *out = c.release();
    return ok();
  });
}

UCM_API int ucm_corpus_next(ucm_corpus_t* c, const char** entry, size_t* len) {
  return guarded("ucm_corpus_next", [&] {
    if (!c || !entry) return fail(UCM_E_INVALID, "ucm_corpus_next: corpus and entry must not be NULL");
    *entry = nullptr;
    if (len) *len = 0;
    c->entry.clear();
    if (c->limit && c->reader->stats().documents >= c->limit) return ok();
    const uint64_t malformed = c->reader->stats().malformed;
    corpus::Document d;
    try {
      if (!c->reader->next(d)) return ok();
    } catch (const corpus::CorpusError& e) {  // strict: a malformed entry; else a read error
      const bool bad_entry = c->reader->stats().malformed > malformed;
      return fail(bad_entry ? UCM_E_INVALID : UCM_E_IO, std::string("ucm_corpus_next: ") + e.what());
    }
    c->entry = entry_json(d);
    *entry = c->entry.c_str();
    if (len) *len = c->entry.size();
    return ok();
  });
}

UCM_API int ucm_corpus_stats(ucm_corpus_t* c, uint64_t* documents, uint64_t* malformed, uint64_t* empty) {
  return guarded("ucm_corpus_stats", [&] {
    if (!c) return fail(UCM_E_INVALID, "ucm_corpus_stats: corpus is NULL");
    const corpus::Stats& s = c->reader->stats();
    if (documents) *documents = s.documents;
    if (malformed) *malformed = s.malformed;
    if (empty) *empty = s.empty;
    return ok();
  });
}

UCM_API void ucm_corpus_close(ucm_corpus_t* c) { delete c; }

UCM_API int ucm_corpus_template(const char* path, char* buf, size_t cap, size_t* len) {
  return guarded("ucm_corpus_template", [&] {
    if (!path) return fail(UCM_E_INVALID, "ucm_corpus_template: path is NULL");
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      return fail(UCM_E_NOT_FOUND, std::string("ucm_corpus_template: template ") + path + " is not a file");
    std::ifstream f(path, std::ios::binary);
    std::ostringstream ss;
    if (f) ss << f.rdbuf();
    if (!f || f.bad())
      return fail(UCM_E_IO, std::string("ucm_corpus_template: ") + path + ": " + std::strerror(errno));
    corpus::Template t;
    try {
      t = corpus::Template::from_string(ss.str(), path);  // the one split rule; throws for invalid UTF-8
    } catch (const corpus::CorpusError& e) {
      return fail(UCM_E_INVALID, std::string("ucm_corpus_template: ") + e.what());
    }
    const std::string json = nlohmann::ordered_json{{"prefix", t.prefix()}, {"suffix", t.suffix()}}.dump();
    return sized_output("ucm_corpus_template", json, true, buf, cap, len);
  });
}
