// The corpus reader through libucm's C ABI (ucm/corpus.h), linking libucm.so only: the entries'
// JSON, ids, order, suffix, limit, shards, skip reports (callback and counts), strict mode, the
// template split, and every documented return code. The rules themselves: test_corpus.cc.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ucm/corpus.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class CorpusCapi : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ucm_corpus_capi_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const std::string& rel, const std::string& content) const {
    const fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  fs::path dir_;
};

struct Issues {
  std::vector<std::pair<int32_t, std::string>> seen;  // kind, "location: reason"
  static void cb(int32_t kind, const char* location, const char* reason, void* self) {
    static_cast<Issues*>(self)->seen.emplace_back(kind, std::string(location) + ": " + reason);
  }
};

// Every entry of the corpus at path, as raw JSON texts; *rc the first non-OK code (or UCM_OK).
std::vector<std::string> read_all(const fs::path& path, const ucm_corpus_open_params* p, int* rc = nullptr,
                                  ucm_corpus_t** keep = nullptr) {
  std::vector<std::string> out;
  ucm_corpus_t* c = nullptr;
  int r = ucm_corpus_open(path.c_str(), p, &c);
  EXPECT_EQ(r, UCM_OK) << ucm_last_error();
  const char* e = nullptr;
  size_t len = 0;
  while (r == UCM_OK && (r = ucm_corpus_next(c, &e, &len)) == UCM_OK && e) {
    EXPECT_EQ(std::strlen(e), len);
    out.emplace_back(e, len);
  }
  if (rc) *rc = r;
  if (keep) *keep = c;
  else ucm_corpus_close(c);
  return out;
}

TEST_F(CorpusCapi, JsonlEntriesIdsTokenIdsAndSkips) {
  const fs::path f = write("c.jsonl",
                           "{\"id\": \"a\", \"text\": \"alpha \\u00e9\"}\n"                  // 1
                           "\n"                                                             // 2 blank
                           "{\"id\": 7, \"text\": \"seven\"}\r\n"                           // 3 numeric id
                           "{\"id\": 1.5, \"text\": \"x\", \"other\": 1}\n"                 // 4 float id
                           "{bad json\n"                                                    // 5 malformed
                           "{\"text\": \"\"}\n"                                             // 6 empty
                           "{\"id\": \"t\", \"token_ids\": [5, 6, 7], \"prefix_tokens\": 2}\n"  // 7
                           "{\"id\": \"z\", \"token_ids\": [9], \"prefix_tokens\": 0, \"text\": \"kept?\"}\n"  // 8
                           "{\"id\": \"u\", \"text\": \"caf\xff\"}\n"                       // 9 invalid UTF-8
                           "{\"text\": \"no id\"}");                                        // 10
  Issues is;
  ucm_corpus_open_params p = ucm_corpus_default_open_params();
  p.on_issue = &Issues::cb;
  p.on_issue_data = &is;
  ucm_corpus_t* c = nullptr;
  const auto got = read_all(f, &p, nullptr, &c);
  const std::string src = f.string() + ":";
  const std::vector<json> want = {
      {{"id", "a"}, {"source", src + "1"}, {"text", "alpha \xc3\xa9"}},
      {{"id", "7"}, {"source", src + "3"}, {"text", "seven"}},
      {{"id", "1.5"}, {"source", src + "4"}, {"text", "x"}},
      {{"id", "t"}, {"source", src + "7"}, {"token_ids", {5, 6, 7}}, {"prefix_tokens", 2}},
      {{"id", "z"}, {"source", src + "8"}, {"token_ids", {9}}},  // prefix_tokens 0 is left out, text too
      {{"id", "10"}, {"source", src + "10"}, {"text", "no id"}}};
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(json::parse(got[i]), want[i]) << got[i];
  // The documented key order.
  EXPECT_EQ(got[0].rfind("{\"id\":\"a\",\"source\":", 0), 0u) << got[0];
  EXPECT_LT(got[3].find("\"token_ids\""), got[3].find("\"prefix_tokens\"")) << got[3];
  ASSERT_EQ(is.seen.size(), 3u);
  EXPECT_EQ(is.seen[0].first, UCM_CORPUS_MALFORMED);
  EXPECT_EQ(is.seen[0].second.rfind(src + "5: bad JSON", 0), 0u) << is.seen[0].second;
  EXPECT_EQ(is.seen[1].first, UCM_CORPUS_EMPTY);
  EXPECT_EQ(is.seen[1].second.rfind(src + "6: empty document", 0), 0u) << is.seen[1].second;
  EXPECT_EQ(is.seen[2].first, UCM_CORPUS_MALFORMED);
  EXPECT_NE(is.seen[2].second.find("invalid UTF-8"), std::string::npos) << is.seen[2].second;
  uint64_t docs = 0, malformed = 0, empty = 0;
  ASSERT_EQ(ucm_corpus_stats(c, &docs, &malformed, &empty), UCM_OK);
  EXPECT_EQ(docs, 6u);
  EXPECT_EQ(malformed, 2u);
  EXPECT_EQ(empty, 1u);
  EXPECT_EQ(ucm_corpus_stats(c, nullptr, nullptr, nullptr), UCM_OK);
  // After the end: the end again.
  const char* e = "x";
  size_t len = 9;
  EXPECT_EQ(ucm_corpus_next(c, &e, &len), UCM_OK);
  EXPECT_EQ(e, nullptr);
  EXPECT_EQ(len, 0u);
  ucm_corpus_close(c);
}

