// Skipped corpus entries must not cost the documents around them (issue: "a skipped corpus entry
// loses the documents after it"), and the registry must stay true after gc:
//   * DocSource (the corpus adapter of precompute): every kind of bad entry (malformed JSON line,
//     invalid UTF-8, empty text) at the start, in the middle (twice in a row) and at the end, in a
//     JSONL file and in a directory corpus: every good document comes out, in order, and every
//     skipped entry is reported with its line or file and its reason. No model needed.
//   * run_precompute on the real model over the same corpora: every valid document is stored and
//     registered; the summary lists each skipped entry; --resume finds them all.
//   * the `ucm precompute --json` stdout is exactly one JSON object, with warnings on stderr; with
//     --strict the failure is that object plus "error".
//   * --resume recomputes a registered document whose last block is gone; gc unregisters a
//     document that loses blocks (the repro: truncate a data file, gc, resume).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.h"
#include "doc_source.h"
#include "ucm/format/format.h"
#include "ucm/core/index.h"
#include "ucm/model/llama_model.h"
#include "ucm/admin.h"
#include "ucm/hash.h"
#include "ucm/precompute/precompute.h"
#include "ucm/store.h"
#include "ucm/tok/tokenizer.h"
#include "real_data.h"

namespace fs = std::filesystem;
using namespace ucm;
using namespace ucm::precompute;
using nlohmann::json;

using ucm::test::model_dir;

