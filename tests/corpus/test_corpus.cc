// Tests of ucm::corpus: JSONL parsing and issue reporting, skip vs strict, directory ordering,
// sharding, templates, and the default Python 3.11 docs corpus.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "ucm/corpus/corpus.h"

namespace fs = std::filesystem;
using namespace ucm::corpus;

namespace {

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("ucm_corpus_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  fs::path write(const std::string& rel, const std::string& content) const {
    const fs::path p = path_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

std::vector<Document> read_all(Reader& r) {
  std::vector<Document> out;
  Document d;
  while (r.next(d)) out.push_back(d);
  return out;
}

// Every document of file f read with options o; *stats (when given): the reader's stats after.
std::vector<Document> read_file(const fs::path& f, const Options& o, Stats* stats = nullptr) {
  Reader r = Reader::open(f, o);
  std::vector<Document> docs = read_all(r);
  if (stats) *stats = r.stats();
  return docs;
}

const char* kJsonl =
    "{\"id\": \"a\", \"text\": \"alpha\"}\n"        // 1
    "\n"                                            // 2 blank: ignored
    "{\"id\": 7, \"text\": \"seven\"}\r\n"          // 3 numeric id, CRLF
    "{bad json\n"                                   // 4
    "{\"id\": \"m\"}\n"                             // 5 missing text
    "{\"id\": \"n\", \"text\": 5}\n"                // 6 text not a string
    "{\"id\": \"u\", \"text\": \"caf\xff\"}\n"      // 7 invalid UTF-8
    "{\"id\": \"e\", \"text\": \"\"}\n"             // 8 empty document
    "[1, 2]\n"                                      // 9 not an object
    "{\"id\": true, \"text\": \"x\"}\n"             // 10 bad id type
    "   \t \n"                                      // 11 blank
    "{\"text\": \"no id \\u00e9\"}";                // 12 no id, no final newline

TEST(CorpusJsonl, SkipsMalformedLinesWithLineNumbers) {
  TempDir t;
  const fs::path f = t.write("c.jsonl", kJsonl);
  std::vector<Issue> seen;
  Options o;
  o.on_issue = [&](const Issue& i) { seen.push_back(i); };
  Reader r = Reader::open(f, o);
  const auto docs = read_all(r);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].id, "a");
  EXPECT_EQ(docs[0].text, "alpha");
  EXPECT_EQ(docs[0].source, f.string() + ":1");
  EXPECT_EQ(docs[1].id, "7");
  EXPECT_EQ(docs[1].text, "seven");
  EXPECT_EQ(docs[2].id, "12");
  EXPECT_EQ(docs[2].text, "no id \xc3\xa9");
  EXPECT_EQ(docs[2].source, f.string() + ":12");
  EXPECT_EQ(docs[0].index, 0u);
  EXPECT_EQ(docs[1].index, 1u);
  EXPECT_EQ(docs[2].index, 9u);  // 10 non-blank lines, this is the 10th

  const Stats& s = r.stats();
  EXPECT_EQ(s.documents, 3u);
  EXPECT_EQ(s.malformed, 6u);
  EXPECT_EQ(s.empty, 1u);
  ASSERT_EQ(s.issues.size(), 7u);
  ASSERT_EQ(seen.size(), 7u);
  const std::vector<std::pair<int, std::string>> want = {
      {4, "bad JSON"}, {5, "missing \"text\""}, {6, "not a string"}, {7, "invalid UTF-8"},
      {8, "empty document"}, {9, "expected a JSON object"}, {10, "\"id\" is a boolean"}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(s.issues[i].location, f.string() + ":" + std::to_string(want[i].first));
    EXPECT_NE(s.issues[i].reason.find(want[i].second), std::string::npos) << s.issues[i].reason;
    EXPECT_EQ(s.issues[i].kind, want[i].first == 8 ? Issue::Kind::Empty : Issue::Kind::Malformed);
  }
  EXPECT_NE(s.issues[3].reason.find("byte offset 24"), std::string::npos) << s.issues[3].reason;
}

