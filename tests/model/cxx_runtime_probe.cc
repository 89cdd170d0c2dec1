// tests/model/cxx_runtime_probe.cc: linked with fake_std_filesystem *before* libstdc++ and without
// the build's libstdc++-first link option (tests/model/CMakeLists.txt), as an executable linked
// against a pip PyTorch was. Prints what cxx_runtime_conflict() finds, what remove_all(dir)
// reached ("fake" or "libstdc++"), and whether ucm::remove_tree(dir), which libucm uses, removed
// the tree all the same. test_cxx_runtime.cc runs it.
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include "ucm/model/cpu_runtime.h"
#include "ucm/fs.h"

extern "C" int ucm_fake_remove_all_calls;

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::printf("conflict: %s\n", ucm::model::cxx_runtime_conflict().c_str());
  std::error_code ec;
  std::filesystem::remove_all(argv[1], ec);
  std::printf("remove_all: %s\n", ucm_fake_remove_all_calls ? "fake" : "libstdc++");
  const uintmax_t n = ucm::remove_tree(argv[1], ec);
  std::printf("remove_tree: %s %ju\n", !ec && !std::filesystem::exists(argv[1]) ? "removed" : "left", n);
  return 0;
}