TEST_F(CorpusCapi, DirectoryBytewiseOrderSuffixAndLimit) {
  write("b.txt", "bee");
  write("a/z.txt", "a-zed");
  write("B.txt", "capital");
  write("a-b.txt", "dash");
  write("\xc3\xa9.txt", "e acute");
  write("skip.md", "not .txt");
  write("empty.txt", "");
  ucm_corpus_open_params p = ucm_corpus_default_open_params();
  p.suffix = ".txt";
  std::vector<std::string> ids, texts;
  for (const auto& s : read_all(dir_, &p)) {
    const json j = json::parse(s);
    ids.push_back(j["id"]);
    texts.push_back(j["text"]);
    EXPECT_EQ(j["source"], (dir_ / ids.back()).string());
  }
  // Bytewise: 'B' (0x42) < 'a' (0x61); "a-b.txt" < "a/z.txt" ('-' 0x2d < '/' 0x2f); 0xc3 last.
  EXPECT_EQ(ids, (std::vector<std::string>{"B.txt", "a-b.txt", "a/z.txt", "b.txt", "\xc3\xa9.txt"}));
  EXPECT_EQ(texts[2], "a-zed");
  p.limit = 2;
  EXPECT_EQ(read_all(dir_, &p).size(), 2u);
  p.limit = 0;
  p.shard_index = 1;
  p.shard_count = 2;
  std::vector<std::string> shard;
  for (const auto& s : read_all(dir_, &p)) shard.push_back(json::parse(s)["id"]);
  // Sorted .txt files: B.txt 0, a-b.txt 1, a/z.txt 2, b.txt 3, empty.txt 4, é.txt 5.
  EXPECT_EQ(shard, (std::vector<std::string>{"a-b.txt", "b.txt", "\xc3\xa9.txt"}));
  // No params: every file, the defaults.
  EXPECT_EQ(read_all(dir_, nullptr).size(), 6u);  // 7 files, empty.txt skipped
}

TEST_F(CorpusCapi, StrictFailsOnAMalformedEntryThenGoesOn) {
  const fs::path f = write("c.jsonl", "{\"text\": \"one\"}\n{oops\n{\"text\": \"\"}\n{\"text\": \"two\"}\n");
  ucm_corpus_open_params p = ucm_corpus_default_open_params();
  p.strict = 1;
  ucm_corpus_t* c = nullptr;
  ASSERT_EQ(ucm_corpus_open(f.c_str(), &p, &c), UCM_OK);
  const char* e = nullptr;
  ASSERT_EQ(ucm_corpus_next(c, &e, nullptr), UCM_OK);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(ucm_corpus_next(c, &e, nullptr), UCM_E_INVALID);
  EXPECT_EQ(e, nullptr);
  EXPECT_NE(std::string(ucm_last_error()).find(f.string() + ":2"), std::string::npos) << ucm_last_error();
  ASSERT_EQ(ucm_corpus_next(c, &e, nullptr), UCM_OK);  // the empty entry is skipped, strict or not
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(json::parse(e)["text"], "two");
  ucm_corpus_close(c);
}