TEST(CorpusJsonl, StrictModeFailsAtFirstMalformedLine) {
  TempDir t;
  const fs::path f = t.write("c.jsonl", kJsonl);
  Options o;
  o.strict = true;
  Reader r = Reader::open(f, o);
  Document d;
  ASSERT_TRUE(r.next(d));
  ASSERT_TRUE(r.next(d));
  try {
    r.next(d);
    FAIL() << "strict mode accepted a malformed line";
  } catch (const CorpusError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(f.string() + ":4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bad JSON"), std::string::npos) << msg;
  }
}

TEST(CorpusJsonl, EmptyIsSkippedEvenWhenStrict) {
  TempDir t;
  const fs::path f = t.write("c.jsonl", "{\"id\":1,\"text\":\"\"}\n{\"id\":2,\"text\":\"b\"}\n");
  Options o;
  o.strict = true;
  Stats stats;
  const auto docs = read_file(f, o, &stats);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].id, "2");
  EXPECT_EQ(stats.empty, 1u);
}

// "token_ids" entries (a server's tokenizer): ids as given, no template, with prefix_tokens; every
// bad form skipped with its line and a reason naming the field.
TEST(CorpusJsonl, TokenIdsEntries) {
  TempDir t;
  const fs::path f = t.write("ids.jsonl",
                             "{\"id\": \"a\", \"token_ids\": [1, 2, 2147483647]}\n"                  // 1
                             "{\"id\": \"b\", \"text\": \"kept\", \"token_ids\": [5], \"prefix_tokens\": 1}\n"  // 2
                             "{\"id\": \"c\", \"token_ids\": []}\n"                                  // 3 empty
                             "{\"id\": \"d\", \"token_ids\": [1, 2.5]}\n"                            // 4
                             "{\"id\": \"e\", \"token_ids\": [-1]}\n"                                // 5
                             "{\"id\": \"f\", \"token_ids\": [2147483648]}\n"                        // 6
                             "{\"id\": \"g\", \"token_ids\": {\"x\": 1}}\n"                          // 7
                             "{\"id\": \"h\", \"token_ids\": [1], \"prefix_tokens\": 2}\n"           // 8
                             "{\"id\": \"i\", \"token_ids\": [\"1\"]}\n"                             // 9
                             "{\"id\": \"j\", \"text\": \"plain\"}\n");                              // 10
  Options o;
  o.tmpl = Template::from_string("PRE {document} POST");
  Reader r = Reader::open(f, o);
  const auto docs = read_all(r);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_TRUE(docs[0].has_token_ids);
  EXPECT_EQ(docs[0].token_ids, (std::vector<int32_t>{1, 2, 2147483647}));
  EXPECT_EQ(docs[0].text, "");  // no template on an ids entry
  EXPECT_EQ(docs[0].prefix_tokens, 0u);
  EXPECT_EQ(docs[1].text, "kept");
  EXPECT_EQ(docs[1].prefix_tokens, 1u);
  EXPECT_FALSE(docs[2].has_token_ids);
  EXPECT_TRUE(docs[2].token_ids.empty());
  EXPECT_EQ(docs[2].text, "PRE plain POST");
  const Stats& s = r.stats();
  EXPECT_EQ(s.empty, 1u);
  EXPECT_EQ(s.malformed, 6u);
  const std::vector<std::pair<int, std::string>> want = {
      {3, "empty \"token_ids\""}, {4, "\"token_ids\"[1] is 2.5"}, {5, "\"token_ids\"[0] is -1"},
      {6, "\"token_ids\"[0] is 2147483648"}, {7, "not an array"}, {8, "\"prefix_tokens\" is 2"},
      {9, "\"token_ids\"[0] is \"1\""}};
  ASSERT_EQ(s.issues.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(s.issues[i].location, f.string() + ":" + std::to_string(want[i].first));
    EXPECT_NE(s.issues[i].reason.find(want[i].second), std::string::npos) << s.issues[i].reason;
  }
}