namespace {


fs::path fresh_dir(const std::string& name) {
  static int n = 0;
  fs::path p = fs::temp_directory_path() /
               ("ucm-test-skips-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + "-" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// A good document: about 70 tokens, so a few full blocks of 16.
std::string good_text(int i) {
  std::string s;
  for (int k = 0; k < 6; ++k)
    s += "Paragraph " + std::to_string(k) + " of document " + std::to_string(i) + " explains the module. ";
  return s;
}

// The kinds of bad entry: malformed JSON (a directory corpus has no JSON: its third kind is a
// file of white space only, which precompute skips as empty), invalid UTF-8, empty text.
enum class Bad { kMalformed, kInvalidUtf8, kEmpty };
const char* bad_name(Bad b) {
  return b == Bad::kMalformed ? "malformed" : b == Bad::kInvalidUtf8 ? "invalid_utf8" : "empty";
}

// The corpus layout: bad, g0, g1, bad, bad, g2, g3, bad (start, middle twice in a row, end).
const std::vector<int> kLayout = {-1, 0, 1, -1, -1, 2, 3, -1};

struct Corpus {
  fs::path path;
  std::vector<std::string> good_ids;        // in corpus order
  std::vector<std::string> bad_locations;   // in corpus order
};

Corpus make_jsonl(const fs::path& dir, Bad b) {
  Corpus c;
  c.path = dir / "corpus.jsonl";
  std::string s;
  int line = 0, nbad = 0;
  for (int g : kLayout) {
    ++line;
    if (g >= 0) {
      const std::string id = "g" + std::to_string(g);
      s += json({{"id", id}, {"text", good_text(g)}}).dump() + "\n";
      c.good_ids.push_back(id);
      continue;
    }
    const std::string id = "bad" + std::to_string(nbad++);
    if (b == Bad::kMalformed) s += "{\"id\": \"" + id + "\", \"text\": \n";
    if (b == Bad::kInvalidUtf8) s += "{\"id\": \"" + id + "\", \"text\": \"caf\xff\xfe\"}\n";
    if (b == Bad::kEmpty) s += "{\"id\": \"" + id + "\", \"text\": \"\"}\n";
    c.bad_locations.push_back(c.path.string() + ":" + std::to_string(line));
  }
  write(c.path, s);
  return c;
}

Corpus make_dir(const fs::path& dir, Bad b) {
  Corpus c;
  c.path = dir / "docs";
  fs::create_directories(c.path);
  int i = 0;
  for (int g : kLayout) {
    char name[32];
    std::snprintf(name, sizeof name, "%02d-%s.txt", i++, g >= 0 ? ("g" + std::to_string(g)).c_str() : "bad");
    const fs::path p = c.path / name;
    if (g >= 0) {
      write(p, good_text(g));
      c.good_ids.push_back(name);
      continue;
    }
    write(p, b == Bad::kMalformed ? std::string(" \n\t \n") : b == Bad::kInvalidUtf8 ? std::string("caf\xff\xfe") : "");
    c.bad_locations.push_back(p.string());
  }
  return c;
}

struct Pulled {
  std::vector<std::string> docs;  // ids
  std::vector<SkippedEntry> skipped;
  std::vector<std::string> order;  // "doc:<id>" / "skip:<location>"
};

Pulled pull_all(const fs::path& corpus) {
  Pulled p;
  DocSourceOptions o;
  o.path = corpus.string();
  std::unique_ptr<DocSource> src;
  Status st = open_doc_source(o, &src);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!src) return p;
  for (int guard = 0; guard < 1000; ++guard) {
    SourceDoc d;
    SkippedEntry sk;
    auto r = src->next(&d, &sk, &st);
    if (r == DocSource::Result::kEnd) {
      EXPECT_TRUE(st.ok()) << st.ToString();
      break;
    }
    if (r == DocSource::Result::kSkipped) {
      p.order.push_back("skip:" + sk.location);
      p.skipped.push_back(sk);
      continue;
    }
    EXPECT_FALSE(d.id.empty()) << "a document with a blank id";
    EXPECT_FALSE(d.text.empty()) << d.id;
    p.order.push_back("doc:" + d.id);
    p.docs.push_back(d.id);
  }
  return p;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// DocSource, no model.

TEST(DocSourceSkips, IssueReproJsonlBrokenLineAfterTheSecond) {
  const fs::path d = fresh_dir("repro");
  std::string s;
  for (int i = 0; i < 6; ++i) {
    s += json({{"id", "d" + std::to_string(i)}, {"text", good_text(i)}}).dump() + "\n";
    if (i == 1) s += "{\"id\": \"broken\", \"text\": \n";
  }
  write(d / "c.jsonl", s);
  Pulled p = pull_all(d / "c.jsonl");
  EXPECT_EQ(p.docs, (std::vector<std::string>{"d0", "d1", "d2", "d3", "d4", "d5"}));
  ASSERT_EQ(p.skipped.size(), 1u);
  EXPECT_EQ(p.skipped[0].kind, "malformed");
  EXPECT_EQ(p.skipped[0].location, (d / "c.jsonl").string() + ":3");
  EXPECT_NE(p.skipped[0].reason.find("bad JSON"), std::string::npos) << p.skipped[0].reason;
  fs::remove_all(d);
}

TEST(DocSourceSkips, EmptyTextFirstKeepsTheRest) {
  const fs::path d = fresh_dir("emptyfirst");
  std::string s = "{\"id\":\"e\",\"text\":\"\"}\n";
  for (int i = 0; i < 3; ++i) s += json({{"id", "d" + std::to_string(i)}, {"text", good_text(i)}}).dump() + "\n";
  write(d / "c.jsonl", s);
  Pulled p = pull_all(d / "c.jsonl");
  EXPECT_EQ(p.docs, (std::vector<std::string>{"d0", "d1", "d2"}));
  ASSERT_EQ(p.skipped.size(), 1u);
  EXPECT_EQ(p.skipped[0].kind, "empty");
  fs::remove_all(d);
}

class DocSourceEveryPosition : public ::testing::TestWithParam<std::tuple<Bad, bool>> {};

TEST_P(DocSourceEveryPosition, EveryGoodDocumentInOrderEverySkipReported) {
  const auto [bad, is_dir] = GetParam();
  const fs::path d = fresh_dir(bad_name(bad));
  const Corpus c = is_dir ? make_dir(d, bad) : make_jsonl(d, bad);
  Pulled p = pull_all(c.path);
  // A directory's white-space-only file is a document here; precompute skips it as empty.
  const bool ws_docs = is_dir && bad == Bad::kMalformed;
  std::vector<std::string> want_order;
  size_t gi = 0, bi = 0;
  for (int g : kLayout) {
    if (g >= 0) want_order.push_back("doc:" + c.good_ids[gi++]);
    else if (ws_docs) want_order.push_back("doc:" + fs::path(c.bad_locations[bi++]).filename().string());
    else want_order.push_back("skip:" + c.bad_locations[bi++]);
  }
  EXPECT_EQ(p.order, want_order);
  ASSERT_EQ(p.skipped.size(), ws_docs ? 0 : c.bad_locations.size());
  for (const auto& sk : p.skipped) {
    EXPECT_EQ(sk.kind, bad == Bad::kEmpty ? "empty" : "malformed");
    EXPECT_FALSE(sk.reason.empty());
    if (bad == Bad::kInvalidUtf8) {
      EXPECT_NE(sk.reason.find("invalid UTF-8"), std::string::npos) << sk.reason;
    }
  }
  fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(KindsAndContainers, DocSourceEveryPosition,
                         ::testing::Combine(::testing::Values(Bad::kMalformed, Bad::kInvalidUtf8, Bad::kEmpty),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(bad_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_dir" : "_jsonl");
                         });

// ---------------------------------------------------------------------------------------------
// The real model.

class PrecomputeSkips : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = model_dir();
    if (!fs::exists(fs::path(dir) / "config.json")) {
      missing_ = "model directory " + dir + " missing: run scripts/fetch_model.py";
      return;
    }
    model_ = model::LlamaModel::load(dir).release();
    tok_ = new tok::Tokenizer(tok::Tokenizer::from_file((fs::path(dir) / "tokenizer.json").string()));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tok_;
    model_ = nullptr;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (!missing_.empty()) GTEST_FAIL() << missing_;
  }
  static PrecomputeOptions options(const fs::path& corpus, const fs::path& store) {
    PrecomputeOptions o;
    o.model_dir = model_dir();
    o.corpus = corpus.string();
    o.store = store.string();
    o.batch_tokens = 256;
    o.handle_signals = false;
    return o;
  }
  static std::map<std::string, DocumentEntry> registered(const fs::path& store) {
    OpenOptions oo;
    oo.refresh_interval_ms = 0;
    std::unique_ptr<Store> s;
    std::map<std::string, DocumentEntry> out;
    EXPECT_TRUE(Store::Open(store.string(), oo, &s).ok());
    if (!s) return out;
    for (const auto& n : s->namespaces())
      for (auto& d : s->documents(n.id())) out[d.id] = d;
    return out;
  }
  static std::string ucm() { return UCM_BIN; }
  // A JSONL corpus with bad entries `b` (make_jsonl) in fresh_dir(tag), precomputed into
  // <dir>/store.
  struct Precomputed {
    fs::path d;
    Corpus c;
    fs::path store;
  };
  static void precompute_jsonl(const std::string& tag, Bad b, Precomputed* out) {
    out->d = fresh_dir(tag);
    out->c = make_jsonl(out->d, b);
    out->store = out->d / "store";
    PrecomputeSummary sum;
    ASSERT_TRUE(run_precompute(options(out->c.path, out->store), Resources{model_, tok_}, &sum).ok());
  }
  // `ucm precompute --resume` of corpus into store: its summary.
  static Status resume(const fs::path& corpus, const fs::path& store, PrecomputeSummary* again) {
    PrecomputeOptions o = options(corpus, store);
    o.resume = true;
    return run_precompute(o, Resources{model_, tok_}, again);
  }
  // Full blocks of good document `id` ("g<i>" or a directory file name "NN-g<i>.txt").
  static uint32_t blocks_of(const std::string& id) {
    const auto g = id.rfind('g');
    const int i = std::atoi(id.c_str() + g + 1);
    return uint32_t(tok_->encode(good_text(i)).size() / 16);
  }

  static inline model::LlamaModel* model_ = nullptr;
  static inline tok::Tokenizer* tok_ = nullptr;
  static inline std::string missing_;
};

TEST_F(PrecomputeSkips, EveryValidDocumentIsStoredAndEachSkipListed) {
  for (bool is_dir : {false, true}) {
    for (Bad bad : {Bad::kMalformed, Bad::kInvalidUtf8, Bad::kEmpty}) {
      const std::string what = std::string(bad_name(bad)) + (is_dir ? " in a directory" : " in a JSONL file");
      const fs::path d = fresh_dir("run");
      const Corpus c = is_dir ? make_dir(d, bad) : make_jsonl(d, bad);
      PrecomputeSummary sum;
      Status st = run_precompute(options(c.path, d / "store"), Resources{model_, tok_}, &sum);
      ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
      EXPECT_EQ(sum.documents, 4u) << what;
      auto reg = registered(d / "store");
      std::vector<std::string> ids;
      for (const auto& [id, e] : reg) ids.push_back(id);
      EXPECT_EQ(ids, c.good_ids) << what;
      for (const auto& [id, e] : reg) EXPECT_EQ(e.blocks, blocks_of(id)) << what << " " << id;
      // Every skipped entry listed, with its place and reason, in corpus order.
      ASSERT_EQ(sum.skipped_entries.size(), c.bad_locations.size()) << what;
      for (size_t i = 0; i < c.bad_locations.size(); ++i) {
        EXPECT_EQ(sum.skipped_entries[i].location, c.bad_locations[i]) << what;
        EXPECT_FALSE(sum.skipped_entries[i].reason.empty()) << what;
      }
      uint64_t skipped = 0;
      for (const auto& [k, v] : sum.skipped) skipped += v;
      EXPECT_EQ(skipped, c.bad_locations.size()) << what;
      // --resume finds every document.
      PrecomputeSummary again;
      ASSERT_TRUE(resume(c.path, d / "store", &again).ok()) << what;
      EXPECT_EQ(again.documents, 0u) << what;
      EXPECT_EQ(again.skipped["resumed"], 4u) << what;
      EXPECT_EQ(again.blocks_written, 0u) << what;
      fs::remove_all(d);
    }
  }
}

TEST_F(PrecomputeSkips, JsonStdoutIsOneObjectWhateverTheCorpus) {
  const fs::path d = fresh_dir("json");
  const Corpus c = make_jsonl(d, Bad::kMalformed);
  const std::string base = ucm() + " precompute --model " + test::shell_quote(model_dir()) + " --corpus " +
                           test::shell_quote(c.path.string()) + " --batch-tokens 256 --json";
  test::CliRun r = test::run_shell(base + " --store " + test::shell_quote((d / "s1").string()));
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);  // throws (fails the test) unless stdout is exactly one JSON value
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["documents"], 4);
  EXPECT_EQ(j["skipped_entries"].size(), 4u);
  EXPECT_EQ(j["skipped_entries"][0]["location"], c.bad_locations[0]);
  EXPECT_FALSE(j.contains("error"));
  EXPECT_NE(r.err.find(c.bad_locations[0]), std::string::npos) << "the warnings go to stderr: " << r.err;

  // --strict: exit 1, the summary of what was done and the error, as one object.
  r = test::run_shell(base + " --strict --store " + test::shell_quote((d / "s2").string()));
  EXPECT_EQ(r.code, 1) << r.err;
  j = json::parse(r.out);
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j.contains("error")) << r.out;
  EXPECT_EQ(j["error"]["exit_code"], 1);
  EXPECT_EQ(j["error"]["code"], "INVALID_ARGUMENT");
  EXPECT_NE(j["error"]["message"].get<std::string>().find(c.bad_locations[0]), std::string::npos) << r.out;

