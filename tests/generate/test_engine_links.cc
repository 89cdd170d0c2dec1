// test_engine_links: the reference engine (pipelines/generate) is a client of libucm.so only,
// checked where it counts, in the linked objects rather than in the #include lines:
//   * no object of ucm_generate or of ucm_model (the model it runs, its loading and the namespace
//     fingerprint) defines or references a symbol that the static store engine (ucm_core)
//     defines, and none names a store class (ucm::Store*, ucm::NamespaceDesc) or precompute;
//   * the engine does call libucm's C ABI (ucm_store_open, ucm_store_load), and ucm-torch loads
//     libucm.so (an ELF NEEDED entry), so the store it reaches is the one in libucm.so.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"

using ucm::test::run_shell;
using ucm::test::shell_quote;

namespace {

struct Symbol {
  std::string name;  // mangled
  char type = 0;     // nm's type letter: U undefined, T text, W weak, ...
};

// The global symbols of an archive or binary (nm -P: "name type [value size]" lines; archive
// member headers "lib.a[obj.o]:" have one field and are skipped).
std::vector<Symbol> global_symbols(const std::string& file) {
  ucm::test::CliRun r = run_shell("nm -P -g " + shell_quote(file));
  EXPECT_EQ(r.code, 0) << "nm " << file << ": " << r.err;
  std::vector<Symbol> out;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    Symbol s;
    std::string type;
    if (!(f >> s.name >> type) || type.size() != 1) continue;
    s.type = type[0];
    out.push_back(s);
  }
  return out;
}

// Demangled global symbols (nm -C), one per line, for the names of store classes.
std::string demangled(const std::string& file) {
  ucm::test::CliRun r = run_shell("nm -C -g " + shell_quote(file));
  EXPECT_EQ(r.code, 0) << "nm -C " << file << ": " << r.err;
  return r.out;
}

std::vector<std::string> engine_archives() { return {UCM_GENERATE_LIB, UCM_MODEL_LIB}; }

TEST(GenerateLinks, EngineObjectsUseNoSymbolOfTheStaticStoreEngine) {
  // What ucm_core defines for real (strong text, data, bss, read-only data).
  std::set<std::string> core;
  for (const auto& s : global_symbols(UCM_CORE_LIB))
    if (s.type == 'T' || s.type == 'D' || s.type == 'B' || s.type == 'R') core.insert(s.name);
  // The check can fail: the store engine's own classes are in that set.
  ASSERT_GT(core.size(), 100u);
  ASSERT_NE(demangled(UCM_CORE_LIB).find("ucm::Store::Open("), std::string::npos) << "nm cannot read " UCM_CORE_LIB;

  for (const auto& lib : engine_archives()) {
    size_t n = 0;
    for (const auto& s : global_symbols(lib)) {
      ++n;
      EXPECT_EQ(core.count(s.name), 0u) << lib << " " << (s.type == 'U' ? "references" : "defines") << " "
                                        << s.name << ", which the static store engine (ucm_core) defines";
    }
    EXPECT_GT(n, 10u) << lib;
  }
}

TEST(GenerateLinks, EngineObjectsNameNoStoreClass) {
  const std::vector<std::string> banned = {"ucm::Store", "ucm::NamespaceDesc", "ucm::precompute::", "ucm::admin::"};
  for (const auto& lib : engine_archives()) {
    const std::string syms = demangled(lib);
    std::istringstream in(syms);
    for (std::string line; std::getline(in, line);)
      for (const auto& b : banned) EXPECT_EQ(line.find(b), std::string::npos) << lib << ": " << line;
  }
}

TEST(GenerateLinks, EngineCallsTheCAbiAndUcmTorchLoadsLibucm) {
  bool open = false, load = false;
  for (const auto& s : global_symbols(UCM_GENERATE_LIB)) {
    open = open || (s.type == 'U' && s.name == "ucm_store_open");
    load = load || (s.type == 'U' && s.name == "ucm_store_load");
  }
  EXPECT_TRUE(open && load) << UCM_GENERATE_LIB << " does not call ucm_store_open / ucm_store_load";
  ucm::test::CliRun d = run_shell("readelf -d " + shell_quote(UCM_TORCH_BIN));
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_NE(d.out.find("(NEEDED)"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("Shared library: [libucm.so"), std::string::npos) << d.out;
}

}  // namespace
