// tests/common/temp_dir.h: scratch directories of the tests. Header-only; gtest and the standard
// library only.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace ucm::test {

/// <temp dir>/<prefix><tag>_<pid>: the path of one test process, emptied of what an earlier run
/// left there (not created).
inline std::string tmpdir(const std::string& prefix, const std::string& tag) {
  std::string p = (std::filesystem::temp_directory_path() / (prefix + tag + "_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(p);
  return p;
}

/// tmpdir(prefix, tag), removed again on destruction.
struct TaggedTempDir {
  std::string path;
  TaggedTempDir(const std::string& prefix, const std::string& tag) : path(tmpdir(prefix, tag)) {}
  ~TaggedTempDir() { std::filesystem::remove_all(path); }
  TaggedTempDir(const TaggedTempDir&) = delete;
  TaggedTempDir& operator=(const TaggedTempDir&) = delete;
  std::string sub(const std::string& n) const { return path + "/" + n; }
};

/// A fixture with a fresh directory dir_ (mkdtemp of <base>/<prefix>XXXXXX) for each test, removed
/// in TearDown. `base`: the system temp dir unless given.
class MkdtempTest : public ::testing::Test {
 protected:
  explicit MkdtempTest(std::string prefix, std::filesystem::path base = {})
      : prefix_(std::move(prefix)), base_(base.empty() ? std::filesystem::temp_directory_path() : std::move(base)) {}
  void SetUp() override {
    std::string tmpl = (base_ / (prefix_ + "XXXXXX")).string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;

 private:
  std::string prefix_;
  std::filesystem::path base_;
};

}  // namespace ucm::test
