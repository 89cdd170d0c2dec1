// pipelines/token_ids/token_ids.cc: `ucm tokenize` (ucm/token_ids/token_ids.h).
#include "ucm/token_ids/token_ids.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "ucm/corpus/corpus.h"
#include "ucm/tok/tokenizer.h"

namespace ucm::tokenize {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr size_t kContextBefore = 12, kContextAfter = 6, kMaxReasons = 100;
constexpr uint64_t kBlock = 16;  // the default block size, for "blocks a server would find"

// Decoded text of the in-vocabulary ids of [b, e) (out-of-vocabulary ids are left out).
std::string decode_range(const tok::Tokenizer& tk, const std::vector<int32_t>& ids, size_t b, size_t e) {
  std::vector<int32_t> part;
  for (size_t i = b; i < e && i < ids.size(); ++i)
    if (ids[i] >= 0 && size_t(ids[i]) < tk.vocab_size()) part.push_back(ids[i]);
  try {
    return tk.decode(part);
  } catch (const std::exception&) {
    return {};
  }
}

std::string spelling(const tok::Tokenizer& tk, int64_t id) {
  if (id < 0 || size_t(id) >= tk.vocab_size()) return {};
  try {
    return tk.id_to_token(int32_t(id));
  } catch (const std::exception&) {
    return {};
  }
}

void compare(const tok::Tokenizer& tk, const std::vector<int32_t>& given, DocumentTokens* d) {
  d->compared = true;
  d->compare_tokens = given.size();
  const auto& ours = d->ids;
  size_t i = 0;
  while (i < ours.size() && i < given.size() && ours[i] == given[i]) ++i;
  d->match = i == ours.size() && i == given.size();
  d->full_blocks_before_difference = (d->match ? std::min(ours.size(), given.size()) : i) / kBlock;
  if (d->match) return;
  Difference& df = d->diff;
  df.position = i;
  df.ours_id = i < ours.size() ? ours[i] : -1;
  df.given_id = i < given.size() ? given[i] : -1;
  df.ours_token = spelling(tk, df.ours_id);
  df.given_token = spelling(tk, df.given_id);
  df.text_before = decode_range(tk, ours, i >= kContextBefore ? i - kContextBefore : 0, i);
  df.ours_text = decode_range(tk, ours, i, i + kContextAfter);
  df.given_text = decode_range(tk, given, i, i + kContextAfter);
}

// The compare file: id -> ids (every entry must carry token_ids).
Status read_compare(const std::string& path, std::unordered_map<std::string, std::vector<int32_t>>* out) {
  if (!fs::is_regular_file(path))
    return Status::InvalidArgument("--compare " + path + ": not a file (expected JSONL of {\"id\", \"token_ids\"})");
  corpus::Options co;
  co.strict = true;
  try {
    auto r = corpus::Reader::open(path, co);
    corpus::Document d;
    while (r.next(d)) {
      if (!d.has_token_ids)
        return Status::InvalidArgument("--compare " + d.source + ": entry " + d.id +
                                       " has no \"token_ids\" (write the file with `python -m ucm.tokenize`)");
      (*out)[d.id] = std::move(d.token_ids);
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("--compare: ") + e.what());
  }
  return Status::OK();
}

ojson ids_json(const std::vector<int32_t>& ids) {
  ojson a = ojson::array();
  for (int32_t t : ids) a.push_back(t);
  return a;
}

}  // namespace

std::string transformers_rebuilt_tokenizer_class(const std::string& tokenizer_config_path) {
  // Classes whose transformers >= 5 implementation builds its own pre-tokenizer from code instead
  // of loading tokenizer.json's (measured with transformers 5.23.0: docs/python.md).
  // Measured with transformers 5.24.0 on SmolLM2's byte-level tokenizer.json under each class name
  // (scripts/measure_tokenizer_classes.py): these build their own pre-tokenizer and give other ids;
  // LlamaTokenizer(Fast), PreTrainedTokenizerFast and TokenizersBackend load tokenizer.json as is.
  static const char* const kRebuilt[] = {"GPT2Tokenizer",      "GPT2TokenizerFast",      "Qwen2Tokenizer",
                                         "Qwen2TokenizerFast", "CodeLlamaTokenizer",     "CodeLlamaTokenizerFast",
                                         "GemmaTokenizer",     "GemmaTokenizerFast"};
  std::ifstream f(tokenizer_config_path);
  if (!f) return {};
  const auto j = nlohmann::json::parse(f, nullptr, false);
  if (!j.is_object()) return {};
  const auto it = j.find("tokenizer_class");
  if (it == j.end() || !it->is_string()) return {};
  const std::string cls = it->get<std::string>();
  for (const char* c : kRebuilt)
    if (cls == c) return cls;
  return {};
}

