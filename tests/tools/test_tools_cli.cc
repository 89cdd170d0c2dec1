// The `ucm` binary: help, version, JSON output and exit codes (runs UCM_BIN).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "formats/store/records.h"
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
  EXPECT_NE(r.out.find("ucm 0.1.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("store format version 1"), std::string::npos);
  EXPECT_NE(r.out.find("libtorch support: "), std::string::npos);
  EXPECT_NE(r.out.find("CUDA support: "), std::string::npos);
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
  EXPECT_EQ(j["format_version"], 1);
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
  BlockInfo bi;
  {
    auto st = open_store(s, false);
    ASSERT_TRUE(st->get_block(ns, c.hashes[1], &bi).ok());
  }
  {
    std::FILE* f = std::fopen(fmt::data_file_path(s, bi.kv_file).c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, static_cast<long>(bi.kv_offset + fmt::kPage + 3), SEEK_SET);
    int ch = std::fgetc(f);
    std::fseek(f, static_cast<long>(bi.kv_offset + fmt::kPage + 3), SEEK_SET);
    std::fputc(ch ^ 1, f);
    std::fclose(f);
  }
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
    CliRun g = run("gc " + s + " --json");
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
  EXPECT_NE(up.out.find("already at format version 1"), std::string::npos) << up.out;

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