  // A corpus that is not text at all: many warnings, still one JSON object on stdout.
  std::string bin;
  for (int i = 0; i < 4096; ++i) bin += ((i * 131) & 0xff) == 10 ? char(0xff) : char((i * 131) & 0xff);
  write(d / "blob.jsonl", bin + "\n" + bin + "\n");
  r = test::run_shell(ucm() + " precompute --model " + test::shell_quote(model_dir()) + " --corpus " +
                      test::shell_quote((d / "blob.jsonl").string()) + " --json --store " +
                      test::shell_quote((d / "s3").string()));
  EXPECT_EQ(r.code, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j["skipped"]["malformed"], 2);
  // A wrong model directory: {"error": ...} alone.
  r = test::run_shell(ucm() + " precompute --model " + test::shell_quote(d.string()) + " --corpus " +
                      test::shell_quote(c.path.string()) + " --json --store " + test::shell_quote((d / "s4").string()));
  EXPECT_EQ(r.code, 1);
  j = json::parse(r.out);
  ASSERT_TRUE(j.contains("error")) << r.out;
  EXPECT_EQ(j.size(), 1u) << r.out;
  fs::remove_all(d);
}

// The issue's repro: a data file is cut short, gc removes the blocks it held, and --resume must
// then compute the documents that lost blocks again instead of trusting the registry.
TEST_F(PrecomputeSkips, GcKeepsTheRegistryTrueAndResumeRepairs) {
  Precomputed pre;
  ASSERT_NO_FATAL_FAILURE(precompute_jsonl("gc", Bad::kEmpty, &pre));
  const auto& [d, c, store] = pre;
  ASSERT_EQ(registered(store).size(), 4u);
  // Cut the (single) data file in half: the blocks past the cut are gone.
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(store / "data")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  fs::resize_file(files[0], fs::file_size(files[0]) / 2);
  admin::GcOptions go;
  go.grace_ms = 0;
  admin::GcReport gr;
  Status st = admin::gc(store.string(), go, &gr);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_GT(gr.corrupt_removed, 0u);
  EXPECT_GT(gr.documents_removed, 0u);
  auto reg = registered(store);
  EXPECT_EQ(reg.size() + gr.documents_removed, 4u);
  // Whatever is still registered is complete.
  {
    OpenOptions oo;
    std::unique_ptr<Store> s;
    ASSERT_TRUE(Store::Open(store.string(), oo, &s).ok());
    const NamespaceId ns = s->namespaces()[0].id();
    for (const auto& [id, e] : reg) {
      BlockInfo bi;
      EXPECT_TRUE(s->get_block(ns, e.last_block, &bi).ok()) << id;
      EXPECT_TRUE(s->get_block(ns, e.first_block, &bi).ok()) << id;
    }
  }
  // --resume computes exactly the unregistered ones again.
  PrecomputeSummary again;
  ASSERT_TRUE(resume(c.path, store, &again).ok());
  EXPECT_EQ(again.documents, gr.documents_removed);
  EXPECT_EQ(again.skipped["resumed"], 4u - gr.documents_removed);
  EXPECT_GT(again.blocks_written, 0u);
  EXPECT_EQ(registered(store).size(), 4u);
  admin::InspectOptions io;
  io.verify = true;
  admin::InspectReport ir;
  ASSERT_TRUE(admin::inspect(store.string(), io, &ir).ok());
  EXPECT_TRUE(ir.corrupt.empty());
  uint64_t want = 0;
  for (int i = 0; i < 4; ++i) want += blocks_of("g" + std::to_string(i));
  EXPECT_EQ(ir.verified, want);  // every block of the 4 documents, each present once
  fs::remove_all(d);
}

