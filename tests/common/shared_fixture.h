// A test fixture (for example a store precomputed with the real model) built once per ctest run
// and shared by the test processes that need it.
//
// gtest_discover_tests runs every test in a process of its own, so a suite's SetUpTestSuite runs
// once per test. Where that setup is a model forward pass over several documents (tens of seconds),
// the suite builds it through shared_fixture(): with $UCM_TEST_SHARED_DIR set (tests/CMakeLists.txt
// sets it, and a ctest FIXTURES_SETUP test empties that directory at the start of every ctest run,
// so nothing is reused across builds), the first process builds <shared>/<name> while holding
// <shared>/<name>.lock and marks it complete; the others wait for the lock and reuse it. Without the
// variable (the test binary run by hand) it builds a private directory that the caller removes.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace ucm::test {

struct FixtureDir {
  std::filesystem::path dir;  // holds what make() wrote
  bool owned = false;         // true: private to this process, the caller removes it
  std::string error;          // non-empty: make() failed (or the lock could not be taken)
};

// make(dir) writes the fixture under dir (which exists and is empty) and returns "" or an error.
// A failed make leaves no complete marker, so the next process tries again.
inline FixtureDir shared_fixture(const std::string& name, const std::function<std::string(const std::filesystem::path&)>& make) {
  namespace fs = std::filesystem;
  FixtureDir out;
  const char* shared = std::getenv("UCM_TEST_SHARED_DIR");
  if (shared == nullptr || *shared == '\0') {
    out.dir = fs::temp_directory_path() / ("ucm-test-" + name + "-" + std::to_string(::getpid()));
    out.owned = true;
    fs::remove_all(out.dir);
    fs::create_directories(out.dir);
    out.error = make(out.dir);
    return out;
  }
  std::error_code ec;
  fs::create_directories(shared, ec);
  out.dir = fs::path(shared) / name;
  const fs::path lock = fs::path(shared) / (name + ".lock");
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || ::flock(fd, LOCK_EX) != 0) {
    if (fd >= 0) ::close(fd);
    out.error = "cannot lock " + lock.string();
    return out;
  }
  if (!fs::exists(out.dir / ".complete")) {
    fs::remove_all(out.dir, ec);
    fs::create_directories(out.dir);
    out.error = make(out.dir);
    if (out.error.empty()) {
      const int m = ::open((out.dir / ".complete").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (m >= 0) ::close(m);
    }
  }
  ::close(fd);  // releases the lock
  return out;
}

}  // namespace ucm::test

// ---------------------------------------------------------------------------------------------
// The common fixture of the model tests: `ucm precompute` (the binary `ucm_bin`) of documents of
// the default corpus (kDocsDir) into <fixture>/store, with the chat template. Include cli_run.h,
// real_data.h and nlohmann/json.hpp before this part. `extra` is added to the command line
// (e.g. "--chunks"). Returns "" or what went wrong.
#ifdef UCM_SOURCE_DIR
namespace ucm::test {
inline std::string precompute_documents(const std::string& ucm_bin, const std::filesystem::path& dir,
                                        const std::vector<std::string>& docs, const std::string& extra = "") {
  namespace fs = std::filesystem;
  fs::create_directories(dir / "corpus");
  for (const auto& d : docs) fs::copy_file(fs::path(kDocsDir) / d, dir / "corpus" / d);
  auto r = run_shell(ucm_bin + " precompute --json " + extra + " --model " + shell_quote(model_dir()) + " --corpus " +
                     shell_quote((dir / "corpus").string()) + " --store " + shell_quote((dir / "store").string()) +
                     " --template " + shell_quote(std::string(UCM_SOURCE_DIR) + "/configs/template_chat.txt"));
  if (r.code != 0) return "precompute exit " + std::to_string(r.code) + ": " + r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.contains("documents") || j["documents"] != docs.size()) return "report: " + r.out;
  return "";
}

// A suite (`Suite`, which derives from this: each suite its own statics) over one store of
// documents precomputed by precompute_documents() and shared by the suite's processes
// (shared_fixture), and a scratch directory of this process. Include gtest before this part.
// The suite's SetUpTestSuite calls set_up_suite(); tests skip without the model.
template <class Suite>
class PrecomputedStoreTest : public ::testing::Test {
 protected:
  // Makes root_ (<temp>/ucm-test-<name>-<pid>) and the shared fixture "<name>-store": `ucm_bin`
  // precompute of `docs` with `extra` options, in store_.
  static void set_up_suite(const std::string& ucm_bin, const std::string& name, const std::vector<std::string>& docs,
                           const std::string& extra = "") {
    namespace fs = std::filesystem;
    if (!have_model()) GTEST_SKIP() << "model not fetched";
    root_ = fs::temp_directory_path() / ("ucm-test-" + name + "-" + std::to_string(::getpid()));
    fs::create_directories(root_);
    fixture_ = shared_fixture(name + "-store",
                              [&](const fs::path& dir) { return precompute_documents(ucm_bin, dir, docs, extra); });
    ASSERT_EQ(fixture_.error, "");
    store_ = fixture_.dir / "store";
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
    if (fixture_.owned) std::filesystem::remove_all(fixture_.dir, ec);
  }
  void SetUp() override {
    if (!have_model()) GTEST_SKIP() << "model not fetched";
  }

  static inline std::filesystem::path root_;   // this process's scratch directory
  static inline FixtureDir fixture_;           // the precomputed store's directory
  static inline std::filesystem::path store_;  // the store of the documents: read only
};
}  // namespace ucm::test
#endif