TEST_F(CorpusCapi, ReturnCodes) {
  ucm_corpus_t* c = reinterpret_cast<ucm_corpus_t*>(1);
  EXPECT_EQ(ucm_corpus_open((dir_ / "missing.jsonl").c_str(), nullptr, &c), UCM_E_NOT_FOUND);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(ucm_last_error()).find("does not exist"), std::string::npos);
  EXPECT_EQ(ucm_corpus_open(nullptr, nullptr, &c), UCM_E_INVALID);
  EXPECT_EQ(ucm_corpus_open(dir_.c_str(), nullptr, nullptr), UCM_E_INVALID);
  ucm_corpus_open_params p = ucm_corpus_default_open_params();
  p.shard_index = 2;
  p.shard_count = 2;
  EXPECT_EQ(ucm_corpus_open(dir_.c_str(), &p, &c), UCM_E_INVALID);
  p.shard_index = 0;
  p.shard_count = 0;
  EXPECT_EQ(ucm_corpus_open(dir_.c_str(), &p, &c), UCM_E_INVALID);
  p = ucm_corpus_default_open_params();
  p.struct_size = 4;  // below the minimum
  EXPECT_EQ(ucm_corpus_open(dir_.c_str(), &p, &c), UCM_E_INVALID);
  EXPECT_NE(std::string(ucm_last_error()).find("struct_size"), std::string::npos);
  // A path that exists but cannot be opened as a file (root opens any file): a socket, ENXIO.
  const fs::path sock = dir_ / "s.sock";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  EXPECT_EQ(ucm_corpus_open(sock.c_str(), nullptr, &c), UCM_E_IO) << ucm_last_error();
  ::close(fd);
  const fs::path f = write("c.jsonl", "{\"text\": \"x\"}\n");
  ASSERT_EQ(ucm_corpus_open(f.c_str(), nullptr, &c), UCM_OK);
  const char* e = nullptr;
  EXPECT_EQ(ucm_corpus_next(nullptr, &e, nullptr), UCM_E_INVALID);
  EXPECT_EQ(ucm_corpus_next(c, nullptr, nullptr), UCM_E_INVALID);
  EXPECT_EQ(ucm_corpus_stats(nullptr, nullptr, nullptr, nullptr), UCM_E_INVALID);
  ucm_corpus_close(c);
  ucm_corpus_close(nullptr);
  ucm_corpus_open_params d = ucm_corpus_default_open_params();
  EXPECT_EQ(d.struct_size, sizeof d);
  EXPECT_EQ(d.shard_count, 1u);
  EXPECT_EQ(d.strict, 0);
  EXPECT_EQ(d.limit, 0u);
  EXPECT_EQ(d.on_issue, nullptr);
}

TEST_F(CorpusCapi, TemplateSplitAsPrecompute) {
  auto split = [](const fs::path& f, int* rc) {
    size_t need = 0;
    *rc = ucm_corpus_template(f.c_str(), nullptr, 0, &need);
    if (*rc != UCM_OK) return json();
    std::string buf(need + 1, '\0');
    size_t len = 0;
    EXPECT_EQ(ucm_corpus_template(f.c_str(), buf.data(), need, &len), UCM_E_INVALID);  // no room for the NUL
    *rc = ucm_corpus_template(f.c_str(), buf.data(), buf.size(), &len);
    EXPECT_EQ(len, need);
    return json::parse(buf.substr(0, len));
  };
  int rc = 0;
  EXPECT_EQ(split(write("t1.txt", "<s>sys\n{document}\n</s>{document}\n"), &rc),
            (json{{"prefix", "<s>sys\n"}, {"suffix", "\n</s>{document}\n"}}));
  EXPECT_EQ(rc, UCM_OK);
  EXPECT_EQ(split(write("t2.txt", "all prefix\n"), &rc), (json{{"prefix", "all prefix\n"}, {"suffix", ""}}));
  EXPECT_EQ(split(write("t3.txt", ""), &rc), (json{{"prefix", ""}, {"suffix", ""}}));
  EXPECT_EQ(rc, UCM_OK);
  split(write("t4.txt", "bad \xff"), &rc);
  EXPECT_EQ(rc, UCM_E_INVALID);
  EXPECT_NE(std::string(ucm_last_error()).find("invalid UTF-8"), std::string::npos) << ucm_last_error();
  split(dir_ / "none.txt", &rc);
  EXPECT_EQ(rc, UCM_E_NOT_FOUND);
  EXPECT_EQ(ucm_corpus_template(nullptr, nullptr, 0, nullptr), UCM_E_INVALID);
}

}  // namespace