// A registry left stale by an older ucm (a block removed, the entry kept): --resume checks the
// document's last block before trusting the entry.
TEST_F(PrecomputeSkips, ResumeRecomputesARegisteredDocumentWhoseLastBlockIsGone) {
  Precomputed pre;
  ASSERT_NO_FATAL_FAILURE(precompute_jsonl("stale", Bad::kMalformed, &pre));
  const auto& [d, c, store] = pre;
  auto reg = registered(store);
  ASSERT_EQ(reg.count("g2"), 1u);
  {
    // Remove g2's last block from the index directly, leaving its registry entry.
    std::unique_ptr<fmt::WriterLock> lock;
    ASSERT_TRUE(fmt::WriterLock::Acquire(store.string(), &lock).ok());
    std::unique_ptr<Index> idx;
    ASSERT_TRUE(Index::OpenPrimary(fmt::index_dir(store.string()), false, &idx).ok());
    NamespaceId ns{};
    ASSERT_TRUE(idx->for_each_namespace([&](const NamespaceId& id, const std::string&) {
                     ns = id;
                     return false;
                   }).ok());
    Index::Batch b;
    b.delete_block(ns, reg["g2"].last_block);
    ASSERT_TRUE(idx->write(b).ok());
  }
  PrecomputeSummary again;
  ASSERT_TRUE(resume(c.path, store, &again).ok());
  EXPECT_EQ(again.documents, 1u);
  EXPECT_EQ(again.skipped["resumed"], 3u);
  EXPECT_EQ(again.blocks_written, 1u);  // only the missing block; the prefix was there
  OpenOptions oo;
  std::unique_ptr<Store> s;
  ASSERT_TRUE(Store::Open(store.string(), oo, &s).ok());
  BlockInfo bi;
  EXPECT_TRUE(s->get_block(s->namespaces()[0].id(), reg["g2"].last_block, &bi).ok());
  fs::remove_all(d);
}

// A store without index/: precompute answers like every other command (exit 3, the fix named),
// and creates nothing.
TEST_F(PrecomputeSkips, MissingIndexIsTheSameCorruptionAsEverywhere) {
  Precomputed pre;
  ASSERT_NO_FATAL_FAILURE(precompute_jsonl("noindex", Bad::kEmpty, &pre));
  const auto& [d, c, store] = pre;
  fs::remove_all(store / "index");
  test::CliRun r = test::run_shell(ucm() + " precompute --model " + test::shell_quote(model_dir()) + " --corpus " +
                                   test::shell_quote(c.path.string()) + " --json --store " +
                                   test::shell_quote(store.string()));
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("ucm build " + store.string() + " --rebuild-index"), std::string::npos) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["error"]["code"], "CORRUPTION");
  EXPECT_FALSE(fs::exists(store / "index"));
  fs::remove_all(d);
}
