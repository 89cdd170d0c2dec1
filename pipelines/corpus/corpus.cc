// Corpus reader: JSONL and directory-of-files document streams. See docs/corpus.md.
#include "ucm/corpus/corpus.h"

#include <fnmatch.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "ucm/utf8/utf8.h"

namespace ucm::corpus {

namespace fs = std::filesystem;

std::optional<std::size_t> find_invalid_utf8(std::string_view s) noexcept {
  // One validator for the whole pipeline: ucm_utf8's, which the tokenizer uses too (RFC 3629,
  // ASCII fast path).
  return ucm::utf8::find_invalid_utf8(s);
}

namespace {

bool read_whole(const fs::path& p, std::string& out, std::string& err) {
  std::ifstream f(p, std::ios::binary);
  if (!f) {
    err = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) {
    err = std::string("cannot read: ") + std::strerror(errno);
    return false;
  }
  out = std::move(ss).str();
  return true;
}

std::string utf8_reason(std::string_view s, std::size_t off) {
  std::ostringstream ss;
  ss << "invalid UTF-8 (byte 0x" << std::hex << static_cast<int>(static_cast<unsigned char>(s[off])) << std::dec
     << " at byte offset " << off << ")";
  return ss.str();
}

}  // namespace

// ---- Template -----------------------------------------------------------------------------------

Template Template::from_string(std::string_view content, const std::string& origin) {
  if (auto bad = find_invalid_utf8(content)) throw CorpusError("template " + origin + ": " + utf8_reason(content, *bad));
  Template t;
  static constexpr std::string_view kPlaceholder = "{document}";
  const auto pos = content.find(kPlaceholder);
  if (pos == std::string_view::npos) {
    t.prefix_ = std::string(content);
  } else {
    t.prefix_ = std::string(content.substr(0, pos));
    t.suffix_ = std::string(content.substr(pos + kPlaceholder.size()));
  }
  return t;
}

Template Template::from_file(const fs::path& path) {
  std::string content, err;
  if (!read_whole(path, content, err)) throw CorpusError("template " + path.string() + ": " + err);
  return from_string(content, path.string());
}

std::string Template::apply(std::string_view document) const {
  std::string out;
  out.reserve(prefix_.size() + document.size() + suffix_.size());
  out.append(prefix_).append(document).append(suffix_);
  return out;
}

// ---- Reader -------------------------------------------------------------------------------------

struct Reader::Impl {
  Options opt;
  Stats stats;
  fs::path root;
  bool is_dir = false;
  // Directory mode.
  std::vector<std::string> files;  // relative paths, sorted
  std::size_t next_file = 0;
  // JSONL mode.
  std::ifstream in;
  uint64_t line_no = 0;
  uint64_t entry_index = 0;  // next candidate index

  bool keep(uint64_t index) const { return index % opt.shard_count == opt.shard_index; }

  // Records an issue; throws for a malformed entry in strict mode.
  void issue(Issue::Kind kind, std::string location, std::string reason) {
    Issue is{kind, std::move(location), std::move(reason)};
    if (kind == Issue::Kind::Malformed) {
      ++stats.malformed;
      if (opt.strict) throw CorpusError(is.location + ": " + is.reason + " (strict mode)");
    } else {
      ++stats.empty;
    }
    if (opt.on_issue) opt.on_issue(is);
    if (stats.issues.size() < Stats::kMaxStoredIssues) stats.issues.push_back(std::move(is));
  }

  bool emit(Document& doc, std::string id, std::string_view text, std::string source, uint64_t index) {
    doc.id = std::move(id);
    doc.text = opt.tmpl ? opt.tmpl->apply(text) : std::string(text);
    doc.source = std::move(source);
    doc.index = index;
    doc.has_token_ids = false;
    doc.token_ids.clear();
    doc.prefix_tokens = 0;
    ++stats.documents;
    return true;
  }

  // An entry that gives token ids: no template (the ids are template + document already).
  bool emit_ids(Document& doc, std::string id, std::string text, std::vector<int32_t> ids, uint32_t prefix_tokens,
                std::string source, uint64_t index) {
    doc.id = std::move(id);
    doc.text = std::move(text);
    doc.source = std::move(source);
    doc.index = index;
    doc.has_token_ids = true;
    doc.token_ids = std::move(ids);
    doc.prefix_tokens = prefix_tokens;
    ++stats.documents;
    return true;
  }

  // "token_ids" of a JSONL entry: an array of integers in [0, 2^31). "" = fine, else the reason.
  static std::string parse_ids(const nlohmann::json& a, std::vector<int32_t>* out) {
    if (!a.is_array()) return std::string("\"token_ids\" is a ") + a.type_name() + ", not an array of integers";
    out->clear();
    out->reserve(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const auto& v = a[i];
      if (!v.is_number_integer() || (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(INT32_MAX)
                                                             : v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX))
        return "\"token_ids\"[" + std::to_string(i) + "] is " + (v.is_primitive() ? v.dump() : std::string("a ") + v.type_name()) +
               ", not a token id (an integer in [0, 2^31))";
      out->push_back(int32_t(v.get<int64_t>()));
    }
    return {};
  }