// Found by fuzzing (tests/fuzz/corpus/corpus/repro-number-overflow-*): a number too large for a
// double makes nlohmann::json throw out_of_range, not parse_error; it escaped the reader.
TEST(CorpusJsonl, NumberOverflowIsMalformedNotACrash) {
  TempDir t;
  const fs::path f = t.write("c.jsonl", "{\"id\":1,\"text\":\"a\",\"x\":1e999}\n{\"id\":2,\"text\":\"b\"}\n");
  Reader r = Reader::open(f);
  const auto docs = read_all(r);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].id, "2");
  ASSERT_EQ(r.stats().malformed, 1u);
  EXPECT_EQ(r.stats().issues[0].location, f.string() + ":1");
  EXPECT_NE(r.stats().issues[0].reason.find("bad JSON"), std::string::npos) << r.stats().issues[0].reason;
  EXPECT_NE(r.stats().issues[0].reason.find("number overflow"), std::string::npos) << r.stats().issues[0].reason;

  Options o;
  o.strict = true;
  Reader rs = Reader::open(f, o);
  Document d;
  try {
    rs.next(d);
    FAIL() << "strict mode accepted a number overflow";
  } catch (const CorpusError& e) {
    EXPECT_NE(std::string(e.what()).find(f.string() + ":1"), std::string::npos) << e.what();
  }
}

TEST(CorpusJsonl, ShardsPartitionTheDocuments) {
  TempDir t;
  std::string content;
  for (int i = 0; i < 20; ++i) content += "{\"id\": " + std::to_string(i) + ", \"text\": \"doc " + std::to_string(i) + "\"}\n\n";
  const fs::path f = t.write("c.jsonl", content);
  std::set<std::string> all;
  for (uint64_t s = 0; s < 3; ++s) {
    Options o;
    o.shard_index = s;
    o.shard_count = 3;
    Reader r = Reader::open(f, o);
    for (const auto& d : read_all(r)) {
      EXPECT_EQ(d.index % 3, s);
      EXPECT_EQ(d.id, std::to_string(d.index));
      EXPECT_TRUE(all.insert(d.id).second) << "document " << d.id << " in two shards";
    }
  }
  EXPECT_EQ(all.size(), 20u);
  Options bad;
  bad.shard_index = 3;
  bad.shard_count = 3;
  EXPECT_THROW(Reader::open(f, bad), CorpusError);
  bad.shard_count = 0;
  bad.shard_index = 0;
  EXPECT_THROW(Reader::open(f, bad), CorpusError);
}

