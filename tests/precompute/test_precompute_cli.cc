// test_precompute (CLI part): the real `ucm` binary (UCM_BIN) run as a child process on six small
// real documents of the default corpus (Python 3.11 docs, each cut at 256 tokens):
//   * SIGTERM after the first document is registered: exit status 143, "interrupted": true in the
//     JSON summary, `ucm inspect --verify` finds no corrupt block, every registered document has all
//     of its blocks, and a `--resume` run registers the rest exactly once without writing any block
//     twice;
//   * `--shard I/N` runs partition the corpus and agree with a single run;
//   * `--config configs/precompute.yaml` (the shipped file) with command-line overrides;
//   * the keys of the `--json` summary.
// Model dir: $UCM_MODEL_DIR or <repo>/models/SmolLM2-135M-Instruct (run scripts/fetch_model.py).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ucm/hash.h"
#include "ucm/store.h"
#include "ucm/tok/tokenizer.h"
#include "ucm/model/cpu_runtime.h"
#include "real_data.h"

extern char** environ;

namespace fs = std::filesystem;
using namespace ucm;
using nlohmann::json;

using ucm::test::model_dir;
using ucm::test::model_missing;
using ucm::test::read_file;
using ucm::test::kDocsDir;

namespace {

// Six documents of 2.5-3.5 KB (> 256 tokens each with the template), in corpus (sorted) order.
const std::vector<std::string> kDocs = {"codeop.rst.txt", "copy.rst.txt", "linecache.rst.txt",
                                        "netrc.rst.txt",  "pwd.rst.txt",  "quopri.rst.txt"};
constexpr uint32_t kMaxTokens = 256, kBlock = 16;



// The template prefix of configs/template_chat.txt (text before "{document}").
std::string chat_prefix() {
  std::string t = read_file(fs::path(UCM_SOURCE_DIR) / "configs/template_chat.txt");
  const auto p = t.find("{document}");
  return p == std::string::npos ? t : t.substr(0, p);
}
std::string chat_suffix() {
  std::string t = read_file(fs::path(UCM_SOURCE_DIR) / "configs/template_chat.txt");
  const auto p = t.find("{document}");
  return p == std::string::npos ? std::string() : t.substr(p + 10);
}

// A `ucm` child process; stdout and stderr go to files.
struct Child {
  pid_t pid = -1;
  fs::path out, err;
  std::string stdout_text() const { return read_file(out); }
  std::string stderr_text() const { return read_file(err); }
  // Waits for the child; returns the raw wait status.
  int wait() {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    pid = -1;
    return status;
  }
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      wait();
    }
  }
};

