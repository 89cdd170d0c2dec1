// tests/model/test_cxx_runtime.cc: every std::filesystem call reaches libstdc++.so.6 even when a
// library linked before it exports its own copy (a pip PyTorch's libtorch.so does, and its
// remove_all crashed ucm bench precompute: docs/device.md), and ucm-torch's start-up check names
// such a copy where a link bypassed the build's libstdc++-first option (cpu_runtime.h); libucm's own
// directory removal (ucm/fs.h) works either way, for servers whose links put libtorch first.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include <unistd.h>

#include "ucm/model/cpu_runtime.h"

extern "C" int ucm_fake_remove_all_calls;

namespace fs = std::filesystem;

namespace {

fs::path make_tree(const std::string& name) {
  const fs::path root = fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "a" / "b");
  std::ofstream(root / "a" / "b" / "f") << "x";
  std::ofstream(root / "g") << "y";
  return root;
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), int(buf.size()), p)) out += buf.data();
  ::pclose(p);
  return out;
}

}  // namespace

// This binary links fake_std_filesystem before libstdc++ too, with the build's link option.
TEST(CxxRuntime, LibstdcxxFilesystemWinsOverAnEarlierLibrarysCopy) {
  const fs::path root = make_tree("ucm-cxx-runtime");
  std::error_code ec;
  const auto n = fs::remove_all(root, ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(ucm_fake_remove_all_calls, 0) << "remove_all reached the exported copy, not libstdc++'s";
  EXPECT_EQ(n, 5u);  // root, a, a/b, a/b/f, g
  EXPECT_FALSE(fs::exists(root));
  EXPECT_EQ(ucm::model::cxx_runtime_conflict(), "");
}

// The same libraries linked without the option: the copy takes the call, and the check names it.
TEST(CxxRuntime, TheStartupCheckNamesACopyFoundFirst) {
  const fs::path root = make_tree("ucm-cxx-runtime-probe");
  const std::string out = run(std::string(UCM_CXX_RUNTIME_PROBE) + " " + root.string());
  EXPECT_NE(out.find("remove_all: fake"), std::string::npos) << out;
  EXPECT_NE(out.find("resolves to "), std::string::npos) << out;
  EXPECT_NE(out.find("libucm_fake_std_filesystem.so"), std::string::npos) << out;
  EXPECT_NE(out.find("libstdc++ first"), std::string::npos) << out;
  // libucm removes directories with ucm::remove_tree (POSIX calls only), which no copy can take.
  EXPECT_NE(out.find("remove_tree: removed 5"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root));
}