TEST(CorpusDir, SortedRelativeIdsSuffixGlobAndIssues) {
  TempDir t;
  t.write("b.txt", "plain");
  t.write("a/z.rst.txt", "zeta");
  t.write("a/b.rst.txt", "beta");
  t.write("A.rst.txt", "upper");
  t.write("empty.rst.txt", "");
  t.write("bad.rst.txt", "ok\xc3(");
  t.write("sub/deep/x.md", "# md");

  Options o;
  o.suffix = ".rst.txt";
  Reader r = Reader::open(t.path(), o);
  const auto docs = read_all(r);
  std::vector<std::string> ids;
  for (const auto& d : docs) ids.push_back(d.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"A.rst.txt", "a/b.rst.txt", "a/z.rst.txt"}));
  EXPECT_EQ(docs[1].text, "beta");
  EXPECT_EQ(docs[1].source, (t.path() / "a/b.rst.txt").string());
  EXPECT_EQ(docs[2].index, 2u);
  EXPECT_EQ(r.stats().malformed, 1u);
  EXPECT_EQ(r.stats().empty, 1u);
  ASSERT_EQ(r.stats().issues.size(), 2u);
  EXPECT_EQ(r.stats().issues[0].location, (t.path() / "bad.rst.txt").string());
  EXPECT_NE(r.stats().issues[0].reason.find("byte offset 2"), std::string::npos) << r.stats().issues[0].reason;

  Options strict = o;
  strict.strict = true;
  Reader rs = Reader::open(t.path(), strict);
  EXPECT_THROW(read_all(rs), CorpusError);

  Reader all = Reader::open(t.path());  // default: all regular files
  std::vector<std::string> all_ids;
  for (const auto& d : read_all(all)) all_ids.push_back(d.id);
  EXPECT_EQ(all_ids, (std::vector<std::string>{"A.rst.txt", "a/b.rst.txt", "a/z.rst.txt", "b.txt", "sub/deep/x.md"}));

  Options g;
  g.glob = "*.md";
  Reader rg = Reader::open(t.path(), g);
  const auto md = read_all(rg);
  ASSERT_EQ(md.size(), 1u);
  EXPECT_EQ(md[0].id, "sub/deep/x.md");
  g.glob = "a/*";
  Reader ra = Reader::open(t.path(), g);
  EXPECT_EQ(read_all(ra).size(), 2u);

  Options sh;
  sh.suffix = ".rst.txt";
  sh.shard_index = 1;
  sh.shard_count = 2;
  Reader r1 = Reader::open(t.path(), sh);
  std::vector<std::string> s1;
  for (const auto& d : read_all(r1)) s1.push_back(d.id);
  // Order: A(0) a/b(1) a/z(2) bad(3) empty(4): shard 1 gets a/b; bad (3) is reported, not returned.
  EXPECT_EQ(s1, (std::vector<std::string>{"a/b.rst.txt"}));
  EXPECT_EQ(r1.stats().malformed, 1u);
  EXPECT_EQ(r1.stats().empty, 0u);

  EXPECT_THROW(Reader::open(t.path() / "missing"), CorpusError);
}

TEST(CorpusTemplate, PlaceholderAndPrefixOnly) {
  TempDir t;
  const auto split = Template::from_file(t.write("t1.txt", "<|im_start|>user\n{document}<|im_end|>\n"));
  EXPECT_EQ(split.prefix(), "<|im_start|>user\n");
  EXPECT_EQ(split.suffix(), "<|im_end|>\n");
  EXPECT_EQ(split.apply("hi"), "<|im_start|>user\nhi<|im_end|>\n");
  const auto prefix = Template::from_file(t.write("t2.txt", "System: be brief.\n"));
  EXPECT_EQ(prefix.suffix(), "");
  EXPECT_EQ(prefix.apply("doc"), "System: be brief.\ndoc");
  EXPECT_THROW(Template::from_file(t.path() / "none.txt"), CorpusError);
  EXPECT_THROW(Template::from_string("bad \xff"), CorpusError);

  const fs::path f = t.write("c.jsonl", "{\"id\":\"x\",\"text\":\"body\"}\n");
  Options o;
  o.tmpl = split;
  const auto docs = read_file(f, o);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].text, "<|im_start|>user\nbody<|im_end|>\n");
}

TEST(CorpusDefault, PythonDocs) {
  const char* env = std::getenv("UCM_CORPUS_DIR");
  const fs::path dir = env && *env ? fs::path(env) : fs::path("/usr/share/doc/python3.11/html/_sources");
  ASSERT_TRUE(fs::is_directory(dir)) << "corpus " << dir << " not found: apt-get install python3.11-doc (or set UCM_CORPUS_DIR)";
  Options o;
  o.suffix = ".rst.txt";
  Reader r = Reader::open(dir, o);
  std::vector<std::string> ids;
  std::size_t bytes = 0;
  Document d;
  while (r.next(d)) {
    ids.push_back(d.id);
    bytes += d.text.size();
  }
  EXPECT_EQ(ids.size(), 497u);
  EXPECT_EQ(r.stats().malformed + r.stats().empty, 0u);
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_GT(bytes, 10'000'000u);
  EXPECT_NE(std::find(ids.begin(), ids.end(), "library/os.rst.txt"), ids.end());
}

}  // namespace