  bool next_dir(Document& doc) {
    while (next_file < files.size()) {
      const uint64_t index = next_file;
      const std::string& rel = files[next_file++];
      if (!keep(index)) continue;
      const fs::path p = root / rel;
      std::string text, err;
      if (!read_whole(p, text, err)) {
        issue(Issue::Kind::Malformed, p.string(), err);
        continue;
      }
      if (auto bad = find_invalid_utf8(text)) {
        issue(Issue::Kind::Malformed, p.string(), utf8_reason(text, *bad));
        continue;
      }
      if (text.empty()) {
        issue(Issue::Kind::Empty, p.string(), "empty document");
        continue;
      }
      return emit(doc, rel, text, p.string(), index);
    }
    return false;
  }

  bool next_jsonl(Document& doc) {
    std::string line;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;  // blank line
      const uint64_t index = entry_index++;
      if (!keep(index)) continue;
      const std::string loc = root.string() + ":" + std::to_string(line_no);
      if (auto bad = find_invalid_utf8(line)) {
        issue(Issue::Kind::Malformed, loc, utf8_reason(line, *bad));
        continue;
      }
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
        issue(Issue::Kind::Malformed, loc, std::string("bad JSON: ") + e.what());
        continue;
      }
      if (!j.is_object()) {
        issue(Issue::Kind::Malformed, loc, std::string("expected a JSON object, got ") + j.type_name());
        continue;
      }
      auto t = j.find("text");
      auto ti = j.find("token_ids");
      if (t == j.end() && ti == j.end()) {
        issue(Issue::Kind::Malformed, loc, "missing \"text\" (or \"token_ids\")");
        continue;
      }
      if (t != j.end() && !t->is_string()) {
        issue(Issue::Kind::Malformed, loc, std::string("\"text\" is a ") + t->type_name() + ", not a string");
        continue;
      }
      std::string id;
      auto idj = j.find("id");
      if (idj == j.end()) {
        id = std::to_string(line_no);
      } else if (idj->is_string()) {
        id = idj->get<std::string>();
      } else if (idj->is_number()) {
        id = idj->dump();
      } else {
        issue(Issue::Kind::Malformed, loc, std::string("\"id\" is a ") + idj->type_name() + ", not a string or number");
        continue;
      }
      if (ti != j.end()) {
        std::vector<int32_t> ids;
        if (std::string why = parse_ids(*ti, &ids); !why.empty()) {
          issue(Issue::Kind::Malformed, loc, why + " (id " + id + ")");
          continue;
        }
        uint64_t prefix = 0;
        if (auto pj = j.find("prefix_tokens"); pj != j.end()) {
          if (!pj->is_number_unsigned() || pj->get<uint64_t>() > ids.size()) {
            issue(Issue::Kind::Malformed, loc,
                  "\"prefix_tokens\" is " + pj->dump() + ", not an integer in [0, " + std::to_string(ids.size()) +
                      "] (the number of leading token_ids that are the template's prefix; id " + id + ")");
            continue;
          }
          prefix = pj->get<uint64_t>();
        }
        if (ids.empty()) {
          issue(Issue::Kind::Empty, loc, "empty \"token_ids\" (id " + id + ")");
          continue;
        }
        return emit_ids(doc, std::move(id), t == j.end() ? std::string() : t->get<std::string>(), std::move(ids),
                        uint32_t(prefix), loc, index);
      }
      const std::string& text = t->get_ref<const std::string&>();
      if (text.empty()) {
        issue(Issue::Kind::Empty, loc, "empty document (id " + id + ")");
        continue;
      }
      return emit(doc, std::move(id), text, loc, index);
    }
    if (in.bad()) throw CorpusError(root.string() + ": read error after line " + std::to_string(line_no));
    return false;
  }
};

Reader::Reader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;
Reader::~Reader() = default;

Reader Reader::open(const fs::path& path, Options options) {
  if (options.shard_count == 0 || options.shard_index >= options.shard_count)
    throw CorpusError("invalid shard " + std::to_string(options.shard_index) + " of " +
                      std::to_string(options.shard_count) + ": need shard_count >= 1 and shard_index < shard_count");
  auto impl = std::make_unique<Impl>();
  impl->opt = std::move(options);
  impl->root = path;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw CorpusError("corpus " + path.string() + " does not exist");
  if (fs::is_directory(st)) {
    impl->is_dir = true;
    fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec);
    if (ec) throw CorpusError("corpus directory " + path.string() + ": " + ec.message());
    const Options& o = impl->opt;
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) throw CorpusError("corpus directory " + path.string() + ": " + ec.message());
      std::error_code fe;
      if (!it->is_regular_file(fe)) continue;
      const std::string name = it->path().filename().string();
      const std::string rel = it->path().lexically_relative(path).generic_string();
      if (!o.suffix.empty() &&
          (name.size() < o.suffix.size() || name.compare(name.size() - o.suffix.size(), o.suffix.size(), o.suffix) != 0))
        continue;
      if (!o.glob.empty()) {
        const std::string& subject = o.glob.find('/') != std::string::npos ? rel : name;
        if (fnmatch(o.glob.c_str(), subject.c_str(), 0) != 0) continue;
      }
      impl->files.push_back(rel);
    }
    if (ec) throw CorpusError("corpus directory " + path.string() + ": " + ec.message());
    std::sort(impl->files.begin(), impl->files.end());
  } else {
    impl->in.open(path, std::ios::binary);
    if (!impl->in) throw CorpusError("cannot open corpus " + path.string() + ": " + std::strerror(errno));
  }
  return Reader(std::move(impl));
}

bool Reader::next(Document& doc) { return impl_->is_dir ? impl_->next_dir(doc) : impl_->next_jsonl(doc); }

const Stats& Reader::stats() const { return impl_->stats; }

}  // namespace ucm::corpus