Status run_tokenize(const TokenizeOptions& o, bool keep_ids, const std::function<void(const DocumentTokens&)>& on_doc,
                    TokenizeReport* rep) {
  *rep = TokenizeReport{};
  if (o.corpus.empty()) return Status::InvalidArgument("no corpus: pass --corpus PATH (a JSONL file or a directory)");
  std::string tk_path = o.tokenizer_file;
  if (tk_path.empty()) {
    if (o.model_dir.empty()) return Status::InvalidArgument("no tokenizer: pass --model DIR (or --tokenizer FILE)");
    tk_path = (fs::path(o.model_dir) / "tokenizer.json").string();
  }
  if (!fs::exists(tk_path))
    return Status::InvalidArgument("tokenizer file " + tk_path + " not found: pass --tokenizer FILE, or the model "
                                   "directory that holds tokenizer.json");
  rep->tokenizer = tk_path;
  std::unique_ptr<tok::Tokenizer> tk;
  try {
    tk = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_file(tk_path));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("cannot load tokenizer ") + tk_path + ": " + e.what());
  }
  std::unordered_map<std::string, std::vector<int32_t>> given;
  if (!o.compare_file.empty()) {
    Status st = read_compare(o.compare_file, &given);
    if (!st.ok()) return st;
    rep->comparing = true;
  }
  corpus::Options co;
  co.suffix = o.corpus_suffix;
  co.on_issue = [rep](const corpus::Issue& is) {
    rep->skipped++;
    if (rep->skipped_reasons.size() < kMaxReasons) rep->skipped_reasons.push_back(is.location + ": " + is.reason);
  };
  try {
    if (!o.template_file.empty()) co.tmpl = corpus::Template::from_file(o.template_file);
    auto r = corpus::Reader::open(o.corpus, co);
    corpus::Document d;
    while ((o.limit == 0 || rep->documents < o.limit) && r.next(d)) {
      DocumentTokens dt;
      dt.id = d.id;
      dt.source = d.source;
      if (d.has_token_ids) {
        dt.given_ids = true;
        dt.ids = std::move(d.token_ids);
      } else {
        try {
          dt.ids = tk->encode(d.text);
        } catch (const tok::TokenizerError& e) {
          co.on_issue(corpus::Issue{corpus::Issue::Kind::Malformed, d.source, e.what()});
          continue;
        }
      }
      dt.tokens = dt.ids.size();
      if (rep->comparing) {
        auto it = given.find(dt.id);
        if (it == given.end()) {
          rep->missing++;
        } else {
          compare(*tk, it->second, &dt);
          rep->compared++;
          (dt.match ? rep->matched : rep->differ)++;
        }
      }
      rep->documents++;
      rep->tokens += dt.ids.size();
      if (on_doc) on_doc(dt);
      if (!keep_ids) dt.ids.clear();
      rep->docs.push_back(std::move(dt));
    }
  } catch (const corpus::CorpusError& e) {
    return Status::InvalidArgument(std::string("corpus: ") + e.what());
  }
  return Status::OK();
}

std::string TokenizeReport::to_json() const {
  ojson j;
  j["tokenizer"] = tokenizer;
  j["documents"] = documents;
  j["tokens"] = tokens;
  j["skipped"] = skipped;
  j["skipped_reasons"] = skipped_reasons;
  if (comparing) {
    j["compared"] = compared;
    j["matched"] = matched;
    j["differ"] = differ;
    j["missing"] = missing;
  }
  ojson list = ojson::array();
  for (const auto& d : docs) {
    ojson e;
    e["id"] = d.id;
    e["source"] = d.source;
    e["tokens"] = d.tokens;
    if (!d.ids.empty()) e["token_ids"] = ids_json(d.ids);
    if (d.given_ids) e["given_ids"] = true;
    if (comparing) {
      e["compared"] = d.compared;
      if (d.compared) {
        e["match"] = d.match;
        e["compare_tokens"] = d.compare_tokens;
        e["full_blocks_before_difference"] = d.full_blocks_before_difference;
        if (!d.match) {
          const Difference& f = d.diff;
          e["first_difference"] = {{"position", f.position},
                                   {"ours", {{"id", f.ours_id}, {"token", f.ours_token}, {"text", f.ours_text}}},
                                   {"given", {{"id", f.given_id}, {"token", f.given_token}, {"text", f.given_text}}},
                                   {"text_before", f.text_before}};
        }
      }
    }
    list.push_back(std::move(e));
  }
  j["entries"] = std::move(list);
  return j.dump();
}

std::string TokenizeReport::to_text() const {
  std::ostringstream s;
  if (comparing) {
    for (const auto& d : docs) {
      if (!d.compared) {
        s << "MISSING " << d.id << ": not in the compare file\n";
        continue;
      }
      if (d.match) {
        s << "SAME    " << d.id << " (" << d.compare_tokens << " tokens)\n";
        continue;
      }
      const Difference& f = d.diff;
      s << "DIFFER  " << d.id << " at token " << f.position << " (ucm " << d.tokens << " tokens, given "
        << d.compare_tokens << "; " << d.full_blocks_before_difference << " full blocks of 16 agree)\n"
        << "        ucm:   " << f.ours_id << " " << ojson(f.ours_token).dump() << "  then "
        << ojson(f.ours_text).dump() << "\n"
        << "        given: " << f.given_id << " " << ojson(f.given_token).dump() << "  then "
        << ojson(f.given_text).dump() << "\n"
        << "        after: " << ojson(f.text_before).dump() << "\n";
    }
  }
  s << "documents " << documents << ", tokens " << tokens << ", skipped " << skipped;
  if (comparing) s << "; compared " << compared << ": " << matched << " same, " << differ << " differ, " << missing
                   << " missing from the compare file";
  s << "\n";
  for (const auto& r : skipped_reasons) s << "  skipped " << r << "\n";
  return s.str();
}

}  // namespace ucm::tokenize