Child spawn_ucm(const std::vector<std::string>& args, const fs::path& io_prefix, const fs::path& cwd = {}) {
  Child c;
  c.out = io_prefix.string() + ".stdout";
  c.err = io_prefix.string() + ".stderr";
  std::vector<std::string> argv_s = {UCM_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, c.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, c.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  const int rc = posix_spawn(&c.pid, UCM_BIN, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  EXPECT_EQ(rc, 0) << "posix_spawn " << UCM_BIN << ": " << std::strerror(rc);
  if (rc != 0) c.pid = -1;
  return c;
}

// Runs ucm to completion; returns the exit code (-signal when killed by a signal).
int run_ucm(const std::vector<std::string>& args, const fs::path& io_prefix, std::string* out,
            std::string* err = nullptr, const fs::path& cwd = {}) {
  Child c = spawn_ucm(args, io_prefix, cwd);
  if (c.pid < 0) return -1000;
  const int st = c.wait();
  if (out) *out = c.stdout_text();
  if (err) *err = c.stderr_text();
  return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

json parse_or_fail(const std::string& s) {
  json j = json::parse(s, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << s;
  return j;
}

std::unique_ptr<Store> open_ro(const fs::path& p) {
  OpenOptions oo;
  oo.refresh_interval_ms = 0;
  std::unique_ptr<Store> s;
  if (!Store::Open(p.string(), oo, &s).ok()) return nullptr;
  return s;
}

class PrecomputeCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    missing_ = model_missing();
    if (!missing_.empty()) return;
    const std::string dir = model_dir();
    if (!fs::exists(UCM_BIN)) {
      missing_ = std::string("ucm binary ") + UCM_BIN + " not built (target ucm_cli)";
      return;
    }
    tok_ = new tok::Tokenizer(tok::Tokenizer::from_file((fs::path(dir) / "tokenizer.json").string()));
    root_ = fs::temp_directory_path() / ("ucm-test-precompute-cli-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    corpus_ = root_ / "corpus";
    fs::create_directories(corpus_);
    for (const auto& n : kDocs) fs::copy_file(fs::path(kDocsDir) / n, corpus_ / n);
  }
  static void TearDownTestSuite() {
    if (!root_.empty()) fs::remove_all(root_);
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (!missing_.empty()) FAIL() << missing_;
  }

  // Common arguments of a run on the test corpus.
  static std::vector<std::string> base_args(const fs::path& store, uint32_t max_tokens = kMaxTokens) {
    return {"precompute",
            "--model", model_dir(),
            "--corpus", corpus_.string(),
            "--template", (fs::path(UCM_SOURCE_DIR) / "configs/template_chat.txt").string(),
            "--store", store.string(),
            "--max-doc-tokens", std::to_string(max_tokens),
            "--batch-tokens", std::to_string(max_tokens),  // one document per batch
            "--json"};
  }

  // Block hashes precompute stores for document `name` (template + text, cut, full blocks).
  static std::vector<BlockHash> doc_hashes(const NamespaceId& seed, const std::string& name,
                                           uint32_t max_tokens = kMaxTokens) {
    auto ids = tok_->encode(chat_prefix() + read_file(corpus_ / name) + chat_suffix());
    if (ids.size() > max_tokens) ids.resize(max_tokens);
    ids.resize(ids.size() - ids.size() % kBlock);
    std::vector<BlockHash> h;
    hash_blocks(root_hash(seed), reinterpret_cast<const uint32_t*>(ids.data()), ids.size(), kBlock, &h);
    return h;
  }

  // The store's single namespace and its hash seed.
  static bool the_namespace(Store* s, NamespaceId* id, NamespaceId* seed) {
    auto v = s->namespaces();
    if (v.size() != 1) return false;
    *id = v[0].id();
    *seed = v[0].hash_seed();
    return true;
  }

  static inline tok::Tokenizer* tok_ = nullptr;
  static inline fs::path root_, corpus_;
  static inline std::string missing_;
};

// The documented `--json` summary keys (docs/precompute.md, "Output").
const std::vector<std::string> kSummaryKeys = {
    "documents", "documents_seen", "skipped", "skipped_total", "truncated", "blocks_written",
    "blocks_existing", "tokens", "seconds", "prefill_seconds", "tokens_per_second", "interrupted",
    "signal", "namespace", "namespace_id"};

TEST_F(PrecomputeCliTest, SigtermLeavesConsistentStoreAndResumeCompletes) {
  const fs::path store = root_ / "sig";
  Child c = spawn_ucm(base_args(store), root_ / "sig-run1");
  ASSERT_GT(c.pid, 0);
  // Poll the registry read-only (as `ucm inspect --docs` would) until a document is registered.
  size_t seen = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  bool exited_early = false;
  while (std::chrono::steady_clock::now() < deadline) {
    int st = 0;
    if (::waitpid(c.pid, &st, WNOHANG) == c.pid) {  // finished before we could interrupt it
      c.pid = -1;
      exited_early = true;
      break;
    }
    if (auto s = open_ro(store)) {
      NamespaceId id, seed;
      if (the_namespace(s.get(), &id, &seed)) seen = s->documents(id).size();
    }
    if (seen >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(exited_early) << "ucm precompute finished before SIGTERM; stderr:\n" << c.stderr_text();
  ASSERT_GE(seen, 1u) << "no document registered within 240 s; stderr:\n" << c.stderr_text();
  ASSERT_EQ(::kill(c.pid, SIGTERM), 0);
  const int status = c.wait();
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                 << "; stderr:\n" << c.stderr_text();
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << c.stderr_text();
  json s1 = parse_or_fail(c.stdout_text());
  for (const auto& k : kSummaryKeys) EXPECT_TRUE(s1.contains(k)) << k << " missing in " << s1.dump();
  EXPECT_EQ(s1.value("interrupted", false), true);
  EXPECT_EQ(s1.value("signal", 0), SIGTERM);
  const uint64_t reg1 = s1.value("documents", uint64_t{0});
  EXPECT_GE(reg1, 1u);
  ASSERT_LT(reg1, kDocs.size()) << "SIGTERM came too late to leave work for --resume";
  std::printf("SIGTERM sent with %zu document(s) registered; the run registered %llu of %zu\n", seen,
              (unsigned long long)reg1, kDocs.size());

  // inspect --verify: no corrupt block; the store holds exactly the blocks the run reports written.
  std::string out, err;
  ASSERT_EQ(run_ucm({"inspect", store.string(), "--verify", "--json"}, root_ / "sig-inspect", &out, &err), 0) << err;
  json ins = parse_or_fail(out);
  EXPECT_TRUE(ins["corrupt"].empty()) << ins["corrupt"].dump();
  EXPECT_EQ(ins.value("verified", uint64_t{0}), ins.value("blocks", uint64_t{1}));
  EXPECT_EQ(ins.value("blocks", uint64_t{0}), s1.value("blocks_written", uint64_t{1}));

  // Every registered document has all of its blocks, with the chain the document entry names.
  std::set<std::string> registered;
  {
    auto s = open_ro(store);
    ASSERT_TRUE(s);
    NamespaceId id, seed;
    ASSERT_TRUE(the_namespace(s.get(), &id, &seed));
    auto docs = s->documents(id);
    EXPECT_EQ(docs.size(), reg1);
    for (const auto& d : docs) {
      registered.insert(d.id);
      auto h = doc_hashes(seed, d.id);
      ASSERT_EQ(d.blocks, h.size()) << d.id;
      EXPECT_EQ(d.last_block, h.back()) << d.id;
      for (size_t i = 0; i < h.size(); ++i) {
        BlockInfo info;
        EXPECT_TRUE(s->get_block(id, h[i], &info).ok()) << d.id << " block " << i << " missing";
      }
    }
  }

  // --resume registers the rest exactly once and writes no block twice.
  ASSERT_EQ(run_ucm([&] {
              auto a = base_args(store);
              a.push_back("--resume");
              return a;
            }(),
                    root_ / "sig-run2", &out, &err),
            0)
      << err;
  json s2 = parse_or_fail(out);
  EXPECT_EQ(s2.value("interrupted", true), false);
  EXPECT_EQ(s2.value("signal", -1), 0);
  EXPECT_EQ(s2["skipped"].value("resumed", uint64_t{0}), reg1);
  EXPECT_EQ(s2.value("documents", uint64_t{0}), kDocs.size() - reg1);

  auto s = open_ro(store);
  ASSERT_TRUE(s);
  NamespaceId id, seed;
  ASSERT_TRUE(the_namespace(s.get(), &id, &seed));
  std::map<std::string, DocumentEntry> docs;
  for (const auto& d : s->documents(id)) EXPECT_TRUE(docs.emplace(d.id, d).second) << d.id << " twice";
  ASSERT_EQ(docs.size(), kDocs.size());
  std::set<std::string> distinct;         // every block of every document
  uint64_t blocks_of_new_docs = 0;        // blocks of the documents the resume run registered
  for (const auto& n : kDocs) {
    ASSERT_TRUE(docs.count(n)) << n;
    auto h = doc_hashes(seed, n);
    EXPECT_EQ(docs[n].last_block, h.back()) << n;
    if (!registered.count(n)) blocks_of_new_docs += h.size();
    for (const auto& b : h) {
      BlockInfo info;
      EXPECT_TRUE(s->get_block(id, b, &info).ok()) << n;
      distinct.insert(to_hex(b));
    }
  }
  const uint64_t w1 = s1.value("blocks_written", uint64_t{0}), w2 = s2.value("blocks_written", uint64_t{0});
  EXPECT_EQ(w1 + w2, distinct.size()) << "a block was written twice (or not at all)";
  EXPECT_EQ(w2 + s2.value("blocks_existing", uint64_t{0}), blocks_of_new_docs);
  ASSERT_EQ(run_ucm({"inspect", store.string(), "--verify", "--json"}, root_ / "sig-inspect2", &out, &err), 0) << err;
  ins = parse_or_fail(out);
  EXPECT_EQ(ins.value("blocks", uint64_t{0}), distinct.size());
  EXPECT_TRUE(ins["corrupt"].empty());
}

TEST_F(PrecomputeCliTest, ShardsPartitionTheCorpus) {
  // Short documents (2 blocks) keep this fast; shard I/N takes corpus entries with index % N == I.
  constexpr uint32_t kShort = 32;
  std::map<std::string, std::string> last;  // doc -> last block hash over all shards
  for (uint32_t i = 0; i < 2; ++i) {
    const fs::path store = root_ / ("shard" + std::to_string(i));
    auto a = base_args(store, kShort);
    a.push_back("--shard");
    a.push_back(std::to_string(i) + "/2");
    std::string out, err;
    ASSERT_EQ(run_ucm(a, root_ / ("shard-run" + std::to_string(i)), &out, &err), 0) << err;
    json j = parse_or_fail(out);
    EXPECT_EQ(j.value("documents", uint64_t{0}), 3u);
    EXPECT_EQ(j.value("documents_seen", uint64_t{0}), 3u);
    EXPECT_EQ(j.value("truncated", uint64_t{0}), 3u);
    EXPECT_EQ(j.value("tokens", uint64_t{0}), 3u * kShort);
    auto s = open_ro(store);
    ASSERT_TRUE(s);
    NamespaceId id, seed;
    ASSERT_TRUE(the_namespace(s.get(), &id, &seed));
    std::set<std::string> got, want;
    for (const auto& d : s->documents(id)) {
      got.insert(d.id);
      auto h = doc_hashes(seed, d.id, kShort);
      EXPECT_EQ(d.last_block, h.back()) << d.id;
      EXPECT_TRUE(last.emplace(d.id, to_hex(d.last_block)).second) << d.id << " in both shards";
    }
    for (size_t k = i; k < kDocs.size(); k += 2) want.insert(kDocs[k]);
    EXPECT_EQ(got, want) << "shard " << i << "/2";
  }
  EXPECT_EQ(last.size(), kDocs.size());
}

TEST_F(PrecomputeCliTest, ShardWorkersWriteOneShardedStoreInParallelWhileGcRuns) {
  // store_v1.md §11: two `--shard I/2` workers started together on one missing store create it
  // sharded and each write their own shard (precompute-0, precompute-1), with no merge step,
  // while `ucm gc` runs from a third process; readers see the union, every block byte-checked.
  constexpr uint32_t kShort = 64;
  const fs::path store = root_ / "one-store";
  auto worker_args = [&](uint32_t i) {
    auto a = base_args(store, kShort);
    a.push_back("--shard");
    a.push_back(std::to_string(i) + "/2");
    return a;
  };
  Child w0 = spawn_ucm(worker_args(0), root_ / "par-run0");  // (Child kills its process when destroyed:
  Child w1 = spawn_ucm(worker_args(1), root_ / "par-run1");  //  no copies)
  Child* workers[2] = {&w0, &w1};
  int status[2] = {-1, -1};
  // gc meanwhile: shards whose worker runs are busy (exit 0, reported), others are collected.
  int gc_runs = 0;
  for (;;) {
    bool running = false;
    for (int i = 0; i < 2; ++i) {
      if (workers[i]->pid <= 0) continue;
      const pid_t r = ::waitpid(workers[i]->pid, &status[i], WNOHANG);
      if (r == workers[i]->pid) workers[i]->pid = -1;
      else running = true;
    }
    if (!running) break;
    if (fs::exists(fs::path(store) / "UCMSTORE")) {
      std::string out, err;
      const int rc = run_ucm({"gc", store.string(), "--json", "--lease-wait", "30s"}, root_ / "par-gc", &out, &err);
      EXPECT_EQ(rc, 0) << err;
      ++gc_runs;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0) << workers[i]->stderr_text();
    EXPECT_EQ(parse_or_fail(workers[i]->stdout_text()).value("documents", uint64_t{0}), 3u)
        << workers[i]->stderr_text();
  }
  std::string out, err;
  ASSERT_EQ(run_ucm({"gc", store.string(), "--json"}, root_ / "par-gc2", &out, &err), 0) << err;
  json g = parse_or_fail(out);
  EXPECT_EQ(g.value("shards_busy", uint64_t{9}), 0u);
  EXPECT_EQ(g.value("evicted_blocks", uint64_t{9}), 0u);
  ASSERT_EQ(run_ucm({"inspect", store.string(), "--verify", "--json"}, root_ / "par-inspect", &out, &err), 0) << err;
  json ins = parse_or_fail(out);
  EXPECT_EQ(ins.value("format_version", 0), 3);
  ASSERT_EQ(ins["shards"].size(), 2u);
  EXPECT_EQ(ins["shards"][0].value("name", std::string()), "precompute-0");
  EXPECT_EQ(ins["shards"][1].value("name", std::string()), "precompute-1");
  EXPECT_TRUE(ins["corrupt"].empty());
  auto s = open_ro(store);
  ASSERT_TRUE(s);
  NamespaceId id, seed;
  ASSERT_TRUE(the_namespace(s.get(), &id, &seed));
  ASSERT_EQ(s->documents(id).size(), kDocs.size());
  std::set<std::string> per_shard[2];  // distinct blocks each worker wrote (documents k % 2 == I)
  for (size_t k = 0; k < kDocs.size(); ++k) {
    const auto& n = kDocs[k];
    auto h = doc_hashes(seed, n, kShort);
    for (const auto& b : h) per_shard[k % 2].insert(to_hex(b));
    DocumentEntry d;
    ASSERT_TRUE(s->get_document(id, n, &d).ok()) << n;
    EXPECT_EQ(d.last_block, h.back()) << n;
    std::vector<uint8_t> present(h.size());
    size_t prefix = 0;
    ASSERT_TRUE(s->lookup(id, h.data(), h.size(), present.data(), &prefix).ok());
    EXPECT_EQ(prefix, h.size()) << n;
  }
  // Each shard holds whole chains: a block shared by documents of both (the template's) is in both.
  EXPECT_EQ(ins["shards"][0].value("blocks", uint64_t{0}), per_shard[0].size());
  EXPECT_EQ(ins["shards"][1].value("blocks", uint64_t{0}), per_shard[1].size());
  std::cerr << "gc ran " << gc_runs << " times while the workers ran\n";
}

TEST_F(PrecomputeCliTest, ShippedConfigWithOverrides) {
  // configs/precompute.yaml names the model and template relative to the repository root and a
  // store under /var/lib: run from the root, overriding store, corpus, limit and cut.
  const fs::path store = root_ / "cfg";
  std::string out, err;
  const int rc = run_ucm({"precompute", "--config", "configs/precompute.yaml", "--store", store.string(),
                          "--corpus", corpus_.string(), "--limit", "2", "--max-doc-tokens", "48",
                          "--model", model_dir(), "--json"},
                         root_ / "cfg-run", &out, &err, UCM_SOURCE_DIR);
  ASSERT_EQ(rc, 0) << err;
  json j = parse_or_fail(out);
  for (const auto& k : kSummaryKeys) EXPECT_TRUE(j.contains(k)) << k << " missing in " << j.dump();
  EXPECT_EQ(j.value("documents", uint64_t{0}), 2u);
  EXPECT_EQ(j.value("tokens", uint64_t{0}), 2u * 48);
  EXPECT_EQ(j.value("interrupted", true), false);
  auto s = open_ro(store);
  ASSERT_TRUE(s);
  NamespaceId id, seed;
  ASSERT_TRUE(the_namespace(s.get(), &id, &seed));
  EXPECT_EQ(j.value("namespace_id", std::string()), to_hex(id));
  // The config's template (configs/template_chat.txt) and block size: the registry's chains match.
  auto v = s->namespaces();
  EXPECT_EQ(v[0].block_size, kBlock);
  EXPECT_EQ(dtype_name(v[0].dtype), std::string("bf16"));
  for (const auto& d : s->documents(id)) EXPECT_EQ(d.last_block, doc_hashes(seed, d.id, 48).back()) << d.id;
  // An unknown key in a config is a usage-level error naming the key (exit 1, nothing created).
  const fs::path bad = root_ / "bad.yaml";
  std::ofstream(bad) << "model: x\nblock_sise: 16\n";
  EXPECT_EQ(run_ucm({"precompute", "--config", bad.string(), "--store", (root_ / "cfg-bad").string(), "--json"},
                    root_ / "cfg-bad", &out, &err),
            1);
  EXPECT_NE(err.find("block_sise"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(root_ / "cfg-bad"));
}

// An environment that names OpenBLAS's AVX2 kernels on an AVX-512 CPU (some machines set
// OPENBLAS_CORETYPE=Haswell on AMD Zen 4/5): the fp32 precompute runs AVX-512 kernels in its own
// process, says so at info and in the report (blas_core_replaced); UCM_BLAS_CORE=keep runs the
// environment's, and the warning says what that costs and how to undo it (docs/model.md).
TEST_F(PrecomputeCliTest, EnvironmentsAvx2BlasCoreIsReplacedUnlessKept) {
  const auto f = ucm::model::cpu_flags();
  if (!f.count("avx512f") || !f.count("avx512bw") || !f.count("avx512vl") || !f.count("avx512dq"))
    GTEST_SKIP() << "this CPU has no AVX-512: Haswell's kernels are its best";
  struct Env {  // sets a variable for the children, restores it after
    std::string name, old;
    bool had;
    Env(const char* n, const char* v) : name(n), had(std::getenv(n) != nullptr) {
      if (had) old = std::getenv(n);
      ::setenv(n, v, 1);
    }
    ~Env() { had ? ::setenv(name.c_str(), old.c_str(), 1) : ::unsetenv(name.c_str()); }
  };
  Env core("OPENBLAS_CORETYPE", "Haswell");
  auto run = [&](const std::string& tag, std::string* err) {
    std::string out;
    const int rc = run_ucm({"precompute", "--model", model_dir(), "--corpus", corpus_.string(), "--store",
                            (root_ / tag).string(), "--limit", "1", "--max-doc-tokens", "48", "--compute-dtype",
                            "fp32", "--json"},
                           root_ / (tag + "-run"), &out, err);
    EXPECT_EQ(rc, 0) << *err;
    return parse_or_fail(out);
  };
  std::string err;
  json j = run("blas-replaced", &err);
  EXPECT_EQ(j.value("blas_core", std::string()), "SkylakeX") << j.dump();
  EXPECT_EQ(j.value("blas_core_replaced", std::string()), "Haswell") << j.dump();
  EXPECT_NE(err.find("OPENBLAS_CORETYPE=Haswell in the environment names kernels this CPU outgrows"), std::string::npos)
      << err;
  EXPECT_NE(err.find("UCM_BLAS_CORE=keep"), std::string::npos) << err;
  Env keep("UCM_BLAS_CORE", "keep");
  j = run("blas-kept", &err);
  EXPECT_EQ(j.value("blas_core", std::string()), "Haswell") << j.dump();
  EXPECT_EQ(j.value("blas_core_replaced", std::string("?")), "") << j.dump();
  EXPECT_NE(err.find("UCM_BLAS_CORE=keep keeps it"), std::string::npos) << err;
  EXPECT_NE(err.find("0.62x"), std::string::npos) << "the warning names what is lost: " << err;
}

// --device cuda where libtorch has no CUDA (Debian's) or there is no GPU: refused before any work,
// naming what to do; nothing is created. On a GPU build with a device, it must run instead.
TEST_F(PrecomputeCliTest, DeviceCudaWithoutCudaIsRefusedClearly) {
  std::string out, err;
  const fs::path store = root_ / "dev";
  const int rc = run_ucm({"precompute", "--device", "cuda", "--store", store.string(), "--corpus", corpus_.string(),
                          "--limit", "1", "--max-doc-tokens", "48", "--model", model_dir(), "--json"},
                         root_ / "dev-run", &out, &err);
  if (rc == 0) GTEST_SKIP() << "this build has a CUDA libtorch and a GPU";
  EXPECT_EQ(rc, 1) << err;
  EXPECT_NE(err.find("NOT_SUPPORTED"), std::string::npos) << err;
  EXPECT_NE(err.find("CUDA"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(store / "UCMSTORE"));
  EXPECT_EQ(run_ucm({"precompute", "--device", "tpu", "--store", store.string(), "--corpus", corpus_.string(),
                     "--model", model_dir()},
                    root_ / "dev-run2", &out, &err),
            1);
  EXPECT_NE(err.find("use cpu, cuda or cuda:N"), std::string::npos) << err;
}

}  // namespace
