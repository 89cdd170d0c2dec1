// The `ucm` binary: help, version, JSON output and exit codes (runs UCM_BIN).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <filesystem>
#include <set>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "ucm/format/format.h"
#include "cli_run.h"
#include "tools_test_util.h"
#include "ucm/admin.h"

using namespace ucm;
using namespace ucm::test;
using json = nlohmann::json;

namespace {

CliRun run(const std::string& args) { return run_shell(std::string(UCM_BIN) + " " + args); }

}  // namespace

TEST(Cli, HelpListsSubcommandsAndExitCodes) {
  CliRun r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* s : {"build", "inspect", "gc", "migrate", "bench", "precompute", "Exit codes",
                        "3 corruption", "4 store busy", "5 store format"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

TEST(Cli, Version) {
  CliRun r = run("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("ucm " UCM_VERSION_STRING "\n"), std::string::npos) << r.out;
  // The newest format, as ucm_format_version() says: 5 (single stores); sharded roots are 3.
  EXPECT_NE(r.out.find("store format version 5 (single stores 5, sharded roots 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("libtorch support: "), std::string::npos);
  EXPECT_NE(r.out.find("CUDA support: "), std::string::npos);
}

TEST(Cli, UcmLinksNoLibtorchAndRunsItsModelCommandsThroughUcmTorch) {
  // ucm itself needs no libtorch (the dynamic loader's list: ELF NEEDED entries).
  CliRun d = run_shell("objdump -p " + std::string(UCM_BIN) + " | grep NEEDED");
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_NE(d.out.find("libc.so"), std::string::npos) << d.out;
  EXPECT_EQ(d.out.find("libtorch"), std::string::npos) << d.out;
  EXPECT_EQ(d.out.find("libc10"), std::string::npos) << d.out;
  // Its model commands run in ucm-torch (when built): their --help comes from the real parsers.
  if (std::filesystem::exists(std::filesystem::path(UCM_BIN).parent_path() / "../libexec/ucm/ucm-torch")) {
    CliRun h = run("precompute --help");
    EXPECT_EQ(h.code, 0) << h.err;
    EXPECT_NE(h.out.find("Usage: ucm precompute"), std::string::npos) << h.out;
    EXPECT_NE(h.out.find("--corpus"), std::string::npos) << h.out;
    CliRun b = run("bench --json generate --help");
    EXPECT_EQ(b.code, 0) << b.err;
    EXPECT_NE(b.out.find("Usage: ucm bench generate"), std::string::npos) << b.out;
  }
  // A ucm with no ucm-torch beside it: exit 1, the missing path named, one JSON object.
  const auto dir = std::filesystem::temp_directory_path() / ("ucm-alone-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "bin");
  std::filesystem::copy_file(UCM_BIN, dir / "bin/ucm");
  CliRun r = run_shell((dir / "bin/ucm").string() + " precompute --corpus x --store y --json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find((dir / "libexec/ucm/ucm-torch").lexically_normal().string()), std::string::npos) << r.err;
  const auto j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["error"]["code"], "NOT_SUPPORTED");
  // Its admin commands do not need it.
  EXPECT_EQ(run_shell((dir / "bin/ucm").string() + " --version").code, 0);
  std::filesystem::remove_all(dir);
}

TEST(Cli, UsageErrorsExit2) {
  EXPECT_EQ(run("").code, 2);
  EXPECT_EQ(run("inspect").code, 2);  // STORE missing
  EXPECT_EQ(run("gc /nonexistent --bogus-flag").code, 2);
  EXPECT_EQ(run("migrate a b --dtype int8").code, 2);
  EXPECT_EQ(run("nosuchcommand").code, 2);
}

TEST(Cli, BuildInspectJsonVerifyAndVersion) {
  TempDir d;
  const std::string s = d.sub("store");
  CliRun b = run("build " + s + " --json");
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(json::parse(b.out)["created"], true);
  NamespaceDesc desc = tiny_desc();
  NamespaceId ns{};
  Chain c;
  {
    auto st = open_store(s, true);
    ASSERT_TRUE(st->register_namespace(desc, &ns).ok());
    c = dump_chain(st.get(), ns, desc, 1, 2);
  }
  CliRun i = run("inspect " + s + " --json");
  ASSERT_EQ(i.code, 0) << i.err;
  json j = json::parse(i.out);
  EXPECT_EQ(j["format_version"], 4);
  EXPECT_EQ(j["blocks"], 2);
  EXPECT_EQ(j["bytes"], 2 * desc.payload_bytes());
  ASSERT_EQ(j["namespaces"].size(), 1u);
  EXPECT_EQ(j["namespaces"][0]["name"], desc.display_name());
  EXPECT_EQ(j["namespaces"][0]["blocks"], 2);
  EXPECT_TRUE(i.err.empty()) << "no progress noise without a TTY: " << i.err;

  CliRun bad = run("inspect " + s + " --block nothex");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("32 hex digits"), std::string::npos) << bad.err;

  // Corrupt one payload byte: inspect --verify exits 3 and lists the block.
  ASSERT_TRUE(spoil_payload_byte(s, ns, c.hashes[1], 3, 1));
  CliRun v = run("inspect " + s + " --verify --json --progress");
  EXPECT_EQ(v.code, 3) << v.err;
  json jv = json::parse(v.out);  // stdout is pure JSON even with --progress
  EXPECT_EQ(jv["verified"], 1);
  ASSERT_EQ(jv["corrupt"].size(), 1u);
  EXPECT_EQ(jv["corrupt"][0]["block"], to_hex(c.hashes[1]));
  EXPECT_NE(v.err.find("ucm inspect: verify"), std::string::npos) << v.err;

  // Busy: a writer holds the store.
  {
    auto w = open_store(s, true);
    CliRun g = run("gc " + s + " --writer-wait 0 --json");  // no hand-off to the live writer
    EXPECT_EQ(g.code, 4) << g.err;
    EXPECT_NE(g.err.find("BUSY"), std::string::npos) << g.err;
    EXPECT_EQ(json::parse(g.out)["error"]["exit_code"], 4);
  }
  CliRun g = run("gc " + s + " --verify --grace 0 --json");
  EXPECT_EQ(g.code, 0) << g.err;
  EXPECT_EQ(json::parse(g.out)["corrupt_removed"], 1);
  CliRun g2 = run("gc " + s + " --max-bytes lots");
  EXPECT_EQ(g2.code, 1);
  EXPECT_NE(g2.err.find("--max-bytes"), std::string::npos) << g2.err;

  CliRun up = run("migrate " + s + " --upgrade");
  EXPECT_EQ(up.code, 0) << up.err;
  EXPECT_NE(up.out.find("already at format version 4"), std::string::npos) << up.out;

  // A newer format version: every command exits 5 with the spec's message.
  fmt::Superblock sb;
  ASSERT_TRUE(fmt::read_superblock(s, &sb).ok());
  sb.format_version = 7;
  uint8_t buf[fmt::kSuperblockSize];
  fmt::encode_superblock(sb, buf);
  {
    std::FILE* f = std::fopen(fmt::superblock_path(s).c_str(), "wb");
    std::fwrite(buf, 1, sizeof buf, f);
    std::fclose(f);
  }
  for (const std::string& cmd : {"build " + s, "build " + s + " --rebuild-index", "inspect " + s,
                                 "gc " + s, "migrate " + s + " " + d.sub("dst"),
                                 "migrate " + s + " --upgrade"}) {
    CliRun r = run(cmd);
    EXPECT_EQ(r.code, 5) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find("newer than this ucm supports"), std::string::npos) << r.err;
  }
}

namespace {

// A store of one namespace and one chain of 3 blocks.
void make_store(const std::string& s, NamespaceId* ns_out = nullptr, Chain* chain_out = nullptr) {
  NamespaceDesc desc = tiny_desc();
  NamespaceId ns{};
  auto st = open_store(s, true, true);
  ASSERT_TRUE(st->register_namespace(desc, &ns).ok());
  Chain c = dump_chain(st.get(), ns, desc, 1, 3);
  ASSERT_TRUE(st->put_document(ns, document_of("doc", c)).ok());
  if (ns_out) *ns_out = ns;
  if (chain_out) *chain_out = c;
}

// Every entry under `dir`, recursively (relative paths).
std::set<std::string> tree(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    out.insert(std::filesystem::relative(it->path(), dir).string());
  return out;
}

}  // namespace

// --json: stdout is exactly one JSON object for every subcommand and every outcome; the error is
// in it ({"error": {"code", "message", "exit_code"}}, exit_code = the process's), and on stderr.
TEST(Cli, JsonStdoutIsOneObjectInEveryFailure) {
  TempDir d;
  const std::string s = d.sub("store");
  make_store(s);
  {
    std::ofstream(d.sub("afile")) << "x";
    std::filesystem::create_directories(d.sub("notastore"));
    std::ofstream(d.sub("notastore/readme")) << "x";
  }
  struct Case {
    std::string args;
    int code;
  };
  std::vector<Case> cases = {
      {"build " + d.sub("afile"), 1},
      {"build " + d.sub("notastore"), 1},
      {"build " + d.sub("notastore") + " --rebuild-index", 1},
      {"inspect /nonexistent/store", 1},
      {"inspect " + s + " --block nothex", 1},
      {"inspect " + s + " --namespace nosuch", 1},
      {"gc /nonexistent/store", 1},
      {"gc " + s + " --max-bytes lots", 1},
      {"gc " + s + " --max-age forever", 1},
      {"migrate /nonexistent/store " + d.sub("dst"), 1},
      {"migrate " + s + " " + d.sub("afile"), 1},
      {"migrate " + s + " " + d.sub("dst2") + " --namespace nosuch", 1},
      {"inspect", 2},
      {"gc " + s + " --bogus-flag", 2},
      {"migrate " + s + " x --dtype int8", 2},
      {"bench store --blocks 0", 2},
  };
  for (const auto& c : cases) {
    CliRun r = run(c.args + " --json");
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << c.args << ": stdout is not one JSON value:\n" << r.out;
    ASSERT_TRUE(j.is_object()) << c.args;
    ASSERT_TRUE(j.contains("error")) << c.args << ": " << r.out;
    EXPECT_EQ(j["error"]["exit_code"], c.code) << c.args;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty()) << c.args;
    EXPECT_FALSE(r.err.empty()) << c.args << ": the error also goes to stderr";
  }
  // A failure after a partial report: the report and the error in one object.
  NamespaceId ns;
  Chain c;
  const std::string s2 = d.sub("store2");
  make_store(s2, &ns, &c);
  BlockInfo bi;
  {
    auto st = open_store(s2, false);
    ASSERT_TRUE(st->get_block(ns, c.hashes[0], &bi).ok());
  }
  std::filesystem::resize_file(fmt::data_file_path(s2, bi.kv_file), bi.kv_offset + 100);
  CliRun v = run("inspect " + s2 + " --verify --json");
  EXPECT_EQ(v.code, 3) << v.err;
  json j = json::parse(v.out);
  EXPECT_EQ(j["corrupt"].size(), 3u);
  EXPECT_EQ(j["error"]["exit_code"], 3);
  EXPECT_EQ(j["error"]["code"], "CORRUPTION");
}

// A store whose index/ is gone: every command answers the same (exit 3, CORRUPTION, the fix
// named), and nothing is created in the store.
TEST(Cli, MissingIndexSameAnswerFromEveryCommandNothingCreated) {
  TempDir d;
  const std::string s = d.sub("store");
  make_store(s);
  std::filesystem::remove_all(s + "/index");
  const std::set<std::string> before = tree(s);
  const std::string fix = "ucm build " + s + " --rebuild-index";
  for (const std::string& args : {"inspect " + s, "inspect " + s + " --verify", "inspect " + s + " --docs",
                                  "gc " + s, "gc " + s + " --dry-run", "migrate " + s + " " + d.sub("dst"),
                                  "migrate " + s + " --upgrade", "build " + s}) {
    CliRun r = run(args + " --json");
    EXPECT_EQ(r.code, 3) << args << ": " << r.err;
    EXPECT_NE(r.err.find(fix), std::string::npos) << args << ": " << r.err;
    json j = json::parse(r.out);
    EXPECT_EQ(j["error"]["code"], "CORRUPTION") << args;
    EXPECT_EQ(tree(s), before) << args << " changed the store";
  }
  // The library says the same.
  for (bool rw : {false, true}) {
    OpenOptions o;
    o.mode = rw ? OpenOptions::Mode::kReadWrite : OpenOptions::Mode::kReadOnly;
    std::unique_ptr<Store> st;
    Status r = Store::Open(s, o, &st);
    EXPECT_EQ(r.code(), Code::kCorruption) << r.ToString();
    EXPECT_NE(r.message().find(fix), std::string::npos) << r.ToString();
    EXPECT_EQ(tree(s), before);
  }
  // And the fix works.
  CliRun b = run("build " + s + " --rebuild-index --json");
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(json::parse(b.out)["blocks_indexed"], 3);
  EXPECT_EQ(run("inspect " + s + " --verify").code, 0);
}
